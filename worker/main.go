// Command worker runs sparklane's Temporal workers:
//
//	worker control            workflows + control activities (queue sparklane)
//	worker node --node NAME   node-local activities (queue node.NAME), on that node
//	worker dev                embedded server + web UI + control worker + every local node's worker
//
// It loads the config, dials one client and runs until SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/logging"
	"github.com/sparklane/sparklane/internal/workers"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: worker control|node --node NAME|dev [--config FILE] [--log json|console] [--log-level info]")
	}
	mode := args[0]
	fs := flag.NewFlagSet("worker "+mode, flag.ContinueOnError)
	cfgPath := fs.String("config", "", "fleet config (default $SPARKLANE_CONFIG or ./sparklane.toml)")
	nodeName := fs.String("node", "", "node name (worker node)")
	logMode := fs.String("log", "", "log format: console or json (default console for dev, json otherwise)")
	level := fs.String("log-level", "info", "log level")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *logMode == "" {
		*logMode = "json"
		if mode == "dev" {
			*logMode = "console"
		}
	}
	log, err := logging.New(*logMode, *level)
	if err != nil {
		return err
	}
	defer log.Sync()
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch mode {
	case "dev":
		return workers.RunDev(ctx, cfg, log)
	case "control", "node":
		if mode == "node" && *nodeName == "" {
			return errors.New("worker node needs --node NAME (one of the config's [[nodes]])")
		}
		env, err := workers.Connect(ctx, cfg, log, workers.ConnectOptions{NoEmbedded: true})
		if err != nil {
			return err
		}
		defer env.Close()
		if mode == "control" {
			return workers.RunControl(ctx, cfg, env.Client, log)
		}
		return workers.RunNode(ctx, cfg, env.Client, *nodeName, log)
	}
	return fmt.Errorf("unknown mode %q: use control, node or dev", mode)
}
