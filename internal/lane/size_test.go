package lane

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// NodesNeeded reads a recipe's world as the renderer does: a TOML
// recipe's tensor_parallel and min_nodes (nothing said: 0, its cluster's
// size), a sparkrun recipe's tp × pp × dp (tp 1 when unset).
func TestNodesNeeded(t *testing.T) {
	dir := t.TempDir()
	head := "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\n"
	for _, c := range []struct {
		file, body string
		want       int
	}{
		{"none.toml", head, 0},
		{"tp4.toml", head + "[defaults]\ntensor_parallel = 4\n", 4},
		{"min3.toml", head + "min_nodes = 3\n[defaults]\ntensor_parallel = 2\n", 3},
		{"world.yaml", "recipe_version: \"2\"\nmodel: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m\ndefaults:\n  tensor_parallel: 2\n  pipeline_parallel: 3\n", 6},
		{"one.yaml", "recipe_version: \"2\"\nmodel: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m\n", 1},
	} {
		r, err := config.LoadRecipe(writeFile(t, dir, c.file, c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		if got := NodesNeeded(r); got != c.want {
			t.Errorf("%s: needs %d nodes, want %d", c.file, got, c.want)
		}
	}
}

// A whole recipe that needs more nodes than the fleet has is neither a
// lane nor broken: ValidateSet puts it in TooLarge (the whole set stays
// valid), recipe check says so as a notice, and Resolve names what it
// needs. One with an error of its own is broken as before, and one whose
// cluster is only unknown (the fleet is big enough) is broken too.
func TestTooLargeRecipesAreNotBroken(t *testing.T) {
	cfg := sparkFleet() // 4 nodes
	dir := t.TempDir()
	head := "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\n"
	big := writeFile(t, dir, "big.toml", head+"aliases = [\"b\"]\ncluster = \"8nodes\"\n[defaults]\ntensor_parallel = 8\n")
	bigBad := writeFile(t, dir, "bigbad.toml", head+"cluster = \"8nodes\"\nbogus = 1\n[defaults]\ntensor_parallel = 8\n")
	unknown := writeFile(t, dir, "unknown.toml", head+"cluster = \"nowhere\"\n[defaults]\ntensor_parallel = 2\n")
	writeFile(t, dir, "ok.toml", head+"cluster = \"pair\"\n")
	cfg.RecipesDir, cfg.RecipesDirs = dir, nil
	set, err := config.LoadRecipeSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateSet(cfg, set); err != nil {
		t.Fatalf("the set: %v", err)
	}
	if len(set.Recipes) != 1 || set.Recipes[0].Name != "ok" {
		t.Errorf("lanes %v, want ok only", set.Recipes)
	}
	if len(set.TooLarge) != 1 || set.TooLarge[0].File != big || TooLargeWhy(set.TooLarge[0]) != "needs 8 nodes; this fleet has 4" {
		t.Errorf("too large %+v, want big.toml needing 8 of 4", set.TooLarge)
	}
	var broken []string
	for _, b := range set.Broken {
		broken = append(broken, b.File)
	}
	if strings.Join(broken, " ") != bigBad+" "+unknown {
		t.Errorf("broken %v, want bigbad.toml and unknown.toml", broken)
	}
	for _, lane := range []string{"big", "b"} {
		_, _, err := Resolve(cfg, set, Request{Lane: lane})
		if err == nil || !strings.Contains(err.Error(), "("+"recipe "+big+") needs 8 nodes; this fleet has 4") {
			t.Errorf("--lane %s: %v", lane, err)
		}
	}
	recipes := []*config.Recipe{set.Recipes[0], set.TooLarge[0].Recipe}
	errs, notices := CheckRecipes(cfg, recipes)
	if len(errs) != 0 || !strings.Contains(strings.Join(notices, "\n"), big+": lane big needs 8 nodes; this fleet has 4") {
		t.Errorf("recipe check: errors %v, notices %q", errs, notices)
	}
}
