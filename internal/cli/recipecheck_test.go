package cli

import (
	"encoding/json"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// `recipe check` is one check: with the recipe files given and without
// (recipes_dir), it fails on the same recipes — a placeholder digest, a
// mount of /etc, a staging dst outside the node's roots — and on exactly
// the ones `lanes` lists as BROKEN, plus the incomplete pins.
func TestRecipeCheckAgreesWithAndWithoutFiles(t *testing.T) {
	head := "runtime = \"sim\"\ncommand = \"serve\"\ncluster = \"one\"\n"
	recipes := map[string]string{
		"good.toml":   head + "image = \"i@sha256:" + strings.Repeat("ab", 32) + "\"\n",
		"digest.toml": head + "image = \"i@sha256:" + strings.Repeat("0", 64) + "\"\n",
		"etc.toml":    head + "image = \"i\"\n[[mounts]]\nsrc = \"/etc\"\ndst = \"/host-etc\"\n",
		"dst.toml":    head + "image = \"i\"\n[[staging]]\nkind = \"hub-mirror\"\nsrc = \"/nas/hub\"\ndst = \"/elsewhere/w\"\nrepos = [\"org/m\"]\n",
		"host.toml":   head + "image = \"i\"\n[[mounts]]\nsrc = \"/dev/infiniband\"\ndst = \"/dev/infiniband\"\nhost = true\n",
	}
	cfg, lanes := writeCLIFleet(t, "good.toml", recipes["good.toml"])
	var files []string
	for _, name := range sortedMapKeys(recipes) {
		files = append(files, writeConfigTestFile(t, lanes, name, recipes[name]))
	}
	want := []string{"digest.toml", "dst.toml", "etc.toml"}

	type result struct {
		OK      bool     `json:"ok"`
		Errors  []string `json:"errors"`
		Notices []string `json:"notices"`
		Fleet   string   `json:"fleet_config"`
	}
	check := func(what string, args ...string) result {
		t.Helper()
		code, out, errOut := runStarter(t, append([]string{"--config", cfg, "--json", "recipe", "check"}, args...)...)
		var res result
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%s: %v\n%s%s", what, err, out, errOut)
		}
		if code != 1 || res.OK {
			t.Errorf("%s: exit %d ok=%v, want 1 and not ok", what, code, res.OK)
		}
		if got := failing(res.Errors, lanes); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: failing recipes %v, want %v:\n%s", what, got, want, strings.Join(res.Errors, "\n"))
		}
		if len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "host.toml: mounts[0]: host mount /dev/infiniband") {
			t.Errorf("%s: notices %q, want host.toml's host mount", what, res.Notices)
		}
		if res.Fleet != cfg {
			t.Errorf("%s: checked against %q, want %s", what, res.Fleet, cfg)
		}
		return res
	}
	without := check("recipe check")
	with := check("recipe check FILE...", files...)
	withCfg := check("recipe check CONFIG FILE...", append([]string{cfg}, files...)...)
	sort.Strings(without.Errors)
	sort.Strings(with.Errors)
	sort.Strings(withCfg.Errors)
	if strings.Join(without.Errors, "\n") != strings.Join(with.Errors, "\n") || strings.Join(with.Errors, "\n") != strings.Join(withCfg.Errors, "\n") {
		t.Errorf("the same recipes, different errors:\nwithout files:\n%s\nwith files:\n%s\nwith the config among them:\n%s",
			strings.Join(without.Errors, "\n"), strings.Join(with.Errors, "\n"), strings.Join(withCfg.Errors, "\n"))
	}
	for _, w := range []string{"etc.toml: mounts[0].src: /etc is outside node a's roots", "dst.toml: staging[0].dst: /elsewhere/w is outside node a's roots", "digest.toml: image: digest sha256:" + strings.Repeat("0", 64) + " is a zero placeholder"} {
		if !strings.Contains(strings.Join(with.Errors, "\n"), w) {
			t.Errorf("recipe check lacks %q:\n%s", w, strings.Join(with.Errors, "\n"))
		}
	}

	// lanes marks BROKEN what recipe check fails on (pins aside: they
	// are recipe check's own, stricter than a run).
	code, out, _ := runStarter(t, "--config", cfg, "lanes")
	if code != 0 {
		t.Fatalf("lanes: exit %d\n%s", code, out)
	}
	for _, name := range []string{"etc.toml", "dst.toml"} {
		if !strings.Contains(out, "BROKEN "+filepath.Join(lanes, name)) {
			t.Errorf("lanes does not mark %s BROKEN:\n%s", name, out)
		}
	}
	for _, name := range []string{"good", "host", "digest"} {
		if strings.Contains(out, "BROKEN "+filepath.Join(lanes, name)) {
			t.Errorf("lanes marks %s BROKEN:\n%s", name, out)
		}
	}

	// Only good recipes: exit 0 either way.
	code, out, errOut := runStarter(t, "--config", cfg, "recipe", "check", files[3], files[4])
	if code != 0 || !strings.Contains(out, "2 recipe file(s) ok on the fleet of "+cfg) {
		t.Errorf("recipe check of good.toml and host.toml: exit %d\n%s%s", code, out, errOut)
	}
}

// failing lists the recipe files (base names, sorted) that errs name.
func failing(errs []string, dir string) []string {
	seen := map[string]bool{}
	for _, e := range errs {
		file, _, _ := strings.Cut(e, ": ")
		if filepath.Dir(file) == dir {
			seen[filepath.Base(file)] = true
		}
	}
	return sortedMapKeys(seen)
}
