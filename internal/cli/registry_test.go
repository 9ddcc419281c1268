package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/registry"
)

// gitRun runs the real git in dir, failing the test on error.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=sparklane test", "-c", "user.email=test@sparklane.invalid", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// bareRegistry makes a bare repository and a work tree pushing to it;
// commit writes files (path → body) and pushes, returning the commit.
type bareRegistry struct {
	t          *testing.T
	bare, work string
}

func newBareRegistry(t *testing.T) *bareRegistry {
	t.Helper()
	b := &bareRegistry{t: t, bare: filepath.Join(t.TempDir(), "reg.git"), work: t.TempDir()}
	gitRun(t, filepath.Dir(b.bare), "init", "--quiet", "--bare", b.bare)
	gitRun(t, b.work, "init", "--quiet")
	gitRun(t, b.work, "remote", "add", "origin", b.bare)
	return b
}

func (b *bareRegistry) commit(msg string, files map[string]string) string {
	b.t.Helper()
	for p, body := range files {
		writeConfigTestFile(b.t, filepath.Join(b.work, filepath.Dir(p)), filepath.Base(p), body)
	}
	gitRun(b.t, b.work, "add", "-A")
	gitRun(b.t, b.work, "commit", "--quiet", "-m", msg)
	gitRun(b.t, b.work, "push", "--quiet", "origin", "HEAD:main")
	return gitRun(b.t, b.work, "rev-parse", "HEAD")
}

func registryList(t *testing.T, cfg string) map[string]registry.Registry {
	t.Helper()
	code, out, errOut := runStarter(t, "--config", cfg, "--json", "registry", "list")
	var rs []registry.Registry
	if code != 0 || json.Unmarshal([]byte(out), &rs) != nil {
		t.Fatalf("registry list: exit %d\n%s\n%s", code, out, errOut)
	}
	m := map[string]registry.Registry{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

const regRecipeYAML = "model: org/m\nruntime: vllm\ncontainer: img\ncluster: pair\ncommand: vllm serve {model}\n"

// registry add / update / list / remove with the real git against local
// bare repositories: add pins the default branch's head, update moves to
// the second commit, a --ref pin stays; @NAME/RECIPE renders from the
// clone; a mod found only in the registry named eugr resolves (sparkrun's
// fallback), one found nowhere names what to add.
func TestRegistryAddUpdateAndResolve(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := writeConfigTestFile(t, dir, "sparklane.toml", "state_dir = "+jsonString(state)+"\nrecipes_dir = "+jsonString(filepath.Join(dir, "lanes"))+
		"\nhf_cache_dir = \"/mnt/nas/hub\"\nshared_roots = [\"/mnt/nas\"]\n"+
		"[[nodes]]\nname = \"dgx1\"\naddress = \"10.0.0.1\"\nroots = [\"/mnt/nvme\"]\n[[nodes]]\nname = \"dgx2\"\naddress = \"10.0.0.2\"\nroots = [\"/mnt/nvme\"]\n"+
		"[[clusters]]\nname = \"pair\"\nnodes = [\"dgx1\", \"dgx2\"]\n")
	if err := os.MkdirAll(filepath.Join(dir, "lanes"), 0o755); err != nil {
		t.Fatal(err)
	}

	other := newBareRegistry(t)
	first := other.commit("one recipe", map[string]string{
		"official-recipes/alpha.yaml":   regRecipeYAML,
		"official-recipes/patched.yaml": regRecipeYAML + "mods:\n  - fix\n",
	})
	gitRun(t, other.work, "tag", "v1")
	gitRun(t, other.work, "push", "--quiet", "origin", "v1")
	second := other.commit("two recipes", map[string]string{"official-recipes/beta.yaml": regRecipeYAML})

	// add pins the default branch's head; a --ref tag pins its commit.
	for _, args := range [][]string{{"registry", "add", "other", other.bare}, {"registry", "add", "pinned", other.bare, "--ref", "v1"}} {
		if code, out, errOut := runStarter(t, append([]string{"--config", cfg}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
	}
	rs := registryList(t, cfg)
	if rs["other"].Commit != second || rs["pinned"].Commit != first || rs["pinned"].Ref != "v1" || rs["other"].URL != other.bare ||
		rs["other"].Path != filepath.Join(state, "registries", "other") {
		t.Fatalf("registry list after add: %+v (want other at %s, pinned at %s)", rs, second, first)
	}
	code, out, _ := runStarter(t, "--config", cfg, "registry", "list")
	if code != 0 || !strings.Contains(out, second) || !strings.Contains(out, "v1") {
		t.Errorf("registry list (text) does not show the pinned commits:\n%s", out)
	}
	if code, _, errOut := runStarter(t, "--config", cfg, "registry", "add", "other", other.bare); code == 0 || !strings.Contains(errOut, "registry update other") {
		t.Errorf("adding a name twice: exit %d %s", code, errOut)
	}

	// A third commit: update moves the branch follower, not the tag pin.
	third := other.commit("three recipes", map[string]string{"official-recipes/gamma.yaml": regRecipeYAML})
	if code, out, errOut := runStarter(t, "--config", cfg, "registry", "update"); code != 0 || !strings.Contains(out, third) {
		t.Fatalf("registry update: exit %d\n%s\n%s", code, out, errOut)
	}
	rs = registryList(t, cfg)
	if rs["other"].Commit != third || rs["pinned"].Commit != first {
		t.Fatalf("after update: other %s (want %s), pinned %s (want %s)", rs["other"].Commit, third, rs["pinned"].Commit, first)
	}

	// @NAME/RECIPE renders from the clone.
	code, out, errOut := runStarter(t, "--config", cfg, "--json", "recipe", "render", "--lane", "@other/gamma")
	var plan contract.LanePlan
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || plan.Lane != "gamma" || len(plan.Nodes) != 1 {
		t.Fatalf("render @other/gamma: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := runStarter(t, "--config", cfg, "recipe", "render", "--lane", "@pinned/gamma"); code == 0 || !strings.Contains(errOut, "no recipe gamma.yaml under registry pinned") {
		t.Errorf("@pinned/gamma (added after the pin): exit %d %s", code, errOut)
	}

	// A plain name no recipes directory has is looked up in the registries
	// (a lane started as @other/gamma runs as gamma: stop and rollback
	// find it so); one in two registries asks which.
	if code, out, errOut := runStarter(t, "--config", cfg, "--json", "recipe", "render", "--lane", "gamma"); code != 0 || !strings.Contains(out, `"lane": "gamma"`) {
		t.Errorf("--lane gamma (only in registry other): exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := runStarter(t, "--config", cfg, "recipe", "render", "--lane", "alpha"); code == 0 || !strings.Contains(errOut, "lane alpha is in several registries: name one, --lane @other/alpha or --lane @pinned/alpha") {
		t.Errorf("--lane alpha (in two registries): exit %d %s", code, errOut)
	}

	// The mod "fix" is in no clone yet: the error says to add eugr.
	code, _, errOut = runStarter(t, "--config", cfg, "recipe", "render", "--lane", "@other/patched")
	if code == 0 || !strings.Contains(errOut, `mod "fix" not found`) || !strings.Contains(errOut, "starter registry add eugr URL") {
		t.Errorf("a mod found nowhere: exit %d %s", code, errOut)
	}
	eugr := newBareRegistry(t)
	eugr.commit("mods", map[string]string{"eugr-mods/fix/run.sh": "#!/bin/sh\necho fixed\n"})
	if code, out, errOut := runStarter(t, "--config", cfg, "registry", "add", "eugr", eugr.bare); code != 0 {
		t.Fatalf("registry add eugr: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfg, "--json", "recipe", "render", "--lane", "@other/patched")
	wantMod := filepath.Join(state, "registries", "eugr", "eugr-mods", "fix")
	if code != 0 || !strings.Contains(out, wantMod) {
		t.Errorf("the mod only the eugr registry has: exit %d, %s not in the plan\n%s\n%s", code, wantMod, out, errOut)
	}
	// The plan carries the mod (nodes need no clone of their own).
	var modPlan contract.LanePlan
	if err := json.Unmarshal([]byte(out), &modPlan); err != nil || len(modPlan.Nodes) == 0 || len(modPlan.Nodes[0].PreExec) == 0 {
		t.Fatalf("render @other/patched: %v\n%s", err, out)
	}
	if a := modPlan.Nodes[0].PreExec[0].Archive; !bytes.Contains(a, []byte("workspace/mods/fix/run.sh")) || !bytes.Contains(a, []byte("echo fixed")) {
		t.Errorf("the plan does not carry the mod's run.sh: %d bytes", len(a))
	}

	// remove deletes the clone; its recipes are gone.
	if code, _, errOut := runStarter(t, "--config", cfg, "registry", "remove", "pinned"); code != 0 {
		t.Fatalf("registry remove: exit %d %s", code, errOut)
	}
	if _, ok := registryList(t, cfg)["pinned"]; ok {
		t.Error("pinned still listed after remove")
	}
	if code, _, errOut := runStarter(t, "--config", cfg, "recipe", "render", "--lane", "@pinned/alpha"); code == 0 || !strings.Contains(errOut, `registry "pinned" is not in [registries]`) {
		t.Errorf("@pinned/alpha after remove: exit %d %s", code, errOut)
	}
}

// registry disable takes a registry's recipes out of lanes and out of
// resolution (@NAME/RECIPE and a bare lane name both say how to enable
// it), list shows it disabled, and enable brings them back; the clone
// is never touched.
func TestRegistryDisableAndEnable(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	fleet := "state_dir = " + jsonString(state) + "\nrecipes_dir = " + jsonString(filepath.Join(dir, "lanes")) +
		"\nhf_cache_dir = \"/mnt/nas/hub\"\nshared_roots = [\"/mnt/nas\"]\n" +
		"[[nodes]]\nname = \"dgx1\"\naddress = \"10.0.0.1\"\nroots = [\"/mnt/nvme\"]\n[[nodes]]\nname = \"dgx2\"\naddress = \"10.0.0.2\"\nroots = [\"/mnt/nvme\"]\n" +
		"[[clusters]]\nname = \"pair\"\nnodes = [\"dgx1\", \"dgx2\"]\n"
	cfg := writeConfigTestFile(t, dir, "sparklane.toml", fleet)
	if err := os.MkdirAll(filepath.Join(dir, "lanes"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := newBareRegistry(t)
	other.commit("one recipe", map[string]string{"official-recipes/alpha.yaml": regRecipeYAML})
	if code, out, errOut := runStarter(t, "--config", cfg, "registry", "add", "other", other.bare); code != 0 {
		t.Fatalf("registry add: exit %d\n%s%s", code, out, errOut)
	}
	// The clone is also a recipes directory, so lanes lists its recipes.
	writeConfigTestFile(t, dir, "sparklane.toml", "recipes_dirs = ["+jsonString(filepath.Join(state, "registries", "other"))+"]\n"+fleet)
	lanes := func() string {
		t.Helper()
		code, out, errOut := runStarter(t, "--config", cfg, "lanes")
		if code != 0 {
			t.Fatalf("lanes: exit %d\n%s%s", code, out, errOut)
		}
		return out
	}
	if !strings.Contains(lanes(), "alpha") {
		t.Fatal("lanes does not list the registry's recipe")
	}

	if code, out, errOut := runStarter(t, "--config", cfg, "registry", "disable", "other"); code != 0 || !strings.Contains(out, "registry other disabled") {
		t.Fatalf("registry disable: exit %d\n%s%s", code, out, errOut)
	}
	if out := lanes(); strings.Contains(out, "alpha") {
		t.Errorf("a disabled registry's recipe is listed:\n%s", out)
	}
	if !registryList(t, cfg)["other"].Disabled {
		t.Error("registry list does not say other is disabled")
	}
	for lane, want := range map[string]string{
		"@other/alpha": "@other/alpha: registry other is disabled: `starter registry enable other` turns it back on",
		"alpha":        "lane alpha is in registry other, which is disabled: `starter registry enable other` turns it back on",
	} {
		if code, _, errOut := runStarter(t, "--config", cfg, "recipe", "render", "--lane", lane); code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("render --lane %s of a disabled registry: exit %d %s", lane, code, errOut)
		}
	}
	if code, _, errOut := runStarter(t, "--config", cfg, "registry", "disable", "ghost"); code == 0 || !strings.Contains(errOut, "no registry ghost") {
		t.Errorf("disable of an unknown registry: exit %d %s", code, errOut)
	}

	if code, out, errOut := runStarter(t, "--config", cfg, "registry", "enable", "other"); code != 0 || !strings.Contains(out, "registry other enabled") {
		t.Fatalf("registry enable: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := runStarter(t, "--config", cfg, "registry", "enable", "other"); code != 0 || !strings.Contains(out, "was enabled already") {
		t.Errorf("enable twice: exit %d %s", code, out)
	}
	if !strings.Contains(lanes(), "alpha") || registryList(t, cfg)["other"].Disabled {
		t.Error("enable did not bring the registry back")
	}
	if code, out, errOut := runStarter(t, "--config", cfg, "--json", "recipe", "render", "--lane", "@other/alpha"); code != 0 || !strings.Contains(out, `"lane": "alpha"`) {
		t.Errorf("render @other/alpha after enable: exit %d\n%s%s", code, out, errOut)
	}
}
