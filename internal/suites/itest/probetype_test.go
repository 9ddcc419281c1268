package itest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// probeLane writes lane name from the demo-2x recipe with probe as its
// [probe] table (smoke prompts dropped) and boot lines engine-sim prints.
func probeLane(t *testing.T, f *fleet, name, probe, bootLines string) {
	t.Helper()
	b, r := demo2xRenamed(t, f, name)
	i := strings.Index(r, "[probe]\n")
	j := strings.Index(r, "[bench]\n")
	if i < 0 || j < i || !strings.Contains(r, "[env]\n") {
		t.Fatalf("demo-2x recipe changed shape (no [probe]/[bench]/[env]):\n%s", b)
	}
	r = r[:i] + "[probe]\nready = \"5m\"\n" + probe + "\n\n" + r[j:]
	r = strings.Replace(r, "[env]\n", "[env]\nENGINE_SIM_BOOT_LINES = \""+bootLines+"\"\n", 1)
	if err := os.WriteFile(filepath.Join(f.dir, "recipes", name+".toml"), []byte(r), 0o644); err != nil {
		t.Fatal(err)
	}
	f.reload()
}

// Through the real server and real engine-sim containers: an embedding
// lane is probed on /v1/embeddings (no completion), and is ready only once
// the head's container log shows every [probe] log_signatures line; a lane
// whose log lacks one fails readiness naming it, and the cutover rolls
// back to the lane that ran before.
func TestCutoverEmbeddingLaneAndLogSignatures(t *testing.T) {
	f, dc := demoFleet(t, 24<<20)
	t.Cleanup(func() { removeLaneContainers(dc, "embed-2x", "sigmiss-2x") })
	probeLane(t, f, "embed-2x", `model_type = "embedding"
log_signatures = ["gated adapters enabled", "MTP drafter loaded"]`, `[engram] gated adapters enabled: 4 layers\nMTP drafter loaded (1 layer)`)
	probeLane(t, f, "sigmiss-2x", `log_signatures = ["gated adapters enabled", "dsa sparse attention: on"]
decode_prompt_tokens = 64
decode_max_tokens = 16`, `[engram] gated adapters enabled: 4 layers`)

	code, res, errOut := cutover(t, f, "--lane", "embed-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover embed-2x: exit %d, failed at %q: %s\n%s", code, res.FailedStep, res.Error, errOut)
	}
	if res.Serve == nil || res.Serve.Decode == nil || res.Serve.Decode.Pool == nil || res.Serve.Decode.Pool.Endpoint != "/v1/embeddings" || res.Serve.Decode.Pool.Dim == 0 {
		t.Fatalf("embed-2x was not probed on /v1/embeddings: %+v", res.Serve)
	}
	if res.Serve.Decode.CompletionTokens != 0 {
		t.Errorf("embed-2x got a completion probe: %+v", res.Serve.Decode)
	}

	code, res, _ = cutover(t, f, "--lane", "sigmiss-2x")
	if code == 0 || res.OK {
		t.Fatalf("cutover sigmiss-2x passed without its log signature")
	}
	if !strings.Contains(res.Error, `"dsa sparse attention: on"`) || strings.Contains(res.Error, `"gated adapters enabled"`) || !strings.Contains(res.Error, "sparklane-sigmiss-2x-r0") {
		t.Errorf("failure does not name the missing line and the head's container: step %q: %s", res.FailedStep, res.Error)
	}
	if len(res.RolledBack) != 1 || res.RolledBack[0] != "embed-2x" {
		t.Errorf("rolled back %v, want embed-2x", res.RolledBack)
	}
}
