package lane_test

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/lane"
)

func fleet14() *config.Config {
	return &config.Config{File: "fleet.toml", HFCacheDir: "/mnt/nas/hub", SharedRoots: []string{"/mnt/nas"},
		Nodes:    []config.Node{{Name: "a", Roots: []string{"/mnt/nvme/sparklane", "/var/lib/sparklane"}}, {Name: "b", Roots: []string{"/mnt/nvme/sparklane", "/var/lib/sparklane"}}},
		Clusters: []config.Cluster{{Name: "two", Nodes: []string{"a", "b"}}},
	}
}

func recipe14() *config.Recipe {
	return &config.Recipe{File: "lane.toml", Name: "lane", Cluster: "two", Runtime: "sglang", Image: "i@sha256:" + strings.Repeat("ab", 32), Model: "org/m", Command: "serve {model_path}"}
}

func wantRenderErr(t *testing.T, r *config.Recipe, parts ...string) {
	t.Helper()
	_, err := lane.Render(fleet14(), r, nil)
	if err == nil {
		t.Fatalf("rendered, want an error naming %v", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not name %q", err, p)
		}
	}
}

// Item 4: create = true travels to the plan for a source under a node
// root; on a shared root, a host path or a root itself it is refused.
func TestCreateMountRender(t *testing.T) {
	r := recipe14()
	r.Mounts = []config.Mount{{Src: "/mnt/nvme/sparklane/cache/{lane}/triton", Dst: "/root/.cache/sglang/triton", Create: true}}
	p, err := lane.Render(fleet14(), r, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, np := range p.Nodes {
		if len(np.Mounts) != 1 || !np.Mounts[0].Create || np.Mounts[0].Src != "/mnt/nvme/sparklane/cache/lane/triton" || np.Mounts[0].ReadOnly {
			t.Fatalf("node %s mounts %+v: want the created rw cache", np.Node, np.Mounts)
		}
	}
	for _, m := range []config.Mount{
		{Src: "/mnt/nas/jit", Dst: "/jit", Create: true, ReadOnly: true},
		{Src: "/opt/jit", Dst: "/jit", Create: true, Host: true},
		{Src: "/mnt/nvme/sparklane", Dst: "/jit", Create: true},
	} {
		r.Mounts = []config.Mount{m}
		wantRenderErr(t, r, "mounts[0].create", m.Src)
	}
}

// Item 5: a recipe mount at a path the staging manifest binds (a file of
// an export kept on the NAS by a skip glob) is a render error naming both.
func TestRecipeMountOverSkippedExportFile(t *testing.T) {
	r := recipe14()
	r.Staging = []config.Staging{{Kind: "hub-mirror", ID: "weights", Src: "/mnt/nas/hub", Dst: "/mnt/nvme/sparklane/hub-mirror",
		Repos: []string{"org/m"}, Skip: []string{"page15/**"}, Exports: []config.Export{{Repo: "org/m", Mount: "/model"}}}}
	if _, err := lane.Render(fleet14(), r, nil); err != nil {
		t.Fatalf("without the hand-written mount: %v", err)
	}
	r.Mounts = []config.Mount{{Src: "/mnt/nas/hub/models--org--m/snapshots/abc/page15/page15-00001.safetensors", Dst: "/model/page15/page15-00001.safetensors", ReadOnly: true}}
	wantRenderErr(t, r, "mounts[0].dst", "/model/page15/page15-00001.safetensors", "staging[0]", `"page15/**"`, "remove this [[mounts]] entry")
	// A mount beside the export, not under a skip glob, is fine.
	r.Mounts[0].Dst = "/model-extra/page15-00001.safetensors"
	if _, err := lane.Render(fleet14(), r, nil); err != nil {
		t.Fatal(err)
	}
}

// Items 2 and 6: record_bytes belongs to sparse-rows blocks; rows_env on a
// packed block needs rows; a sparse-copy rows_env is left to the serve step
// (rows_from), with no rendered value.
func TestRowsEnvAndRecordBytesKeys(t *testing.T) {
	cfg := fleet14()
	r := recipe14()
	r.Staging = []config.Staging{
		{Kind: "hub-mirror", ID: "w", Src: "/mnt/nas/hub", Dst: "/mnt/nvme/sparklane/hub-mirror", Repos: []string{"org/m"}, RecordBytes: 264},
		{Kind: "sparse-rows", ID: "p", Src: "/mnt/nas/hub/x", Dst: "/var/lib/sparklane/p", Format: "packed", Tensors: []string{"t.{L}"}, Layers: []int{0}, RowsEnv: "ROWS_P", RecordBytes: -1},
	}
	err := lane.Validate(cfg, []*config.Recipe{r})
	for _, p := range []string{"staging[0]", "record_bytes belong to sparse-rows", "staging[1].rows", "ROWS_P", "staging[1].record_bytes"} {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("validate: %v, want it to name %q", err, p)
		}
	}
	r.Staging = []config.Staging{{Kind: "sparse-rows", ID: "e", Src: "/mnt/nas/hub/x", Dst: "/mnt/nvme/sparklane/e", Format: "sparse-copy", Tensors: []string{"t.{L}"}, Layers: []int{0, 1}, Mount: "/engram", EnvVar: "SPARK_ENGRAM_DIR", RowsEnv: "SPARK_ENGRAM_ROWS", RecordBytes: 264}}
	if err := lane.Validate(cfg, []*config.Recipe{r}); err != nil {
		t.Fatal(err)
	}
	p, err := lane.Render(cfg, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	for rank, np := range p.Nodes {
		if _, set := np.Env["SPARK_ENGRAM_ROWS"]; set {
			t.Errorf("rank %d: SPARK_ENGRAM_ROWS rendered without rows: %q", rank, np.Env["SPARK_ENGRAM_ROWS"])
		}
		if len(np.RowsFrom) != 1 || np.RowsFrom[0].Rank != rank || np.RowsFrom[0].TP != 2 || np.RowsFrom[0].Format != "sparse-copy" || len(np.RowsFrom[0].Layers) != 2 {
			t.Errorf("rank %d: rows_from %+v", rank, np.RowsFrom)
		}
	}
}
