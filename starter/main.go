package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparklane/sparklane/internal/cli"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	cli.HardExit = os.Exit
	os.Exit(cli.Execute(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, signals))
}
