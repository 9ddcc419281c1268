package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/strictdecode"
)

// BrokenRecipe is a recipe file that did not load: listed (by `starter
// lanes`) with its error, while every other lane keeps working.
type BrokenRecipe struct {
	File string `json:"file"`
	Err  error  `json:"-"`
	// Error is Err's text, for JSON output.
	Error string `json:"error"`
}

// RecipeSet is every recipe the fleet config points at: recipes_dir (flat)
// and each recipes_dirs entry (searched recursively, so a registry clone
// works as it is).
type RecipeSet struct {
	Recipes []*Recipe      `json:"recipes"`
	Broken  []BrokenRecipe `json:"broken,omitempty"`
	// Warnings are files skipped because they could not be read: like
	// Broken, a command that does not list recipes only counts them.
	Warnings []string `json:"warnings,omitempty"`
	// Notes are findings that change nothing an operator must fix (a
	// name qualified because two registry folders use it): `starter
	// lanes` prints them, other commands do not.
	Notes []string `json:"notes,omitempty"`
	// TooLarge are whole recipes needing more nodes than the fleet has:
	// not lanes, not broken (`starter lanes` lists them; nothing else counts them).
	TooLarge []TooLarge `json:"too_large,omitempty"`
}

// TooLarge is a recipe that needs Needs nodes on a fleet of Has.
type TooLarge struct {
	Recipe *Recipe `json:"-"`
	File   string  `json:"file"`
	Lane   string  `json:"lane"`
	Needs  int     `json:"needs"`
	Has    int     `json:"has"`
}

// Find returns the recipe named (or aliased) lane, nil when none is.
func (s *RecipeSet) Find(lane string) *Recipe {
	for _, r := range s.Recipes {
		if r.Name == lane || slices.Contains(r.Aliases, lane) {
			return r
		}
	}
	return nil
}

// LoadRecipeSet reads recipes_dir and every recipes_dirs entry. A recipe
// that fails to load is returned in Broken with its error, never failing
// the others; a second recipe with a name already taken is broken too
// (lane names must be unique). skip lists files never read (the fleet
// config in use). The error is only for a directory that cannot be read.
func LoadRecipeSet(cfg *Config, skip ...string) (*RecipeSet, error) {
	set := &RecipeSet{}
	var errs []error
	type loaded struct {
		r    *Recipe
		root string
	}
	var all []loaded
	read := func(dir string, deep bool) {
		files, warns, err := recipeFiles(dir, deep, skip)
		if err != nil {
			errs = append(errs, err)
		}
		set.Warnings = append(set.Warnings, warns...)
		for _, r := range set.load(treeOf(cfg, dir, deep), files, cfg.Registries) {
			root := ""
			if deep {
				root = dir
			}
			all = append(all, loaded{r, root})
		}
	}
	if cfg.RecipesDir != "" {
		read(cfg.RecipesDir, false)
	}
	for _, d := range cfg.RecipesDirs {
		read(d, true)
	}
	// A name found twice in recipes_dirs trees (a registry has
	// official-recipes/X.yaml and experimental-recipes/X.yaml) is
	// qualified by each file's top directory under its tree:
	// official-recipes.X. What still clashes is broken.
	count := map[string]int{}
	for _, l := range all {
		count[l.r.Name]++
	}
	for _, l := range all {
		if count[l.r.Name] < 2 || l.root == "" {
			continue
		}
		rel, err := filepath.Rel(l.root, l.r.File)
		top, _, nested := strings.Cut(filepath.ToSlash(rel), "/")
		q := strings.ToLower(top) + "." + l.r.Name
		if err != nil || !nested || ValidName(q) != nil || count[q] > 0 {
			continue
		}
		set.Notes = append(set.Notes, fmt.Sprintf("%s: lane %q is also the name of another recipe: this one is lane %s", l.r.File, l.r.Name, q))
		l.r.Name = q
	}
	seen := map[string]string{}
	for _, l := range all {
		r := l.r
		if prev, dup := seen[r.Name]; dup {
			set.Broken = append(set.Broken, Broken(r.File, fault.Permanent(fault.InvalidSpec,
				fmt.Errorf("%s: lane name %q is taken by %s: rename one of the files", r.File, r.Name, prev))))
			continue
		}
		seen[r.Name] = r.File
		set.Recipes = append(set.Recipes, r)
	}
	if len(errs) > 0 {
		return set, fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
	}
	return set, nil
}

// Broken is the BrokenRecipe of file: err as it happened, and its text
// without the fault wrapper for listings and JSON.
func Broken(file string, err error) BrokenRecipe {
	return BrokenRecipe{File: file, Err: err, Error: unwrapFault(err).Error()}
}

func (s *RecipeSet) load(tree recipeTree, files []string, registries map[string]string) []*Recipe {
	var out []*Recipe
	for _, p := range files {
		r, err := loadRecipe(tree, p, registries)
		switch {
		case errors.Is(err, ErrNotRecipe):
			s.Warnings = append(s.Warnings, fmt.Sprintf("%v: skipped", unwrapFault(err)))
		case err != nil:
			s.Broken = append(s.Broken, Broken(p, err))
		default:
			out = append(out, r)
		}
	}
	return out
}

// isRecipeName says whether a file name may be a recipe.
func isRecipeName(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	if ext == ".toml" {
		return !IsFleetConfigFile(name)
	}
	return ext == ".yaml" || ext == ".yml"
}

// recipeFiles lists the recipe files of dir in name order, recursively
// when deep: hidden directories (.sparkrun, .git) and mod directories
// (mods/, *-mods/) are not recipes and are not entered. Symlinked
// directories are not followed (a loop would never end).
func recipeFiles(dir string, deep bool, skip []string) ([]string, []string, error) {
	if _, err := os.Stat(dir); err != nil {
		key := "recipes_dir"
		if deep {
			key = "recipes_dirs"
		}
		return nil, nil, fmt.Errorf("read %s %s: %w: fix %s in the fleet config", key, dir, err, key)
	}
	var skipInfo []fs.FileInfo
	for _, p := range skip {
		if st, err := os.Stat(p); err == nil {
			skipInfo = append(skipInfo, st)
		}
	}
	var files, warnings []string
	// The root itself may be a symlink (recipes -> a checkout elsewhere):
	// walked with a trailing separator, WalkDir follows it; links below
	// the root are still not followed.
	root := dir
	if st, err := os.Lstat(dir); err == nil && st.Mode()&fs.ModeSymlink != 0 {
		root = dir + string(filepath.Separator)
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: %v: skipped", p, err))
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p == root {
				return nil
			}
			name := d.Name()
			if !deep || strings.HasPrefix(name, ".") || name == "mods" || strings.HasSuffix(name, "-mods") {
				return fs.SkipDir
			}
			return nil
		}
		if !isRecipeName(d.Name()) {
			return nil
		}
		st, err := os.Stat(p)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: %v: skipped", p, err))
			return nil
		}
		if st.IsDir() {
			return nil
		}
		if !st.Mode().IsRegular() {
			warnings = append(warnings, fmt.Sprintf("%s: not a regular file (%s): skipped", p, strictdecode.FileKind(st.Mode())))
			return nil
		}
		for _, s := range skipInfo {
			if os.SameFile(s, st) {
				return nil
			}
		}
		files = append(files, p)
		return nil
	})
	sort.Strings(files)
	return files, warnings, err
}

// ResolveRecipeRef loads a recipe named @REGISTRY/NAME (sparkrun's scoped
// reference) from the local clone the config's [registries] names: the
// file NAME.yaml, NAME.yml or NAME.toml anywhere under it (mod
// directories aside), read from inside the clone (a symlink out of it is
// an error, never followed). A ref without @ is a path.
func ResolveRecipeRef(cfg *Config, ref string) (*Recipe, error) {
	if !strings.HasPrefix(ref, "@") {
		return LoadRecipeWith(ref, cfg.Registries)
	}
	bad := func(format string, args ...any) (*Recipe, error) {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf(format, args...))
	}
	reg, name, ok := strings.Cut(strings.TrimPrefix(ref, "@"), "/")
	if !ok || reg == "" || name == "" || strings.Contains(name, "/") || hasDotDot(name) {
		return bad("%s: write a registry recipe as @REGISTRY/NAME", ref)
	}
	root, ok := cfg.Registries[reg]
	if _, off := cfg.DisabledRegistries[reg]; off {
		return bad("%s: registry %s is disabled: `starter registry enable %s` turns it back on", ref, reg, reg)
	} else if !ok {
		known := strings.Join(slices.Sorted(maps.Keys(cfg.Registries)), ", ")
		return bad("%s: registry %q is not in [registries] of %s (known: %s): add %s = \"PATH TO ITS CLONE\"", ref, reg, cfg.File, known, reg)
	}
	files, _, err := recipeFiles(root, true, nil)
	if err != nil {
		return bad("%s: registry %s: %v", ref, reg, err)
	}
	var hits []string
	for _, f := range files {
		if baseName(f) == name {
			hits = append(hits, f)
		}
	}
	switch len(hits) {
	case 0:
		return bad("%s: no recipe %s.yaml under registry %s (%s): check the name with `starter lanes`", ref, name, reg, root)
	case 1:
		return loadRecipe(recipeTree{Root: root, What: "registry " + reg + "'s clone"}, hits[0], cfg.Registries)
	}
	return bad("%s: %d recipes are named %s under registry %s (%s): name the file instead", ref, len(hits), name, reg, strings.Join(hits, ", "))
}

// BrokenFor returns the broken recipe a lane name most likely means (its
// file is LANE.yaml / LANE.toml), so `--lane X` on a broken recipe says
// why it is broken instead of "unknown lane".
func (s *RecipeSet) BrokenFor(lane string) *BrokenRecipe {
	for i, b := range s.Broken {
		if baseName(b.File) == lane {
			return &s.Broken[i]
		}
	}
	return nil
}
