package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/engine/secretenv"
)

// HookOutputLimit is how much of a hook's output is kept (its tail): enough
// to explain a failure, small enough for a workflow history.
const HookOutputLimit = 4 << 10

// HooksInput is a node's before_serve work.
type HooksInput struct {
	// Clear lists receipt roots (fs_root already applied) that do not exist
	// afterwards: the EXL3 kit's receipt writer is strict-on-exists (mkdir
	// with exist_ok=False), so an emptied but present root, or yesterday's
	// root-owned files in it, fail every start with FileExistsError. Each
	// must lie strictly beneath one of Roots, reached through no symlink,
	// and hold none of Protected.
	Clear []string `json:"clear,omitempty"`
	// Roots are the node's roots (fs_root applied): the only trees a clear
	// may remove from, and never a root itself (that would remove every
	// lane's staged data).
	Roots []string `json:"roots,omitempty"`
	// Protected are the lane's staged data (staging dsts and export trees,
	// fs_root applied): a clear path equal to or above one is refused.
	Protected []string `json:"protected,omitempty"`
	// Helper is an argv prefix (e.g. ["sudo", "-n"]) used to remove a clear
	// path the worker user may not (files a root container wrote): it runs
	// HELPER... rm -rf --one-file-system -- PATH for exactly that path,
	// after the same checks.
	Helper []string `json:"helper,omitempty"`
	// Commands run one after another with sh -c; the first failure stops.
	Commands []string          `json:"commands,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// Timeout bounds each command (default 2m).
	Timeout time.Duration `json:"timeout,omitempty"`
	// Dir is the working directory (default: the worker's).
	Dir string `json:"dir,omitempty"`
	// Label names the commands in errors: "before_serve hook" (default)
	// or "post_commands".
	Label string `json:"label,omitempty"`
}

// HookOutput is one command's result.
type HookOutput struct {
	Command string `json:"command"`
	Exit    int    `json:"exit"`
	// Output is stdout and stderr interleaved, trimmed to the last 4 KiB.
	Output string `json:"output"`
}

// HooksResult holds every command that ran, including a failing last one.
type HooksResult struct {
	// Cleared is every clear path handled, with what was removed.
	Cleared []Cleared    `json:"cleared,omitempty"`
	Outputs []HookOutput `json:"outputs,omitempty"`
}

// RunHooks removes in.Clear (each path refused or removed whole, see
// HooksInput.Clear), then runs in.Commands in order, each bounded by
// in.Timeout (the whole process group is killed when it runs over). A
// failing or timed-out command is an error naming it, its exit code and the
// tail of its output; the result still holds everything that ran. Outputs
// are masked (secretenv.EnvSecrets of the hooks' environment).
func RunHooks(ctx context.Context, in HooksInput) (HooksResult, error) {
	var res HooksResult
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	for _, p := range in.Clear {
		c, err := clearPath(ctx, p, in.Roots, in.Protected, in.Helper, timeout)
		if err != nil {
			return res, err
		}
		res.Cleared = append(res.Cleared, c)
	}
	env := os.Environ()
	keys := make([]string, 0, len(in.Env))
	for k := range in.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+in.Env[k])
	}
	// Hooks run with the worker's environment, where env_from's env:
	// sources live: what they print (kept in the run's history, quoted in
	// a failure) is masked with every secret-looking variable's value.
	secrets := secretenv.EnvSecrets(env)
	for i, command := range in.Commands {
		out, err := runHook(ctx, command, in.Dir, env, timeout)
		out.Output = secretenv.Mask(out.Output, secrets)
		res.Outputs = append(res.Outputs, out)
		if err != nil {
			label := in.Label
			if label == "" {
				label = "before_serve hook"
			}
			return res, fmt.Errorf("%s %d (%q): %w; output tail:\n%s", label, i+1, command, err, out.Output)
		}
	}
	return res, nil
}

func runHook(ctx context.Context, command, dir string, env []string, timeout time.Duration) (HookOutput, error) {
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tail := &tailBuffer{max: HookOutputLimit}
	cmd := exec.CommandContext(hctx, "sh", "-c", command)
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdout, cmd.Stderr = tail, tail
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	out := HookOutput{Command: command, Exit: -1, Output: tail.String()}
	if cmd.ProcessState != nil {
		out.Exit = cmd.ProcessState.ExitCode()
	}
	switch {
	case hctx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		return out, fmt.Errorf("timed out after %s (killed)", timeout)
	case ctx.Err() != nil:
		return out, ctx.Err()
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("exited %d", out.Exit)
		}
		return out, fmt.Errorf("run in %q: %w", dir, err)
	}
	return out, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 2*t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	return string(b)
}
