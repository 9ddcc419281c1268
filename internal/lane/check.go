package lane

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// Check backs `starter recipe check FILE...` when no fleet config is at
// hand: CheckFiles without one.
func Check(paths []string) (errs []error, notices []string) {
	return CheckFiles(nil, paths)
}

// CheckFiles backs `starter recipe check FILE...`: it loads every file and
// runs CheckRecipes on the recipes among them, against the fleet config
// among them (sparklane*.toml), else against fleet (the starter's usual
// config, --config), so a file checks out exactly when the same recipe in
// recipes_dir would. Files that do not load are reported as they failed.
func CheckFiles(fleet *config.Config, paths []string) (errs []error, notices []string) {
	var cfg *config.Config
	var recipes []*config.Recipe
	for _, p := range paths {
		if config.IsFleetConfigFile(p) {
			c, err := config.Load(p)
			if err != nil {
				errs = append(errs, fault.Items(err)...)
				continue
			}
			if cfg == nil {
				cfg = c
				notices = append(notices, c.Notes...)
			}
			continue
		}
		r, err := config.LoadRecipe(p)
		if err != nil {
			errs = append(errs, fault.Items(err)...)
			continue
		}
		recipes = append(recipes, r)
	}
	if cfg == nil {
		cfg = fleet
	}
	more, found := CheckRecipes(cfg, recipes)
	return append(errs, more...), append(notices, found...)
}

// CheckSet backs `starter recipe check` without files: the recipes of
// recipes_dir and recipes_dirs as LoadRecipeSet found them (those that did
// not load, or took a name twice, are in set.Broken) through CheckRecipes.
// It reports the same lines as CheckFiles on the same files.
func CheckSet(cfg *config.Config, set *config.RecipeSet) (errs []error, notices []string) {
	for _, b := range set.Broken {
		errs = append(errs, fault.Items(b.Err)...)
	}
	more, notices := CheckRecipes(cfg, set.Recipes)
	return append(errs, more...), notices
}

// CheckRecipes is the one recipe check: every check that `lanes`, `stage`
// and `cutover` run before a recipe may become a run — the config and the
// recipes validated as a set against the fleet, each recipe rendered on
// its cluster (Validate: a mount of /etc, a staging dst outside a node's
// roots) — and then pins that are not whole (PinErrors), which would pass
// every other check and pin nothing. Notices are what is allowed but worth
// a look before a cutover: every host = true mount (a host path bound into
// the container on purpose). cfg nil checks the recipes on their own.
func CheckRecipes(cfg *config.Config, recipes []*config.Recipe) (errs []error, notices []string) {
	all := recipes
	recipes, big := splitTooLarge(cfg, recipes)
	for _, t := range big {
		// Whole, but no cluster of this fleet can hold it: said, not failed.
		notices = append(notices, fmt.Sprintf("%s: lane %s %s: not checked on a cluster", t.File, t.Lane, TooLargeWhy(t)))
	}
	for _, r := range recipes {
		for i, m := range r.Mounts {
			if m.Host {
				notices = append(notices, fmt.Sprintf("%s: mounts[%d]: host mount %s -> %s (host = true: bound from the host, outside the node's roots)", r.File, i, m.Src, m.Dst))
			}
		}
	}
	errs = fault.Items(Validate(cfg, recipes))
	for _, r := range all {
		errs = append(errs, PinErrors(r)...)
	}
	if cfg != nil {
		more, fits := checkFit(cfg, recipes, memfit.LoadDiscovered(cfg.StateDir))
		errs, notices = append(errs, more...), append(notices, fits...)
	}
	return errs, notices
}

// checkFit is recipe check's memory fit: each recipe rendered on its
// cluster and estimated (fit); one that does not fit is an error with the
// arithmetic, one that fits a notice. One that cannot be estimated is a
// notice saying why (a command flag, a config.json or a safetensors
// header that does not read, naming it) — except when its weights are
// only not on the NAS yet, which cutover --dry-run reports. The notices
// are the same with FILEs and without: CheckFiles and CheckSet both come
// here.
func checkFit(cfg *config.Config, recipes []*config.Recipe, discovered map[string]int64) (errs []error, notices []string) {
	for _, r := range recipes {
		plan, err := RenderOn(cfg, r, "", nil)
		if err != nil {
			continue // Validate reported it
		}
		w := Wire(r)
		est, note, pending := fit(cfg, &w, plan, discovered)
		switch {
		case est == nil && !pending:
			notices = append(notices, fmt.Sprintf("%s: %s", r.File, note))
		case est == nil:
		case est.Err() != nil:
			errs = append(errs, fmt.Errorf("%s: %w", r.File, est.Err()))
		default:
			notices = append(notices, fmt.Sprintf("lane %s fits in memory: %s", r.Name, strings.Join(est.Lines(), "; ")))
		}
	}
	return errs, notices
}

// IncompleteDigest is what recipe check says of a pin that is not whole:
// the operator's log gives some digests only in part (mia's image
// sha256:3dbc3130…, checkpoint fb2764a5), and a recipe that pads them with
// zeros would pass every check and pin nothing.
const IncompleteDigest = "complete this digest"

var (
	snapshotRevRE = regexp.MustCompile(`/snapshots/([^/]+)`)
)

// PinErrors lists, for recipe check, every pin of r that is not whole: an
// image digest that is not 64 hex digits (or is all zeros), and a model
// revision (model_revision, [defaults] revision, a staging src's
// snapshots/REV) that is not a 40-hex commit (or is all zeros), and a repo
// id or model with "…" in it (the notes' own mark of a cut value). Each
// error names the file, the key and how to find the full value.
func PinErrors(r *config.Recipe) []error {
	var errs []error
	zero := func(s string) bool { return strings.Trim(s, "0") == "" }
	// The image is parsed by the one parser (contract.ParseImageRef); one
	// with a placeholder is checked when it renders.
	if ref, err := contract.ParseImageRef(r.Image); err == nil && ref.Digest != "" && !strings.ContainsAny(r.Image, "{}") {
		h := strings.TrimPrefix(ref.Digest, "sha256:")
		switch {
		case zero(h):
			errs = append(errs, fileErr(r.File, "image", "digest %s is a zero placeholder: %s (docker image inspect --format '{{index .RepoDigests 0}}' on a node that runs the image)", ref.Digest, IncompleteDigest))
		case ref.Incomplete():
			errs = append(errs, fileErr(r.File, "image", "digest %s has %d of 64 hex digits: %s (docker image inspect --format '{{index .RepoDigests 0}}' on a node that runs the image)", ref.Digest, len(h), IncompleteDigest))
		}
	}
	rev := func(key, v string) {
		h := strings.TrimRight(v, ".…")
		switch {
		case h == "" || strings.ContainsAny(h, "{}"):
		case zero(h):
			errs = append(errs, fileErr(r.File, key, "revision %s is a zero placeholder: %s (the 40-hex commit in the repo's refs/main on the NAS)", v, IncompleteDigest))
		case !hubcache.IsCommit(h):
			errs = append(errs, fileErr(r.File, key, "revision %s has %d of 40 hex digits: %s (the 40-hex commit in the repo's refs/main on the NAS)", v, len(h), IncompleteDigest))
		}
	}
	rev("model_revision", r.ModelRevision)
	if v, ok := r.Defaults["revision"]; ok {
		rev("defaults.revision", config.ValueString(v))
	}
	for i, st := range r.Staging {
		if m := snapshotRevRE.FindStringSubmatch(st.Src); m != nil {
			rev(fmt.Sprintf("staging[%d].src", i), m[1])
		}
		for j, repo := range st.Repos {
			if strings.Contains(repo, "…") {
				errs = append(errs, fileErr(r.File, fmt.Sprintf("staging[%d].repos[%d]", i, j), "repo id %q is not whole (\"…\" marks what the notes do not give): complete this: the org/name of the repo on the NAS (models--ORG--NAME), here and in the exports", repo))
			}
		}
	}
	if strings.Contains(r.Model, "…") {
		errs = append(errs, fileErr(r.File, "model", "model %q is not whole: complete this (the hub id)", r.Model))
	}
	return errs
}
