package lane

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// Resolve is what the starter (--cluster wins) and the control worker
// (a fallback for a recipe without a cluster) both run: the returned
// recipe is on the cluster its plan was rendered on, an alias finds the
// lane, and a broken recipe is named with its error, not as unknown.
func TestResolveClusterChoiceAndBrokenRecipes(t *testing.T) {
	cfg := sparkFleet()
	dir := t.TempDir()
	writeFile(t, dir, "mine.toml", "aliases = [\"m\"]\nruntime = \"sim\"\nimage = \"i\"\ncommand = \"serve --port {port}\"\ncluster = \"solo\"\n")
	writeFile(t, dir, "bad.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve\"\nmods = [\"nowhere\"]\n")
	cfg.RecipesDir = dir
	set, err := config.LoadRecipeSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req        Request
		want, head string
	}{
		{Request{Lane: "minimax-m2.7-awq4-vllm", Fallback: "pair"}, "pair", "dgx1"},
		{Request{Lane: "minimax-m2.7-awq4-vllm"}, "quad", "dgx1"},
		{Request{Lane: "minimax-m2.7-awq4-vllm", Cluster: "trio", Fallback: "pair"}, "trio", "dgx1"},
		{Request{Lane: "m", Fallback: "pair"}, "solo", "dgx1"},
		{Request{Lane: "mine", Cluster: "pair"}, "pair", "dgx1"},
	} {
		r, plan, err := Resolve(cfg, set, c.req)
		if err != nil {
			t.Fatalf("%+v: %v", c.req, err)
		}
		if plan.Cluster != c.want || r.Cluster != c.want || plan.Nodes[0].Node != c.head {
			t.Errorf("%+v: plan on %s (head %s), recipe on %s; want %s", c.req, plan.Cluster, plan.Nodes[0].Node, r.Cluster, c.want)
		}
		w := Wire(set.Find(c.req.Lane))
		w.Cluster = r.Cluster
		if h, _ := RecipeHash(&w, c.req.Overrides); h != plan.RecipeHash {
			t.Errorf("%+v: plan hash %s is not the returned recipe's %s", c.req, plan.RecipeHash, h)
		}
	}
	_, plan, err := Resolve(cfg, set, Request{Lane: "mine", Overrides: map[string]string{"port": "9100"}})
	if err != nil || plan.APIPort != 9100 {
		t.Fatalf("-o port=9100: %+v %v", plan, err)
	}
	if _, _, err := Resolve(cfg, set, Request{Lane: "bad"}); err == nil || !strings.HasPrefix(err.Error(), "lane bad: recipe "+dir+"/bad.toml is broken: ") || !strings.Contains(err.Error(), `mod "nowhere" not found`) {
		t.Errorf("broken recipe: %v", err)
	}
	if _, _, err := Resolve(cfg, set, Request{Lane: "mien"}); err == nil || !strings.Contains(err.Error(), `unknown lane "mien" — did you mean mine?`) {
		t.Errorf("unknown lane: %v", err)
	}
}
