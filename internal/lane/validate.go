package lane

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Validate checks the fleet config and the recipes as a whole and returns
// every problem at once (errors.Join, one line each naming file and key),
// so an operator fixes a config in one pass instead of one error per run:
// what config finds in each file (config.ConfigErrors, NameErrors,
// RecipeErrors), then, for each recipe, what needs the fleet: its cluster
// exists and fits it, what it writes lies under every node's roots, and it
// renders there. A recipe without a cluster (every sparkrun recipe) is
// checked on default_cluster, or on its own only when there is none; cfg
// nil checks the files alone.
func Validate(cfg *config.Config, recipes []*config.Recipe) error {
	var errs []error
	if cfg != nil {
		errs = append(errs, config.ConfigErrors(cfg)...)
	}
	errs = append(errs, config.NameErrors(recipes)...)
	for _, r := range recipes {
		rerrs := config.RecipeErrors(r)
		if err := maxModelLenErr(r); err != nil {
			rerrs = append(rerrs, err)
		}
		if cfg != nil && r.Cluster == "" && cfg.DefaultCluster != "" && cfg.Cluster(cfg.DefaultCluster) != nil {
			// A recipe without a cluster (every sparkrun recipe) is checked
			// where it will run: the default cluster.
			cp := *r
			cp.Cluster = cfg.DefaultCluster
			r = &cp
		}
		if cfg != nil {
			rerrs = append(rerrs, onFleet(cfg, r)...)
			// A recipe that checks out is rendered on its cluster, so an
			// unknown placeholder or a cycle shows up now, not at cutover.
			if len(rerrs) == 0 && r.Cluster != "" {
				if _, err := Render(cfg, r, nil); err != nil {
					rerrs = append(rerrs, fault.Items(err)...)
				}
			}
		}
		errs = append(errs, rerrs...)
	}
	if len(errs) == 0 {
		return nil
	}
	return fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
}

// ValidateSet checks a loaded recipe set against the fleet config without
// letting one bad recipe stop the others: a recipe that fails on its own
// (a bad key, an unknown cluster, a placeholder that does not render)
// moves to set.Broken with its errors, and a whole one that needs more
// nodes than the fleet has to set.TooLarge. The error is for what breaks
// every lane: the config itself, or recipes that clash with each other (a
// name or alias taken twice).
func ValidateSet(cfg *config.Config, set *config.RecipeSet) error {
	var big []config.TooLarge
	set.Recipes, big = splitTooLarge(cfg, set.Recipes)
	set.TooLarge = append(set.TooLarge, big...)
	if err := Validate(cfg, set.Recipes); err == nil {
		return nil
	}
	if err := Validate(cfg, nil); err != nil {
		return err
	}
	var ok []*config.Recipe
	for _, r := range set.Recipes {
		if err := Validate(nil, []*config.Recipe{r}); err != nil {
			set.Broken = append(set.Broken, config.Broken(r.File, err))
			continue
		}
		if err := Validate(cfg, []*config.Recipe{r}); err != nil {
			set.Broken = append(set.Broken, config.Broken(r.File, err))
			continue
		}
		ok = append(ok, r)
	}
	set.Recipes = ok
	sort.Slice(set.Broken, func(i, j int) bool { return set.Broken[i].File < set.Broken[j].File })
	return Validate(cfg, set.Recipes)
}

// onFleet checks a recipe against the fleet: its cluster exists, it fits,
// and everything it writes (staging dsts, exports, clear paths) lies under
// each node's roots.
func onFleet(cfg *config.Config, r *config.Recipe) []error {
	bad := func(key, format string, args ...any) error { return fileErr(r.File, key, format, args...) }
	var hubErrs []error
	for i, s := range r.Staging {
		if OnHubRoot(s.Src) && cfg.HFCacheDir == "" {
			// Nothing for StagingSrc to write there.
			hubErrs = append(hubErrs, bad(fmt.Sprintf("staging[%d].src", i), "%s: %s sets no hf_cache_dir: set it to the NAS hub root (the directory of models--org--name/), or write the path", s.Src, cfg.File))
		}
	}
	if r.Cluster == "" || len(hubErrs) > 0 {
		return hubErrs
	}
	c := cfg.Cluster(r.Cluster)
	if c == nil {
		return []error{bad("cluster", "unknown cluster %q — known clusters: %s", r.Cluster, strings.Join(cfg.ClusterNames(), ", "))}
	}
	var errs []error
	size := len(c.Nodes)
	if tp, ok := r.DefaultInt("tensor_parallel"); ok {
		if tp > size {
			errs = append(errs, bad("defaults.tensor_parallel", "%d is larger than cluster %s (%d nodes, one GPU each): lower it or pick a bigger cluster", tp, c.Name, size))
		} else if tp < 1 {
			errs = append(errs, bad("defaults.tensor_parallel", "%d: must be at least 1", tp))
		}
	}
	if r.MinNodes > size {
		errs = append(errs, bad("min_nodes", "lane needs %d nodes but cluster %s has %d", r.MinNodes, c.Name, size))
	}
	for _, name := range c.Nodes {
		n := cfg.Node(name)
		if n == nil {
			continue // reported by config.ConfigErrors
		}
		for i, s := range r.Staging {
			key := fmt.Sprintf("staging[%d]", i)
			if s.Dst != "" && filepath.IsAbs(s.Dst) {
				if err := checkUnderRoots(s.Dst, n); err != nil {
					errs = append(errs, bad(key+".dst", "%v", err))
				}
			}
			for j, e := range s.Exports {
				if p := wireStaging(s).ExportPath(contract.Export(e)); p != "" && filepath.IsAbs(s.Dst) {
					if err := checkUnderRoots(p, n); err != nil {
						errs = append(errs, bad(fmt.Sprintf("%s.exports[%d].path", key, j), "%v", err))
					}
				}
			}
		}
		for i, p := range r.Hooks.Clear {
			if !filepath.IsAbs(p) || hasDotDot(p) {
				continue // reported by config.RecipeErrors
			}
			key := fmt.Sprintf("hooks.clear[%d]", i)
			if err := checkUnderRoots(p, n); err != nil {
				errs = append(errs, bad(key, "%v", err))
				continue
			}
			for _, root := range n.Roots {
				if filepath.Clean(root) == filepath.Clean(p) {
					errs = append(errs, bad(key, "%s is node %s's root itself: clear would empty the whole root (staged weights, ledgers, other lanes); name a directory inside it", p, n.Name))
				}
			}
		}
	}
	return errs
}

// checkUnderRoots says why p is not writable on node n, naming a ".."
// escape as such.
func checkUnderRoots(p string, n *config.Node) error {
	if len(n.Roots) == 0 {
		return fmt.Errorf("node %s has no roots, so nothing may be written at %s: add roots = [...] to the node", n.Name, p)
	}
	if err := staging.UnderRoots(p, n.Roots); err != nil {
		if hasDotDot(p) {
			return fmt.Errorf("%s escapes node %s's roots %v via \"..\" (it cleans to %s): remove the \"..\"", p, n.Name, n.Roots, filepath.Clean(p))
		}
		return fmt.Errorf("%s is outside node %s's roots %v: add a root to the node or change the path", p, n.Name, n.Roots)
	}
	return nil
}

// maxModelLenErr checks [defaults] max_model_len (sparkrun's key for the
// engine's context length) by the one rule the memory fit and the engines
// read it with (memfit.ParseMaxModelLen: vLLM's 32768, 32k = 32000,
// 32K = 32768, 25.6k, auto): a value no engine takes is an error here,
// not a lane that starts and dies (the resolver checks it: the file
// format knows no engine). A value holding a placeholder is left to the
// render.
func maxModelLenErr(r *config.Recipe) error {
	v, ok := r.Defaults["max_model_len"]
	if !ok {
		return nil
	}
	s := config.ValueString(v)
	if config.Placeholder.MatchString(s) {
		return nil
	}
	if _, err := memfit.ParseMaxModelLen(s); err != nil {
		return fileErr(r.File, "defaults.max_model_len", "%v", err)
	}
	return nil
}
