package main

import (
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
