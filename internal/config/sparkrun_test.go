package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// Keys whose value is wrong are errors naming the file and key.
func TestSparkrunKeyErrors(t *testing.T) {
	dir := t.TempDir()
	base := "model: m\ncontainer: i\ncommand: vllm serve m\n"
	for name, c := range map[string]struct{ body, want string }{
		"exec-key":  {base + "executor_config:\n  shmsize: 1g\n", "unknown key executor_config.shmsize"},
		"mode":      {base + "mode: duo\n", `mode: "duo": use solo, cluster or auto`},
		"ray":       {base + "runtime: vllm\ndefaults:\n  distributed_executor_backend: ray\n", "runtime: vllm with the Ray executor backend"},
		"vllm-ray":  {base + "runtime: vllm-ray\n", "runtime: vllm-ray: sparklane runs vLLM's native multi-node mode"},
		"pre-exec":  {base + "pre_exec:\n  - copy: /a\n", "pre_exec[0]: a table entry is {copy: SRC, dest: DST}"},
		"no-runner": {"model: m\ncontainer: i\ncommand: python serve.py\n", "runtime: empty and the command starts with neither"},
	} {
		p := conftest.WriteFile(t, dir, name+".yaml", c.body)
		if _, err := LoadRecipe(p); err == nil || !strings.Contains(err.Error(), p+": "+c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// A runtime read from the command, as sparkrun does.
	p := conftest.WriteFile(t, dir, "sg.yaml", "model: m\ncontainer: i\ncommand: python3 -m sglang.launch_server --model-path m\n")
	if r, err := LoadRecipe(p); err != nil || r.Runtime != "sglang" {
		t.Errorf("runtime from command: %v %v", r, err)
	}
}

// Mods: found next to the recipe or in a *-mods/ directory of the
// clone, copied to /workspace/mods/NAME and run; a missing one is an
// error naming it.
func TestSparkrunMods(t *testing.T) {
	root := t.TempDir()
	mk := func(dir string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		conftest.WriteFile(t, dir, "run.sh", "#!/bin/sh\n")
	}
	recipes := filepath.Join(root, "official-recipes", "fam")
	mk(filepath.Join(recipes, "mods", "near"))
	mk(filepath.Join(root, "eugr-mods", "far"))
	if err := os.MkdirAll(filepath.Join(root, "eugr-mods", "norun"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := "model: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m\n"
	p := conftest.WriteFile(t, recipes, "ok.yaml", base+"pre_exec: [echo first]\nmods:\n  - mods/near\n  - far\n")
	r, err := LoadRecipe(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []PreExec{
		{Run: "echo first"},
		{Copy: filepath.Join(recipes, "mods", "near"), Dest: "/workspace/mods/near"},
		{Run: "export WORKSPACE_DIR=$PWD && cd /workspace/mods/near && chmod +x run.sh && ./run.sh"},
		{Copy: filepath.Join(root, "eugr-mods", "far"), Dest: "/workspace/mods/far"},
		{Run: "export WORKSPACE_DIR=$PWD && cd /workspace/mods/far && chmod +x run.sh && ./run.sh"},
	}
	if !reflect.DeepEqual(r.PreExec, want) {
		t.Errorf("mods:\n got %+v\nwant %+v", r.PreExec, want)
	}
	for name, c := range map[string]struct{ mods, want string }{
		"missing": {"[mods/ghost]", `mods[0]: mod "mods/ghost" not found (a directory with run.sh; tried ` + filepath.Join(recipes, "ghost")},
		"norun":   {"[norun]", `mods[0]: mod "norun" not found`},
		"escape":  {"[../x]", `mods[0]: "../x" is not a mod name`},
	} {
		p := conftest.WriteFile(t, recipes, name+".yaml", base+"mods: "+c.mods+"\n")
		if _, err := LoadRecipe(p); err == nil || !strings.Contains(err.Error(), p+": "+c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// A broken recipe is listed with its error and the others still load.
func TestRecipeSetBrokenDoesNotStopOthers(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "deep", "er")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	conftest.WriteFile(t, sub, "good.yaml", "model: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m\n")
	bad := conftest.WriteFile(t, dir, "bad.yaml", "model: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m\nmods: [nowhere]\n")
	cfg := &Config{RecipesDirs: []string{dir}}
	set, err := LoadRecipeSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Recipes) != 1 || set.Recipes[0].Name != "good" || set.Find("good") == nil {
		t.Errorf("recipes: %+v", set.Recipes)
	}
	if len(set.Broken) != 1 || set.Broken[0].File != bad || !strings.Contains(set.Broken[0].Error, `mod "nowhere" not found`) {
		t.Errorf("broken: %+v", set.Broken)
	}
	cfg.RecipesDirs = append(cfg.RecipesDirs, filepath.Join(dir, "nope"))
	if _, err := LoadRecipeSet(cfg); err == nil || !strings.Contains(err.Error(), "recipes_dirs "+filepath.Join(dir, "nope")) {
		t.Errorf("missing recipes_dirs entry: %v", err)
	}
}

// Embedding and reranker recipes are probed on their own endpoints.
func TestProbeModelType(t *testing.T) {
	for file, want := range map[string]string{
		"official-recipes/qwen3-vl/vllm/qwen3-vl-embedding-8b-vllm.yaml": "/v1/embeddings",
		"official-recipes/qwen3-vl/vllm/qwen3-vl-reranker-8b-vllm.yaml":  "/v1/rerank",
		"official-recipes/qwen3.6/vllm/qwen3.6-27b-fp8-vllm.yaml":        "/v1/completions",
	} {
		r, err := LoadRecipe(filepath.Join(registryDir, file))
		if err != nil {
			t.Fatal(err)
		}
		if got := (contract.Probe{ModelType: r.Probe.ModelType}).ProbeEndpoint(); got != want {
			t.Errorf("%s: %s (%s), want %s", file, got, r.Probe.ModelType, want)
		}
	}
	dir := t.TempDir()
	base := "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n"
	p := conftest.WriteFile(t, dir, "ok.toml", base+"[probe]\nmodel_type = \"embedding\"\nlog_signatures = [\"adapter on\"]\napi_key_env = \"ENGINE_KEY\"\n")
	r, err := LoadRecipe(p)
	if err != nil || (contract.Probe{ModelType: r.Probe.ModelType}).ProbeEndpoint() != "/v1/embeddings" || fmt.Sprint(r.Probe.LogSignatures) != "[adapter on]" || r.Probe.APIKeyEnv != "ENGINE_KEY" {
		t.Fatalf("probe keys: %+v %v", r, err)
	}
	p = conftest.WriteFile(t, dir, "bad.toml", base+"[probe]\nmodel_type = \"vision\"\nlog_signatures = [\" \"]\napi_key_env = \"sk-123 secret\"\n")
	r, err = LoadRecipe(p)
	if err != nil {
		t.Fatal(err)
	}
	err = validate(nil, []*Recipe{r})
	for _, w := range []string{p + `: probe.model_type: unknown model type "vision"`, p + ": probe.log_signatures[0]: empty", p + `: probe.api_key_env: "sk-123 secret" is not an environment variable name`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("want %q in %v", w, err)
		}
	}
}

// The fleet keys for many recipes and RoCE load from sparklane.toml:
// recipes_dirs and registries relative to the file, default_cluster, and
// a node's hca/ifname/infiniband.
func TestLoadFleetRecipeAndRoCEKeys(t *testing.T) {
	dir := t.TempDir()
	body := strings.Replace(conftest.GoodConfig, `shared_roots = ["/nas"]`, `shared_roots = ["/nas"]
recipes_dirs = ["reg"]
default_cluster = "pair"

[registries]
arena = "reg"
`, 1)
	body = strings.Replace(body, `ssh = "op@10.0.0.1:22"`, "ssh = \"op@10.0.0.1:22\"\nhca = \"rocep1s0f1\"\nifname = \"enp1s0f1np1\"\ninfiniband = true", 1)
	p := conftest.WriteFile(t, dir, "sparklane.toml", body)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	reg := filepath.Join(dir, "reg")
	if fmt.Sprint(cfg.RecipesDirs) != "["+reg+"]" || cfg.Registries["arena"] != reg || cfg.DefaultCluster != "pair" {
		t.Errorf("recipes keys: %v %v %q", cfg.RecipesDirs, cfg.Registries, cfg.DefaultCluster)
	}
	if n := cfg.Node("a"); n.HCA != "rocep1s0f1" || n.IfName != "enp1s0f1np1" || !n.Infiniband {
		t.Errorf("node keys: %+v", n)
	}
	if err := validate(cfg, nil); err != nil {
		t.Errorf("validate: %v", err)
	}
}
