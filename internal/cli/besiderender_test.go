package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// A node staging beside a serving lane says so on its progress line, and
// while the memory floor pauses it, why: on a terminal in the bar, off
// one in a line when the pause begins and one when it ends. A node's
// blocks add up to one bar: the lanes beside it once, its first reason.
func TestProgressShowsStagingBesideAServingLane(t *testing.T) {
	p := contract.StageProgress{BytesDone: 1 << 30, BytesTotal: 4 << 30, Beside: []string{"mia"}, Waiting: "paused: MemAvailable 5.1 GiB under min_available 8.0 GiB"}
	line := barLine("stage/next/dgx1", p, 0)
	if !strings.HasSuffix(line, " · beside mia · paused: MemAvailable 5.1 GiB under min_available 8.0 GiB") {
		t.Fatalf("bar line %q: want the serving lane and the reason", line)
	}
	if line := barLine("stage/next/dgx1", contract.StageProgress{BytesTotal: 1}, 0); strings.Contains(line, "beside") || strings.Contains(line, "paused") {
		t.Fatalf("bar line of a node serving nothing: %q", line)
	}

	var total contract.StageProgress
	addStage(&total, contract.StageProgress{Beside: []string{"mia"}})
	addStage(&total, contract.StageProgress{Beside: []string{"kimi", "mia"}, Waiting: p.Waiting})
	if strings.Join(total.Beside, ",") != "kimi,mia" || total.Waiting != p.Waiting {
		t.Fatalf("summed progress: beside %q waiting %q", total.Beside, total.Waiting)
	}

	var buf bytes.Buffer
	r := newRenderer(&buf, false, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	steps := contract.Progress{Steps: []contract.Step{{Name: "stage next/weights", Node: "dgx1", Status: contract.StepRunning}}}
	id := "stage/next/dgx1"
	sample := func(waiting string) map[string]progressSample {
		return map[string]progressSample{id: {StageProgress: contract.StageProgress{BytesDone: 1 << 30, BytesTotal: 4 << 30, Beside: []string{"mia"}, Waiting: waiting}}}
	}
	r.draw(steps, sample(""))
	r.draw(steps, sample(p.Waiting))
	r.draw(steps, sample(p.Waiting))
	now = now.Add(6 * time.Second)
	r.draw(steps, sample(p.Waiting))
	r.draw(steps, sample(""))
	out := buf.String()
	if strings.Count(out, "dgx1 paused: MemAvailable 5.1 GiB under min_available 8.0 GiB · beside mia\n") != 1 || strings.Count(out, "dgx1 resumed\n") != 1 {
		t.Fatalf("plain output: want one line when the pause begins and one when it ends:\n%s", out)
	}
	if !strings.Contains(out, "still running: stage next/weights [dgx1], dgx1 1.0 GiB/4.0 GiB, beside mia, paused: MemAvailable") {
		t.Fatalf("plain output: the still-running line does not say the node is paused beside mia:\n%s", out)
	}
}
