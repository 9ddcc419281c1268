package itest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
)

// `cutover --no-wait` with the embedded default and no control service
// running: the starter (a process of its own) starts the control service
// in the background, starts the run there, prints its ID and exits. The run
// is not the starter's: it goes on to the end after the starter is gone, in
// the service the starter left running, and a second starter attaches to
// it and prints its result.
func TestCutoverNoWaitRunOutlivesItsStarter(t *testing.T) {
	p := newProcFleet(t, 1<<40) // the pause point is never reached
	ctx := withTimeout(t, 8*time.Minute)
	if o, ok := control.Find(p.state); ok {
		t.Fatalf("a control service (pid %d) runs before the starter started one", o.PID)
	}
	code, out := p.run(ctx, "--json", "cutover", "--lane", "crash-2x", "--no-wait")
	var started struct {
		WorkflowID string `json:"workflow_id"`
		RunID      string `json:"run_id"`
	}
	if i := strings.Index(out, "{"); code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &started) != nil || started.WorkflowID != contract.CutoverID("crash-2x") {
		t.Fatalf("cutover --no-wait: exit %d\n%s", code, out)
	}
	// The starter has exited; the service it started in the background
	// holds the run.
	o, ok := control.Find(p.state)
	if !ok || o.PID == os.Getpid() {
		t.Fatalf("no background control service after the --no-wait starter exited (%+v, %v)", o, ok)
	}
	code, out = p.run(ctx, "--json", "attach", "--lane", "crash-2x")
	var res contract.CutoverResult
	i := strings.Index(out, "{")
	if code != 0 || i < 0 || json.Unmarshal([]byte(out[i:]), &res) != nil {
		t.Fatalf("attach after the --no-wait starter exited: exit %d\n%s", code, out)
	}
	if !res.OK || res.Serve == nil || !res.Serve.Answers {
		t.Fatalf("the run the --no-wait starter left did not complete: %+v", res)
	}
	c := p.client(ctx)
	d, err := c.DescribeWorkflowExecution(ctx, started.WorkflowID, started.RunID)
	if err != nil || d.GetWorkflowExecutionInfo().GetStatus().String() != "Completed" {
		t.Fatalf("run %s/%s: %v, status %v", started.WorkflowID, started.RunID, err, d.GetWorkflowExecutionInfo().GetStatus())
	}
	t.Logf("cutover --no-wait returned; run %s completed in the background service (pid %d); attach printed it", started.RunID, o.PID)
}
