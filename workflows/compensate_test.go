package workflows

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// Undos run last registered first, on a context a cancelled run does not
// cancel, each whatever the others returned; errors come back joined.
func TestCompensationsRunLastFirstDisconnected(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	var ran []string
	undoAll := func(ctx workflow.Context) (string, error) {
		var undo compensations
		for _, name := range []string{"first", "second", "third"} {
			undo.add(func(ctx workflow.Context) error {
				if err := workflow.Sleep(ctx, time.Second); err != nil {
					ran = append(ran, name+" (cancelled)")
					return err
				}
				ran = append(ran, name)
				if name != "first" {
					return failedAt("undo "+name, errors.New("boom"))
				}
				return nil
			})
		}
		cctx, cancel := workflow.WithCancel(ctx)
		cancel()
		return joinedMessage(undo.run(cctx)), nil
	}
	env.RegisterWorkflowWithOptions(undoAll, workflow.RegisterOptions{Name: "undoAll"})
	env.ExecuteWorkflow("undoAll")
	var msg string
	if err := env.GetWorkflowResult(&msg); err != nil {
		t.Fatal(err)
	}
	if want := []string{"third", "second", "first"}; !reflect.DeepEqual(ran, want) {
		t.Errorf("undos ran %v, want %v", ran, want)
	}
	if want := "undo third: boom; undo second: boom"; msg != want {
		t.Errorf("joined errors %q, want %q", msg, want)
	}
	if err := compensations(nil).run(nil); err != nil {
		t.Errorf("no undos: %v", err)
	}
}
