package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
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
	// shownSteps is set once a step line reached the output: the final
	// summary then need not list the steps again.
	shownSteps bool
	// now is the clock (tests set it); lastLine is when plain output last
	// printed, for the every-few-seconds "still running" line.
	now      func() time.Time
	lastLine time.Time
	// open are the progress sources plain output printed a bar for and
	// has not closed yet, with their last sample: a bar that ends is
	// closed with one line (done, or where it stopped), never left at
	// the last tenth printed.
	open map[string]openBar
	// width is the terminal's columns (0: unknown): a live line longer
	// than it would wrap, the redraw would move up fewer rows than it
	// printed, and every frame would leave copies of its lines behind.
	width int
}

// openBar is a bar plain output printed and has not closed: its last
// sample, and the activities it sums (another set is another bar).
type openBar struct {
	contract.StageProgress
	acts string
}

// plainEvery is how often plain (non-terminal) output says what is still
// running when nothing else changed: a log or CI page must not look frozen.
const plainEvery = 5 * time.Second

// rateSample is the last byte count of a progress source and when it was
// measured, with the rate computed so far.
type rateSample struct {
	at    time.Time
	bytes int64
	rate  float64
}

// progressSample is one progress source as a poll found it: its staging
// progress (summed over its pending staging activities) and when the
// node last reported it (the activities' latest heartbeat; zero when
// unknown). The node reports every few seconds while a poll runs every
// 400 ms: a rate is bytes over the time between reports, never between
// polls, or a poll that sees a whole report's bytes land 400 ms after the
// last one shows 100× the real rate.
type progressSample struct {
	contract.StageProgress
	At time.Time
	// Retry is why the source is retrying (a fetch's request, or its
	// activity's last failed attempt): shown with its progress, so minutes
	// of retries never read as just "still running".
	Retry string
	// Idle: the source was described and has no byte progress pending
	// (between two blocks, or its activity finished); Ended is the
	// status of a source that closed (Completed, Failed…). Neither is
	// drawn as a bar: an open bar of theirs is closed.
	Idle  bool
	Ended string
	// Acts names the pending activities the sample sums (their IDs):
	// when they change, the bar's activity finished and another began.
	Acts string
}

// retryShown is how much of a retry's reason a progress line shows.
const retryShown = 240

// clip cuts s to n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func newRenderer(w io.Writer, live, quiet bool) *renderer {
	return &renderer{w: w, live: live, quiet: quiet, seen: map[string]string{}, rates: map[string]rateSample{}, now: time.Now,
		open: map[string]openBar{}}
}

// stepKey keys step i of a run's progress: its place, as steps are only
// ever appended. A step's name is not a key: an image step runs once per
// round under one name, and two steps of one name would each reprint the
// other at every poll.
func stepKey(i int) string { return fmt.Sprintf("step#%d", i) }

// drawing is whether a progress source is drawn as a bar (it has byte
// progress pending, or is retrying).
func (p progressSample) drawing() bool { return !p.Idle && p.Ended == "" }

func (r *renderer) draw(p contract.Progress, bars map[string]progressSample) {
	if r.quiet {
		return
	}
	if !r.live {
		r.drawPlain(p, bars)
		return
	}
	var out []string
	for _, s := range p.Steps {
		out = append(out, stepLine(s))
		r.shownSteps = true
	}
	for _, id := range sortedMapKeys(bars) {
		if !bars[id].drawing() {
			continue
		}
		out = append(out, barLine(id, bars[id].StageProgress, r.rate(id, bars[id])))
		if why := bars[id].Retry; why != "" {
			out = append(out, "    retrying: "+clip(why, 100))
		}
	}
	for _, w := range p.Waiting {
		out = append(out, waitLine(w, r.now()))
	}
	r.redraw(out)
}

// redraw replaces the live frame with lines: up over the last frame,
// each line cleared and written, then everything below cleared — a frame
// shorter than the last (a bar that ended) leaves nothing of it behind.
func (r *renderer) redraw(lines []string) {
	if r.lines > 0 {
		fmt.Fprintf(r.w, "\033[%dA", r.lines)
	}
	for _, l := range lines {
		if r.width > 1 {
			l = clip(l, r.width-1)
		}
		fmt.Fprintf(r.w, "\033[2K%s\n", l)
	}
	fmt.Fprint(r.w, "\033[J")
	r.lines = len(lines)
}

// finish ends the progress once the run ended (failed: it did not
// succeed): on a terminal the last frame keeps the steps and drops the
// bars; off one each bar still open is closed with one line.
func (r *renderer) finish(p contract.Progress, failed bool) {
	if r.quiet {
		return
	}
	if r.live {
		if r.lines == 0 || len(p.Steps) == 0 {
			return // nothing drawn, or the last query failed: the frame stays
		}
		var out []string
		for _, s := range p.Steps {
			out = append(out, stepLine(s))
		}
		r.redraw(out)
		return
	}
	status := "Completed"
	if failed {
		status = "Failed"
	}
	for _, id := range sortedMapKeys(r.open) {
		r.closeBar(id, status)
	}
}

// closeBar prints the one line that ends source id's bar (plain output):
// all its bytes when it ended well (a finished activity wrote its total),
// else where it stopped and why.
func (r *renderer) closeBar(id, status string) {
	last, ok := r.open[id]
	if !ok {
		return
	}
	delete(r.open, id)
	delete(r.seen, "bar@"+id)
	if status == "" || status == "Completed" || status == "Running" {
		fmt.Fprintf(r.w, "  %-10s done: %s\n", shortID(id), contract.HumanBytes(last.BytesTotal))
		return
	}
	fmt.Fprintf(r.w, "  %-10s stopped at %s/%s (%s)\n", shortID(id), contract.HumanBytes(last.BytesDone), contract.HumanBytes(last.BytesTotal), strings.ToLower(status))
}

// drawPlain is draw off a terminal: a line per change (a step, a wait, a
// tenth of the bytes, a new reason for retrying) and, while nothing
// changes, one "still running" line every plainEvery.
func (r *renderer) drawPlain(p contract.Progress, bars map[string]progressSample) {
	now := r.now()
	if r.lastLine.IsZero() {
		r.lastLine = now
	}
	printed := false
	for i, s := range p.Steps {
		k := stepKey(i)
		if r.seen[k] == s.Status {
			continue
		}
		r.seen[k] = s.Status
		fmt.Fprintln(r.w, stepLine(s))
		r.shownSteps, printed = true, true
	}
	for _, w := range p.Waiting {
		// One line when the wait starts (plain output has no redraw).
		k := "wait@" + w.Node + "@" + w.Since.String()
		if r.seen[k] == "" {
			r.seen[k] = "y"
			fmt.Fprintln(r.w, waitLine(w, r.now()))
		}
	}
	for _, id := range sortedMapKeys(bars) {
		pr := bars[id]
		if last, ok := r.open[id]; ok && (!pr.drawing() || pr.Acts != last.acts) {
			// Its activity finished (and the next block's began), or
			// the source closed.
			status := pr.Ended
			if status == "" {
				status = "Completed"
			}
			r.closeBar(id, status)
			printed = true
		}
		if !pr.drawing() {
			continue
		}
		k := "bar@" + id
		line := barLine(id, pr.StageProgress, r.rate(id, pr))
		// Print byte progress at most every 10%.
		bucket := ""
		if pr.BytesTotal > 0 {
			bucket = fmt.Sprint(pr.BytesDone * 10 / pr.BytesTotal)
		}
		if r.seen[k] != bucket && (pr.BytesTotal > 0 || pr.Retry == "") {
			r.seen[k] = bucket
			fmt.Fprintln(r.w, line)
			printed = true
		}
		if pr.BytesTotal > 0 {
			r.open[id] = openBar{pr.StageProgress, pr.Acts}
		}
		// One line each time the reason for retrying changes.
		if k := "retry@" + id; pr.Retry != "" && r.seen[k] != pr.Retry {
			r.seen[k] = pr.Retry
			fmt.Fprintf(r.w, "  %s retrying: %s\n", shortID(id), clip(pr.Retry, retryShown))
			printed = true
		}
		// One line when the node's writes start waiting beside a
		// serving lane (the memory floor), and one when they go on.
		if k := "waiting@" + id; r.seen[k] != pr.Waiting {
			if pr.Waiting != "" {
				fmt.Fprintf(r.w, "  %s %s%s\n", shortID(id), pr.Waiting, besideText(contract.StageProgress{Beside: pr.Beside}, " · "))
			} else {
				fmt.Fprintf(r.w, "  %s resumed\n", shortID(id))
			}
			r.seen[k] = pr.Waiting
			printed = true
		}
	}
	if printed {
		r.lastLine = now
		return
	}
	if now.Sub(r.lastLine) < plainEvery {
		return
	}
	var running []string
	for _, s := range p.Steps {
		if s.Status == contract.StepRunning {
			name := s.Name
			if s.Node != "" {
				name += " [" + s.Node + "]"
			}
			running = append(running, name)
		}
	}
	for _, id := range sortedMapKeys(bars) {
		pr := bars[id]
		if !pr.drawing() {
			continue
		}
		line := shortID(id)
		if pr.BytesTotal > 0 {
			line += fmt.Sprintf(" %s/%s", contract.HumanBytes(pr.BytesDone), contract.HumanBytes(pr.BytesTotal))
			if rate := r.rates[id].rate; rate > 0 {
				line += " at " + contract.HumanBytes(int64(rate)) + "/s"
			}
		}
		if pr.Retry != "" {
			line += " (retrying: " + clip(pr.Retry, retryShown) + ")"
		}
		line += besideText(pr.StageProgress, ", ")
		if pr.BytesTotal > 0 || pr.Retry != "" {
			running = append(running, line)
		}
	}
	if len(running) > 0 {
		fmt.Fprintf(r.w, "  still running: %s\n", strings.Join(running, ", "))
		r.lastLine = now
	}
}

// rate is a smoothed bytes/s of progress source id: the bytes added
// between two reports of its node over the time between those reports
// (progressSample.At; when unknown, the time between the polls that saw
// the count change). A poll that finds no new report changes nothing.
func (r *renderer) rate(id string, p progressSample) float64 {
	at := p.At
	if at.IsZero() {
		at = r.now()
	}
	prev, ok := r.rates[id]
	if !ok || p.BytesDone < prev.bytes {
		r.rates[id] = rateSample{at: at, bytes: p.BytesDone}
		return 0
	}
	if p.BytesDone == prev.bytes && (p.At.IsZero() || !at.After(prev.at)) {
		return prev.rate // no new report since the last sample
	}
	dt := at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return prev.rate
	}
	inst := float64(p.BytesDone-prev.bytes) / dt
	rate := inst
	if prev.rate > 0 {
		rate = 0.7*prev.rate + 0.3*inst
	}
	r.rates[id] = rateSample{at: at, bytes: p.BytesDone, rate: rate}
	return rate
}

// waitLine is a node the run waits for, with how long it has been gone.
func waitLine(w contract.NodeWait, now time.Time) string {
	return fmt.Sprintf("⏸ waiting for node %s (down %s)", w.Node, now.Sub(w.Since).Round(time.Second))
}

func stepLine(s contract.Step) string {
	mark := map[string]string{
		contract.StepRunning: "…", contract.StepDone: "✓", contract.StepFailed: "✗",
		contract.StepSkipped: "-", contract.StepPending: " ", contract.StepWaiting: "⏸",
	}[s.Status]
	name := s.Name
	if s.Node != "" {
		name += " [" + s.Node + "]"
	}
	line := fmt.Sprintf("%s %-34s", mark, name)
	if s.Status == contract.StepDone || s.Status == contract.StepFailed {
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

func barLine(id string, p contract.StageProgress, rate float64) string {
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
	name := shortID(id)
	return fmt.Sprintf("  %-10s [%s] %3.0f%% %s/%s %s/s ETA %s%s%s", name, bar, frac*100,
		contract.HumanBytes(p.BytesDone), contract.HumanBytes(p.BytesTotal), contract.HumanBytes(int64(rate)), eta, sourcesText(p.ByteSources, " · "), besideText(p, " · "))
}

// besideText says, after sep, which lanes serve on the node while it
// stages (its writes are paced) and why its writes wait, if they do;
// empty for a node serving nothing.
func besideText(p contract.StageProgress, sep string) string {
	var parts []string
	if len(p.Beside) > 0 {
		parts = append(parts, "beside "+strings.Join(p.Beside, ","))
	}
	if p.Waiting != "" {
		parts = append(parts, p.Waiting)
	}
	if len(parts) == 0 {
		return ""
	}
	return sep + strings.Join(parts, sep)
}

// sourcesText says where a relayed node's bytes came from ("NAS 1.2 GiB,
// n1 3.4 GiB, n3 0 B"), after sep; empty when the block was not relayed.
func sourcesText(s contract.ByteSources, sep string) string {
	if s.FromNAS == 0 && len(s.FromPeers) == 0 {
		return ""
	}
	parts := []string{"NAS " + contract.HumanBytes(s.FromNAS)}
	for _, n := range sortedMapKeys(s.FromPeers) {
		parts = append(parts, n+" "+contract.HumanBytes(s.FromPeers[n]))
	}
	return sep + strings.Join(parts, ", ")
}

// shortID is the last path element of a workflow ID (stage/demo-4x/n1 → n1).
func shortID(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		return id[i+1:]
	}
	return id
}
