package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/bench"
)

// plotHistory is a week of nightly reports with a dip and a recovery, and
// one run without a harness.
func plotHistory() []Report {
	t0 := time.Date(2026, 11, 23, 5, 15, 0, 0, time.UTC)
	tgs := []float64{34.8, 35.1, 29.5, 35.6, 36.2, 35.9}
	var out []Report
	for i, tg := range tgs {
		p := perfOf(3100+float64(i)*40, tg, tg*1.85, 210, 280)
		p.PP = append(p.PP, bench.PPPoint{RequestedTokens: 8192, PromptTokens: 8190, TokPerSec: 2500 + float64(i)*30, OK: 3})
		p.TG = append(p.TG, bench.TGPoint{Depth: 8192, Concurrency: 1, PerRequestTokPerSec: tg * 0.8, OK: 1})
		var h *bench.HarnessResult
		if i != 3 {
			h = harnessOf(78+float64(i), 1)
		}
		r := reportAt(t0.Add(time.Duration(i)*24*time.Hour).Format(TimeFormat)+"_nightly", t0.Add(time.Duration(i)*24*time.Hour), p, h)
		out = append(out, r)
	}
	return out
}

func TestPlotSVGIsXMLWithEverySeriesPoint(t *testing.T) {
	hist := plotHistory()
	svg, err := PlotSVG(hist)
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("SPARKLANE_PLOT_OUT"); dir != "" {
		os.WriteFile(dir, svg, 0o644)
	}
	// Well-formed XML with an <svg> root; collect texts and point titles.
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var root string
	var titles, texts []string
	var stack []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Local
			}
			stack = append(stack, e.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 {
				continue
			}
			switch stack[len(stack)-1] {
			case "title":
				titles = append(titles, string(e))
			case "text":
				texts = append(texts, string(e))
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q", root)
	}
	series := HistorySeries(hist)
	names := map[string]int{}
	for _, s := range series {
		names[s.Name] = len(s.Points)
	}
	want := map[string]int{
		"tg, depth 0, 1 request": 6, "tg, depth 0, 2 requests (sum)": 6, "tg, depth 8192, 1 request": 6,
		"pp, 2048-token prompt": 6, "pp, 8192-token prompt": 6, "quality score": 5,
	}
	for n, c := range want {
		if names[n] != c {
			t.Errorf("series %q has %d points, want %d (all: %v)", n, names[n], c, names)
		}
	}
	joined := strings.Join(titles, "\n")
	count := 0
	for _, s := range series {
		unit := "tok/s"
		for _, p := range s.Points {
			count++
			if !strings.Contains(joined, PointTitle(s, p, unit)) {
				t.Errorf("SVG lacks point %q", PointTitle(s, p, unit))
			}
		}
	}
	if len(titles) != count {
		t.Errorf("%d point titles for %d points", len(titles), count)
	}
	// Spot-check one value against the input, not against HistorySeries.
	if !strings.Contains(joined, "tg, depth 0, 1 request: 29.5 tok/s at 2026-11-25 05:15 UTC") {
		t.Errorf("the dip of 29.5 tok/s is not plotted")
	}
	allText := strings.Join(texts, "\n")
	for _, w := range []string{"Bench history of lane mia", "Token generation (tg)", "Prompt processing (pp)", "tok/s", "report time (UTC)", "quality score (0–100)", "Nov 25"} {
		if !strings.Contains(allText, w) {
			t.Errorf("SVG text lacks %q", w)
		}
	}
}

func TestPlotSVGWithoutDataFails(t *testing.T) {
	if _, err := PlotSVG([]Report{{ID: "x", CreatedAt: time.Now()}}); err == nil {
		t.Error("plot of reports without perf or score succeeded")
	}
}

func TestPlotSVGSingleReport(t *testing.T) {
	svg, err := PlotSVG(plotHistory()[:1])
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Errorf("single-report SVG: %v", err)
	}
	if bytes.Contains(svg, []byte("NaN")) || bytes.Contains(svg, []byte("Inf")) {
		t.Errorf("single-report SVG has NaN/Inf coordinates")
	}
}
