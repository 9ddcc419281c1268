package workflows

import (
	"runtime"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
)

// The starter starts runs by the type names in internal/contract, without
// linking this package: each must be the name a registered workflow has.
func TestWorkflowTypeNamesMatchTheRegisteredFunctions(t *testing.T) {
	names := map[string]bool{}
	for _, wf := range replayed {
		n := runtime.FuncForPC(reflectPC(wf)).Name()
		names[n[strings.LastIndex(n, ".")+1:]] = true
	}
	for _, n := range []string{contract.WorkflowCutover, contract.WorkflowStage, contract.WorkflowStageNode, contract.WorkflowVerify,
		contract.WorkflowServe, contract.WorkflowStop, contract.WorkflowProbe, contract.WorkflowFleetProbe, contract.WorkflowBench,
		contract.WorkflowPower, contract.WorkflowDisk, contract.WorkflowKeeper, contract.WorkflowNodeLease, contract.WorkflowFetch} {
		if !names[n] {
			t.Errorf("contract names workflow type %q, which no registered workflow has", n)
		}
		delete(names, n)
	}
	for n := range names {
		t.Errorf("workflow %s has no contract.Workflow%s name", n, n)
	}
}
