package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparklane/sparklane/internal/workers"

	// The embedded Temporal server: this program hosts the control service.
	_ "github.com/sparklane/sparklane/internal/workers/embedded"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := workers.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr, workers.Options{})
	stop()
	os.Exit(code)
}
