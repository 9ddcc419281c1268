// Command starter is sparklane's operator CLI: it starts workflows, follows
// them and prints results. See `starter --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparklane/sparklane/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ints := make(chan os.Signal, 4)
	signal.Notify(ints, os.Interrupt)
	os.Exit(cli.Execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, ints))
}
