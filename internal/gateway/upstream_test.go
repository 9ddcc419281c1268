package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/loopnet"
)

// TestKeptConnectionClosedByEngine: an engine (a test double on raw TCP)
// that closes its connection after each answer without saying so; the
// next request finds the kept connection dead before any answer byte and
// is sent again on a new one, body and all.
func TestKeptConnectionClosedByEngine(t *testing.T) {
	l := loopnet.Listen(t)
	var conns atomic.Int32
	loopnet.Serve(l, func(c net.Conn) {
		conns.Add(1)
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		var v map[string]any
		json.NewDecoder(req.Body).Decode(&v)
		body := fmt.Sprintf(`{"id":"x","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`, v["model"])
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	})
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-x", "http://"+l.Addr().String(), "org/model-x", "chat"))
	c := g.client("")
	for i := 0; i < 3; i++ {
		res, err := chat(context.Background(), c, "chat", "hi")
		if err != nil || res.Model != "org/model-x" {
			t.Fatalf("request %d: %+v %v", i, res, err)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections for 3 requests", n)
	}
}

// TestKeepAlive: requests one after another to an engine reuse one
// connection.
func TestKeepAlive(t *testing.T) {
	a := startSim(t, "org/model-a")
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-a", a, "org/model-a"))
	for i := 0; i < 5; i++ {
		if _, err := chat(context.Background(), g.client(""), "org/model-a", "hi"); err != nil {
			t.Fatal(err)
		}
	}
	g.lanes.mu.Lock()
	n := len(g.lanes.idle[strings.TrimPrefix(a, "http://")])
	g.lanes.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d kept connections after 5 sequential requests, want 1", n)
	}
}

// TestKilledGatewayRoutesTheSame: a gateway process killed -9 right after
// its table changes (each change returned) is started again from its
// state file and routes the same.
func TestKilledGatewayRoutesTheSame(t *testing.T) {
	if os.Getenv("GATEWAY_TEST_CHILD_STATE") != "" {
		return // the child's part is TestMain's childGateway
	}
	a := startSim(t, "org/model-a")
	dir := t.TempDir()
	state := filepath.Join(dir, "gateway.json")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GATEWAY_TEST_CHILD_STATE="+state, "GATEWAY_TEST_CHILD_ENGINE="+a)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var want []contract.GatewayRoute
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "ROUTES "); ok {
			if err := json.Unmarshal([]byte(line), &want); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(want) != 2 {
		t.Fatalf("the child gateway reported %v", want)
	}
	for i := range want {
		want[i].Held = 0
	}
	g := startGateway(t, config.Gateway{}, dir)
	if got := g.Routes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after kill -9:\n%+v\nwant\n%+v", got, want)
	}
	if res, err := chat(context.Background(), g.client(""), "chat", "hi"); err != nil || res.Model != "org/model-a" {
		t.Fatalf("routing after kill -9: %v %v", res, err)
	}
}

// childGateway is the process TestKilledGatewayRoutesTheSame kills: it
// changes its table, prints it and waits to be killed.
func childGateway(state, engine string) {
	g, err := New(Options{Gateway: config.Gateway{}.WithDefaults(), StateFile: state})
	if err == nil {
		_, err = g.Route(lane("c1", "lane-a", engine, "org/model-a", "chat"))
	}
	if err == nil {
		_, err = g.Hold(contract.GatewayHoldInput{Cluster: "c2", ETA: contract.Duration(time.Minute), Why: "cutover"})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b, _ := json.Marshal(g.Routes())
	fmt.Printf("ROUTES %s\n", b)
	select {}
}

// TestKeptConnectionsOfARestartedEngine: an engine restarted on the same
// address (a keeper's heal, a rollback) leaves every connection the
// gateway kept to it dead; the requests after the restart, sent at once,
// are all answered: the first that finds a kept connection dead drops
// the others and each retry dials a new one.
func TestKeptConnectionsOfARestartedEngine(t *testing.T) {
	const n = 8
	addr := fmt.Sprintf("127.0.0.1:%d", loopnet.FreePort(t))
	// serve answers on addr; with barrier, each answer waits until that
	// many requests arrived (at once: as many connections).
	serve := func(barrier int) *http.Server {
		var mu sync.Mutex
		arrived, all := 0, make(chan struct{})
		if barrier == 0 {
			close(all)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			if arrived++; arrived == barrier {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				http.Error(w, "the other requests never came", 500)
				return
			}
			body := `{"id":"x","object":"chat.completion","created":1,"model":"org/model-x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, body)
		})}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(l)
		return srv
	}
	g := startGateway(t, config.Gateway{}, "")
	mustRoute(t, g, lane("c1", "lane-x", "http://"+addr, "org/model-x"))
	ask := func(round string) {
		errs := make(chan error, n)
		for range n {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := chat(ctx, g.client(""), "org/model-x", "hi")
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("%s: %v", round, err)
			}
		}
	}
	first := serve(n)
	ask("before the restart")
	g.lanes.mu.Lock()
	kept := len(g.lanes.idle[addr])
	g.lanes.mu.Unlock()
	if kept != n {
		t.Fatalf("%d kept connections after %d requests at once, want %d", kept, n, n)
	}
	first.Close() // the engine goes away, and with it every kept connection
	second := serve(0)
	defer second.Close()
	ask("after the restart")
}
