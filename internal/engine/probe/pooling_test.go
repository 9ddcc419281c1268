package probe_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// An embedding lane and a reranker lane are probed on their own endpoints
// of a real engine-sim (which has them), never with a completion.
func TestPoolProbeEmbeddingAndReranker(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	e := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "org/embed"})
	e.WaitServing(t, 10*time.Second)
	ctx := context.Background()
	r, err := probe.PoolProbe(ctx, e.URL, "", contract.ModelEmbedding)
	if err != nil || r.Endpoint != "/v1/embeddings" || r.Dim != sim.EmbeddingDim {
		t.Fatalf("embedding probe: %+v %v", r, err)
	}
	r, err = probe.PoolProbe(ctx, e.URL, "org/embed", contract.ModelReranker)
	if err != nil || r.Endpoint != "/v1/rerank" || r.Results != 2 {
		t.Fatalf("rerank probe: %+v %v", r, err)
	}
	if _, err := probe.PoolProbe(ctx, e.URL, "org/embed", "chat"); err == nil {
		t.Error("pool probe of a chat lane accepted")
	}
}

// An engine behind --api-key: without the key, readiness fails at once
// saying to set api_key_env; with it, the lane is ready and probed. The
// key appears in no error.
func TestProbeAPIKey(t *testing.T) {
	const key = "sk-test-7f3a9c"
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	e := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "org/sim", APIKey: key})
	e.WaitServing(t, 10*time.Second)
	ctx := context.Background()
	start := time.Now()
	_, err := probe.WaitReady(ctx, probe.ReadyInput{BaseURL: e.URL, Budget: 30 * time.Second, Interval: 100 * time.Millisecond}, nil, nil)
	if typ, _ := fault.TypeOf(err); typ != fault.ProbeFailed || !strings.Contains(err.Error(), "api_key_env") || time.Since(start) > 10*time.Second {
		t.Fatalf("WaitReady without the key: %v, want an immediate ProbeFailed naming api_key_env", err)
	}
	_, err = probe.WaitReady(probe.WithAPIKey(ctx, "wrong"), probe.ReadyInput{BaseURL: e.URL, Budget: 30 * time.Second}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "refused the API key") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("WaitReady with a wrong key: %v", err)
	}
	kctx := probe.WithAPIKey(ctx, key)
	if _, err := probe.WaitReady(kctx, probe.ReadyInput{BaseURL: e.URL, Budget: 30 * time.Second}, nil, nil); err != nil {
		t.Fatalf("WaitReady with the key: %v", err)
	}
	if _, err := probe.Smoke(kctx, e.URL, "", []contract.Smoke{{Prompt: "19+23", Expect: "42"}}); err != nil {
		t.Fatalf("Smoke with the key: %v", err)
	}
	if _, err := probe.DecodeProbe(kctx, probe.DecodeInput{BaseURL: e.URL, PromptTokens: 16, MaxTokens: 8}); err != nil {
		t.Fatalf("DecodeProbe with the key: %v", err)
	}
	_, err = probe.DecodeProbe(ctx, probe.DecodeInput{BaseURL: e.URL, Model: "org/sim", PromptTokens: 16, MaxTokens: 8})
	if err == nil || !strings.Contains(err.Error(), "api_key_env") || strings.Contains(err.Error(), key) {
		t.Fatalf("DecodeProbe without the key: %v", err)
	}
}

// [probe] log_signatures: engine-sim prints configured boot lines; a lane
// whose log has them all is ready, one that lacks a line fails naming it
// (the gated feature it marks stayed off).
func TestWaitReadyLogSignatures(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	log := &syncbuf.Buffer{}
	e := simtest.Start(t, sim.Config{ModelPath: model, ServedModelName: "org/sim", Log: log,
		BootLines: []string{"[engram] gated adapters enabled: 4 layers", "MTP drafter loaded"}})
	e.WaitServing(t, 10*time.Second)
	find := func(_ context.Context, sigs []string) ([]string, string, error) {
		text := strings.Join(log.Lines(), "\n")
		var missing []string
		for _, s := range sigs {
			if !strings.Contains(text, s) {
				missing = append(missing, s)
			}
		}
		return missing, "the head's log (in-process engine-sim)", nil
	}
	ctx := context.Background()
	in := probe.ReadyInput{BaseURL: e.URL, Budget: 30 * time.Second, Interval: 50 * time.Millisecond, SignatureGrace: 500 * time.Millisecond,
		LogSignatures: []string{"gated adapters enabled", "MTP drafter loaded"}, FindInLog: find}
	if _, err := probe.WaitReady(ctx, in, nil, nil); err != nil {
		t.Fatalf("all signatures present: %v", err)
	}
	in.LogSignatures = []string{"gated adapters enabled", "dsa sparse attention: on"}
	_, err := probe.WaitReady(ctx, in, nil, nil)
	if typ, _ := fault.TypeOf(err); typ != fault.ProbeFailed || !strings.Contains(err.Error(), `"dsa sparse attention: on"`) || strings.Contains(err.Error(), `"gated adapters enabled"`) {
		t.Fatalf("a missing signature: %v, want ProbeFailed naming only the missing line", err)
	}
}
