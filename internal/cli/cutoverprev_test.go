package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
)

// A cutover that failed before it stopped the previous lane (stage ahead:
// the image step) says that lane still serves; one that stopped it says so.
func TestCutoverSummarySaysWhetherThePreviousLaneStopped(t *testing.T) {
	failed := &contract.CutoverResult{Lane: "b", Cluster: "c", FailedStep: "image", Error: "no image", Previous: []string{"a"},
		Steps: []contract.Step{{Name: "resolve previous a", Status: "ok"}, {Name: "image", Status: "failed"}}}
	var out bytes.Buffer
	printCutover(&App{Out: &out}, failed)
	if s := out.String(); strings.Contains(s, "stopped: a") || !strings.Contains(s, "never stopped, still serving: a") {
		t.Errorf("failed before the stop:\n%s", s)
	}
	ok := &contract.CutoverResult{Lane: "b", Cluster: "c", OK: true, Previous: []string{"a"},
		Steps: []contract.Step{{Name: "stop a", Node: "n1", Status: "ok"}}}
	out.Reset()
	printCutover(&App{Out: &out}, ok)
	if s := out.String(); !strings.Contains(s, "previous lane(s) stopped: a") || strings.Contains(s, "still serving") {
		t.Errorf("stopped:\n%s", s)
	}
}
