package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/staging"
	"github.com/sparklane/sparklane/workflows"
)

// renderer draws a workflow's progress: live bars on a terminal (redrawn in
// place), one line per step change otherwise, nothing in JSON mode.
type renderer struct {
	w      io.Writer
	live   bool
	quiet  bool
	lines  int
	seen   map[string]string
	rates  map[string]rateSample
	spin   int
	header string
}

type rateSample struct {
	at    time.Time
	bytes int64
	rate  float64
}

func newRenderer(w io.Writer, live, quiet bool) *renderer {
	return &renderer{w: w, live: live, quiet: quiet, seen: map[string]string{}, rates: map[string]rateSample{}}
}

func stepKey(s workflows.Step) string { return s.Name + "@" + s.Node }

func (r *renderer) draw(p workflows.Progress, bars map[string]staging.Progress) {
	if r.quiet {
		return
	}
	if !r.live {
		for _, s := range p.Steps {
			k := stepKey(s)
			if r.seen[k] == s.Status {
				continue
			}
			r.seen[k] = s.Status
			fmt.Fprintln(r.w, stepLine(s))
		}
		for _, w := range p.Waiting {
			// One line when the wait starts (plain output has no redraw).
			k := "wait@" + w.Node + "@" + w.Since.String()
			if r.seen[k] == "" {
				r.seen[k] = "y"
				fmt.Fprintln(r.w, waitLine(w, time.Now()))
			}
		}
		for id, pr := range bars {
			k := "bar@" + id
			line := barLine(id, pr, r.rate(id, pr))
			// Print byte progress at most every 10%.
			bucket := ""
			if pr.BytesTotal > 0 {
				bucket = fmt.Sprint(pr.BytesDone * 10 / pr.BytesTotal)
			}
			if r.seen[k] != bucket {
				r.seen[k] = bucket
				fmt.Fprintln(r.w, line)
			}
		}
		return
	}
	var out []string
	for _, s := range p.Steps {
		out = append(out, stepLine(s))
	}
	for _, id := range sortedMapKeys(bars) {
		out = append(out, barLine(id, bars[id], r.rate(id, bars[id])))
	}
	for _, w := range p.Waiting {
		out = append(out, waitLine(w, time.Now()))
	}
	if r.lines > 0 {
		fmt.Fprintf(r.w, "\033[%dA", r.lines)
	}
	for _, l := range out {
		fmt.Fprintf(r.w, "\033[2K%s\n", l)
	}
	r.lines = len(out)
}

// rate is a smoothed bytes/s per progress source.
func (r *renderer) rate(id string, p staging.Progress) float64 {
	now := time.Now()
	prev, ok := r.rates[id]
	if !ok {
		r.rates[id] = rateSample{at: now, bytes: p.BytesDone}
		return 0
	}
	dt := now.Sub(prev.at).Seconds()
	if dt < 0.3 {
		return prev.rate
	}
	inst := float64(p.BytesDone-prev.bytes) / dt
	rate := inst
	if prev.rate > 0 {
		rate = 0.7*prev.rate + 0.3*inst
	}
	r.rates[id] = rateSample{at: now, bytes: p.BytesDone, rate: rate}
	return rate
}

// waitLine is a node the run waits for, with how long it has been gone.
func waitLine(w workflows.NodeWait, now time.Time) string {
	return fmt.Sprintf("⏸ waiting for node %s (down %s)", w.Node, now.Sub(w.Since).Round(time.Second))
}

func stepLine(s workflows.Step) string {
	mark := map[string]string{
		workflows.StepRunning: "…", workflows.StepDone: "✓", workflows.StepFailed: "✗",
		workflows.StepSkipped: "-", workflows.StepPending: " ", workflows.StepWaiting: "⏸",
	}[s.Status]
	name := s.Name
	if s.Node != "" {
		name += " [" + s.Node + "]"
	}
	line := fmt.Sprintf("%s %-34s", mark, name)
	if s.Status == workflows.StepDone || s.Status == workflows.StepFailed {
		line += fmt.Sprintf(" %7.1fs", s.Seconds())
	}
	if s.Detail != "" {
		line += "  " + s.Detail
	}
	if s.Error != "" {
		line += "  error: " + s.Error
	}
	return line
}

func barLine(id string, p staging.Progress, rate float64) string {
	const width = 30
	frac := 0.0
	if p.BytesTotal > 0 {
		frac = float64(p.BytesDone) / float64(p.BytesTotal)
	}
	if frac > 1 {
		frac = 1
	}
	filled := int(frac * width)
	bar := strings.Repeat("#", filled) + strings.Repeat(".", width-filled)
	eta := "--"
	if rate > 0 && p.BytesTotal > p.BytesDone {
		eta = (time.Duration(float64(p.BytesTotal-p.BytesDone)/rate) * time.Second).Round(time.Second).String()
	}
	name := id
	if i := strings.LastIndex(id, "/"); i >= 0 {
		name = id[i+1:]
	}
	return fmt.Sprintf("  %-10s [%s] %3.0f%% %s/%s %s/s ETA %s", name, bar, frac*100,
		staging.HumanBytes(p.BytesDone), staging.HumanBytes(p.BytesTotal), staging.HumanBytes(int64(rate)), eta)
}
