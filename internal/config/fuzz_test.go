package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/lane"
)

// The fuzz targets feed arbitrary bytes to the loaders as a file on disk
// (the way operators hand them over). They must never panic, and every
// error must name the file. Seeds are the shipped recipes, the example
// config and the sparkrun fixtures, so `go test ./internal/config/` runs
// them as ordinary tests. Run one with, e.g.:
//
//	go test -run='^$' -fuzz=FuzzLoadConfig -fuzztime=30s ./internal/config/

// fuzzFleet renders fuzzed recipes on a one-node cluster.
var fuzzFleet = &config.Config{File: "fleet.toml", SharedRoots: []string{"/nas"}, HFCacheDir: "/nas/hub",
	Nodes:    []config.Node{{Name: "a", Roots: []string{"/nvme"}, FSRoot: "/"}, {Name: "b", Roots: []string{"/nvme"}, FSRoot: "/sim/b"}},
	Clusters: []config.Cluster{{Name: "two", Nodes: []string{"a", "b"}}}}

func addSeeds(f *testing.F, globs ...string) {
	f.Helper()
	n := 0
	for _, g := range globs {
		paths, err := filepath.Glob(g)
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
			n++
		}
	}
	if n == 0 {
		f.Fatalf("no seeds in %v", globs)
	}
}

// everyErrorNamesFile fails unless each of err's lines-as-errors names path.
func everyErrorNamesFile(t *testing.T, err error, path string) {
	t.Helper()
	for _, e := range fault.Items(err) {
		if !strings.Contains(e.Error(), path) {
			t.Fatalf("error does not name %s: %v", path, e)
		}
	}
}

func FuzzLoadConfig(f *testing.F) {
	addSeeds(f, filepath.Join("..", "..", "recipes", "sparklane.example.toml"))
	for _, s := range []string{config.GoodConfig, config.HostileFleet, "", "State_Dir = 1\n[[clusters]]\nhf_cache_dir = 2\n",
		"probe_grace = 5\n[temporal]\nport = \"x\"\n", "[[nodes]]\nname = \"a\"\nroots = \"/x\"\n[[nodes]]\nname=\"a\"\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "sparklane.toml")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(p)
		if err != nil {
			everyErrorNamesFile(t, err, p)
			return
		}
		if err := lane.Validate(cfg, nil); err != nil {
			everyErrorNamesFile(t, err, p)
		}
	})
}

func fuzzRecipe(t *testing.T, name string, data []byte) {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := config.LoadRecipe(p)
	if err != nil {
		everyErrorNamesFile(t, err, p)
		return
	}
	if err := lane.Validate(nil, []*config.Recipe{r}); err != nil {
		everyErrorNamesFile(t, err, p)
	}
	// Rendering must not panic either, whatever it says.
	cp := *r
	cp.Cluster = "two"
	_ = lane.Validate(fuzzFleet, []*config.Recipe{&cp})
	_, _ = lane.Render(fuzzFleet, &cp, map[string]string{"x": "1 --evil"})
}

func FuzzLoadRecipeTOML(f *testing.F) {
	addSeeds(f, filepath.Join("..", "..", "recipes", "*.toml"))
	f.Add([]byte("runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve '{x}' {y}\"\n[defaults]\nx = \"{y}\"\ny = \"{x}\"\n"))
	f.Add([]byte("[[staging]]\nkind = \"hub-mirror\"\nmin_free = \"1e400G\"\n[hooks]\nclear = [\"/\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRecipe(t, "lane.toml", data) })
}

func FuzzLoadRecipeYAML(f *testing.F) {
	addSeeds(f, filepath.Join("testdata", "sparkrun-recipes", "*.yaml"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("recipe_version: 3\nmodel: [1]\nenv: {A: {b: 1}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzRecipe(t, "lane.yaml", data) })
}
