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

// writeChart writes a self-contained HTML page (inline SVG, no external
// assets): when each request reached the server, one series per mode and
// phase, and the gap before each navigation; then the tables.
func writeChart(w io.Writer, runs []report.Run, o Options) {
	var tables bytes.Buffer
	report.Write(&tables, runs...)
	fmt.Fprintf(w, `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>cdp-throttle demo</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
pre { background: #f6f6f6; padding: 12px; overflow-x: auto; }
svg text { font: 12px system-ui, sans-serif; fill: #333; }
.legend span { display: inline-block; margin-right: 18px; }
.legend i { display: inline-block; width: 22px; height: 4px; margin-right: 6px; vertical-align: middle; }
</style></head><body>
<h1>cdp-throttle demo: %d navigations per phase, %d phases %v apart</h1>
<p class="legend">`, o.Navigations, o.Phases, o.Idle)
	for _, r := range runs {
		fmt.Fprintf(w, `<span><i style="background:%s"></i>%s</span>`, colorOf(r.Mode), html.EscapeString(r.Mode))
	}
	fmt.Fprint(w, `<span>phase 2 and later dashed</span></p>
<h2>When each request reached the server</h2>
`)
	arrivalChart(w, runs)
	fmt.Fprint(w, "<h2>Gap before each navigation (phase 1)</h2>\n")
	gapChart(w, runs)
	fmt.Fprintf(w, "<h2>What the server saw</h2>\n<pre>%s</pre>\n</body></html>\n", html.EscapeString(tables.String()))
}

// plot is the frame of one chart.
type plot struct {
	w, h                  float64
	left, right, top, bot float64
	xmax, ymax            float64
	xlabel, ylabel        string
}

func (p plot) x(v float64) float64 { return p.left + v/p.xmax*(p.w-p.left-p.right) }
func (p plot) y(v float64) float64 { return p.h - p.bot - v/p.ymax*(p.h-p.top-p.bot) }

func (p plot) open(w io.Writer, id string) {
	fmt.Fprintf(w, `<svg id="%s" xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f">`+"\n",
		id, p.w, p.h, p.w, p.h)
	fmt.Fprintf(w, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#fff"/>`+"\n", p.w, p.h)
	for i := 0; i <= 5; i++ {
		xv, yv := p.xmax*float64(i)/5, p.ymax*float64(i)/5
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", p.x(0), p.y(yv), p.x(p.xmax), p.y(yv))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", p.left-6, p.y(yv)+4, tick(yv))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.x(xv), p.h-p.bot+16, tick(xv))
	}
	fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", p.x(0), p.y(0), p.x(p.xmax), p.y(0))
	fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", p.x(0), p.y(0), p.x(0), p.y(p.ymax))
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (p.left+p.w-p.right)/2, p.h-6, p.xlabel)
	fmt.Fprintf(w, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (p.top+p.h-p.bot)/2, p.ylabel)
}

func tick(v float64) string {
	if v == math.Trunc(v) || v >= 10 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func polyline(w io.Writer, mode string, phase int, pts []string) {
	dash := ""
	if phase > 1 {
		dash = ` stroke-dasharray="6 4"`
	}
	fmt.Fprintf(w, `<polyline class="series" data-mode="%s" data-phase="%d" fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n",
		html.EscapeString(mode), phase, colorOf(mode), dash, strings.Join(pts, " "))
}

func arrivalChart(w io.Writer, runs []report.Run) {
	var span time.Duration
	n := 0
	for _, r := range runs {
		for _, ph := range r.Phases {
			span = max(span, ph[len(ph)-1])
			n = max(n, len(ph))
		}
	}
	p := plot{w: 900, h: 420, left: 56, right: 20, top: 16, bot: 44,
		xmax: niceCeil(span.Seconds()), ymax: float64(n), xlabel: "seconds since the phase's first navigation", ylabel: "navigation"}
	p.open(w, "arrivals")
	for _, r := range runs {
		for i, ph := range r.Phases {
			pts := make([]string, len(ph))
			for k, at := range ph {
				pts[k] = fmt.Sprintf("%.1f,%.1f", p.x(at.Seconds()), p.y(float64(k+1)))
			}
			polyline(w, r.Mode, i+1, pts)
		}
	}
	fmt.Fprint(w, "</svg>\n")
}

func gapChart(w io.Writer, runs []report.Run) {
	var all []time.Duration
	n := 0
	for _, r := range runs {
		ph := r.Phases[0]
		n = max(n, len(ph))
		for k := 1; k < len(ph); k++ {
			all = append(all, ph[k]-ph[k-1])
		}
	}
	// A few slow page loads must not flatten the rest: the scale stops at
	// the 98th percentile and taller gaps are drawn at the top.
	slices.Sort(all)
	top := limiter.Millis(report.Percentile(all, 0.98))
	p := plot{w: 900, h: 320, left: 56, right: 20, top: 16, bot: 44,
		xmax: float64(n), ymax: niceCeil(top * 1.1), xlabel: "navigation", ylabel: "gap before it (ms)"}
	p.open(w, "gaps")
	for _, r := range runs {
		ph := r.Phases[0]
		pts := make([]string, 0, len(ph))
		for k := 1; k < len(ph); k++ {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", p.x(float64(k+1)), p.y(min(limiter.Millis(ph[k]-ph[k-1]), p.ymax))))
		}
		polyline(w, r.Mode, 1, pts)
	}
	fmt.Fprint(w, "</svg>\n")
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
