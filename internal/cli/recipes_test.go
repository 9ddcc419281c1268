package cli

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// registryFleet is four Sparks with clusters of 1 to 4 nodes and no
// default_cluster, reading the registry clone the config tests use
// (internal/config/testdata/registry, MIT, see its README) as recipes_dirs.
func registryFleet(t *testing.T, extraDir string) string {
	t.Helper()
	reg, err := filepath.Abs("../config/testdata/registry")
	if err != nil {
		t.Fatal(err)
	}
	own := t.TempDir() // recipes_dir: the operator's own lanes, none here
	body := "recipes_dir = " + jsonString(own) + "\nrecipes_dirs = [" + jsonString(reg)
	if extraDir != "" {
		body += ", " + jsonString(extraDir)
	}
	body += "]\nhf_cache_dir = \"/mnt/nas/huggingface/hub\"\nshared_roots = [\"/mnt/nas\"]\n"
	for _, n := range []string{"dgx1", "dgx2", "dgx3", "dgx4"} {
		body += "[[nodes]]\nname = \"" + n + "\"\naddress = \"192.168.100.1" + n[3:] + "\"\nroots = [\"/mnt/nvme\"]\n"
	}
	body += "[[clusters]]\nname = \"solo\"\nnodes = [\"dgx1\"]\n[[clusters]]\nname = \"pair\"\nnodes = [\"dgx1\", \"dgx2\"]\n" +
		"[[clusters]]\nname = \"trio\"\nnodes = [\"dgx1\", \"dgx2\", \"dgx3\"]\n[[clusters]]\nname = \"quad\"\nnodes = [\"dgx1\", \"dgx2\", \"dgx3\", \"dgx4\"]\n"
	return writeConfigTestFile(t, t.TempDir(), "sparklane.toml", body)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Every registry recipe renders unmodified through `starter recipe render
// --lane L --cluster quad` (no default_cluster in the config), trimmed to
// its tp×pp×dp nodes; without --cluster it says how to give one.
func TestRecipeRenderClusterFlagOnEveryRegistryRecipe(t *testing.T) {
	cfgPath := registryFleet(t, "")
	code, out, errOut := runStarter(t, "--config", cfgPath, "--json", "lanes")
	if code != 0 {
		t.Fatalf("lanes: exit %d\n%s", code, errOut)
	}
	var lanes struct {
		Lanes  []contract.Recipe     `json:"lanes"`
		Broken []config.BrokenRecipe `json:"broken"`
	}
	if err := json.Unmarshal([]byte(out), &lanes); err != nil {
		t.Fatalf("lanes --json: %v\n%s", err, out)
	}
	if len(lanes.Lanes) != 37 || len(lanes.Broken) != 0 {
		t.Fatalf("lanes: %d recipes, %d broken, want 37 and 0", len(lanes.Lanes), len(lanes.Broken))
	}
	rendered := 0
	for _, r := range lanes.Lanes {
		code, out, errOut := runStarter(t, "--config", cfgPath, "--json", "recipe", "render", "--lane", r.Name, "--cluster", "quad")
		if code != 0 {
			t.Errorf("render %s --cluster quad: exit %d: %s", r.Name, code, errOut)
			continue
		}
		var plan contract.LanePlan
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Errorf("render %s: %v", r.Name, err)
			continue
		}
		if plan.Cluster != "quad" || len(plan.Nodes) == 0 || plan.Nodes[0].Node != "dgx1" {
			t.Errorf("render %s: cluster %q nodes %d", r.Name, plan.Cluster, len(plan.Nodes))
			continue
		}
		rendered++
	}
	t.Logf("registry recipes rendered unmodified with --cluster: %d/%d", rendered, len(lanes.Lanes))
	if rendered != 37 {
		t.Errorf("rendered %d/37", rendered)
	}
	code, _, errOut = runStarter(t, "--config", cfgPath, "recipe", "render", "--lane", lanes.Lanes[0].Name)
	if code == 0 || !strings.Contains(errOut, "pass --cluster, set default_cluster") {
		t.Errorf("render without a cluster: exit %d %s", code, errOut)
	}
	code, _, errOut = runStarter(t, "--config", cfgPath, "recipe", "render", "--lane", lanes.Lanes[0].Name, "--cluster", "octo")
	if code == 0 || !strings.Contains(errOut, "--cluster octo: no such cluster") {
		t.Errorf("render on an unknown cluster: exit %d %s", code, errOut)
	}
	// The text form shows the docker essentials and the mods' pre_exec.
	code, out, _ = runStarter(t, "--config", cfgPath, "recipe", "render", "--lane", "official-recipes.qwen3-coder-next-int4-autoround-vllm", "--cluster", "pair")
	for _, want := range []string{"docker: --gpus all --network host --ipc host --shm-size 32gb --security-opt no-new-privileges --ulimit memlock=-1:-1 --ulimit stack=67108864", "pre_exec: copy ", "/test-mods/"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("render text: %q missing (exit %d)\n%s", want, code, out)
		}
	}
}

// A broken recipe is listed as broken by `lanes` and `recipe check`, names
// its file and error when asked for, and every other lane still renders.
func TestBrokenRecipeListedOthersStillWork(t *testing.T) {
	extra := t.TempDir()
	bad := writeConfigTestFile(t, filepath.Join(extra, "mine"), "bad-lane.yaml", "model: org/m\nruntime: vllm\ncontainer: img\ncluster: pair\ncommand: vllm serve {model}\nexecutor_config:\n  shm_size: lots\n")
	writeConfigTestFile(t, filepath.Join(extra, "mine"), "typo.yaml", "model: org/m\nruntime: vllm\ncontainer: img\ncommand: vllm serve {model}\nbogus_key: 1\n")
	cfgPath := registryFleet(t, extra)

	code, out, errOut := runStarter(t, "--config", cfgPath, "lanes")
	if code != 0 {
		t.Fatalf("lanes with broken recipes: exit %d\n%s", code, errOut)
	}
	if !strings.Contains(out, "BROKEN "+filepath.Join(extra, "mine", "typo.yaml")) || !strings.Contains(out, "minimax-m2.7-awq4-vllm") {
		t.Errorf("lanes: broken recipe not listed, or registry lanes missing:\n%s", out)
	}
	if !strings.Contains(out, "\nBROKEN "+filepath.Join(extra, "mine", "typo.yaml")+":\n") || strings.Contains(errOut, "do not load") {
		t.Errorf("lanes: no full error for the broken recipe, or the one-line count on stderr:\n%s\n%s", out, errOut)
	}
	code, _, errOut = runStarter(t, "--config", cfgPath, "recipe", "render", "--lane", "minimax-m2.7-awq4-vllm", "--cluster", "pair")
	if code != 0 {
		t.Errorf("a good lane beside broken ones: exit %d %s", code, errOut)
	}
	code, _, errOut = runStarter(t, "--config", cfgPath, "recipe", "render", "--lane", "typo", "--cluster", "pair")
	if code == 0 || !strings.Contains(errOut, "lane typo: recipe "+filepath.Join(extra, "mine", "typo.yaml")+" is broken") || !strings.Contains(errOut, "bogus_key") {
		t.Errorf("asking for the broken lane: exit %d %s", code, errOut)
	}
	code, out, _ = runStarter(t, "--config", cfgPath, "--json", "recipe", "check")
	var res struct {
		OK     bool     `json:"ok"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("recipe check --json: %v\n%s", err, out)
	}
	sort.Strings(res.Errors)
	if code != 1 || res.OK || len(res.Errors) != 2 || !strings.Contains(res.Errors[0], "bad-lane.yaml") || !strings.Contains(res.Errors[0], "shm_size") || !strings.Contains(res.Errors[1], "bogus_key") {
		t.Errorf("recipe check of the set: exit %d %+v", code, res)
	}
	if !strings.Contains(strings.Join(res.Errors, "\n"), bad) {
		t.Errorf("recipe check does not name %s: %v", bad, res.Errors)
	}
}

// Twenty broken recipes in a registry clone cost a command that does not
// use them one line on stderr; `lanes` gives every error in full, and
// --lane on a broken one gives its own error (not the count).
func TestTwentyBrokenRecipesOneLine(t *testing.T) {
	extra := t.TempDir()
	for i := range 20 {
		writeConfigTestFile(t, filepath.Join(extra, "broken"), fmt.Sprintf("bad%02d.yaml", i),
			fmt.Sprintf("model: org/m\nruntime: vllm\ncontainer: img\ncommand: vllm serve {model}\nbogus_key_%02d: 1\n", i))
	}
	cfgPath := registryFleet(t, extra)

	code, _, errOut := runStarter(t, "--config", cfgPath, "recipe", "render", "--lane", "minimax-m2.7-awq4-vllm", "--cluster", "pair")
	lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n")
	if code != 0 || len(lines) != 1 || lines[0] != "warning: 20 recipes do not load: `starter lanes` lists them" {
		t.Errorf("a good lane beside 20 broken ones: exit %d, stderr %d lines:\n%s", code, len(lines), errOut)
	}

	code, out, _ := runStarter(t, "--config", cfgPath, "lanes")
	for i := range 20 {
		f := filepath.Join(extra, "broken", fmt.Sprintf("bad%02d.yaml", i))
		if code != 0 || !strings.Contains(out, "\nBROKEN "+f+":\n") || !strings.Contains(out, fmt.Sprintf("bogus_key_%02d", i)) {
			t.Errorf("lanes: %s not listed with its error (exit %d)", f, code)
		}
	}

	code, _, errOut = runStarter(t, "--config", cfgPath, "recipe", "render", "--lane", "bad07", "--cluster", "pair")
	if code == 0 || strings.Contains(errOut, "do not load") || !strings.Contains(errOut, "lane bad07: recipe "+filepath.Join(extra, "broken", "bad07.yaml")+" is broken") || !strings.Contains(errOut, "bogus_key_07") {
		t.Errorf("--lane on a broken recipe: exit %d\n%s", code, errOut)
	}
}

// A recipe that needs more nodes than the fleet has (cliFleet has one) is
// listed by lanes as such, in the table and in JSON, not as BROKEN; other
// commands say nothing of it, --lane on it says what it needs, and recipe
// check passes with a notice. A recipe broken for its own reason beside it
// still is BROKEN, with its error and the one-line count elsewhere.
func TestLaneNeedingMoreNodesIsNotBroken(t *testing.T) {
	cfg, lanes := writeCLIFleet(t, "ok.toml", simLane("serve"))
	writeConfigTestFile(t, lanes, "quad.toml", "aliases = [\"q\"]\nruntime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\ncluster = \"4nodes-switch\"\n[defaults]\ntensor_parallel = 4\n")
	code, out, errOut := runStarter(t, "--config", cfg, "lanes")
	if code != 0 || !regexp.MustCompile(`(?m)^quad +q +4nodes-switch +sim +needs 4 nodes; this fleet has 1$`).MatchString(out) || strings.Contains(out, "BROKEN") || errOut != "" {
		t.Fatalf("lanes: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runStarter(t, "--config", cfg, "--json", "lanes")
	var res struct {
		Lanes    []struct{ Name string }
		Broken   []config.BrokenRecipe
		TooLarge []config.TooLarge `json:"too_large"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
		t.Fatalf("lanes --json: exit %d %v\n%s", code, err, out)
	}
	if len(res.Lanes) != 1 || len(res.Broken) != 0 || len(res.TooLarge) != 1 || res.TooLarge[0].Lane != "quad" || res.TooLarge[0].Needs != 4 || res.TooLarge[0].Has != 1 {
		t.Fatalf("lanes --json: %+v", res)
	}
	code, _, errOut = runStarter(t, "--config", cfg, "recipe", "render", "--lane", "ok")
	if code != 0 || errOut != "" {
		t.Errorf("another lane: exit %d, stderr %q (want nothing of quad)", code, errOut)
	}
	code, _, errOut = runStarter(t, "--config", cfg, "recipe", "render", "--lane", "q")
	if code == 0 || !strings.Contains(errOut, "lane q (recipe "+filepath.Join(lanes, "quad.toml")+") needs 4 nodes; this fleet has 1") {
		t.Errorf("--lane on it: exit %d %s", code, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfg, "recipe", "check")
	if code != 0 || !strings.Contains(out, "notice: "+filepath.Join(lanes, "quad.toml")+": lane quad needs 4 nodes; this fleet has 1") {
		t.Errorf("recipe check: exit %d\n%s%s", code, out, errOut)
	}

	// A recipe broken for its own reason is BROKEN, even when it is large.
	writeConfigTestFile(t, lanes, "typo.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\ncluster = \"4nodes-switch\"\nbogus = 1\n[defaults]\ntensor_parallel = 4\n")
	code, out, _ = runStarter(t, "--config", cfg, "lanes")
	if code != 0 || !strings.Contains(out, "\nBROKEN "+filepath.Join(lanes, "typo.toml")+":\n") || !strings.Contains(out, "bogus") || !strings.Contains(out, "needs 4 nodes; this fleet has 1") {
		t.Errorf("lanes beside a broken recipe: exit %d\n%s", code, out)
	}
	code, _, errOut = runStarter(t, "--config", cfg, "recipe", "render", "--lane", "ok")
	if code != 0 || !strings.Contains(errOut, "warning: 1 recipe does not load") {
		t.Errorf("another lane beside a broken recipe: exit %d, stderr %q", code, errOut)
	}
}
