package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// Plain output (no terminal) prints a step once per state change and,
// while nothing changes, one "still running" line every plainEvery — never
// a frozen screen, never a line per poll.
func TestPlainProgressLinePerChangeAndEveryFewSeconds(t *testing.T) {
	var buf bytes.Buffer
	r := newRenderer(&buf, false, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	p := contract.Progress{Steps: []contract.Step{{Name: "stage demo-4x/weights", Node: "demo1", Status: contract.StepRunning}}}
	bars := map[string]progressSample{"stage/demo-4x/demo1": {StageProgress: contract.StageProgress{BytesDone: 1 << 20, BytesTotal: 100 << 20}}}
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
	p.Steps[0].Status = contract.StepDone
	r.draw(p, nil)
	if !strings.Contains(buf.String(), "✓ stage demo-4x/weights [demo1]") {
		t.Fatalf("done step not printed:\n%s", buf.String())
	}
}

// The rate is bytes over the time between the node's reports (their
// heartbeat times), not between polls: 2.25 GiB reported 45 s after 0 B
// is 51.2 MiB/s, however soon after the report a poll sees it — and off a
// terminal the progress shows it, with the bytes, every few seconds.
func TestPlainProgressRateIsBytesOverReportInterval(t *testing.T) {
	var buf bytes.Buffer
	r := newRenderer(&buf, false, false)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	r.now = func() time.Time { return now }
	p := contract.Progress{Steps: []contract.Step{{Name: "stage mia/weights", Node: "dgx1", Status: contract.StepRunning}}}
	id := "stage/mia/dgx1"
	total := int64(3 << 30)
	sample := progressSample{StageProgress: contract.StageProgress{BytesTotal: total}, At: t0}
	// Polled every 400 ms for 45 s, the node's last report still the 0 B
	// one; then a report with 2.25 GiB, 45 s after the first.
	for now.Sub(t0) < 45*time.Second {
		r.draw(p, map[string]progressSample{id: sample})
		now = now.Add(400 * time.Millisecond)
	}
	sample = progressSample{StageProgress: contract.StageProgress{BytesDone: total * 3 / 4, BytesTotal: total}, At: t0.Add(45 * time.Second)}
	r.draw(p, map[string]progressSample{id: sample})
	out := buf.String()
	if !strings.Contains(out, "2.2 GiB/3.0 GiB 51.2 MiB/s") {
		t.Fatalf("after 2.25 GiB in 45 s, want 51.2 MiB/s:\n%s", out)
	}
	if strings.Contains(out, "GiB/s") {
		t.Errorf("a rate in GiB/s (bytes over the poll interval):\n%s", out)
	}
	// Off a terminal, the bytes and the rate show at least every few
	// seconds while nothing else changes.
	stills := strings.Count(out, "still running:")
	if stills < 45/int(plainEvery.Seconds())-1 || !strings.Contains(out, "still running: stage mia/weights [dgx1], dgx1 0 B/3.0 GiB") {
		t.Errorf("%d still-running lines in 45 s:\n%s", stills, out)
	}
	buf.Reset()
	now = now.Add(plainEvery)
	r.draw(p, map[string]progressSample{id: sample})
	if !strings.Contains(buf.String(), "dgx1 2.2 GiB/3.0 GiB at 51.2 MiB/s") {
		t.Errorf("still-running line without the rate:\n%s", buf.String())
	}
}

// A cutover summary lists the steps only when the progress did not, and
// says what staging copied and what it only verified.
func TestCutoverSummaryStepsOnceAndStageLine(t *testing.T) {
	res := &contract.CutoverResult{Lane: "demo-2x", Cluster: "demo-2x", OK: true,
		Steps: []contract.Step{{Name: "stage", Status: contract.StepDone}},
		Stage: []contract.StageNodeResult{{Node: "demo1"}, {Node: "demo2"}}}
	for i := range res.Stage {
		res.Stage[i].Blocks = append(res.Stage[i].Blocks, contract.StageBlockResult{Block: "weights", Result: contract.BlockResult{VerifiedFiles: 4}})
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
