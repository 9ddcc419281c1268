package lane

import (
	"os/exec"
	"strings"
	"testing"
)

// lane runs in the starter and in activities alike: nothing it imports,
// directly or not, may bring Temporal, cobra or the packages that call it.
// The wire types it returns import nothing of the project.
func TestImportsNoTemporalNoCobra(t *testing.T) {
	for pkg, forbidden := range map[string][]string{
		".":           {"go.temporal.io/", "github.com/spf13/cobra", "github.com/sparklane/sparklane/workflows", "github.com/sparklane/sparklane/activities", "github.com/sparklane/sparklane/internal/cli"},
		"../contract": {"github.com/sparklane/sparklane/"},
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) && !strings.HasSuffix(dep, "/internal/contract") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
