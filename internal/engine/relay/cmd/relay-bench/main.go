package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/pki"
)

const repo = "bench/relay-model"

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "node" {
		err = nodeMain(os.Args[2:])
	} else {
		err = benchMain(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay-bench:", err)
		os.Exit(1)
	}
}

// nodeOut is what a node prints when its pass is done.
type nodeOut struct {
	Node    string         `json:"node"`
	Seconds float64        `json:"seconds"`
	Result  staging.Result `json:"result"`
	// RChar and ReadBytes are this process's /proc/self/io counters.
	RChar     int64 `json:"rchar"`
	ReadBytes int64 `json:"read_bytes"`
}

// nodeMain stages the lane on this node, prints its result, and keeps its
// relay server up (peers may still read from it) until stdin closes.
func nodeMain(args []string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	name := fs.String("name", "", "this node")
	nodes := fs.String("nodes", "", "the nodes staging the lane, comma-separated, in cluster order")
	peers := fs.String("peers", "", "name=host:port,... relay servers")
	listen := fs.String("listen", "", "host:port this node's relay server binds")
	src := fs.String("src", "", "NAS hub root")
	dst := fs.String("dst", "", "staging dst")
	root := fs.String("root", "", "the node's root")
	pkiDir := fs.String("pki", "", "CA and relay identities")
	useRelay := fs.Bool("relay", true, "relay between nodes")
	pauseAt := fs.Int64("pause-at", 0, "hold once this many relayed bytes are fsynced (print PAUSED and wait to be killed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	spec := hubmirror.Spec{Src: *src, Dst: *dst, Repos: []string{repo}, Verify: "sampled", Roots: []string{*root}, SharedRoots: []string{filepath.Dir(*src)}}
	start := time.Now()
	var res staging.Result
	var err error
	if *useRelay {
		id := relay.Identity{CA: filepath.Join(*pkiDir, "ca.pem"), Cert: filepath.Join(*pkiDir, pki.FleetPeerPrefix+*name+".pem"), Key: filepath.Join(*pkiDir, pki.FleetPeerPrefix+*name+"-key.pem")}
		stls, err := relay.ServerTLS(id)
		if err != nil {
			return err
		}
		ctls, err := relay.ClientTLS(id)
		if err != nil {
			return err
		}
		reg := relay.NewRegistry()
		srv := &relay.Server{Registry: reg}
		if err := srv.Listen(*listen, stls); err != nil {
			return err
		}
		defer srv.Close()
		pm := map[string]string{}
		for _, kv := range strings.Split(*peers, ",") {
			k, v, _ := strings.Cut(kv, "=")
			pm[k] = v
		}
		h := relay.HubMirror{Receiver: &relay.Receiver{Registry: reg, TLS: ctls}, Key: "bench/weights", Node: *name, Nodes: strings.Split(*nodes, ","), Peers: pm}
		opts := staging.Options{}
		if *pauseAt > 0 {
			// The fault point: relayed bytes fsynced so far, summed from
			// the per-chunk progress the relay reports.
			var mu sync.Mutex
			var synced int64
			var held bool
			opts.OnProgress = func(p staging.Progress) {
				mu.Lock()
				defer mu.Unlock()
				synced = p.BytesDone
				if !held && synced >= *pauseAt {
					held = true
					fmt.Printf("PAUSED %d\n", synced)
					select {} // held until killed
				}
			}
		}
		res, err = h.Stage(context.Background(), spec, opts, nil)
		if err != nil {
			return err
		}
	} else {
		res, err = hubmirror.Stage(context.Background(), spec, staging.Options{})
		if err != nil {
			return err
		}
		// Without the relay, each file is sampled and then copied.
		res.FromNAS = res.CopiedBytes + 4*ledger.SampledBytes(res.TotalBytes/4)
	}
	out := nodeOut{Node: *name, Seconds: time.Since(start).Seconds(), Result: res}
	out.RChar, out.ReadBytes = selfIO()
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	io.Copy(io.Discard, os.Stdin) // serve peers until the orchestrator is done
	return nil
}

func selfIO() (rchar, readBytes int64) {
	b, _ := os.ReadFile("/proc/self/io")
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "rchar":
			rchar = n
		case "read_bytes":
			readBytes = n
		}
	}
	return
}
