package hubfetch

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsStayInBounds holds the package to its doc comment: no
// Temporal, no CLI libraries, and of sparklane only internal/fault and
// the leaves internal/contract and internal/hubcache.
func TestImportsStayInBounds(t *testing.T) {
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), n, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			sparklane := strings.HasPrefix(p, "github.com/sparklane/sparklane/")
			if strings.HasPrefix(p, "go.temporal.io/") || strings.HasPrefix(p, "github.com/spf13/") || sparklane && p != "github.com/sparklane/sparklane/internal/fault" && p != "github.com/sparklane/sparklane/internal/contract" && p != "github.com/sparklane/sparklane/internal/hubcache" {
				t.Errorf("%s imports %s", n, p)
			}
		}
	}
}
