package gateway

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports: the gateway is its own process beside the workers; nothing
// it depends on may bring Temporal, activities, workflows or workers, and
// it imports no engine itself (doc.go).
func TestImports(t *testing.T) {
	deps, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(deps)) {
		for _, f := range []string{"go.temporal.io/", "github.com/sparklane/sparklane/activities", "github.com/sparklane/sparklane/workflows", "github.com/sparklane/sparklane/internal/workers"} {
			if strings.HasPrefix(dep, f) {
				t.Errorf("internal/gateway depends on %s", dep)
			}
		}
	}
	direct, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, imp := range strings.Fields(string(direct)) {
		if strings.HasPrefix(imp, "github.com/sparklane/sparklane/internal/engine") {
			t.Errorf("internal/gateway imports the engine %s", imp)
		}
	}
}
