package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/fault"
)

// HookOutputLimit is how much of a hook's output is kept (its tail): enough
// to explain a failure, small enough for a workflow history.
const HookOutputLimit = 4 << 10

// HooksInput is a node's before_serve work.
type HooksInput struct {
	// Clear lists directories (fs_root already applied) whose contents are
	// removed and which exist afterwards: per-run receipt dirs that a
	// previous run left behind made every restart fail with FileExistsError.
	Clear []string `json:"clear,omitempty"`
	// Commands run one after another with sh -c; the first failure stops.
	Commands []string          `json:"commands,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// Timeout bounds each command (default 2m).
	Timeout time.Duration `json:"timeout,omitempty"`
	// Dir is the working directory (default: the worker's).
	Dir string `json:"dir,omitempty"`
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
	Cleared []string     `json:"cleared,omitempty"`
	Outputs []HookOutput `json:"outputs,omitempty"`
}

// RunHooks clears in.Clear, then runs in.Commands in order, each bounded by
// in.Timeout (the whole process group is killed when it runs over). A
// failing or timed-out command is an error naming it, its exit code and the
// tail of its output; the result still holds everything that ran.
func RunHooks(ctx context.Context, in HooksInput) (HooksResult, error) {
	var res HooksResult
	for _, dir := range in.Clear {
		if err := clearDir(dir); err != nil {
			return res, err
		}
		res.Cleared = append(res.Cleared, dir)
	}
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
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
	for i, command := range in.Commands {
		out, err := runHook(ctx, command, in.Dir, env, timeout)
		res.Outputs = append(res.Outputs, out)
		if err != nil {
			return res, fmt.Errorf("before_serve hook %d (%q): %w; output tail:\n%s", i+1, command, err, out.Output)
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

// clearDir removes dir's contents and makes sure it exists afterwards.
func clearDir(dir string) error {
	clean := filepath.Clean(dir)
	if !filepath.IsAbs(clean) || clean == "/" || strings.Count(clean, "/") < 2 {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("before_serve clear %q: refusing to clear a relative or top-level path; name the per-run directory itself", dir))
	}
	entries, err := os.ReadDir(clean)
	if os.IsNotExist(err) {
		if err := os.MkdirAll(clean, 0o755); err != nil {
			return fmt.Errorf("before_serve clear %s: create: %w", clean, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("before_serve clear %s: %w (it must be a directory)", clean, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(clean, e.Name())); err != nil {
			return fmt.Errorf("before_serve clear %s: %w", clean, err)
		}
	}
	return nil
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
