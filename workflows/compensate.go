package workflows

import (
	"errors"
	"strings"

	"go.temporal.io/sdk/workflow"
)

// compensations are the undos of a workflow's steps that changed the
// world (the saga pattern): a step adds its undo as it takes effect, and on
// a later failure run undoes them, the last added first.
type compensations []func(ctx workflow.Context) error

// add registers the undo of a step that took effect (or may have partly
// taken effect: a step that can fail halfway adds its undo before it runs).
func (c *compensations) add(undo func(ctx workflow.Context) error) {
	*c = append(*c, undo)
}

// run undoes every registered step, the last registered first, under a
// context disconnected from ctx's cancellation, so a cancelled run still
// cleans up. Every undo runs whatever the others returned; their errors are
// joined (nil when all succeeded).
func (c compensations) run(ctx workflow.Context) error {
	if len(c) == 0 {
		return nil
	}
	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	var errs []error
	for i := len(c) - 1; i >= 0; i-- {
		errs = append(errs, c[i](dctx))
	}
	return errors.Join(errs...)
}

// stepError is a failure with the step (or undo) it happened in, worded as
// "step: the engine's own words" (errMessage, not Temporal's wrapping).
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.step + ": " + errMessage(e.err) }
func (e *stepError) Unwrap() error { return e.err }

// failedAt names the step err happened in (nil stays nil).
func failedAt(step string, err error) error {
	if err == nil {
		return nil
	}
	return &stepError{step: step, err: err}
}

// joinedMessage is a (possibly errors.Join-ed) error as one line, its
// errors separated by "; " as run results have always reported them.
func joinedMessage(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var parts []string
		for _, e := range j.Unwrap() {
			if e != nil {
				parts = append(parts, joinedMessage(e))
			}
		}
		return strings.Join(parts, "; ")
	}
	return err.Error()
}
