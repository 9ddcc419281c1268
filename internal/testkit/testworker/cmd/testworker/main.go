// Command testworker is the worker command line (workers.Execute: control,
// node --node NAME, dev) with the fault points of the process-level tests,
// armed from its environment (testworker.FromEnv). The tests that kill,
// pause or reboot a worker running in its own process build and run this
// program instead of ./worker, which has no such variables.
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
