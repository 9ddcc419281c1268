package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// alreadyRunning answers a start refused because s.ID runs (run runID).
// With s.FollowSame, a run whose recorded input (its history's first
// event) is s.Input is followed, saying so in one line: repeating a
// command is what people do after a crash. Otherwise, or with another
// input, it refuses (exit 3), saying how the inputs differ.
func (a *App) alreadyRunning(ctx context.Context, c client.Client, s runSpec, runID string) (client.WorkflowRun, error) {
	how := fmt.Sprintf("follow it with 'starter attach %s', or cancel it with 'starter cancel %s'", s.ID, s.ID)
	if !s.FollowSame {
		return nil, exitCode(3, fmt.Errorf("%s is already running (run %s): %s", s.ID, runID, how))
	}
	diff, err := runningInputDiff(ctx, c, s.ID, runID, s.Input)
	switch {
	case err != nil:
		return nil, exitCode(3, fmt.Errorf("%s is already running (run %s), and its input could not be read to compare (%v): %s", s.ID, runID, err, how))
	case diff != "":
		return nil, exitCode(3, fmt.Errorf("%s is already running (run %s) with another input (%s): %s", s.ID, runID, diff, how))
	}
	fmt.Fprintf(a.Out, "%s is already running with the same input (run %s): following it\n", s.ID, runID)
	return c.GetWorkflow(ctx, s.ID, runID), nil
}

// runningInputDiff compares the input run runID of id started with (its
// first history event) with in, as JSON: "" when they are the same, else
// a few words on how they differ.
func runningInputDiff(ctx context.Context, c client.Client, id, runID string, in any) (string, error) {
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return "", fmt.Errorf("its history is empty")
	}
	first, err := it.Next()
	if err != nil {
		return "", err
	}
	attrs := first.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return "", fmt.Errorf("its first event is %s, not its start", first.GetEventType())
	}
	ran := reflect.New(reflect.TypeOf(in))
	if err := converter.GetDefaultDataConverter().FromPayloads(attrs.GetInput(), ran.Interface()); err != nil {
		return "", fmt.Errorf("decode its input: %w", err)
	}
	return inputDiff(ran.Elem().Interface(), in)
}

// inputDiff says how two inputs differ as JSON: up to three paths with
// the running run's value and the new one ("" when equal).
func inputDiff(running, asked any) (string, error) {
	var was, now any
	for _, x := range []struct {
		v   any
		out *any
	}{{running, &was}, {asked, &now}} {
		b, err := json.Marshal(x.v)
		if err != nil {
			return "", err
		}
		if err := json.Unmarshal(b, x.out); err != nil {
			return "", err
		}
	}
	var diffs []string
	jsonDiff("", was, now, &diffs)
	if len(diffs) == 0 {
		return "", nil
	}
	sort.Strings(diffs)
	more := ""
	if len(diffs) > 3 {
		more = fmt.Sprintf(", and %d more", len(diffs)-3)
		diffs = diffs[:3]
	}
	return strings.Join(diffs, ", ") + more, nil
}

// jsonDiff appends "path: running → asked" for each leaf where a and b
// differ.
func jsonDiff(path string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		for k := range keys {
			jsonDiff(joinPath(path, k), am[k], bm[k], out)
		}
		return
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok && len(as) == len(bs) {
		for i := range as {
			jsonDiff(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i], out)
		}
		return
	}
	if reflect.DeepEqual(a, b) {
		return
	}
	*out = append(*out, fmt.Sprintf("%s: %s → %s", path, shortJSON(a), shortJSON(b)))
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// shortJSON is v as JSON, cut to 40 characters; absent is "none".
func shortJSON(v any) string {
	if v == nil {
		return "none"
	}
	b, _ := json.Marshal(v)
	if len(b) > 40 {
		return string(b[:37]) + "…"
	}
	return string(b)
}
