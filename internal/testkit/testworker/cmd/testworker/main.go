package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparklane/sparklane/internal/testkit/testworker"
	"github.com/sparklane/sparklane/internal/workers"

	// The embedded Temporal server: `testworker dev` is a control service
	// (SPARKLANE_CONTROL_EXE in the tests that drive starters).
	_ "github.com/sparklane/sparklane/internal/workers/embedded"
)

func main() {
	seams, err := testworker.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := workers.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr, workers.Options{Seams: seams})
	stop()
	os.Exit(code)
}
