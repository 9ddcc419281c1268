package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Series is one line of the history plot; exported so tests and the CLI
// can say what was drawn.
type Series struct {
	Name   string
	Panel  string // "tg", "pp" or "score"
	Points []Point
}

// Point is one report's value of a series.
type Point struct {
	At    time.Time
	Value float64
	ID    string
}

// HistorySeries extracts the plotted series from reports: tg per request
// at concurrency 1 for each depth, aggregate tg at the highest concurrency
// of the smallest depth, pp for each prompt length, and the quality score.
func HistorySeries(history []Report) []Series {
	hist := append([]Report(nil), history...)
	sort.SliceStable(hist, func(i, j int) bool { return hist[i].CreatedAt.Before(hist[j].CreatedAt) })
	byName := map[string]*Series{}
	var order []string
	add := func(panel, name string, r Report, v float64) {
		if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		s, ok := byName[name]
		if !ok {
			s = &Series{Name: name, Panel: panel}
			byName[name] = s
			order = append(order, name)
		}
		s.Points = append(s.Points, Point{At: r.CreatedAt, Value: v, ID: r.ID})
	}
	for _, r := range hist {
		if p := r.Perf; p != nil {
			minDepth, maxConc := math.MaxInt, 0
			for _, t := range p.TG {
				minDepth = min(minDepth, t.Depth)
			}
			for _, t := range p.TG {
				if t.Depth == minDepth {
					maxConc = max(maxConc, t.Concurrency)
				}
			}
			for _, t := range p.TG {
				if t.OK == 0 {
					continue
				}
				if t.Concurrency == 1 {
					add("tg", fmt.Sprintf("tg, depth %d, 1 request", t.Depth), r, t.PerRequestTokPerSec)
				}
				if t.Depth == minDepth && t.Concurrency == maxConc && maxConc > 1 {
					add("tg", fmt.Sprintf("tg, depth %d, %d requests (sum)", t.Depth, t.Concurrency), r, t.AggregateTokPerSec)
				}
			}
			for _, t := range p.PP {
				if t.OK > 0 {
					add("pp", fmt.Sprintf("pp, %d-token prompt", t.RequestedTokens), r, t.TokPerSec)
				}
			}
		}
		if r.Harness != nil {
			add("score", "quality score", r, r.Harness.Quality.Score)
		}
	}
	out := make([]Series, 0, len(order))
	for _, n := range order {
		out = append(out, *byName[n])
	}
	return out
}

// palette is colour-blind friendly (Okabe–Ito) and prints in grey distinctly.
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"}

const (
	svgW        = 1080
	plotLeft    = 90
	plotRight   = 720 // end of the plot area
	legendX     = 825
	panelH      = 220
	panelGap    = 90
	topMargin   = 70
	fontFamily  = "DejaVu Sans, Helvetica, Arial, sans-serif"
	scoreColour = "#444444"
)

// PlotSVG draws tg and pp tok/s over report time, with the quality score
// on a secondary axis of the tg panel when present. Hand-written SVG, no
// dependencies; every point carries a <title> with its value and report.
func PlotSVG(history []Report) ([]byte, error) {
	series := HistorySeries(history)
	var tg, pp []Series
	var score *Series
	for i := range series {
		switch series[i].Panel {
		case "tg":
			tg = append(tg, series[i])
		case "pp":
			pp = append(pp, series[i])
		case "score":
			score = &series[i]
		}
	}
	if len(tg)+len(pp) == 0 && score == nil {
		return nil, errors.New("no perf or score data in the reports to plot")
	}
	var tmin, tmax time.Time
	for _, s := range series {
		for _, p := range s.Points {
			if tmin.IsZero() || p.At.Before(tmin) {
				tmin = p.At
			}
			if p.At.After(tmax) {
				tmax = p.At
			}
		}
	}
	first, last := tmin, tmax
	span := tmax.Sub(tmin)
	if span <= 0 {
		span = 2 * time.Hour
		tmin = tmin.Add(-time.Hour)
		tmax = tmin.Add(span)
	} else {
		pad := span / 20
		tmin, tmax = tmin.Add(-pad), tmax.Add(pad)
		span = tmax.Sub(tmin)
	}
	xOf := func(t time.Time) float64 {
		return plotLeft + float64(t.Sub(tmin))/float64(span)*(plotRight-plotLeft)
	}

	lane := ""
	for _, r := range history {
		if r.Lane != "" {
			lane = r.Lane
		}
	}
	panels := 0
	if len(tg) > 0 || score != nil {
		panels++
	}
	if len(pp) > 0 {
		panels++
	}
	height := topMargin + panels*(panelH+panelGap) + 10

	var b bytes.Buffer
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s">`+"\n", svgW, height, svgW, height, fontFamily)
	w(`<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>`+"\n", svgW, height)
	title := "Bench history"
	if lane != "" {
		title = "Bench history of lane " + lane
	}
	w(`<text x="%d" y="32" font-size="22" font-weight="bold" fill="#111">%s</text>`+"\n", plotLeft, esc(title))
	w(`<text x="%d" y="54" font-size="14" fill="#444">%d report(s), %s to %s UTC; higher tok/s is better</text>`+"\n", plotLeft, len(history),
		esc(first.UTC().Format("2006-01-02 15:04")), esc(last.UTC().Format("2006-01-02 15:04")))

	top := topMargin
	if len(tg) > 0 || score != nil {
		drawPanel(&b, top, "Token generation (tg)", "tok/s", tg, score, xOf, tmin, tmax)
		top += panelH + panelGap
	}
	if len(pp) > 0 {
		drawPanel(&b, top, "Prompt processing (pp)", "tok/s", pp, nil, xOf, tmin, tmax)
	}
	w("</svg>\n")
	return b.Bytes(), nil
}

func drawPanel(b *bytes.Buffer, top int, title, unit string, series []Series, score *Series, xOf func(time.Time) float64, tmin, tmax time.Time) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	y0 := float64(top + 30) // plot area top
	y1 := y0 + panelH - 40  // plot area bottom
	w(`<text x="%d" y="%d" font-size="17" font-weight="bold" fill="#111">%s</text>`+"\n", plotLeft, top+16, esc(title))

	vmax := 0.0
	for _, s := range series {
		for _, p := range s.Points {
			vmax = math.Max(vmax, p.Value)
		}
	}
	ticks, top1 := niceTicks(vmax)
	yOf := func(v float64) float64 { return y1 - v/top1*(y1-y0) }

	// Grid, y ticks and the left axis.
	for _, t := range ticks {
		y := yOf(t)
		w(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e3e3e3" stroke-width="1"/>`+"\n", plotLeft, y, plotRight, y)
		w(`<text x="%d" y="%.1f" font-size="13" fill="#333" text-anchor="end">%s</text>`+"\n", plotLeft-8, y+4, esc(fmtTick(t)))
	}
	w(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333" stroke-width="1.2"/>`+"\n", plotLeft, y0, plotLeft, y1)
	w(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#333" stroke-width="1.2"/>`+"\n", plotLeft, y1, plotRight, y1)
	cy := (y0 + y1) / 2
	w(`<text x="%d" y="%.1f" font-size="14" fill="#222" text-anchor="middle" transform="rotate(-90 %d %.1f)">%s</text>`+"\n", plotLeft-58, cy, plotLeft-58, cy, esc(unit))

	// X ticks (time) on round boundaries.
	for _, t := range timeTicks(tmin, tmax) {
		x := xOf(t.at)
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333" stroke-width="1"/>`+"\n", x, y1, x, y1+5)
		w(`<text x="%.1f" y="%.1f" font-size="13" fill="#333" text-anchor="middle">%s</text>`+"\n", x, y1+20, esc(t.label))
	}
	w(`<text x="%d" y="%.1f" font-size="14" fill="#222" text-anchor="middle">report time (UTC)</text>`+"\n", (plotLeft+plotRight)/2, y1+40)

	// Secondary axis for the score (0-100).
	if score != nil {
		yS := func(v float64) float64 { return y1 - v/100*(y1-y0) }
		w(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="1.2"/>`+"\n", plotRight, y0, plotRight, y1, scoreColour)
		for v := 0; v <= 100; v += 20 {
			w(`<text x="%d" y="%.1f" font-size="13" fill="%s">%d</text>`+"\n", plotRight+8, yS(float64(v))+4, scoreColour, v)
		}
		w(`<text x="%d" y="%.1f" font-size="14" fill="%s" text-anchor="middle" transform="rotate(90 %d %.1f)">quality score (0–100)</text>`+"\n", plotRight+48, cy, scoreColour, plotRight+48, cy)
		drawSeries(b, *score, scoreColour, true, xOf, yS, "points")
	}

	// Series and legend.
	ly := y0 + 4
	for i, s := range series {
		c := palette[i%len(palette)]
		drawSeries(b, s, c, false, xOf, yOf, unit)
		legend(b, ly, c, false, s.Name)
		ly += 22
	}
	if score != nil {
		legend(b, ly, scoreColour, true, "quality score (right axis)")
	}
}

func legend(b *bytes.Buffer, y float64, colour string, dashed bool, name string) {
	dash := ""
	if dashed {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2.5"%s/>`+"\n", legendX-40, y, legendX-12, y, colour, dash)
	fmt.Fprintf(b, `<circle cx="%d" cy="%.1f" r="4" fill="%s"/>`+"\n", legendX-26, y, colour)
	fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="13" fill="#222">%s</text>`+"\n", legendX-4, y+4, esc(name))
}

func drawSeries(b *bytes.Buffer, s Series, colour string, dashed bool, xOf func(time.Time) float64, yOf func(float64) float64, unit string) {
	if len(s.Points) > 1 {
		var pts []string
		for _, p := range s.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(p.At), yOf(p.Value)))
		}
		dash := ""
		if dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"%s/>`+"\n", strings.Join(pts, " "), colour, dash)
	}
	for _, p := range s.Points {
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s" stroke="#fff" stroke-width="1"><title>%s</title></circle>`+"\n",
			xOf(p.At), yOf(p.Value), colour, esc(PointTitle(s, p, unit)))
	}
}

// PointTitle is the tooltip of one plotted point; tests look for it.
func PointTitle(s Series, p Point, unit string) string {
	if s.Panel == "score" {
		unit = "points"
	}
	return fmt.Sprintf("%s: %s %s at %s UTC (%s)", s.Name, fmtValue(p.Value), unit, p.At.UTC().Format("2006-01-02 15:04"), p.ID)
}

func fmtValue(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

type timeTick struct {
	at    time.Time
	label string
}

// timeTicks picks at most 7 ticks on round UTC boundaries (minutes, hours,
// midnights) inside [tmin, tmax].
func timeTicks(tmin, tmax time.Time) []timeTick {
	span := tmax.Sub(tmin)
	steps := []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
		3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 28 * 24 * time.Hour}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= 6 {
			step = s
			break
		}
	}
	format := "15:04"
	switch {
	case step >= 24*time.Hour:
		format = "Jan 02"
	case span > 20*time.Hour:
		format = "Jan 02 15:04"
	}
	start := tmin.UTC().Truncate(step)
	if step >= 24*time.Hour {
		y, m, d := tmin.UTC().Date()
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	var out []timeTick
	for t := start; !t.After(tmax); t = t.Add(step) {
		if t.Before(tmin) {
			continue
		}
		out = append(out, timeTick{t, t.Format(format)})
	}
	return out
}

// niceTicks returns ticks from 0 to a round top covering vmax.
func niceTicks(vmax float64) ([]float64, float64) {
	if vmax <= 0 {
		vmax = 1
	}
	raw := vmax * 1.1 / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	top := 0.0
	for v := 0.0; ; v += step {
		ticks = append(ticks, v)
		top = v
		if v >= vmax*1.05 {
			break
		}
	}
	return ticks, top
}

func fmtTick(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%gk", v/1000)
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%g", v)
	}
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
