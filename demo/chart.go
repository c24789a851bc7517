package demo

import (
	"bytes"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/report"
)

// seriesColor gives each mode of the demo a colour of its own.
var seriesColor = map[string]string{"off": "#7f7f7f", "adaptive": "#d95f02"}

const fixedColor = "#1b64c8"

func colorOf(mode string) string {
	if c, ok := seriesColor[mode]; ok {
		return c
	}
	return fixedColor
}

// modeText says how each mode is set and what it does, for a reader who
// has not read the README: the chart's legend.
func modeText(mode string, o Options) (set, does string) {
	switch mode {
	case "off":
		return "<code>--http-nav-delay 0</code>", "the relay holds nothing: the crawl's own pace, each navigation as soon as the server has the one before"
	case "adaptive":
		return "the default", "an idle host's first navigations go at once; while it stays busy, the gap grows 20 ms at a time up to 100 ms, and it shrinks again when the host rests"
	}
	return fmt.Sprintf("<code>--http-nav-delay %v</code>", o.Fixed), fmt.Sprintf("after a burst of %d at once, every navigation to the host %v after the one before", limiter.DefaultBurst, o.Fixed)
}

// writeChart writes a self-contained HTML page (inline SVG, no external
// assets): what the run shows in one sentence, what each mode is and what
// to look for, when each request reached the server and the gap before
// each navigation (phase 1 and phase 2 side by side), then the tables.
func writeChart(w io.Writer, runs []report.Run, o Options, browser, conclusion string) {
	fmt.Fprintf(w, `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cdp-throttle demo</title>
<style>
body { font: 15px/1.45 system-ui, sans-serif; margin: 20px 28px; color: #222; max-width: 1400px; }
h1 { font-size: 21px; margin: 0 0 8px; } h2 { font-size: 17px; margin: 26px 0 6px; }
p { margin: 6px 0; max-width: 1100px; }
.lead { font-size: 16px; }
.modes { margin: 10px 0; border-collapse: collapse; } .modes td { padding: 2px 14px 2px 0; vertical-align: baseline; }
.modes td:nth-child(-n+2) { white-space: nowrap; }
.modes i { display: inline-block; width: 26px; height: 5px; margin-right: 8px; vertical-align: middle; }
code { font-size: 14px; background: #f2f2f2; padding: 0 3px; }
svg { width: 100%%; height: auto; display: block; }
svg text { font: 15px system-ui, sans-serif; fill: #333; }
svg .title { font-size: 17px; font-weight: 600; }
pre { background: #f6f6f6; padding: 12px; white-space: pre-wrap; font-size: 13px; }
.caption { color: #555; font-size: 14px; }
</style></head><body>
<h1>cdp-throttle demo: %d navigations per phase to one host, %d phase%s %v apart, through %s</h1>
<p class="lead">%s</p>
<table class="modes">
`, o.Navigations, o.Phases, plural(o.Phases), o.Idle, html.EscapeString(browser), html.EscapeString(conclusion))
	for _, r := range runs {
		set, does := modeText(r.Mode, o)
		fmt.Fprintf(w, "<tr><td><i style=\"background:%s\"></i><b>%s</b></td><td>%s</td><td>%s</td></tr>\n", colorOf(r.Mode), html.EscapeString(r.Mode), set, does)
	}
	fmt.Fprint(w, "</table>\n<p>What to look for: the adaptive line starts along the off line (an idle host is not slowed down), then bends to the fixed line's slope; ")
	fmt.Fprint(w, "below it, the adaptive gap climbs in 20 ms steps to the fixed one's.")
	if o.Phases > 1 {
		fmt.Fprintf(w, " Phase 2 comes after %v without navigations: ", o.Idle)
		if a := runs[len(runs)-1]; again(a) {
			fmt.Fprint(w, "its adaptive line is phase 1's again, the host having been forgotten.")
		} else {
			fmt.Fprint(w, "the adaptive line differs from phase 1's, the host's pressure not having drained (one unit every 100 ms).")
		}
	}
	fmt.Fprint(w, "</p>\n<h2>When each request reached the server</h2>\n")
	arrivalChart(w, runs, o)
	fmt.Fprint(w, "<h2>Gap before each navigation</h2>\n")
	gapChart(w, runs, o)

	var bookings, arrivals bytes.Buffer
	report.WriteBookings(&bookings, runs...)
	report.WriteArrivals(&arrivals, runs...)
	fmt.Fprintf(w, "<h2>When the limiter let navigations go (phase 1)</h2>\n<pre>%s</pre>\n", html.EscapeString(strings.TrimSpace(bookings.String())))
	fmt.Fprintf(w, "<h2>What the server saw</h2>\n<pre>%s</pre>\n</body></html>\n", html.EscapeString(strings.TrimSpace(arrivals.String())))
}

// again says whether r's phase 2 took as long as its phase 1, within 5%:
// the host started it from zero again.
func again(r report.Run) bool {
	one, two := report.Span(r.Phases[0]), report.Span(r.Phases[1])
	return (two - one).Abs() <= one/20
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Layout of a chart: one panel per phase shown, side by side, in a
// viewBox the page scales to its width.
const (
	chartW   = 1320.0
	panelGap = 40.0
	left     = 66.0 // room for the y ticks and label
	right    = 16.0
	top      = 36.0 // room for the panel's title
	bottom   = 50.0 // room for the x ticks and label
)

// panel is one plot: its place in the chart and its scales.
type panel struct {
	x0, w, h   float64 // left edge and size in the chart
	xmax, ymax float64
	yticks     int // lines across, besides the axis; 0 means 5
}

func (p panel) x(v float64) float64 { return p.x0 + left + v/p.xmax*(p.w-left-right) }
func (p panel) y(v float64) float64 { return p.h - bottom - v/p.ymax*(p.h-top-bottom) }

// panels lays out n panels across the chart.
func panels(n int, h, xmax, ymax float64) []panel {
	w := (chartW - panelGap*float64(n-1)) / float64(n)
	out := make([]panel, n)
	for i := range out {
		out[i] = panel{x0: float64(i) * (w + panelGap), w: w, h: h, xmax: xmax, ymax: ymax}
	}
	return out
}

// frame draws the panel's grid, axes, ticks and labels.
func (p panel) frame(w io.Writer, title, xlabel, ylabel string) {
	fmt.Fprintf(w, `<text class="title" x="%.1f" y="20">%s</text>`+"\n", p.x(0), html.EscapeString(title))
	yticks := p.yticks
	if yticks == 0 {
		yticks = 5
	}
	for i := 0; i <= yticks; i++ {
		yv := p.ymax * float64(i) / float64(yticks)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", p.x(0), p.y(yv), p.x(p.xmax), p.y(yv))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", p.x(0)-7, p.y(yv)+5, tick(yv))
	}
	for i := 0; i <= 5; i++ {
		xv := p.xmax * float64(i) / 5
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.x(xv), p.h-bottom+19, tick(xv))
	}
	fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", p.x(0), p.y(0), p.x(p.xmax), p.y(0))
	fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", p.x(0), p.y(0), p.x(0), p.y(p.ymax))
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (p.x(0)+p.x(p.xmax))/2, p.h-8, xlabel)
	if ylabel != "" {
		fmt.Fprintf(w, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", p.x0+14, (top+p.h-bottom)/2, ylabel)
	}
}

func tick(v float64) string {
	if v == math.Trunc(v) || v >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func polyline(w io.Writer, mode string, phase int, pts []string) {
	fmt.Fprintf(w, `<polyline class="series" data-mode="%s" data-phase="%d" fill="none" stroke="%s" stroke-width="2" stroke-linejoin="round" points="%s"/>`+"\n",
		html.EscapeString(mode), phase, colorOf(mode), strings.Join(pts, " "))
}

// shown is how many phases the charts draw, each in a panel of its own:
// phase 1 and phase 2 (the tables have every phase).
func shown(runs []report.Run) int { return min(len(runs[0].Phases), 2) }

func panelTitle(phase int, o Options) string {
	if phase == 1 {
		return "phase 1"
	}
	return fmt.Sprintf("phase %d, after %v without navigations", phase, o.Idle)
}

func openChart(w io.Writer, id string, h float64) {
	fmt.Fprintf(w, `<svg id="%s" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %.0f %.0f">`+"\n", id, chartW, h)
	fmt.Fprintf(w, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#fff"/>`+"\n", chartW, h)
}

// chart is one of the page's charts: a panel per phase shown, side by
// side, each with a line per run.
type chart struct {
	id         string
	h          float64 // height in the chart's viewBox
	xmax, ymax float64
	yticks     int // as panel's
	xlabel     string
	ylabel     string // beside the first panel only
	// line gives the points of a run's line through one phase's
	// navigations, ph, in p.
	line func(p panel, ph []time.Duration) []string
}

// draw writes c as an SVG of runs' phases.
func (c chart) draw(w io.Writer, runs []report.Run, o Options) {
	openChart(w, c.id, c.h)
	for i, p := range panels(shown(runs), c.h, c.xmax, c.ymax) {
		p.yticks = c.yticks
		ylabel := ""
		if i == 0 {
			ylabel = c.ylabel
		}
		p.frame(w, panelTitle(i+1, o), c.xlabel, ylabel)
		for _, r := range runs {
			polyline(w, r.Mode, i+1, c.line(p, r.Phases[i]))
		}
	}
	fmt.Fprint(w, "</svg>\n")
}

func arrivalChart(w io.Writer, runs []report.Run, o Options) {
	var span time.Duration
	n := 0
	for _, r := range runs {
		for _, ph := range r.Phases[:shown(runs)] {
			span = max(span, ph[len(ph)-1]-ph[0])
			n = max(n, len(ph))
		}
	}
	chart{
		id: "arrivals", h: 440, xmax: niceCeil(span.Seconds()), ymax: float64(n),
		xlabel: "seconds since the phase's first navigation", ylabel: "navigation",
		line: func(p panel, ph []time.Duration) []string {
			pts := make([]string, len(ph))
			for k, at := range ph {
				pts[k] = fmt.Sprintf("%.1f,%.1f", p.x((at - ph[0]).Seconds()), p.y(float64(k+1)))
			}
			return pts
		},
	}.draw(w, runs, o)
}

func gapChart(w io.Writer, runs []report.Run, o Options) {
	var all []time.Duration
	n := 0
	for _, r := range runs {
		for _, ph := range r.Phases[:shown(runs)] {
			n = max(n, len(ph))
			for k := 1; k < len(ph); k++ {
				all = append(all, ph[k]-ph[k-1])
			}
		}
	}
	// A few slow page loads must not flatten the rest: the scale stops at
	// the 98th percentile and taller gaps are drawn at the top.
	// Up to 200 ms, a line every 20 ms: where the adaptive steps land.
	slices.Sort(all)
	ceil, yticks := niceCeil(limiter.Millis(report.Percentile(all, 0.98))*1.1), 0
	if ceil <= 200 {
		yticks = int(math.Ceil(ceil / 20))
		ceil = float64(yticks) * 20
	}
	chart{
		id: "gaps", h: 340, xmax: float64(n), ymax: ceil, yticks: yticks,
		xlabel: "navigation", ylabel: "gap before it (ms)",
		line: func(p panel, ph []time.Duration) []string {
			pts := make([]string, 0, len(ph))
			for k := 1; k < len(ph); k++ {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.x(float64(k+1)), p.y(min(limiter.Millis(ph[k]-ph[k-1]), p.ymax))))
			}
			return pts
		},
	}.draw(w, runs, o)
	fmt.Fprintf(w, "<p class=\"caption\">The scale stops at %s ms; a longer gap (a page slow to load, a stall of the machine) is drawn at the top.</p>\n", tick(ceil))
}

// niceCeil rounds v up to a round number: 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6
// or 8 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}
