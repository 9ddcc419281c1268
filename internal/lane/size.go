package lane

import (
	"fmt"
	"slices"

	"github.com/sparklane/sparklane/internal/config"
)

// NodesNeeded is the fewest nodes r runs on, whatever cluster it is given:
// its min_nodes, and its world from [defaults] — tensor_parallel (one GPU
// per node), times pipeline_parallel and data_parallel for a sparkrun
// recipe, whose world that is (worldShape). 0 when r says nothing: a TOML
// recipe's tensor_parallel defaults to its cluster's size. `starter init`
// sizes the clusters recipes name by it, and a recipe needing more than
// the fleet's nodes is listed as too large rather than broken.
func NodesNeeded(r *config.Recipe) int {
	need := r.MinNodes
	tp, ok := r.DefaultInt("tensor_parallel")
	if r.Format == "sparkrun" {
		if !ok {
			tp = 1
		}
		pp, _ := r.DefaultInt("pipeline_parallel")
		dp, _ := r.DefaultInt("data_parallel")
		if world, fine := worldSize(tp, max(pp, 1), max(dp, 1)); fine {
			return max(need, world)
		}
		return need
	}
	if ok {
		need = max(need, tp)
	}
	return need
}

// splitTooLarge takes out of recipes those that are whole on their own
// (Validate without a fleet passes) but need more nodes than cfg has: no
// cluster of this fleet can hold them, which says nothing wrong of the
// recipe. cfg nil splits nothing.
func splitTooLarge(cfg *config.Config, recipes []*config.Recipe) (fit []*config.Recipe, big []config.TooLarge) {
	if cfg == nil {
		return recipes, nil
	}
	for _, r := range recipes {
		if need := NodesNeeded(r); need > len(cfg.Nodes) && Validate(nil, []*config.Recipe{r}) == nil {
			big = append(big, config.TooLarge{File: r.File, Recipe: r, Lane: r.Name, Needs: need, Has: len(cfg.Nodes)})
			continue
		}
		fit = append(fit, r)
	}
	return fit, big
}

// TooLargeWhy is what `starter lanes` and --lane say of a too-large
// recipe: "needs 4 nodes; this fleet has 3".
func TooLargeWhy(t config.TooLarge) string {
	nodes := "nodes"
	if t.Needs == 1 {
		nodes = "node"
	}
	return fmt.Sprintf("needs %d %s; this fleet has %d", t.Needs, nodes, t.Has)
}

// tooLargeFor returns the too-large recipe named (or aliased) lane in set,
// nil when none is, so --lane on it says what it needs, not "unknown".
func tooLargeFor(set *config.RecipeSet, lane string) *config.TooLarge {
	for i, t := range set.TooLarge {
		if t.Lane == lane || (t.Recipe != nil && slices.Contains(t.Recipe.Aliases, lane)) {
			return &set.TooLarge[i]
		}
	}
	return nil
}
