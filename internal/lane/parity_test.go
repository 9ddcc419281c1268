package lane

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// parityFixture is what sparkrun produces for one registry recipe, written
// down by testdata/parity/derive.py from sparkrun's code at SparkrunCommit.
type parityFixture struct {
	SparkrunCommit string `json:"sparkrun_commit"`
	RegistryCommit string `json:"registry_commit"`
	Recipe         string `json:"recipe"`
	Nodes          int    `json:"nodes"`
	Ranks          []struct {
		Host string            `json:"host"`
		Argv []string          `json:"argv"`
		Env  map[string]string `json:"env"`
	} `json:"ranks"`
	Docker struct {
		GPUs        string   `json:"gpus"`
		IPC         string   `json:"ipc"`
		Network     string   `json:"network"`
		ShmSize     string   `json:"shm_size"`
		Privileged  bool     `json:"privileged"`
		SecurityOpt []string `json:"security_opt"`
		Ulimit      []string `json:"ulimit"`
		Devices     []string `json:"devices"`
		User        string   `json:"user"`
	} `json:"docker"`
	PreExec []struct {
		CopyMod string `json:"copy_mod"`
		Dest    string `json:"dest"`
		Run     string `json:"run"`
	} `json:"pre_exec"`
}

// sparklaneOnlyEnv are variables sparklane adds that sparkrun does not:
// the world shape engine adapters read. CommEnvKeys are in both, but
// sparkrun's come from its detection, so they are not in the fixtures.
var sparklaneOnlyEnv = []string{"NODE_RANK", "NNODES", "TP_SIZE", "EP_SIZE", "MASTER_ADDR", "MASTER_PORT"}

// Six registry recipes (solo, 2- and 4-node vLLM, SGLang, pp=3, mods)
// rendered by sparklane on the four-node fleet give sparkrun's argv
// (rendezvous port included), env and docker essentials.
func TestSparkrunParity(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "parity", "*.json"))
	if err != nil || len(files) < 6 {
		t.Fatalf("parity fixtures: %v %v", files, err)
	}
	cfg := sparkFleet()
	for i := range cfg.Nodes {
		cfg.Nodes[i].Infiniband = true // sparkrun's rootless launch binds /dev/infiniband everywhere
	}
	equal := 0
	for _, f := range files {
		ok := t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			var fx parityFixture
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &fx); err != nil {
				t.Fatal(err)
			}
			if fx.SparkrunCommit == "" || fx.RegistryCommit == "" {
				t.Fatalf("%s: fixture does not say which commits it came from", f)
			}
			r := mustRecipe(t, filepath.Join(registryDir, fx.Recipe))
			plan, err := RenderOn(cfg, r, "quad", nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(plan.Nodes) != fx.Nodes || len(fx.Ranks) != fx.Nodes {
				t.Fatalf("%d nodes, sparkrun %d", len(plan.Nodes), fx.Nodes)
			}
			for i, want := range fx.Ranks {
				np := plan.Nodes[i]
				if cfg.Node(np.Node).Address != want.Host {
					t.Errorf("rank %d on %s, sparkrun on %s", i, np.Node, want.Host)
				}
				if !reflect.DeepEqual(np.Argv, want.Argv) {
					t.Errorf("rank %d argv:\n sparklane %q\n sparkrun  %q", i, np.Argv, want.Argv)
				}
				for k, v := range want.Env {
					if np.Env[k] != v {
						t.Errorf("rank %d env %s=%q, sparkrun %q", i, k, np.Env[k], v)
					}
				}
				for k := range np.Env {
					if _, ok := want.Env[k]; !ok && !slices.Contains(sparklaneOnlyEnv, k) && !slices.Contains(CommEnvKeys, k) {
						t.Errorf("rank %d env %s=%s is not sparkrun's", i, k, np.Env[k])
					}
				}
				c, d := np.Container, fx.Docker
				var ul []string
				for _, u := range c.Ulimits {
					ul = append(ul, fmt.Sprintf("%s=%d:%d", u.Name, u.Soft, u.Hard))
				}
				if c.GPUs != d.GPUs || c.IPC != d.IPC || c.Network != d.Network || c.ShmSize != d.ShmSize || c.Privileged != d.Privileged ||
					c.User != d.User || !reflect.DeepEqual(c.SecurityOpt, d.SecurityOpt) || !reflect.DeepEqual(c.Devices, d.Devices) ||
					fmt.Sprint(ul) != "[memlock=-1:-1 stack=67108864:67108864]" || fmt.Sprint(d.Ulimit) != "[memlock=-1:-1 stack=67108864]" {
					t.Errorf("rank %d docker: %+v, sparkrun %+v", i, c, d)
				}
				// sparkrun binds the HF cache home at HF_HOME; sparklane binds
				// hf_cache_dir (the hub root) at HF_HOME/hub: the same view.
				if np.Mounts[0].Dst != np.Env["HF_HOME"]+"/hub" || np.Mounts[0].Src != cfg.HFCacheDir {
					t.Errorf("rank %d HF cache bind: %+v", i, np.Mounts[0])
				}
				if len(np.PreExec) != len(fx.PreExec) {
					t.Fatalf("rank %d pre_exec: %+v, sparkrun %+v", i, np.PreExec, fx.PreExec)
				}
				for j, p := range fx.PreExec {
					got := np.PreExec[j]
					if got.Run != p.Run || got.Dest != p.Dest || (p.CopyMod != "" && filepath.Base(got.Copy) != p.CopyMod) {
						t.Errorf("rank %d pre_exec[%d]: %+v, sparkrun %+v", i, j, got, p)
					}
				}
			}
		})
		if ok {
			equal++
		}
	}
	t.Logf("argv, env, docker essentials and pre_exec equal to sparkrun's: %d/%d cases", equal, len(files))
}
