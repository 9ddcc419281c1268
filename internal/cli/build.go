package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

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

// goBuildWorker builds ./worker of the source tree src into out, with env
// added to this process's (a cross-compilation's GOOS/GOARCH), saying so
// on stderr as what. go build leaves a current out as it is.
func (a *App) goBuildWorker(ctx context.Context, src, out string, env []string, what string) error {
	// -s -w drops the symbol table and DWARF (panics still name their
	// functions): 213 → 151 MiB to upload to, and hash on, every node.
	args := []string{"build", "-ldflags=-s -w", "-o", out, "./worker"}
	if !a.JSON {
		fmt.Fprintf(a.Err, "building %s: go %s\n", what, strings.Join(args, " "))
	}
	c := exec.CommandContext(ctx, "go", args...)
	c.Dir, c.Env = src, append(os.Environ(), env...)
	if b, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s in %s (go %s): %v\n%s", what, src, strings.Join(args, " "), err, b)
	}
	return nil
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
