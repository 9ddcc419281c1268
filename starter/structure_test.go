package main

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFunctionLines is the longest a function may be, tests included: a
// longer one is a sequence of steps that wants names.
const maxFunctionLines = 120

// No function of the repository is longer than maxFunctionLines. With -v
// the test also prints the structure table the closing notes quote: the
// ten longest functions and the non-test lines of the largest packages
// (go test -v -run TestFunctionsAreShort ./starter/).
func TestFunctionsAreShort(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	type fn struct {
		where string
		lines int
	}
	var fns []fn
	pkgLines := map[string]int{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(repo, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != repo {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(repo, path)
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				fns = append(fns, fn{fmt.Sprintf("%s:%d %s", rel, fset.Position(fd.Pos()).Line, fd.Name.Name), n})
			}
		}
		if !strings.HasSuffix(path, "_test.go") {
			pkgLines[filepath.Dir(rel)] += countLines(t, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].lines > fns[j].lines })
	for _, f := range fns {
		if f.lines > maxFunctionLines {
			t.Errorf("%s is %d lines (at most %d): split it into named steps", f.where, f.lines, maxFunctionLines)
		}
	}
	for i := 0; i < 10 && i < len(fns); i++ {
		t.Logf("longest function %2d: %4d lines  %s", i+1, fns[i].lines, fns[i].where)
	}
	pkgs := make([]string, 0, len(pkgLines))
	total := 0
	for p, n := range pkgLines {
		pkgs = append(pkgs, p)
		total += n
	}
	sort.Slice(pkgs, func(i, j int) bool {
		return pkgLines[pkgs[i]] > pkgLines[pkgs[j]] || pkgLines[pkgs[i]] == pkgLines[pkgs[j]] && pkgs[i] < pkgs[j]
	})
	t.Logf("non-test Go: %d lines in %d packages", total, len(pkgs))
	for i := 0; i < 12 && i < len(pkgs); i++ {
		t.Logf("package %-40s %6d non-test lines", pkgs[i], pkgLines[pkgs[i]])
	}
	if n := pkgLines["internal/config"]; n > maxConfigLines {
		t.Errorf("internal/config is %d non-test lines (at most %d): it reads and validates the files; planning belongs in internal/lane, engines in their own packages", n, maxConfigLines)
	}
}

// maxConfigLines bounds the file-format package, so it stays the file
// format and does not grow back into the planner. (2500 until the
// [gateway], [[gateways]] and [staging] tables came: those are file format.)
const maxConfigLines = 2800

func countLines(t *testing.T, path string) int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		n++
	}
	if err := s.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}
