package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sparklane/sparklane/internal/config"
)

// Building the worker program from this source tree: for the control
// service (controlExe) and for the nodes (workerBinary).

// builtWorker is where the worker for goarch is built under state_dir
// (the control host's own architecture at bin/worker).
func builtWorker(cfg *config.Config, goarch string) string {
	if goarch != runtime.GOARCH {
		return filepath.Join(cfg.StateDir, "bin", "linux-"+goarch, "worker")
	}
	return filepath.Join(cfg.StateDir, "bin", "worker")
}

// goTool is the go command builds run (a test puts a stand-in there).
var goTool = "go"

// buildProgressEvery is how often a build says it is still running: the
// first build of the worker compiles the embedded Temporal server, minutes
// on a cold Go build cache, and a silent starter looks hung.
const buildProgressEvery = 10 * time.Second

// goBuildWorker builds ./worker of the source tree src into out, with env
// added to this process's (a cross-compilation's GOOS/GOARCH), saying on
// stderr what it builds, that a first build takes minutes on a cold
// cache, and — every buildProgressEvery, on a terminal or not — how long
// it has run and how many packages it compiled (go build -v names each).
// go build leaves a current out as it is.
func (a *App) goBuildWorker(ctx context.Context, src, out string, env []string, what string) error {
	// -s -w drops the symbol table and DWARF (panics still name their
	// functions): 213 → 151 MiB to upload to, and hash on, every node.
	args := []string{"build", "-v", "-ldflags=-s -w", "-o", out, "./worker"}
	// The clock starts before the first line: what elapsed counts from is
	// what the reader saw begin.
	start := a.clock()
	say := func(format string, v ...any) {
		if !a.JSON {
			fmt.Fprintf(a.Err, format+"\n", v...)
		}
	}
	say("building %s: go %s (in %s)", what, strings.Join(args, " "), src)
	if _, err := os.Stat(out); err != nil {
		say("  first build of %s: it compiles the embedded Temporal server, which takes minutes on a cold Go build cache (seconds once it is warm); progress every %s", out, buildProgressEvery)
	}
	c := exec.CommandContext(ctx, goTool, args...)
	c.Dir, c.Env = src, append(os.Environ(), env...)
	var log buildLog
	c.Stdout, c.Stderr = &log, &log
	if err := c.Start(); err != nil {
		return fmt.Errorf("build %s in %s (go %s): %w", what, src, strings.Join(args, " "), err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	tick, stop := a.ticker(buildProgressEvery)
	defer stop()
	for {
		select {
		case err := <-done:
			elapsed := a.clock().Sub(start).Round(time.Second)
			if err != nil {
				return fmt.Errorf("build %s in %s (go %s) failed after %s: %v\n%s", what, src, strings.Join(args, " "), elapsed, err, log.output())
			}
			n, _ := log.progress()
			say("  built %s in %s (%d packages compiled)", out, elapsed, n)
			return nil
		case <-tick:
			n, last := log.progress()
			line := fmt.Sprintf("  still building %s: %s elapsed, %d packages compiled", what, a.clock().Sub(start).Round(time.Second), n)
			if last != "" {
				line += " (last " + last + ")"
			}
			say("%s", line)
		}
	}
}

// buildLog is go build -v's output: the packages it compiled (counted,
// the last one kept) and every other line (compiler errors), kept for a
// failed build's message.
type buildLog struct {
	mu       sync.Mutex
	partial  []byte
	packages int
	last     string
	other    []string
}

func (b *buildLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(b.partial[:i])
		b.partial = b.partial[i+1:]
		// go build -v prints each package it compiles as its import
		// path alone on a line; errors have spaces or a file:line.
		if line != "" && !strings.ContainsAny(line, " \t:") {
			b.packages++
			b.last = line
			continue
		}
		b.other = append(b.other, line)
	}
}

// progress is how many packages were compiled so far, and the last one.
func (b *buildLog) progress() (int, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.packages, b.last
}

// output is what the build printed besides package names.
func (b *buildLog) output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(append(b.other, string(b.partial)), "\n")
}

// sourceTree is the sparklane module root above the working directory.
func sourceTree() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/sparklane/sparklane\n") {
			if _, err := os.Stat(filepath.Join(dir, "worker", "main.go")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not run inside the sparklane source tree, so there is no worker to build: pass --worker-binary PATH (a worker built for the nodes, e.g. GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -o worker ./worker)")
		}
		dir = parent
	}
}
