package simtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/testkit/loopnet"
)

// Model describes a synthetic checkpoint: Shards files of Tensors tensors
// each, every tensor Rows x Cols of BF16, plus model.safetensors.index.json.
type Model struct {
	Shards, Tensors int
	Rows, Cols      int64
}

// WriteModel writes the checkpoint m under dir (created) and returns dir.
// Tensor bytes are a deterministic pattern so reads are real.
func WriteModel(t testing.TB, dir string, m Model) string {
	t.Helper()
	if err := WriteModelDir(dir, m); err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteModelDir is WriteModel for non-test callers (the demo, benchmarks).
func WriteModelDir(dir string, m Model) error {
	if m.Shards < 1 {
		m.Shards = 2
	}
	if m.Tensors < 1 {
		m.Tensors = 2
	}
	if m.Rows < 1 {
		m.Rows = 64
	}
	if m.Cols < 1 {
		m.Cols = 32
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	weightMap := map[string]string{}
	for s := 0; s < m.Shards; s++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", s+1, m.Shards)
		var ts []safetensors.Tensor
		for k := 0; k < m.Tensors; k++ {
			tn := fmt.Sprintf("model.layers.%d.w%d.weight", s, k)
			ts = append(ts, safetensors.Tensor{Name: tn, DType: "BF16", Shape: []int64{m.Rows, m.Cols}})
			weightMap[tn] = name
		}
		hdr, laid, err := safetensors.Encode(ts, map[string]string{"format": "pt"})
		if err != nil {
			return err
		}
		data := make([]byte, laid[len(laid)-1].End)
		for i := range data {
			data[i] = byte(i*7 + s)
		}
		if err := os.WriteFile(filepath.Join(dir, name), append(hdr, data...), 0o644); err != nil {
			return err
		}
	}
	ix, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap}, "", "  ")
	return os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), ix, 0o644)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return loopnet.FreePort(t)
}

// Engine is one in-process engine-sim rank.
type Engine struct {
	// URL is the API base (http://127.0.0.1:PORT), meaningful on rank 0.
	URL     string
	done    chan struct{}
	serving chan struct{}
	err     error
	cancel  context.CancelFunc
}

// Done is closed when Run has returned; Err then holds its result.
func (e *Engine) Done() <-chan struct{} { return e.done }

// Err is Run's result once Done is closed.
func (e *Engine) Err() error {
	<-e.done
	return e.err
}

// Stop cancels the rank and waits for it to return; returns Run's error.
func (e *Engine) Stop() error {
	e.cancel()
	select {
	case <-e.done:
		return e.err
	case <-time.After(10 * time.Second):
		return fmt.Errorf("engine-sim rank did not stop within 10s")
	}
}

// Start runs cfg in-process (Host defaults to 127.0.0.1, Port 0 gets a free
// port; with cfg.Listener, a PipeNet, it serves there) and stops it in
// t.Cleanup. It does not wait for readiness.
func Start(t testing.TB, cfg sim.Config) *Engine {
	t.Helper()
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 && cfg.NodeRank == 0 && cfg.Listener == nil {
		cfg.Port = FreePort(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{URL: fmt.Sprintf("http://%s", net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))), done: make(chan struct{}), serving: make(chan struct{}), cancel: cancel}
	if cfg.Listener != nil {
		e.URL = "http://" + cfg.Listener.Addr().String()
	}
	onServing := cfg.OnServing
	cfg.OnServing = func(addr net.Addr) {
		if onServing != nil {
			onServing(addr)
		}
		close(e.serving)
	}
	go func() { e.err = sim.Run(ctx, cfg); close(e.done) }()
	t.Cleanup(func() { e.Stop() })
	return e
}

// WaitServing waits until rank 0 serves its API (sim.Config.OnServing:
// the listener is open, on TCP or a PipeNet), the engine exits, or the
// timeout passes.
func (e *Engine) WaitServing(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-e.serving:
	case <-e.done:
		t.Fatalf("engine-sim exited before serving: %v", e.err)
	case <-time.After(timeout):
		t.Fatalf("engine-sim at %s not serving after %s", e.URL, timeout)
	}
}
