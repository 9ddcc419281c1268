package lane

import (
	"strings"
	"testing"
)

// TestBenchSeedAndModeDefaults: every bench is reproducible by default
// (seed 42, the operator's), a recipe may set its own seed (0 included)
// and mode, and an unknown mode is an error naming file and key.
func TestBenchSeedAndModeDefaults(t *testing.T) {
	dir := t.TempDir()
	plain := writeFile(t, dir, "plain.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n")
	r := mustRecipe(t, plain)
	if r.Bench.Seed == nil || *r.Bench.Seed != 42 || r.Bench.Mode != "standard" {
		t.Errorf("defaults: seed %v mode %q, want 42 and standard", r.Bench.Seed, r.Bench.Mode)
	}
	own := writeFile(t, dir, "own.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n[bench]\nseed = 0\nmode = \"hardmode\"\nharness = \"tool-eval-bench\"\n")
	r = mustRecipe(t, own)
	if r.Bench.Seed == nil || *r.Bench.Seed != 0 || r.Bench.Mode != "hardmode" || r.Bench.Harness != "tool-eval-bench" {
		t.Errorf("recipe's own: seed %v mode %q harness %q", r.Bench.Seed, r.Bench.Mode, r.Bench.Harness)
	}
	if errs := checkFiles([]string{own}); len(errs) != 0 {
		t.Errorf("a valid [bench] refused: %v", errs)
	}
	bad := writeFile(t, dir, "bad.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n[bench]\nmode = \"hard\"\n")
	typo := writeFile(t, dir, "typo.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n[bench]\nsede = 1\n")
	got := errText(checkFiles([]string{bad, typo}))
	for _, w := range []string{bad + `: bench.mode: unknown mode "hard": use one of standard, hardmode, short`, typo + ": unknown key bench.sede"} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in:\n%s", w, got)
		}
	}
}
