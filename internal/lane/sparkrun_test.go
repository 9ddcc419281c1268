package lane

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// allKeys is a sparkrun recipe with every top-level key sparkrun reads.
const allKeys = `sparkrun_version: "2"
recipe_version: "2"
name: other-name
description: every key
model: org/model
model_revision: abc123
runtime: vllm
runtime_version: "0.11"
mode: solo
min_nodes: 1
max_nodes: 1
container: img:1
defaults:
  port: 8000
  tensor_parallel: 1
env:
  IFACE: $SPARK_TEST_IFACE
  WRAPPED: "pre-${SPARK_TEST_IFACE}-post"
  UNSET: $SPARK_TEST_UNSET
  HF_TOKEN: $SPARK_TEST_TOKEN
command: vllm serve {model} --revision {model_revision} --port {port} -tp {tensor_parallel}
runtime_config:
  foo: 1
cluster_only: false
solo_only: true
benchmark:
  profile: x
metadata:
  maintainer: me
pre_exec:
  - pip install x
  - copy: /tmp/file
    dest: /workspace/file
post_exec:
  - curl -s localhost:8000/v1/models
post_commands:
  - echo done
mods: []
stop_after_post: true
builder: eugr
builder_config:
  a: b
build_args:
  - --tf5
executor_config:
  user: "1000:1000"
  shm_size: 16gb
  ulimit: memlock=-1
  devices: [/dev/fake0]
  security_opt: [no-new-privileges, seccomp=unconfined]
  auto_remove: true
distribution_config:
  models:
    enabled: false
`

// Every key sparkrun reads loads: applied where it means something here,
// otherwise a warning naming it and why; no key is dropped in silence.
func TestSparkrunEveryKey(t *testing.T) {
	t.Setenv("SPARK_TEST_IFACE", "enp1s0f1np1")
	t.Setenv("SPARK_TEST_TOKEN", "hf_secret")
	os.Unsetenv("SPARK_TEST_UNSET")
	dir := t.TempDir()
	p := writeFile(t, dir, "all-keys.yaml", allKeys)
	r := mustRecipe(t, p)
	cfg := sparkFleet()
	plan, err := RenderOn(cfg, r, "quad", nil)
	if err != nil {
		t.Fatal(err)
	}
	np := plan.Nodes[0]
	// Applied.
	if len(plan.Nodes) != 1 || r.Mode != "solo" || r.MaxNodes != 1 {
		t.Errorf("solo: %d nodes, mode %q max %d", len(plan.Nodes), r.Mode, r.MaxNodes)
	}
	if !strings.Contains(np.Command, "--revision abc123") {
		t.Errorf("model_revision: %s", np.Command)
	}
	if np.Env["IFACE"] != "enp1s0f1np1" || np.Env["WRAPPED"] != "pre-enp1s0f1np1-post" || np.Env["UNSET"] != "$SPARK_TEST_UNSET" || np.Env["HF_TOKEN"] != "$SPARK_TEST_TOKEN" {
		t.Errorf("env expansion: %v", np.Env)
	}
	c := np.Container
	if c.User != "1000:1000" || c.ShmBytes != 16<<30 || fmt.Sprint(c.Ulimits) != "[{memlock -1 -1}]" ||
		fmt.Sprint(c.Devices) != "[/dev/fake0]" || fmt.Sprint(c.SecurityOpt) != "[no-new-privileges seccomp=unconfined]" {
		t.Errorf("executor_config: %+v", c)
	}
	if !reflect.DeepEqual(np.PreExec, []contract.PreExec{{Run: "pip install x"}, {Copy: "/tmp/file", Dest: "/workspace/file"}}) {
		t.Errorf("pre_exec: %+v", np.PreExec)
	}
	if fmt.Sprint(r.PostExec) != "[curl -s localhost:8000/v1/models]" || fmt.Sprint(r.PostCommands) != "[echo done]" || r.Metadata["description"] != "every key" || r.Builder != "eugr" {
		t.Errorf("recorded: post_exec %v post_commands %v metadata %v builder %q", r.PostExec, r.PostCommands, r.Metadata, r.Builder)
	}
	if fmt.Sprint(plan.PostExec) != "[curl -s localhost:8000/v1/models]" || fmt.Sprint(plan.PostCommands) != "[echo done]" || !plan.StopAfterPost {
		t.Errorf("plan: post_exec %v post_commands %v stop_after_post %v", plan.PostExec, plan.PostCommands, plan.StopAfterPost)
	}
	// Warned, each by key.
	want := []string{
		"env.HF_TOKEN: $SPARK_TEST_TOKEN is not expanded: it names a secret",
		"executor_config.auto_remove: not applied",
		"name: \"other-name\" not used",
		"runtime_version: not applied",
		"runtime_config: recorded, not applied: its keys (foo)",
		"benchmark: not applied",
		"distribution_config: not applied",
		"build_args: recorded (builder \"eugr\"): sparklane builds no image from it (only builder docker with builder_config context or git maps onto [build]); img:1 must already be on a node, or give the recipe a [build]",
		"max_nodes 1: runs on the first 1 of cluster quad's 4 nodes (dgx1)",
	}
	if len(plan.Warnings) != len(want) {
		t.Errorf("warnings:\n%s", strings.Join(plan.Warnings, "\n"))
	}
	for _, w := range want {
		found := false
		for _, got := range plan.Warnings {
			found = found || strings.Contains(got, p+": "+w)
		}
		if !found {
			t.Errorf("no warning %q in:\n%s", w, strings.Join(plan.Warnings, "\n"))
		}
	}
	for _, w := range plan.Warnings {
		if strings.Contains(w, "hf_secret") {
			t.Errorf("a secret reached the plan: %s", w)
		}
	}
}

// Topology keys: cluster_only needs two nodes, solo_only runs on one.
func TestSparkrunTopologyKeys(t *testing.T) {
	dir := t.TempDir()
	cfg := sparkFleet()
	base := "model: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m -tp {tensor_parallel}\n"
	p := writeFile(t, dir, "co.yaml", base+"cluster_only: true\ndefaults:\n  tensor_parallel: 2\n")
	r, err := config.LoadRecipe(p)
	if err != nil || r.MinNodes != 2 {
		t.Fatalf("cluster_only: %+v %v", r, err)
	}
	if _, err := RenderOn(cfg, r, "solo", nil); err == nil || !strings.Contains(err.Error(), p+": min_nodes: lane needs 2 nodes but cluster solo has 1") {
		t.Errorf("cluster_only on one node: %v", err)
	}
	p = writeFile(t, dir, "so.yaml", base+"solo_only: true\n")
	r = mustRecipe(t, p)
	plan, err := RenderOn(cfg, r, "pair", nil)
	if err != nil || len(plan.Nodes) != 1 || plan.Nodes[0].Argv[len(plan.Nodes[0].Argv)-1] != "1" {
		t.Errorf("solo_only: %+v %v", plan, err)
	}
	// tp×pp larger than the cluster is refused, saying what to do.
	p = writeFile(t, dir, "big.yaml", base+"defaults:\n  tensor_parallel: 2\n  pipeline_parallel: 3\n")
	r, _ = config.LoadRecipe(p)
	if _, err := RenderOn(cfg, r, "quad", nil); err == nil || !strings.Contains(err.Error(), "= 6 nodes, but cluster quad has 4") {
		t.Errorf("tp×pp over the cluster: %v", err)
	}
	// -o moves the world: tensor_parallel=4 uses all four.
	p = writeFile(t, dir, "tp.yaml", base+"defaults:\n  tensor_parallel: 2\n")
	r, _ = config.LoadRecipe(p)
	if plan, err := RenderOn(cfg, r, "quad", map[string]string{"tensor_parallel": "4"}); err != nil || len(plan.Nodes) != 4 || len(plan.Warnings) != 0 {
		t.Errorf("-o tensor_parallel=4: %v %v", plan, err)
	}
}

// vLLM data parallel: replicas of tp×pp nodes, sparkrun's flags.
func TestVLLMDataParallel(t *testing.T) {
	dir := t.TempDir()
	cfg := sparkFleet()
	p := writeFile(t, dir, "dp.yaml", "model: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m -tp {tensor_parallel}\ndefaults:\n  tensor_parallel: 1\n  data_parallel: 2\n")
	r := mustRecipe(t, p)
	plan, err := RenderOn(cfg, r, "quad", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, np := range plan.Nodes {
		want := fmt.Sprintf("vllm serve m -tp 1 --data-parallel-size 2 --data-parallel-rank %d --data-parallel-address 192.168.100.11 --data-parallel-rpc-port 13345", i)
		if np.Command != want {
			t.Errorf("dp rank %d: %s", i, np.Command)
		}
	}
	if len(plan.Nodes) != 2 || len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], "= 2: runs on the first 2") {
		t.Errorf("dp=2 on quad: %d nodes, %q", len(plan.Nodes), plan.Warnings)
	}
	// Hybrid tp=2 dp=2: each replica's workers point at its own first node.
	plan, err = RenderOn(cfg, r, "quad", map[string]string{"tensor_parallel": "2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--nnodes 2 --node-rank 0 --master-addr 192.168.100.11 --master-port 25000 --data-parallel-size 2 --data-parallel-rank 0",
		"--nnodes 2 --node-rank 1 --master-addr 192.168.100.11 --master-port 25000 --headless --data-parallel-size 2 --data-parallel-rank 0",
		"--nnodes 2 --node-rank 0 --master-addr 192.168.100.13 --master-port 25000 --data-parallel-size 2 --data-parallel-rank 1",
		"--nnodes 2 --node-rank 1 --master-addr 192.168.100.13 --master-port 25000 --headless --data-parallel-size 2 --data-parallel-rank 1",
	}
	for i, np := range plan.Nodes {
		if !strings.Contains(np.Command, want[i]) {
			t.Errorf("hybrid rank %d: %s", i, np.Command)
		}
	}
}

// Per-node communication env from [[nodes]] hca/ifname; the recipe's env
// wins; a node without RDMA gets neither the env nor /dev/infiniband.
func TestCommEnvPerNode(t *testing.T) {
	dir := t.TempDir()
	cfg := sparkFleet()
	cfg.Nodes[1].IfName = "enp2"
	p := writeFile(t, dir, "c.yaml", "model: m\nruntime: sglang\ncontainer: i\ncommand: sglang serve --model-path m --tp {tensor_parallel}\ndefaults:\n  tensor_parallel: 4\nenv:\n  GLOO_SOCKET_IFNAME: lo\n")
	r := mustRecipe(t, p)
	plan, err := RenderOn(cfg, r, "quad", nil)
	if err != nil {
		t.Fatal(err)
	}
	e0, e1, e3 := plan.Nodes[0].Env, plan.Nodes[1].Env, plan.Nodes[3].Env
	if e0["NCCL_IB_HCA"] != "rocep1s0f1,roceP2p1s0f1" || e0["UCX_NET_DEVICES"] != "rocep1s0f1:1,roceP2p1s0f1:1" ||
		e0["NCCL_SOCKET_IFNAME"] != "enp1s0f1np1,enP2p1s0f1np1" || e0["TP_SOCKET_IFNAME"] != "enp1s0f1np1,enP2p1s0f1np1" || e0["NCCL_CUMEM_ENABLE"] != "0" {
		t.Errorf("dgx1 comm env: %v", e0)
	}
	if e1["NCCL_SOCKET_IFNAME"] != "enp2" || e0["GLOO_SOCKET_IFNAME"] != "lo" || e1["GLOO_SOCKET_IFNAME"] != "lo" {
		t.Errorf("per-node ifname / recipe env wins: %v / %v", e0, e1)
	}
	if _, ok := e3["NCCL_IB_HCA"]; ok || len(plan.Nodes[3].Container.Devices) != 0 || fmt.Sprint(plan.Nodes[0].Container.Devices) != "[/dev/infiniband]" {
		t.Errorf("dgx4 without RDMA: %v %v", e3, plan.Nodes[3].Container.Devices)
	}
	if !strings.HasSuffix(plan.Nodes[2].Command, "--dist-init-addr 192.168.100.11:25000 --nnodes 4 --node-rank 2") {
		t.Errorf("sglang rank 2: %s", plan.Nodes[2].Command)
	}
}

// --cluster beats the recipe's cluster, default_cluster fills an empty
// one, and an unknown default_cluster is a config error.
func TestRenderOnClusterChoice(t *testing.T) {
	cfg := sparkFleet()
	r := mustRecipe(t, filepath.Join(registryDir, "official-recipes/minimax-m2.7/minimax-m2.7-awq4-vllm.yaml"))
	if p, err := RenderOn(cfg, r, "pair", nil); err != nil || p.Cluster != "pair" || r.Cluster != "" {
		t.Errorf("--cluster pair: %v %v (recipe cluster %q)", p, err, r.Cluster)
	}
	if p, err := Render(cfg, r, nil); err != nil || p.Cluster != "quad" {
		t.Errorf("default_cluster: %v %v", p, err)
	}
	cfg.DefaultCluster = ""
	if _, err := Render(cfg, r, nil); err == nil || !strings.Contains(err.Error(), "cluster: empty: pass --cluster, set default_cluster") {
		t.Errorf("no cluster: %v", err)
	}
	cfg.DefaultCluster = "octo"
	if err := Validate(cfg, nil); err == nil || !strings.Contains(err.Error(), `default_cluster: unknown cluster "octo"`) {
		t.Errorf("unknown default_cluster: %v", err)
	}
}

// A TOML recipe takes the same keys: executor_config, pre_exec, mods
// (resolved as in a sparkrun recipe) and mode.
func TestTOMLRecipeSparkrunKeys(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "mods", "tpl"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "mods", "tpl"), "run.sh", "#!/bin/sh\n")
	p := writeFile(t, dir, "t.toml", `runtime = "vllm"
image = "i"
command = "vllm serve m"
mode = "solo"
mods = ["tpl"]
builder = "eugr"
build_args = ["--tf5"]

[executor_config]
user = "0:0"
ulimit = ["nofile=1024:2048"]

[[pre_exec]]
run = "echo hi"
`)
	r := mustRecipe(t, p)
	plan, err := RenderOn(sparkFleet(), r, "pair", nil)
	if err != nil {
		t.Fatal(err)
	}
	np := plan.Nodes[0]
	if len(plan.Nodes) != 1 || np.Container.User != "0:0" || fmt.Sprint(np.Container.Ulimits) != "[{nofile 1024 2048}]" ||
		len(np.PreExec) != 3 || np.PreExec[0].Run != "echo hi" || np.PreExec[1].Dest != "/workspace/mods/tpl" {
		t.Errorf("toml keys: %d nodes, %+v, %+v", len(plan.Nodes), np.Container, np.PreExec)
	}
	if len(plan.Warnings) != 2 || plan.Warnings[0] != p+`: build_args: recorded (builder "eugr"): sparklane builds no image from it (only builder docker with builder_config context or git maps onto [build]); i must already be on a node, or give the recipe a [build]` ||
		!strings.Contains(plan.Warnings[1], "max_nodes 1: runs on the first 1 of cluster pair's 2 nodes") {
		t.Errorf("toml warnings: %q", plan.Warnings)
	}
	p = writeFile(t, dir, "m.toml", "runtime = \"vllm\"\nimage = \"i\"\ncommand = \"x\"\nmods = [\"gone\"]\n")
	if _, err := config.LoadRecipe(p); err == nil || !strings.Contains(err.Error(), p+`: mods[0]: mod "gone" not found`) {
		t.Errorf("toml missing mod: %v", err)
	}
}

// Detected RDMA facts fill a node; configured ones win.
func TestApplyDetected(t *testing.T) {
	n := config.Node{Name: "a", IfName: "pinned0"}
	n.ApplyDetected("rocep1s0f1", "enp1s0f1np1", true)
	if n.HCA != "rocep1s0f1" || n.IfName != "pinned0" || !n.Infiniband {
		t.Errorf("%+v", n)
	}
	env := commEnv(&n)
	if env["NCCL_SOCKET_IFNAME"] != "pinned0" || env["UCX_NET_DEVICES"] != "rocep1s0f1:1" {
		t.Errorf("env %v", env)
	}
}
