package lane

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// topologyFixture is sparkrun's own per-host comm env for a recipe on a
// ring, written by testdata/parity/topology/derive.py.
type topologyFixture struct {
	SparkrunCommit string `json:"sparkrun_commit"`
	Recipe         string `json:"recipe"`
	Topology       string `json:"topology"`
	Nodes          []struct {
		Name, Address, HCA, IfName string
	} `json:"nodes"`
	Ranks []struct {
		Host    string            `json:"host"`
		CommEnv map[string]string `json:"comm_env"`
	} `json:"ranks"`
}

// A 3-node (pp 3) and a 4-node (tp 4) registry recipe rendered on a ring
// (and on the same cabling declared a mesh) give every rank the comm env
// sparkrun computes for its host, key for key, and no comm variable
// sparkrun does not set. NODE_IP (sparkrun's management IP for Ray
// scripts) is not rendered by sparklane.
func TestRingParityWithSparkrun(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "parity", "topology", "*.json"))
	if len(files) != 2 {
		t.Fatalf("ring fixtures: %v", files)
	}
	for _, f := range files {
		var fx topologyFixture
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &fx); err != nil || fx.SparkrunCommit == "" {
			t.Fatalf("%s: %v (commit %q)", f, err, fx.SparkrunCommit)
		}
		for _, topo := range []string{"ring", "mesh"} {
			cfg := &config.Config{File: "sparklane.toml", HFCacheDir: "/mnt/nas/huggingface/hub", SharedRoots: []string{"/mnt/nas"}}
			c := config.Cluster{Name: "r", Topology: topo}
			for _, n := range fx.Nodes {
				cfg.Nodes = append(cfg.Nodes, config.Node{Name: n.Name, Address: n.Address, HCA: n.HCA, IfName: n.IfName, Roots: []string{"/mnt/nvme"}})
				c.Nodes = append(c.Nodes, n.Name)
			}
			cfg.Clusters = []config.Cluster{c}
			plan, err := RenderOn(cfg, mustRecipe(t, filepath.Join(registryDir, fx.Recipe)), "r", nil)
			if err != nil {
				t.Fatalf("%s on a %s: %v", fx.Recipe, topo, err)
			}
			if len(plan.Nodes) != len(fx.Ranks) {
				t.Fatalf("%s: %d ranks, sparkrun %d", fx.Recipe, len(plan.Nodes), len(fx.Ranks))
			}
			comm := append(slices.Clone(CommEnvKeys), TopologyEnvKeys...)
			for i, want := range fx.Ranks {
				np := plan.Nodes[i]
				if cfg.Node(np.Node).Address != want.Host || np.Topology != topo {
					t.Errorf("%s rank %d on %s (topology %q), sparkrun on %s", f, i, np.Node, np.Topology, want.Host)
				}
				for k, v := range want.CommEnv {
					if k != "NODE_IP" && np.Env[k] != v {
						t.Errorf("%s %s rank %d: %s=%q, sparkrun %q", f, topo, i, k, np.Env[k], v)
					}
				}
				for _, k := range comm {
					if _, ok := want.CommEnv[k]; !ok && np.Env[k] != "" && k != "NCCL_CUMEM_ENABLE" {
						t.Errorf("%s %s rank %d: %s=%s is not in sparkrun's comm env", f, topo, i, k, np.Env[k])
					}
				}
			}
		}
	}
}

// switch and pair get sparkrun's IB env without the switchless
// overrides; an undeclared topology keeps the device names alone; a
// topology the cluster cannot have is refused naming the key.
func TestTopologyDeclared(t *testing.T) {
	cfg := sparkFleet()
	r := mustRecipe(t, filepath.Join(registryDir, "official-recipes/minimax-m2.7/minimax-m2.7-awq4-vllm.yaml"))
	for _, topo := range []string{"", "switch", "pair"} {
		cfg.Clusters[1].Topology = topo
		plan, err := RenderOn(cfg, r, "pair", nil)
		if err != nil {
			t.Fatal(err)
		}
		e := plan.Nodes[0].Env
		if e["NCCL_NET_PLUGIN"] != "" || e["NCCL_IB_SUBNET_AWARE_ROUTING"] != "" || e["NCCL_IB_HCA"] != "rocep1s0f1,roceP2p1s0f1" {
			t.Errorf("%q: %v", topo, e)
		}
		if got := e["NCCL_NET"] == "IB" && e["NCCL_CROSS_NIC"] == "1" && e["MN_IF_NAME"] == "enp1s0f1np1,enP2p1s0f1np1"; got != (topo != "") {
			t.Errorf("%q: sparkrun's IB env %v, want %v: %v", topo, got, topo != "", e)
		}
	}
	for topo, want := range map[string]string{
		"star": `sparklane.toml: clusters.trio.topology: "star" is not a topology: write one of switch, pair, ring, mesh`,
		"pair": "sparklane.toml: clusters.trio.topology: pair is two nodes cabled to each other, the cluster has 3",
	} {
		cfg.Clusters[2].Topology = topo
		if _, err := RenderOn(cfg, r, "trio", nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", topo, err)
		}
	}
	cfg.Clusters[2].Topology = ""
	cfg.Clusters[1].Topology = "ring"
	if _, err := RenderOn(cfg, r, "pair", nil); err == nil || !strings.Contains(err.Error(), "clusters.pair.topology: a ring has three or more nodes, the cluster has 2") {
		t.Errorf("ring of two: %v", err)
	}
}
