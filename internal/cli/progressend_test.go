package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// An image step runs once per round under one name: off a terminal each
// of them prints a line when it starts and one when it ends, however
// many polls see them — "missing everywhere: pulling" once, not at every
// poll as two steps of one name reprinted each other.
func TestPlainProgressOneLinePerEventWithRepeatedStepNames(t *testing.T) {
	var buf bytes.Buffer
	r := newRenderer(&buf, false, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	img := "image reg.lan:5000/sim:1"
	steps := []contract.Step{
		{Name: img, Status: contract.StepDone, Detail: "missing everywhere: pulling from reg.lan:5000 on n1"},
		{Name: "image pull " + img, Node: "n1", Status: contract.StepRunning},
	}
	for i := 0; i < 5; i++ {
		r.draw(contract.Progress{Steps: steps}, nil)
		now = now.Add(drawEvery)
	}
	steps[1].Status = contract.StepDone
	steps = append(steps, contract.Step{Name: img, Status: contract.StepRunning})
	for i := 0; i < 5; i++ {
		r.draw(contract.Progress{Steps: steps}, nil)
		now = now.Add(drawEvery)
	}
	steps[2].Status, steps[2].Detail = contract.StepDone, "n1: present 0123456789ab; n2: received 3 layers (1048576 bytes)"
	for i := 0; i < 5; i++ {
		r.draw(contract.Progress{Steps: steps}, nil)
		now = now.Add(drawEvery)
	}
	out := buf.String()
	if n := strings.Count(out, "missing everywhere: pulling"); n != 1 {
		t.Errorf("the pull was announced %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "\n"); n != 5 {
		t.Errorf("%d lines for 3 steps (one running and done, two seen running then done, one seen done), want 5:\n%s", n, out)
	}
	if strings.Count(out, "… "+img) != 1 || strings.Count(out, "✓ "+img) != 2 {
		t.Errorf("each image round once when it starts (the second) and once when it ends:\n%s", out)
	}
}

// Off a terminal a bar never stays at the last tenth printed: its end is
// one line — "done" with its bytes when its activity finished (another
// began, or its run completed), "stopped at" where it stopped when its
// run failed.
func TestPlainProgressClosesEveryBar(t *testing.T) {
	var buf bytes.Buffer
	r := newRenderer(&buf, false, false)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	p := contract.Progress{Steps: []contract.Step{{Name: "stage", Status: contract.StepRunning}}}
	half := func(acts string) progressSample {
		return progressSample{StageProgress: contract.StageProgress{BytesDone: 512 << 20, BytesTotal: 1 << 30}, Acts: acts}
	}
	r.draw(p, map[string]progressSample{"stage/l/n1": half("5"), "stage/l/n2": half("5"), "stage/l/n3": half("5")})
	// n1's block ended and its next began; n2's child completed; n3's
	// stays under way until the run fails.
	next := progressSample{StageProgress: contract.StageProgress{BytesDone: 0, BytesTotal: 2 << 30}, Acts: "9"}
	r.draw(p, map[string]progressSample{"stage/l/n1": next, "stage/l/n2": {Ended: "Completed"}, "stage/l/n3": half("5")})
	r.draw(p, map[string]progressSample{"stage/l/n1": {Idle: true}, "stage/l/n3": half("5")})
	r.finish(p, true)
	out := buf.String()
	for _, want := range []string{
		"  n1         done: 1.0 GiB\n", "  n1         done: 2.0 GiB\n",
		"  n2         done: 1.0 GiB\n",
		"  n3         stopped at 512.0 MiB/1.0 GiB (failed)\n",
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("want %q once:\n%s", want, out)
		}
	}
	if strings.Count(out, "\n") != 9 {
		t.Errorf("want 1 step, 4 bars and 4 closing lines:\n%s", out)
	}
	buf.Reset()
	r.finish(p, false)
	if buf.Len() != 0 {
		t.Errorf("closed bars closed again: %q", buf.String())
	}
}

// On a terminal every frame clears what the last left below it, and the
// run's end leaves its steps and no bar.
func TestLiveProgressClearsEndedBars(t *testing.T) {
	var buf bytes.Buffer
	r := newRenderer(&buf, true, false)
	p := contract.Progress{Steps: []contract.Step{{Name: "stage", Status: contract.StepRunning}}}
	r.draw(p, map[string]progressSample{
		"stage/l/n1": {StageProgress: contract.StageProgress{BytesDone: 1, BytesTotal: 2}},
		"stage/l/n2": {StageProgress: contract.StageProgress{BytesDone: 0, BytesTotal: 2}},
	})
	if !strings.HasSuffix(buf.String(), "\033[J") || r.lines != 3 {
		t.Fatalf("frame of a step and two bars: %d lines %q", r.lines, buf.String())
	}
	buf.Reset()
	r.draw(p, map[string]progressSample{"stage/l/n1": {Ended: "Completed"}, "stage/l/n2": {Idle: true}})
	if got := buf.String(); !strings.HasPrefix(got, "\033[3A") || strings.Contains(got, "%") || !strings.HasSuffix(got, "\033[J") || r.lines != 1 {
		t.Fatalf("frame after the bars ended: %d lines %q", r.lines, got)
	}
	buf.Reset()
	p.Steps[0].Status = contract.StepDone
	r.finish(p, false)
	if got := buf.String(); !strings.Contains(got, "✓ stage") || !strings.HasSuffix(got, "\033[J") || r.lines != 1 {
		t.Fatalf("last frame: %q", got)
	}
}

// A cutover's and a stage's summary say how many image bytes moved node
// to node, hop by hop, and where the image came from.
func TestSummaryShowsImageBytesNodeToNode(t *testing.T) {
	ref, err := contract.ParseImageRef("reg.lan:5000/sim:1")
	if err != nil {
		t.Fatal(err)
	}
	images := []contract.ImageNodeResult{
		{Node: "n1", Image: ref, State: "present 0123456789ab"},
		{Node: "n2", Image: ref, State: "received 3 layers (1073741824 bytes)", From: "n1", BytesIn: 1 << 30, Layers: 3},
		{Node: "n3", Image: ref, State: "received 3 layers (1073741824 bytes)", From: "n2", BytesIn: 1 << 30, Layers: 3},
	}
	res := &contract.CutoverResult{Lane: "sim-demo", Cluster: "all", OK: true, Images: images,
		Pulled: &contract.PullImageResult{Node: "n1", ImagePulled: contract.ImagePulled{From: "reg.lan:5000"}}}
	var buf bytes.Buffer
	printCutover(&App{Out: &buf, stepsShown: true}, res)
	want := "  image reg.lan:5000/sim:1: pulled from reg.lan:5000 on n1; 2.0 GiB moved node to node (n1 → n2 1.0 GiB, 3 layers; n2 → n3 1.0 GiB, 3 layers); present on n1\n"
	if !strings.Contains(buf.String(), want) {
		t.Errorf("cutover summary, want %q:\n%s", want, buf.String())
	}
	buf.Reset()
	a := &App{Out: &buf}
	if err := a.printStage(contract.StageResult{Lane: "sim-demo", Images: images[:1]}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "image reg.lan:5000/sim:1: 0 B moved node to node; present on n1\n") {
		t.Errorf("stage summary of an image every node had:\n%s", buf.String())
	}
}

// On a terminal no line of a frame is wider than the terminal: a wrapped
// line would make the next redraw move up fewer rows than were printed,
// leaving a copy of the frame on the screen at every poll.
func TestLiveProgressLinesFitTheTerminal(t *testing.T) {
	var buf bytes.Buffer
	r := newRenderer(&buf, true, false)
	r.width = 40
	p := contract.Progress{Steps: []contract.Step{{Name: "image reg.lan:5000/engine/sim:1", Status: contract.StepDone,
		Detail: "missing everywhere: pulling from reg.lan:5000 on spark1 and moving it along the chain"}}}
	for i := 0; i < 3; i++ {
		r.draw(p, nil)
	}
	escapes := regexp.MustCompile("\033\\[[0-9]*[A-Za-z]")
	for _, l := range strings.Split(escapes.ReplaceAllString(buf.String(), ""), "\n") {
		if n := len([]rune(l)); n > 39 {
			t.Errorf("a line of %d runes on a 40-column terminal: %q", n, l)
		}
	}
	if strings.Count(buf.String(), "✓ image reg.lan:5000/engine/sim:1") != 3 || strings.Count(buf.String(), "…\n") != 3 {
		t.Errorf("three frames of one clipped line:\n%q", buf.String())
	}
}
