package conftest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// HostileFleet is one node whose roots include the worker's own state
// dir: the fleet the hostile-input tests write recipes against.
const HostileFleet = `
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

// LaneHead is the start of a sim recipe on HostileFleet's cluster.
const LaneHead = `runtime = "sim"
image = "img"
command = "serve"
cluster = "one"
`

// GoodConfig is a valid two-node fleet: one node over SSH, one local
// under its own fs_root.
const GoodConfig = `
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

// WriteFile writes body to dir/name and returns the path.
func WriteFile(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// ErrText joins errors one per line for assertions.
func ErrText(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteByte('\n')
	}
	return b.String()
}

// WantLines fails t for each of want that got does not contain.
func WantLines(t testing.TB, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}

// RepoRoot is the clone's top directory: the nearest directory above the
// test's package directory that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

// SparkrunFixtures holds community sparkrun v2 recipes copied into
// internal/config's testdata (with their LICENSE and README), so a fresh
// clone tests alone.
func SparkrunFixtures(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), "internal", "config", "testdata", "sparkrun-recipes")
	if _, err := os.Stat(filepath.Join(dir, "LICENSE")); err != nil {
		t.Fatalf("sparkrun fixtures missing at %s: %v", dir, err)
	}
	return dir
}

// ShippedRecipes is the repo's recipes/ directory.
func ShippedRecipes(t testing.TB) string {
	t.Helper()
	return filepath.Join(RepoRoot(t), "recipes")
}
