package lane

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// Request names a lane to resolve and says where it runs.
type Request struct {
	// Lane is the lane's name or one of its aliases.
	Lane string
	// Cluster, when set, is where the lane runs whatever its recipe says
	// (starter --cluster); the caller has checked it names a cluster.
	Cluster string
	// Fallback is where a recipe that names no cluster runs when Cluster
	// is empty: the control worker re-resolving a lane for a rollback
	// renders a sparkrun recipe on the cluster it ran on. Empty, such a
	// recipe runs on default_cluster.
	Fallback string
	// Overrides are -o key=value, winning over the recipe's [defaults].
	Overrides map[string]string
}

// Resolve is the one way a lane becomes a run, for the starter and the
// control worker alike: it finds req.Lane in set by name or alias (a
// lane whose recipe is broken is reported with the recipe's error, not as
// unknown), renders it on its cluster and returns the recipe as a run
// carries it, on the cluster it was rendered on (so workflow IDs such as
// cutover/CLUSTER name it), with its plan. set is loaded (and, by the
// starter, validated) by the caller.
func Resolve(cfg *config.Config, set *config.RecipeSet, req Request) (*contract.Recipe, *contract.LanePlan, error) {
	r, err := config.Resolve(set.Recipes, req.Lane)
	if err != nil {
		if b := set.BrokenFor(req.Lane); b != nil {
			return nil, nil, fmt.Errorf("lane %s: recipe %s is broken: %s", req.Lane, b.File, b.Error)
		}
		if t := tooLargeFor(set, req.Lane); t != nil {
			return nil, nil, fmt.Errorf("lane %s (recipe %s) %s: it runs on a fleet with more nodes (or copy the recipe with a smaller tensor_parallel)", req.Lane, t.File, TooLargeWhy(*t))
		}
		var rerr error
		if r, rerr = registryLane(cfg, req.Lane); rerr != nil {
			return nil, nil, rerr
		} else if r == nil {
			return nil, nil, err
		}
	}
	cluster := req.Cluster
	if cluster == "" && r.Cluster == "" {
		cluster = req.Fallback
	}
	plan, err := RenderOn(cfg, r, cluster, req.Overrides)
	if err != nil {
		return nil, nil, err
	}
	w := Wire(r)
	w.Cluster = plan.Cluster
	resolveStaging(cfg, w.Staging)
	if err := wireRegistry(cfg, r, &w); err != nil {
		return nil, nil, err
	}
	return &w, plan, nil
}

// registryLane finds a lane that no recipes directory has in the
// registries (a lane started as --lane @REG/NAME runs as NAME: its
// rollback and stop find it here). Found in one registry it is loaded and
// validated; in several, the error names the @REG/NAME to choose from.
func registryLane(cfg *config.Config, name string) (*config.Recipe, error) {
	if config.ValidName(name) != nil {
		return nil, nil
	}
	var found []*config.Recipe
	var refs []string
	for _, reg := range slices.Sorted(maps.Keys(cfg.Registries)) {
		ref := "@" + reg + "/" + name
		r, err := config.ResolveRecipeRef(cfg, ref)
		if err != nil {
			continue
		}
		found, refs = append(found, r), append(refs, ref)
	}
	switch len(found) {
	case 0:
		return nil, inDisabledRegistry(cfg, name)
	case 1:
		set := &config.RecipeSet{Recipes: found}
		if err := ValidateSet(cfg, set); err != nil {
			return nil, err
		}
		if len(set.Broken) > 0 {
			return nil, fmt.Errorf("lane %s (%s): recipe %s is broken: %s", name, refs[0], set.Broken[0].File, set.Broken[0].Error)
		}
		if len(set.TooLarge) > 0 {
			return nil, fmt.Errorf("lane %s (%s) %s", name, refs[0], TooLargeWhy(set.TooLarge[0]))
		}
		return found[0], nil
	}
	return nil, fmt.Errorf("lane %s is in several registries: name one, --lane %s", name, strings.Join(refs, " or --lane "))
}

// inDisabledRegistry is the error for a lane found only in a registry
// `starter registry disable` turned off: how to turn it back on.
func inDisabledRegistry(cfg *config.Config, name string) error {
	off := *cfg
	off.Registries, off.DisabledRegistries = cfg.DisabledRegistries, nil
	for _, reg := range slices.Sorted(maps.Keys(cfg.DisabledRegistries)) {
		if _, err := config.ResolveRecipeRef(&off, "@"+reg+"/"+name); err == nil {
			return fmt.Errorf("lane %s is in registry %s, which is disabled: `starter registry enable %s` turns it back on", name, reg, reg)
		}
	}
	return nil
}
