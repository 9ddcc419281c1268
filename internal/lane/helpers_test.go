package lane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// errText joins errors one per line for assertions.
func errText(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

func wantLines(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}

const hostileFleet = `
shared_roots = ["/nas"]
hf_cache_dir = "/nas/hub"

[[nodes]]
name = "n1"
roots = ["/nvme", "/var/lib/sparklane"]
fs_root = "/tmp/sim/n1"
clear_helper = ["sudo", "-n"]

[[clusters]]
name = "one"
nodes = ["n1"]
`

const laneHead = `runtime = "sim"
image = "img"
command = "serve"
cluster = "one"
`

// registryDir is a clone of spark-arena/recipe-registry, kept with the
// loader's fixtures (../config/testdata/registry/README.md).
const registryDir = "../config/testdata/registry"

// sparkFleet is four DGX Sparks on a RoCE switch: dgx1/dgx2 with their
// RDMA devices configured, dgx3/dgx4 without (detection fills them in on
// real nodes). Clusters of 1 to 4 nodes, quad the default.
func sparkFleet() *config.Config {
	cfg := &config.Config{
		File:           "sparklane.toml",
		HFCacheDir:     "/mnt/nas/huggingface/hub",
		SharedRoots:    []string{"/mnt/nas"},
		DefaultCluster: "quad",
		RecipesDirs:    []string{registryDir},
		Registries:     map[string]string{"arena": registryDir},
	}
	for i := 1; i <= 4; i++ {
		n := config.Node{Name: fmt.Sprintf("dgx%d", i), Address: fmt.Sprintf("192.168.100.1%d", i), Roots: []string{"/mnt/nvme"}}
		if i <= 2 {
			n.HCA = "rocep1s0f1,roceP2p1s0f1"
			n.IfName = "enp1s0f1np1,enP2p1s0f1np1"
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	cfg.Clusters = []config.Cluster{
		{Name: "solo", Nodes: []string{"dgx1"}},
		{Name: "pair", Nodes: []string{"dgx1", "dgx2"}},
		{Name: "trio", Nodes: []string{"dgx1", "dgx2", "dgx3"}},
		{Name: "quad", Nodes: []string{"dgx1", "dgx2", "dgx3", "dgx4"}},
	}
	return cfg
}

// repoRoot is the clone's top directory (tests run in the package dir).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repo root %s has no go.mod: %v", root, err)
	}
	return root
}

// fixturesDir holds community sparkrun v2 recipes copied into the loader's
// testdata (../config/testdata, with their LICENSE and README), so a fresh
// clone tests alone.
func fixturesDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "config", "testdata", "sparkrun-recipes")
	if _, err := os.Stat(filepath.Join(dir, "LICENSE")); err != nil {
		t.Fatalf("sparkrun fixtures missing at %s: %v", dir, err)
	}
	return dir
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodConfig = `
state_dir = "state"
hf_cache_dir = "/nas/hub"
shared_roots = ["/nas"]

[temporal]
ui_port = 9233

[[nodes]]
name = "a"
ssh = "op@10.0.0.1:22"
roots = ["/nvme"]

[[nodes]]
name = "b"
roots = ["/nvme"]
fs_root = "/tmp/b"

[[clusters]]
name = "pair"
nodes = ["a", "b"]
`

// checkFiles is `starter recipe check FILE...` without its notices.
func checkFiles(paths []string) []error {
	errs, _ := Check(paths)
	return errs
}
