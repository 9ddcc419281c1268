package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/staging"
	"github.com/sparklane/sparklane/workflows"
)

// Plain output (no terminal) prints a step once per state change and,
// while nothing changes, one "still running" line every plainEvery — never
// a frozen screen, never a line per poll.
func TestPlainProgressLinePerChangeAndEveryFewSeconds(t *testing.T) {
	var buf bytes.Buffer
	r := newRenderer(&buf, false, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	p := workflows.Progress{Steps: []workflows.Step{{Name: "stage demo-4x/weights", Node: "demo1", Status: workflows.StepRunning}}}
	bars := map[string]staging.Progress{"stage/demo-4x/demo1": {BytesDone: 1 << 20, BytesTotal: 100 << 20}}
	r.draw(p, bars)
	first := strings.Count(buf.String(), "\n")
	if first != 2 || !r.shownSteps {
		t.Fatalf("first draw: %q", buf.String())
	}
	// Polled every 400 ms for 4.8 s with no change: nothing more.
	for i := 0; i < 12; i++ {
		now = now.Add(400 * time.Millisecond)
		r.draw(p, bars)
	}
	if got := strings.Count(buf.String(), "\n"); got != first {
		t.Fatalf("lines printed without a change before %s:\n%s", plainEvery, buf.String())
	}
	now = now.Add(400 * time.Millisecond)
	r.draw(p, bars)
	out := buf.String()
	if !strings.Contains(out, "still running: stage demo-4x/weights [demo1], demo1 1.0 MiB/100.0 MiB") {
		t.Fatalf("no still-running line after %s:\n%s", plainEvery, out)
	}
	p.Steps[0].Status = workflows.StepDone
	r.draw(p, nil)
	if !strings.Contains(buf.String(), "✓ stage demo-4x/weights [demo1]") {
		t.Fatalf("done step not printed:\n%s", buf.String())
	}
}

// A cutover summary lists the steps only when the progress did not, and
// says what staging copied and what it only verified.
func TestCutoverSummaryStepsOnceAndStageLine(t *testing.T) {
	res := &workflows.CutoverResult{Lane: "demo-2x", Cluster: "demo-2x", OK: true,
		Steps: []workflows.Step{{Name: "stage", Status: workflows.StepDone}},
		Stage: []workflows.StageNodeResult{{Node: "demo1"}, {Node: "demo2"}}}
	for i := range res.Stage {
		res.Stage[i].Blocks = append(res.Stage[i].Blocks, activities.StageBlockResult{Block: "weights", Result: staging.Result{VerifiedFiles: 4}})
	}
	var buf bytes.Buffer
	a := &App{Out: &buf, stepsShown: true}
	printCutover(a, res)
	if strings.Contains(buf.String(), "steps:") {
		t.Errorf("steps listed again after the progress showed them:\n%s", buf.String())
	}
	if !strings.Contains(buf.String(), "staged: copied 0 B, verified 8 files on 2 node(s)") {
		t.Errorf("no stage line:\n%s", buf.String())
	}
	buf.Reset()
	a.stepsShown = false
	printCutover(a, res)
	if !strings.Contains(buf.String(), "steps:") {
		t.Errorf("steps not listed when no progress showed them:\n%s", buf.String())
	}
}
