package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// temporalFree are the packages that know nothing of Temporal besides the
// engines (every package under internal/engine/): the file format, the
// resolver, the wire contract and the small shared pieces. Each one's
// doc.go says so; this holds them to it.
var temporalFree = []string{
	"internal/fault", "internal/node", "internal/sim", "internal/simimage", "internal/config", "internal/lane",
	"internal/contract", "internal/strictdecode", "internal/ranklogs", "internal/tardir", "internal/atomicfile",
	"internal/buildinfo", "internal/pki", "internal/syncbuf", "internal/hubcache", "internal/gateway",
}

// cliMayImport are the engines the CLI may import: reading and plotting
// report bundles is client-side work. Everything else an engine knows
// reaches the CLI through internal/lane or a small client-side package.
var cliMayImport = []string{"internal/engine/report"}

// The import boundaries the package docs state: engines and the other
// Temporal-free packages import no Temporal, activities, workflows, CLI or
// worker code; the wire contract imports no sparklane package (so no
// engine); the CLI, a client only, imports neither activities nor
// workflows nor the workers nor an engine (but cliMayImport); the
// resolver does not import the serve engine; production code never
// imports a test kit.
func TestImportBoundaries(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/sparklane/sparklane/"
	forbiddenForEngines := []string{"go.temporal.io/", mod + "activities", mod + "workflows", mod + "internal/cli", mod + "internal/workers"}
	forbiddenForCLI := []string{mod + "activities", mod + "workflows", mod + "internal/workers", mod + "internal/engine/"}
	checked, cli := 0, 0
	for _, pkg := range goPackageDirs(t, repo) {
		imports := productionImports(t, filepath.Join(repo, pkg))
		isEngine := strings.HasPrefix(pkg, "internal/engine/") && !strings.Contains(pkg, "/cmd/")
		for _, e := range temporalFree {
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
			if pkg == "internal/cli" {
				cli++
				for _, f := range forbiddenForCLI {
					if strings.HasPrefix(imp, f) && !slices.Contains(cliMayImport, strings.TrimPrefix(imp, mod)) {
						t.Errorf("internal/cli imports %s: the CLI is a client; it reaches engines through internal/lane or a client-side package, and runs by their names in internal/contract", imp)
					}
				}
			}
			if (pkg == "internal/contract" || pkg == "internal/strictdecode") && strings.HasPrefix(imp, mod) {
				t.Errorf("%s imports %s: it stands alone (the wire contract; the generic decoder)", pkg, imp)
			}
			if pkg == "internal/lane" && imp == mod+"internal/engine/serve" {
				t.Errorf("internal/lane imports %s: the resolver does not link the serve engine (and the Docker SDK with it)", imp)
			}
			testkitUser := strings.HasPrefix(pkg, "internal/testkit/") || pkg == "internal/engine/relay/cmd/relay-bench" ||
				pkg == "internal/engine/hubfetch/cmd/hubfetch-bench" || pkg == "scripts/gwbench"
			if strings.HasPrefix(imp, mod+"internal/testkit/") && !testkitUser {
				t.Errorf("%s imports the test kit %s: production code never does", pkg, imp)
			}
		}
	}
	if checked == 0 || cli == 0 {
		t.Fatal("no engine or CLI import was checked: the package walk is wrong")
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

// Every package says in its doc.go what it owns (and, by the project's
// rule, what it must not import): a newcomer reads the tree through them.
func TestEveryPackageHasADocFile(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, pkg := range goPackageDirs(t, repo) {
		f, err := parser.ParseFile(fset, filepath.Join(repo, pkg, "doc.go"), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Errorf("%s has no readable doc.go: %v", pkg, err)
			continue
		}
		if f.Doc == nil || len(strings.TrimSpace(f.Doc.Text())) < 40 {
			t.Errorf("%s/doc.go has no package comment saying what the package owns", pkg)
		}
	}
}
