package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sparklane/sparklane/internal/sim"
)

func main() {
	if filepath.Base(os.Args[0]) == "sh" {
		os.Exit(runShell(os.Args[1:]))
	}
	cfg, err := sim.ParseArgs(os.Args[1:], os.Getenv)
	if err == nil {
		cfg.Log = os.Stdout
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = sim.Run(ctx, cfg)
		stop()
	}
	if err != nil {
		// One line, so the orchestrator can quote it from the log tail.
		fmt.Fprintln(os.Stderr, "engine-sim: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		os.Exit(1)
	}
}
