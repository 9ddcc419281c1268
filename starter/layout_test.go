package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The README's layout is the map a newcomer reads first, so it must stay
// true and complete: every Go package of the repository is named in it, and
// every package path it names exists.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no '## Layout' section")
	}
	if next := strings.Index(layout, "\n## "); next >= 0 {
		layout = layout[:next]
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9_./-]*)`").FindAllStringSubmatch(layout, -1) {
		named[strings.TrimSuffix(m[1], "/")] = true
	}

	packages := goPackageDirs(t, repo)
	var missing []string
	for _, p := range packages {
		if !named[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Errorf("README.md's layout does not name these packages: %s", strings.Join(missing, ", "))
	}

	isPackage := map[string]bool{}
	for _, p := range packages {
		isPackage[p] = true
	}
	var stale []string
	for p := range named {
		if !strings.HasPrefix(p, "internal/") {
			continue
		}
		if !isPackage[p] {
			stale = append(stale, p)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Errorf("README.md's layout names packages that do not exist: %s", strings.Join(stale, ", "))
	}
	if len(packages) < 10 {
		t.Fatalf("found only %d packages under %s: the walk is wrong", len(packages), repo)
	}
}

// goPackageDirs lists, relative to repo, every directory that holds a .go
// file, leaving out testdata and hidden directories as the go tool does.
func goPackageDirs(t *testing.T, repo string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != repo && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			rel, err := filepath.Rel(repo, filepath.Dir(path))
			if err != nil {
				return err
			}
			seen[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// engines know nothing of Temporal: activities wrap them. Each one's doc.go
// says so; this holds every one of them to it.
var engines = []string{
	"internal/engine/bench", "internal/engine/disk", "internal/fault", "internal/engine/hubfetch", "internal/engine/hubmirror",
	"internal/engine/ledger", "internal/node", "internal/engine/power", "internal/engine/power/routeros", "internal/engine/probe",
	"internal/engine/relay", "internal/engine/report", "internal/engine/safetensors", "internal/engine/secretenv", "internal/engine/serve",
	"internal/sim", "internal/simimage", "internal/engine/sparserows", "internal/engine/staging",
	"internal/config", "internal/lane", "internal/contract", "internal/strictdecode",
}

// The import boundaries the package docs state: engines, the file format
// and the planner import no Temporal, activities, workflows, CLI or worker
// code; the wire contract imports no sparklane package; production code
// never imports a test kit.
func TestImportBoundaries(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/sparklane/sparklane/"
	forbiddenForEngines := []string{"go.temporal.io/", mod + "activities", mod + "workflows", mod + "internal/cli", mod + "internal/workers"}
	checked := 0
	for _, pkg := range goPackageDirs(t, repo) {
		imports := productionImports(t, filepath.Join(repo, pkg))
		isEngine := false
		for _, e := range engines {
			isEngine = isEngine || pkg == e
		}
		for _, imp := range imports {
			if isEngine {
				checked++
				for _, f := range forbiddenForEngines {
					if strings.HasPrefix(imp, f) {
						t.Errorf("%s imports %s: engines know nothing of Temporal, activities, workflows, the CLI or the workers", pkg, imp)
					}
				}
			}
			if (pkg == "internal/contract" || pkg == "internal/strictdecode") && strings.HasPrefix(imp, mod) {
				t.Errorf("%s imports %s: it stands alone (the wire contract; the generic decoder)", pkg, imp)
			}
			testkitUser := strings.HasPrefix(pkg, "internal/testkit/") || pkg == "internal/engine/relay/cmd/relay-bench" ||
				pkg == "internal/engine/hubfetch/cmd/hubfetch-bench"
			if strings.HasPrefix(imp, mod+"internal/testkit/") && !testkitUser {
				t.Errorf("%s imports the test kit %s: production code never does", pkg, imp)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no engine import was checked: the package walk is wrong")
	}
}

// productionImports lists the imports of dir's non-test Go files.
func productionImports(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			out = append(out, strings.Trim(imp.Path.Value, `"`))
		}
	}
	return out
}
