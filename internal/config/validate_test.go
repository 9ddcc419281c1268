package config

import (
	"os"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

func TestResolve(t *testing.T) {
	rs := []*Recipe{
		{Name: "dsv41-flash-4x-mia", Aliases: []string{"mia"}},
		{Name: "aiden16"},
	}
	for in, want := range map[string]string{"mia": "dsv41-flash-4x-mia", "dsv41-flash-4x-mia": "dsv41-flash-4x-mia", "aiden16": "aiden16"} {
		r, err := Resolve(rs, in)
		if err != nil || r.Name != want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	_, err := Resolve(rs, "maa")
	if err == nil || err.Error() != `unknown lane "maa" — did you mean mia? known lanes: aiden16; dsv41-flash-4x-mia (mia)` {
		t.Fatalf("Resolve(maa): %v", err)
	}
	_, err = Resolve(rs, "qwen")
	if err == nil || err.Error() != `unknown lane "qwen" — known lanes: aiden16; dsv41-flash-4x-mia (mia)` {
		t.Fatalf("Resolve(qwen): %v", err)
	}
}

func TestLocalPath(t *testing.T) {
	n := Node{FSRoot: "/tmp/sim/dgx2"}
	shared := []string{"/mnt/nas"}
	cases := map[string]string{
		"/mnt/nvme/x":       "/tmp/sim/dgx2/mnt/nvme/x",
		"/mnt/nas/hub":      "/mnt/nas/hub",
		"/mnt/nas":          "/mnt/nas",
		"/mnt/nasty/x":      "/tmp/sim/dgx2/mnt/nasty/x",
		"/var/lib/../lib/s": "/tmp/sim/dgx2/var/lib/s",
	}
	for in, want := range cases {
		if got := n.LocalPath(in, shared); got != want {
			t.Errorf("LocalPath(%s) = %s, want %s", in, got, want)
		}
	}
	if got := (Node{FSRoot: "/"}).LocalPath("/mnt/nvme/x", shared); got != "/mnt/nvme/x" {
		t.Errorf("fs_root / changed the path: %s", got)
	}
	if _, err := os.Stat(n.FSRoot); err == nil {
		t.Fatal("LocalPath must not touch the disk") // the fs_root above does not exist
	}
}

// Every node and cluster needs a name of its own; the error names the
// table and, for a name given twice, the earlier one.
func TestNodeAndClusterNamesMissingOrTwice(t *testing.T) {
	cfg := &Config{
		File:     "f.toml",
		Nodes:    []Node{{Roots: []string{"/nvme"}}, {Name: "a", Roots: []string{"/nvme"}}, {Name: "a", Roots: []string{"/nvme"}}},
		Clusters: []Cluster{{Nodes: []string{"a"}}, {Name: "c", Nodes: []string{"a"}}, {Name: "c", Nodes: []string{"a"}}},
	}
	conftest.WantLines(t, conftest.ErrText(ConfigErrors(cfg)),
		"f.toml: nodes[0].name: missing: every node needs a name\n",
		"f.toml: nodes[2].name: node a is defined twice (also nodes[1]): rename or remove one\n",
		"f.toml: clusters[0].name: missing: every cluster needs a name\n",
		"f.toml: clusters[2].name: cluster c is defined twice (also clusters[1])\n",
	)
}
