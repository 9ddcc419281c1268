package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// HarnessVars are the values a harness command template may name as
// {base_url} {model} {output_dir} {seed} {mode} {mode_flags} {parallel}
// {tokenizer}.
type HarnessVars struct {
	BaseURL string `json:"base_url"`
	Model   string `json:"model"`
	// OutputDir is where the harness must write its JSON report; it is
	// created if missing.
	OutputDir string `json:"output_dir"`
	Seed      int64  `json:"seed"`
	// Mode is the scenario pool ([bench] mode: standard, hardmode, short);
	// {mode_flags} renders it as tool-eval-bench's flags.
	Mode string `json:"mode,omitempty"`
	// Parallel is --parallel N: scenarios in flight at once (default 1).
	// Faster, but a saturated server may time requests out; reports mark it.
	Parallel int `json:"parallel"`
	// Tokenizer is a local tokenizer path for harnesses that size prompts.
	Tokenizer string `json:"tokenizer,omitempty"`
}

// HarnessInput says which command to run and how.
type HarnessInput struct {
	// Template is the recipe's [bench] harness command, run with sh -c
	// after each {key} is replaced by its shell-quoted value. Braces that
	// name no known key (${HOME}, awk blocks) are left alone. The word
	// "tool-eval-bench" stands for ToolEvalBenchTemplate.
	Template string
	Vars     HarnessVars
	// Format is the report format to ingest (default tool-eval-bench).
	Format string
	// Dir is the working directory (default: OutputDir).
	Dir string
	// Env is extra environment (KEY=VALUE) on top of this process's.
	Env []string
	// OnLine receives every stdout/stderr line as it arrives; the bench
	// activity heartbeats them into the run.
	OnLine func(string)
}

// HarnessResult is what the harness did and what its report said.
type HarnessResult struct {
	// Command is the rendered command line that ran.
	Command string `json:"command"`
	// Format is the ingested report format.
	Format string `json:"format"`
	// Parallel is the --parallel the run used; above 1 the report warns
	// that the run is faster but may time out under saturation.
	Parallel int `json:"parallel"`
	// Seed and Mode are what the run was given ({seed}, {mode}); a
	// verdict against a baseline with another seed or mode warns.
	Seed int64  `json:"seed"`
	Mode string `json:"mode,omitempty"`
	// ExitCode is the command's exit status (tool-eval-bench exits 2 when
	// --fail-on-safety trips but still writes its report).
	ExitCode int     `json:"exit_code"`
	Seconds  float64 `json:"seconds"`
	// ReportFile is the JSON report that was ingested.
	ReportFile string `json:"report_file"`
	// Quality is the parsed report.
	Quality Quality `json:"quality"`
	// Tail is the last lines of output, kept for the report.
	Tail []string `json:"tail,omitempty"`
}

const tailLines = 40

// RunHarness renders the template, runs it with sh -c in its own process
// group, streams its output lines to OnLine, and ingests the newest JSON
// report the run wrote under OutputDir. Cancelling ctx kills the whole
// process group. A non-zero exit with a readable report is not an error
// (ExitCode records it); without a report it is.
func RunHarness(ctx context.Context, in HarnessInput) (HarnessResult, error) {
	res, out, dir, err := prepareHarness(&in)
	if err != nil {
		return res, err
	}

	start := time.Now()
	cmd := exec.Command("sh", "-c", res.Command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), in.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("bench harness: start sh -c %q: %w", res.Command, err)
	}
	pgid := cmd.Process.Pid

	readers := collectOutput(&res, in.OnLine, stdout, stderr)

	// Kill the whole group on cancel, so a harness's children (python
	// workers, curl) do not outlive the activity.
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		case <-done:
		}
	}()
	readers.Wait()
	werr := cmd.Wait()
	close(done)
	// Children that kept running after sh exited are the harness's too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	res.Seconds = time.Since(start).Seconds()
	if ctx.Err() != nil {
		return res, fmt.Errorf("bench harness %q stopped: %w", res.Command, ctx.Err())
	}
	var ee *exec.ExitError
	if werr != nil {
		if !errors.As(werr, &ee) {
			return res, fmt.Errorf("bench harness %q: %w", res.Command, werr)
		}
		res.ExitCode = ee.ExitCode()
	}

	file, q, perr := ingest(out, start, in.Format)
	res.ReportFile = file
	if perr != nil {
		if res.ExitCode != 0 {
			return res, fmt.Errorf("bench harness %q exited with status %d and %v; last output: %s", res.Command, res.ExitCode, perr, lastLine(res.Tail))
		}
		return res, perr
	}
	res.Quality = q
	return res, nil
}

// prepareHarness fills in the input's defaults, checks it, creates the
// output dir and renders the command: the result so far, the absolute
// output dir and the dir the command runs in.
func prepareHarness(in *HarnessInput) (HarnessResult, string, string, error) {
	if in.Vars.Parallel <= 0 {
		in.Vars.Parallel = 1
	}
	if in.Format == "" {
		in.Format = FormatToolEvalBench
	}
	in.Template = ExpandHarness(in.Template)
	res := HarnessResult{Format: in.Format, Parallel: in.Vars.Parallel, Seed: in.Vars.Seed, Mode: in.Vars.Mode}
	if strings.TrimSpace(in.Template) == "" {
		return res, "", "", fault.Permanent(fault.InvalidSpec, errors.New("bench harness: empty command template (recipe [bench] harness)"))
	}
	if in.Vars.OutputDir == "" {
		return res, "", "", fault.Permanent(fault.InvalidSpec, errors.New("bench harness: no output_dir to collect the report from"))
	}
	out, err := filepath.Abs(in.Vars.OutputDir)
	if err != nil {
		return res, "", "", fmt.Errorf("bench harness output_dir %s: %w", in.Vars.OutputDir, err)
	}
	in.Vars.OutputDir = out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return res, "", "", fmt.Errorf("bench harness: create output_dir %s: %w", out, err)
	}
	if err := checkFormat(in.Format); err != nil {
		return res, "", "", fault.Permanent(fault.InvalidSpec, err)
	}
	if res.Command, err = RenderTemplate(in.Template, in.Vars); err != nil {
		return res, "", "", err
	}
	dir := in.Dir
	if dir == "" {
		dir = out
	}

	return res, out, dir, nil
}

// collectOutput reads streams line by line on their own goroutines,
// keeping the last tailLines lines in res.Tail and passing each to
// onLine; wait on the returned group before reading res.Tail.
func collectOutput(res *HarnessResult, onLine func(string), streams ...io.Reader) *sync.WaitGroup {
	var mu sync.Mutex
	emit := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		res.Tail = append(res.Tail, line)
		if len(res.Tail) > tailLines {
			res.Tail = res.Tail[len(res.Tail)-tailLines:]
		}
		if onLine != nil {
			onLine(line)
		}
	}
	readers := &sync.WaitGroup{}
	for _, r := range streams {
		readers.Add(1)
		go func(r io.Reader) {
			defer readers.Done()
			sc := bufio.NewScanner(r)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				emit(sc.Text())
			}
			if sc.Err() != nil {
				// A line over 1 MiB: keep draining so the harness never
				// blocks on a full pipe.
				emit("(output line too long; rest of this stream not shown)")
				_, _ = io.Copy(io.Discard, r)
			}
		}(r)
	}

	return readers
}

func lastLine(tail []string) string {
	for i := len(tail) - 1; i >= 0; i-- {
		if s := strings.TrimSpace(tail[i]); s != "" {
			return s
		}
	}
	return "(none)"
}

// ingest finds the JSON reports written under dir since start (newest
// first) and parses the first that has the format's shape. Errors name
// the file and the field at fault.
func ingest(dir string, since time.Time, format string) (string, Quality, error) {
	type cand struct {
		path string
		mod  time.Time
	}
	var cands []cand
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.EqualFold(filepath.Ext(p), ".json") {
			return nil
		}
		if info, err := d.Info(); err == nil && !info.ModTime().Before(since.Add(-time.Second)) {
			cands = append(cands, cand{p, info.ModTime()})
		}
		return nil
	})
	if len(cands) == 0 {
		return "", Quality{}, fmt.Errorf("bench harness wrote no JSON report under %s (the template must write one there, e.g. tool-eval-bench --json --no-warmup > {output_dir}/tool-eval-bench.json, as harness = \"tool-eval-bench\" does)", dir)
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].mod.After(cands[j].mod) })
	var firstErr error
	for _, c := range cands {
		b, err := os.ReadFile(c.path)
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("read harness report %s: %w", c.path, err))
			continue
		}
		q, err := ParseQuality(format, b)
		if err == nil {
			return c.path, q, nil
		}
		firstErr = cmpErr(firstErr, fmt.Errorf("harness report %s: %w", c.path, err))
	}
	return cands[0].path, Quality{}, firstErr
}

func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// RenderTemplate fills the known {key} placeholders of a harness
// template, each value one literal word wherever it lands
// (contract.RenderShell: the project's one shell quoter, as post hooks
// use); anything else in braces is left as written. A value with shell
// characters where no quoting makes it one word (inside ${...}, say) is an
// InvalidSpec error naming the placeholder.
func RenderTemplate(tmpl string, v HarnessVars) (string, error) {
	vals := map[string]string{
		"base_url":   v.BaseURL,
		"model":      v.Model,
		"output_dir": v.OutputDir,
		"seed":       strconv.FormatInt(v.Seed, 10),
		"mode_flags": ModeFlags(v.Mode),
		"mode":       v.Mode,
		"parallel":   strconv.Itoa(max(v.Parallel, 1)),
		"tokenizer":  v.Tokenizer,
	}
	out, err := contract.RenderShell([]string{tmpl}, func(_ int, k string) (string, bool, error) {
		val, ok := vals[k]
		return val, ok, nil
	})
	if err != nil {
		return "", fault.Permanent(fault.InvalidSpec, fmt.Errorf("bench harness (recipe [bench] harness): %w", err))
	}
	return out[0], nil
}

// ModeFlags are tool-eval-bench's flags for a [bench] mode: --hardmode
// adds its hard scenarios (category P), --short runs the core 15; the
// standard pool needs none. Only these constant words are ever rendered.
func ModeFlags(mode string) string {
	switch mode {
	case "hardmode":
		return "--hardmode"
	case "short":
		return "--short"
	}
	return ""
}
