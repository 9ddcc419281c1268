package lane

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// exampleFleet loads recipes/sparklane.example.toml and the shipped lanes.
func exampleFleet(t *testing.T) (*config.Config, []*config.Recipe) {
	t.Helper()
	// Written for the repo root (recipes_dir = "recipes"): loaded where it
	// lies, the environment points it at recipes/.
	t.Setenv("SPARKLANE_RECIPES_DIR", shippedRecipesDir(t))
	cfg := mustConfig(t, filepath.Join(shippedRecipesDir(t), "sparklane.example.toml"))
	// As every command reads them: {hf_cache_dir} expanded (sim-demo).
	set, err := config.LoadRecipeSet(cfg, cfg.File)
	if err != nil || len(set.Broken) > 0 {
		t.Fatal(err, set.Broken)
	}
	return cfg, set.Recipes
}

// renderExample resolves and renders lane of the example fleet, failing t
// on an error.
func renderExample(t *testing.T, lane string) (*config.Config, []*config.Recipe, *config.Recipe, *contract.LanePlan) {
	t.Helper()
	cfg, rs := exampleFleet(t)
	r, err := config.Resolve(rs, lane)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Render(cfg, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, rs, r, plan
}

// goldenText prints one rank of a plan the way an operator reads it; paths
// are made relative to the repo so goldens do not depend on the checkout.
func goldenText(root string, p *contract.LanePlan, np contract.NodePlan) string {
	var b strings.Builder
	rel := func(s string) string { return strings.ReplaceAll(s, root+string(filepath.Separator), "") }
	fmt.Fprintf(&b, "lane: %s\ncluster: %s\nruntime: %s\nmodel: %s\ntp: %d\napi_port: %d\nhead_addr: %s\n",
		p.Lane, p.Cluster, p.Runtime, p.Model, p.TP, p.APIPort, p.HeadAddr)
	fmt.Fprintf(&b, "\nnode: %s\nrank: %d\nhead: %v\ncontainer: %s\nimage: %s\ngpus: %v\n",
		np.Node, np.Rank, np.Head, np.ContainerName, np.Image, np.GPUs)
	fmt.Fprintf(&b, "\ncommand:\n  %s\n\nargv:\n", np.Command)
	for _, a := range np.Argv {
		fmt.Fprintf(&b, "  %q\n", a)
	}
	b.WriteString("\nenv:\n")
	keys := make([]string, 0, len(np.Env))
	for k := range np.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s=%s\n", k, np.Env[k])
	}
	b.WriteString("\nmounts:\n")
	for _, m := range np.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(&b, "  %s -> %s (%s)\n", m.Src, m.Dst, mode)
	}
	if len(p.Warnings) > 0 {
		b.WriteString("\nwarnings:\n")
		for _, w := range p.Warnings {
			fmt.Fprintf(&b, "  %s\n", rel(w))
		}
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run go test ./internal/lane -run Golden -update to create it)", path, err)
	}
	if string(want) != got {
		t.Errorf("render differs from %s (rerun with -update if intended):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestRenderGoldenShippedLanes(t *testing.T) {
	cfg, rs := exampleFleet(t)
	root := repoRoot(t)
	if len(rs) < 5 {
		t.Fatalf("only %d shipped lanes", len(rs))
	}
	for _, r := range rs {
		// A lane that names no cluster (sim-demo) runs where it is
		// sent: the example's pair.
		plan, err := RenderOn(cfg, r, cmp.Or(r.Cluster, "2nodes-dac"), nil)
		if err != nil {
			t.Fatal(err)
		}
		c := cfg.Cluster(plan.Cluster)
		if len(plan.Nodes) != len(c.Nodes) {
			t.Fatalf("%s: %d node plans for %d nodes", r.Name, len(plan.Nodes), len(c.Nodes))
		}
		for i, np := range plan.Nodes {
			if np.Node != c.Nodes[i] || np.Rank != i || np.Head != (i == 0) {
				t.Fatalf("%s rank %d: node %s head %v, want %s", r.Name, i, np.Node, np.Head, c.Nodes[i])
			}
			checkGolden(t, fmt.Sprintf("%s.r%d.txt", r.Name, i), goldenText(root, plan, np))
		}
	}
}

func TestRenderMiaEnvAndFlags(t *testing.T) {
	_, _, r, plan := renderExample(t, "mia")
	if plan.TP != 4 || plan.HeadAddr != "192.168.100.11" || len(plan.Nodes) != 4 {
		t.Fatalf("plan: tp %d head %s nodes %d", plan.TP, plan.HeadAddr, len(plan.Nodes))
	}
	for i, np := range plan.Nodes {
		want := map[string]string{
			"DSV41_LAUNCHER":   "tp4",
			"TP_SIZE":          "4",
			"EP_SIZE":          "1",
			"DSV41_TP_PAD":     "0",
			"NODE_RANK":        fmt.Sprint(i),
			"DSV41_PACKED_DIR": "/state/engram",
			"MASTER_ADDR":      "192.168.100.11",
			"NNODES":           "4",
		}
		for k, v := range want {
			if np.Env[k] != v {
				t.Errorf("rank %d env %s=%q, want %q", i, k, np.Env[k], v)
			}
		}
		tail := strings.Join(np.Argv[len(np.Argv)-6:], " ")
		if tail != fmt.Sprintf("--dist-init-addr 192.168.100.11:29500 --nnodes 4 --node-rank %d", i) {
			t.Errorf("rank %d SGLang flags: %s", i, tail)
		}
		if np.ContainerName != fmt.Sprintf("sparklane-dsv41-flash-4x-mia-r%d", i) || !np.GPUs {
			t.Errorf("rank %d container %s gpus %v", i, np.ContainerName, np.GPUs)
		}
		var state *contract.Mount
		for j := range np.Mounts {
			if np.Mounts[j].Dst == "/state" {
				state = &np.Mounts[j]
			}
		}
		if state == nil || !strings.HasPrefix(r.Staging[0].Dst, state.Src+"/") {
			t.Errorf("rank %d: staging dst %s not under the /state bind %+v", i, r.Staging[0].Dst, state)
		}
	}
	if r.Staging[0].MinFree != 55<<30 || r.Staging[0].Format != "packed" || len(r.Staging[0].Layers) != 2 {
		t.Errorf("mia staging: %+v", r.Staging[0])
	}
}

func TestRenderHubMirrorAndExports(t *testing.T) {
	cfg, rs, exl3, plan := renderExample(t, "exl3")
	np := plan.Nodes[1]
	mounts := map[string]contract.Mount{}
	for _, m := range np.Mounts {
		mounts[m.Dst] = m
	}
	blk := Wire(exl3).Staging[0]
	for dst, src := range map[string]string{
		"/model":                       blk.ExportPath(blk.Exports[0]),
		"/draft-exl3":                  blk.ExportPath(blk.Exports[1]),
		"/root/.cache/huggingface/hub": "/mnt/nvme/sparklane/hub-mirror/hub",
	} {
		m, ok := mounts[dst]
		if !ok || m.Src != src || !m.ReadOnly {
			t.Errorf("mount at %s = %+v, want ro bind of %s", dst, m, src)
		}
	}
	if !strings.Contains(np.Command, "--model-dir /model --draft-model-dir /draft-exl3") {
		t.Errorf("exl3 command does not read the exports: %s", np.Command)
	}
	if np.Env["HF_HUB_CACHE"] != "/root/.cache/huggingface/hub" || np.Env["HF_HUB_OFFLINE"] != "1" {
		t.Errorf("hub env: %v", np.Env)
	}
	if strings.Contains(np.Command, "--nnodes") {
		t.Errorf("exllamav3 got engine flags: %s", np.Command)
	}
	if len(exl3.Hooks.Clear) != 3 {
		t.Errorf("exl3 hooks.clear: %v", exl3.Hooks.Clear)
	}

	// mopd binds {hf_cache_dir}: that bind becomes the staged mirror.
	mopd, err := config.Resolve(rs, "mopd")
	if err != nil {
		t.Fatal(err)
	}
	plan, err = Render(cfg, mopd, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range plan.Nodes[0].Mounts {
		if strings.HasPrefix(m.Src, cfg.HFCacheDir) {
			t.Errorf("mopd still binds the NAS hub cache: %+v", m)
		}
	}
	if plan.Nodes[0].Mounts[0] != (contract.Mount{Src: "/mnt/nvme/sparklane/hub-mirror/hub", Dst: "/root/.cache/huggingface/hub", ReadOnly: true}) {
		t.Errorf("mopd hub bind: %+v", plan.Nodes[0].Mounts[0])
	}
}

// A sparkrun fixture, unmodified, rendered on a two-node cluster: the vLLM
// native multi-node flags, workers headless.
func TestRenderVLLMFixtureMultiNode(t *testing.T) {
	cfg, _ := exampleFleet(t)
	root := repoRoot(t)
	r := mustRecipe(t, filepath.Join(fixturesDir(t), "minimax-m2.7-awq4-vllm.yaml"))
	r.Cluster = "2nodes-dac" // from --cluster
	plan, err := Render(cfg, r, map[string]string{"gpu_memory_utilization": "0.75"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Warnings) != 0 {
		t.Errorf("used override reported unused: %v", plan.Warnings)
	}
	for i, np := range plan.Nodes {
		cmd := np.Command
		// 25000: sparkrun's init_port, where its recipes rendezvous.
		want := fmt.Sprintf("--nnodes 2 --node-rank %d --master-addr 192.168.100.11 --master-port 25000", i)
		if !strings.Contains(cmd, want) || !strings.Contains(cmd, "-tp 2") || !strings.Contains(cmd, "--gpu-memory-utilization 0.75") {
			t.Errorf("rank %d command: %s", i, cmd)
		}
		if strings.HasSuffix(cmd, "--headless") != (i > 0) {
			t.Errorf("rank %d --headless wrong: %s", i, cmd)
		}
		if np.Env["VLLM_MARLIN_USE_ATOMIC_ADD"] != "1" || np.Env["TP_SIZE"] != "2" {
			t.Errorf("rank %d env: %v", i, np.Env)
		}
		checkGolden(t, fmt.Sprintf("sparkrun-minimax-m2.7-awq4-vllm.r%d.txt", i), goldenText(root, plan, np))
	}
	// A single-node sparkrun recipe on a two-node cluster runs on its
	// head alone, and the plan says so.
	one := mustRecipe(t, filepath.Join(fixturesDir(t), "qwen3-vl-embedding-8b-vllm.yaml"))
	p1, err := RenderOn(cfg, one, "2nodes-dac", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Nodes) != 1 || p1.Nodes[0].Node != "dgx1" || strings.Contains(p1.Nodes[0].Command, "--nnodes") ||
		len(p1.Warnings) != 1 || !strings.Contains(p1.Warnings[0], "max_nodes 1: runs on the first 1 of cluster 2nodes-dac's 2 nodes (dgx1)") {
		t.Errorf("max_nodes 1 on two nodes: %d nodes, %q", len(p1.Nodes), p1.Warnings)
	}
}

func TestRenderQuotedFixtureArgs(t *testing.T) {
	cfg, _ := exampleFleet(t)
	r := mustRecipe(t, filepath.Join(fixturesDir(t), "qwen3.6-27b-fp8-mtp-vllm.yaml"))
	cfg.Clusters = append(cfg.Clusters, config.Cluster{Name: "solo", Nodes: []string{"dgx5"}})
	r.Cluster = "solo"
	plan, err := Render(cfg, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	argv := plan.Nodes[0].Argv
	idx := -1
	for i, a := range argv {
		if a == "--speculative-config" {
			idx = i
		}
	}
	if idx < 0 || argv[idx+1] != `{"method": "mtp", "num_speculative_tokens": 2}` {
		t.Fatalf("speculative config arg: %q", argv)
	}
	if argv[0] != "vllm" || argv[2] != "Qwen/Qwen3.6-27B-FP8" || strings.Contains(plan.Nodes[0].Command, "--nnodes") {
		t.Fatalf("single-node argv: %q", argv)
	}
	back, err := contract.SplitArgs(plan.Nodes[0].Command)
	if err != nil || strings.Join(back, "\x00") != strings.Join(argv, "\x00") {
		t.Fatalf("Command does not split back into Argv: %q vs %q (%v)", back, argv, err)
	}
}

func simFleet(t *testing.T) *config.Config {
	t.Helper()
	p := writeFile(t, t.TempDir(), "sparklane.toml", goodConfig)
	cfg := mustConfig(t, p)
	return cfg
}

func TestRenderSubstitution(t *testing.T) {
	cfg := simFleet(t)
	r := &config.Recipe{File: "lane.toml", Name: "demo", Cluster: "pair", Runtime: "sim", Image: "sim:{tag}", Model: "org/m",
		Command:  "engine-sim --model {model_path} --listen {listen} --rank {node_rank}",
		Defaults: map[string]any{"tag": "v1", "listen": "{host}:{port}", "host": "0.0.0.0", "port": int64(9000), "dist_port": int64(31000)},
		Env:      map[string]string{"WHO": "{node}@{lane}", "EP_SIZE": "2"},
		Mounts:   []config.Mount{{Src: "/nvme/{lane}/cache", Dst: "/cache"}},
	}
	// An -o of a key the lane does not use is an error naming the key
	// and the keys it does use (it would change nothing, silently).
	_, err := Render(cfg, r, map[string]string{"host": "127.0.0.1", "unused_key": "1"})
	if err == nil || !strings.Contains(err.Error(), `-o unused_key=1: lane demo (lane.toml) uses no key "unused_key"`) ||
		!strings.Contains(err.Error(), "known keys: dist_port, expert_parallel, host, listen, model, model_path, port, tag, tensor_parallel") {
		t.Fatalf("-o unused_key=1: %v", err)
	}
	plan, err := Render(cfg, r, map[string]string{"host": "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	np := plan.Nodes[1]
	if np.Command != "engine-sim --model org/m --listen 127.0.0.1:9000 --rank 1 --dist-init-addr 10.0.0.1:31000 --nnodes 2 --node-rank 1" {
		t.Errorf("command: %s", np.Command)
	}
	if np.Image.String() != "sim:v1" || np.GPUs || plan.APIPort != 9000 || plan.TP != 2 {
		t.Errorf("image %s gpus %v port %d tp %d", np.Image, np.GPUs, plan.APIPort, plan.TP)
	}
	if np.Env["WHO"] != "b@demo" || np.Env["EP_SIZE"] != "2" || np.Env["MASTER_PORT"] != "31000" {
		t.Errorf("env: %v", np.Env)
	}
	if np.Mounts[0].Src != "/nvme/demo/cache" {
		t.Errorf("mount src: %+v", np.Mounts[0])
	}
	if len(plan.Warnings) != 0 {
		t.Errorf("warnings: %v", plan.Warnings)
	}

	// Cycle.
	r.Defaults["host"] = "{listen}"
	_, err = Render(cfg, r, nil)
	if err == nil || !strings.Contains(err.Error(), "lane.toml: command: placeholder cycle listen → host → listen") {
		t.Errorf("cycle: %v", err)
	}
	r.Defaults["host"] = "0.0.0.0"
	// Unknown placeholder.
	r.Command += " --x {typo_key}"
	_, err = Render(cfg, r, nil)
	if err == nil || !strings.Contains(err.Error(), "lane.toml: command: unknown placeholder {typo_key}") {
		t.Errorf("unknown placeholder: %v", err)
	}
	// Built-in per-node keys cannot be overridden.
	if _, err := Render(cfg, r, map[string]string{"node_rank": "3", "typo_key": "1"}); err == nil || !strings.Contains(err.Error(), "-o node_rank") {
		t.Errorf("override of node_rank: %v", err)
	}
	// Two binds at one container path.
	r.Mounts = append(r.Mounts, config.Mount{Src: "/nvme/other", Dst: "/cache/"})
	if _, err := Render(cfg, r, map[string]string{"typo_key": "1"}); err == nil || !strings.Contains(err.Error(), "lane.toml: mounts: two binds land at /cache") {
		t.Errorf("duplicate mount dst: %v", err)
	}
	r.Mounts = r.Mounts[:1]
	// The hash follows the overrides.
	w := Wire(r)
	h1, _ := RecipeHash(&w, nil)
	h2, _ := RecipeHash(&w, map[string]string{"typo_key": "1"})
	r2 := *r
	r2.File = "/elsewhere/lane.toml"
	w2 := Wire(&r2)
	h3, _ := RecipeHash(&w2, nil)
	if h1 == h2 || h1 != h3 || len(h1) != 64 {
		t.Errorf("hashes: %s %s %s", h1, h2, h3)
	}
}

// Words first, placeholders second: a value is one argument, so an -o
// value cannot add a flag and a path with a space is not split.
func TestRenderValuesStayOneArgument(t *testing.T) {
	cfg := &config.Config{File: "fleet.toml", Nodes: []config.Node{{Name: "a"}}, Clusters: []config.Cluster{{Name: "one", Nodes: []string{"a"}}}}
	r := &config.Recipe{File: "lane.toml", Name: "lane", Cluster: "one", Runtime: "sim", Image: "img",
		Model:    "/models/my model",
		Command:  "serve {model} --served-model-name {served} --name '{label}' --x=\"{label}\" {extra_args}",
		Defaults: map[string]any{"served": "m", "label": "it's a \"test\"", "extra_args": ""}}
	plan, err := Render(cfg, r, map[string]string{"served": "1 --evil"})
	if err != nil {
		t.Fatal(err)
	}
	argv := plan.Nodes[0].Argv
	want := []string{"serve", "/models/my model", "--served-model-name", "1 --evil", "--name", `it's a "test"`, `--x=it's a "test"`}
	if strings.Join(argv, "|") != strings.Join(want, "|") {
		t.Fatalf("argv %q\nwant %q", argv, want)
	}
	back, err := contract.SplitArgs(plan.Nodes[0].Command)
	if err != nil || strings.Join(back, "|") != strings.Join(argv, "|") {
		t.Fatalf("displayed command %s does not split back to argv: %q %v", plan.Nodes[0].Command, back, err)
	}
	// A flag-looking value for a whole-word placeholder is still one word.
	plan, err = Render(cfg, r, map[string]string{"extra_args": "--a --b"})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.Nodes[0].Argv; got[len(got)-1] != "--a --b" || len(got) != len(want)+1 {
		t.Fatalf("extra_args: %q", got)
	}
	r.Command = "serve 'unterminated {model}"
	if _, err := Render(cfg, r, nil); err == nil || !strings.HasPrefix(err.Error(), "lane.toml: command: unterminated single-quoted string") {
		t.Fatalf("bad quoting: %v", err)
	}
}
