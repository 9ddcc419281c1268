package fleete2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

// initResult is what the test reads of `starter init --json`.
type initResult struct {
	Written     bool
	Nodes       []struct{ Name, SSH, Root string }
	SharedRoots []struct{ Path, FSType, Source string } `json:"shared_roots"`
	SharedNotes []string                                `json:"shared_notes"`
	HFCacheDir  string                                  `json:"hf_cache_dir"`
	Clusters    []struct {
		Name  string
		Nodes []string
	}
	TooLarge []struct{ Name string } `json:"too_large"`
}

// lanesResult is what the test reads of `starter lanes --json`.
type lanesResult struct {
	Lanes    []struct{ Name string }
	Broken   []struct{ File, Error string }
	TooLarge []struct {
		Lane       string
		Needs, Has int
	} `json:"too_large"`
}

// starter init on the network-namespace fleet — real hosts, each with its
// own sshd, dockerd, mount namespace and /mnt/nvme, and one read-only NAS
// at /mnt/nas — beside the shipped recipes, as a new user runs it from the
// release directory: it writes ssh as user@host:22, the NAS as the shared
// root (the nodes' /mnt/nvme, the same path on every node but each its
// own, is not), the hub cache on it as hf_cache_dir, and the clusters the
// shipped recipes name. Then what init tells the user to run, and the
// lanes and a dry run, take the file as written: on three hosts the
// 4-node lanes are listed as needing 4 nodes, on four every shipped lane
// is a lane; nothing is BROKEN and no command warns of recipes that do
// not load.
func TestInitOnTheTestFleetWritesAConfigEveryCommandTakes(t *testing.T) {
	tf := testfleet.New(t, testfleet.Options{Name: "flinit", Nodes: 4, Docker: true})
	hub := filepath.Join(testfleet.NASPath, "huggingface", "hub")
	if err := os.MkdirAll(filepath.Join(tf.NASDir(), "huggingface", "hub", "models--XiaomiMiMo--MiMo-2.6-Flash-MOPD", "snapshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Whatever init writes under "~" stays in the test (state_dir).
	t.Setenv("HOME", t.TempDir())
	shipped, err := filepath.Glob("../../../recipes/*.toml")
	if err != nil || len(shipped) < 5 {
		t.Fatalf("shipped recipes: %v %v", shipped, err)
	}
	for _, size := range []int{3, 4} {
		dir := t.TempDir()
		copyFiles(t, shipped, filepath.Join(dir, "recipes"))
		cfg := filepath.Join(dir, "sparklane.toml")
		args := []string{"--json", "init", "--known-hosts", tf.KnownHostsFile(), "--identity", tf.IdentityFile(), "--out", cfg}
		for i, n := range tf.Nodes()[:size] {
			target := n.SSHAddr()
			if i == 0 {
				target = "root@" + n.IP // as the README writes it: no port
			}
			args = append(args, "--node", n.Name+"="+target)
		}
		code, out, errOut := starter(t, args...)
		var res initResult
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || !res.Written {
			t.Fatalf("%d hosts: init: exit %d %v\n%s%s", size, code, err, out, errOut)
		}
		text, _ := os.ReadFile(cfg)
		t.Logf("%d hosts: init wrote:\n%s", size, text)
		// Each host's login sets DOCKER_HOST to its own dockerd: init
		// writes it as the node's docker endpoint.
		if n := strings.Count(string(text), "docker = \"unix://"+testfleet.NodeDockerSocket+"\""); n != size {
			t.Errorf("%d hosts: init wrote the nodes' DOCKER_HOST %d times, want %d", size, n, size)
		}
		checkInit(t, tf, size, res, hub)

		code, out, errOut = starter(t, "recipe", "check", cfg)
		if code != 0 || !strings.Contains(out, "ok") {
			t.Fatalf("%d hosts: recipe check %s: exit %d\n%s%s", size, cfg, code, out, errOut)
		}
		checkLanes(t, cfg, size)

		// A dry run of a shipped lane (mopd: the 4-node one, by its alias)
		// on the cluster init wrote for it; sim-demo, which names none,
		// on the default cluster of all the hosts.
		dry := map[string]string{"mimo26-flash-mopd-2x": "2nodes-dac", "sim-demo": fmt.Sprintf("all-%dx", size)}
		if size == 4 {
			dry["mopd"] = "4nodes-switch"
		}
		for l, cluster := range dry {
			code, out, errOut = starter(t, "--config", cfg, "--json", "cutover", "--lane", l, "--dry-run")
			var d struct {
				Cluster string
				Nodes   []struct{ Node string }
			}
			if err := json.Unmarshal([]byte(out), &d); err != nil || code != 0 || strings.Contains(errOut, "do not load") {
				t.Fatalf("%d hosts: cutover --lane %s --dry-run: exit %d %v\n%s%s", size, l, code, err, out, errOut)
			}
			if c := clusterOf(t, cfg, cluster); d.Cluster != cluster || len(d.Nodes) != len(c) {
				t.Errorf("%d hosts: dry run of %s on %s (nodes %+v), want %s (%v)", size, l, d.Cluster, d.Nodes, cluster, c)
			}
		}
	}
}

// checkInit checks what init found on the test fleet: ssh with its port,
// the NVMe root, the NAS alone as shared root, its hub cache, and the
// shipped recipes' clusters sized for them (or too large).
func checkInit(t *testing.T, tf *testfleet.Fleet, size int, res initResult, hub string) {
	t.Helper()
	for i, n := range res.Nodes {
		if want := tf.Nodes()[i].SSHAddr(); n.SSH != want || n.Root != "/mnt/nvme/sparklane" {
			t.Errorf("%d hosts: node %+v, want ssh %s and root /mnt/nvme/sparklane", size, n, want)
		}
	}
	if len(res.SharedRoots) != 1 || res.SharedRoots[0].Path != testfleet.NASPath || res.HFCacheDir != hub {
		t.Errorf("%d hosts: shared roots %+v (notes %q), hf_cache_dir %q; want %s alone and %s", size, res.SharedRoots, res.SharedNotes, res.HFCacheDir, testfleet.NASPath, hub)
	}
	var clusters, large []string
	for _, c := range res.Clusters {
		clusters = append(clusters, c.Name+"="+strings.Join(c.Nodes, ","))
	}
	for _, c := range res.TooLarge {
		large = append(large, c.Name)
	}
	want, wantLarge := []string{"2nodes-dac=h1,h2"}, []string{"4nodes-switch"}
	if size == 4 {
		want, wantLarge = []string{"2nodes-dac=h1,h2", "4nodes-switch=h1,h2,h3,h4"}, nil
	}
	if !slices.Equal(clusters, want) || !slices.Equal(large, wantLarge) {
		t.Errorf("%d hosts: recipe clusters %v, too large %v; want %v and %v", size, clusters, large, want, wantLarge)
	}
}

// checkLanes runs `lanes` on init's config: no broken recipe, no warning,
// and the 4-node lanes listed as needing 4 nodes when the fleet has 3.
func checkLanes(t *testing.T, cfg string, size int) {
	t.Helper()
	code, out, errOut := starter(t, "--config", cfg, "--json", "lanes")
	var l lanesResult
	if err := json.Unmarshal([]byte(out), &l); err != nil || code != 0 {
		t.Fatalf("%d hosts: lanes: exit %d %v\n%s%s", size, code, err, out, errOut)
	}
	var lanes, large []string
	for _, r := range l.Lanes {
		lanes = append(lanes, r.Name)
	}
	for _, r := range l.TooLarge {
		if r.Needs != 4 || r.Has != size {
			t.Errorf("%d hosts: %s needs %d of %d nodes, want 4 of %d", size, r.Lane, r.Needs, r.Has, size)
		}
		large = append(large, r.Lane)
	}
	sort.Strings(lanes)
	want, wantLarge := []string{"dsv41-flash-exl3-2x", "mimo26-flash-mopd-2x", "sim-demo"}, []string{"aiden16", "dsv41-flash-4x-mia", "mimo26-flash-mopd-4x"}
	if size == 4 {
		want, wantLarge = []string{"aiden16", "dsv41-flash-4x-mia", "dsv41-flash-exl3-2x", "mimo26-flash-mopd-2x", "mimo26-flash-mopd-4x", "sim-demo"}, nil
	}
	if len(l.Broken) != 0 || errOut != "" || !slices.Equal(lanes, want) || !slices.Equal(large, wantLarge) {
		t.Errorf("%d hosts: lanes %v, too large %v, broken %+v, stderr %q; want %v, %v, none, nothing", size, lanes, large, l.Broken, errOut, want, wantLarge)
	}
	code, out, _ = starter(t, "--config", cfg, "lanes")
	if code != 0 || strings.Contains(out, "BROKEN") || (size == 3 && !strings.Contains(out, "needs 4 nodes; this fleet has 3")) {
		t.Errorf("%d hosts: lanes:\n%s", size, out)
	}
}

// clusterOf is cluster name's nodes in the config at path.
func clusterOf(t *testing.T, path, name string) []string {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Cluster(name); c != nil {
		return c.Nodes
	}
	return nil
}

// copyFiles copies files into dir (created).
func copyFiles(t *testing.T, files []string, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
