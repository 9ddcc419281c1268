package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/gateway"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gwbench run|serve-gateway [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "serve-gateway":
		err = serveGateway(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: run or serve-gateway", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gwbench:", err)
		os.Exit(1)
	}
}

// serveGateway runs a gateway with one route, anonymous on loopback,
// until SIGTERM: the process the bench measures.
func serveGateway(args []string) error {
	fs := flag.NewFlagSet("serve-gateway", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	backend := fs.String("backend", "", "the engine's base URL")
	served := fs.String("served", "", "the engine's served model name")
	alias := fs.String("alias", "", "an alias of the served name")
	state := fs.String("state", "", "the gateway's state file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the gateway here")
	fs.Parse(args)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	g, err := gateway.New(gateway.Options{Gateway: config.Gateway{Listen: *listen}.WithDefaults(), StateFile: *state, Log: zap.NewNop()})
	if err != nil {
		return err
	}
	if _, err := g.Route(contract.GatewayRoute{Cluster: "bench", Lane: "bench", BaseURL: *backend, Served: *served, Names: []string{*alias}}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return g.Serve(ctx, ln)
}

// waitHTTP waits (at most 30 s) until url answers.
func waitHTTP(url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after 30s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr is a loopback address free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
