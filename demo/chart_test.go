package demo

import (
	"bytes"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/report"
	"github.com/cdp-throttle/cdp-throttle/simulate"
)

var chartOut = flag.String("chart", "", "also write the test's chart to this file, to look at it")

// TestChartPage writes the chart of a simulated run: it says what the run
// showed and what each mode is, draws each phase in a panel of its own
// (phase 2 is not hidden under phase 1), heads the limiter's tables apart
// from what the server saw, and its tables fit the page.
func TestChartPage(t *testing.T) {
	o := Options{Navigations: 400, Phases: 2, Idle: 8 * time.Second, Fixed: 100 * time.Millisecond}
	var runs []report.Run
	for _, cfg := range []limiter.Config{{Mode: limiter.Off}, {Mode: limiter.Fixed, Interval: o.Fixed}, {}} {
		r := simulate.Report(simulate.Options{Policy: policy.Config{Default: cfg}, Navigations: o.Navigations, Load: 20 * time.Millisecond, Phases: o.Phases, Idle: o.Idle})
		if cfg.Mode == limiter.Off {
			r.Booked = nil // as measured: an off relay books nothing
		}
		runs = append(runs, r)
	}
	short := conclusion(runs, o)
	if want := "In short: adaptive let the first 22 of 400 navigations go at once, then spaced them 20ms more at a time up to 100ms; " +
		"they took 36.04s, against 7.98s with nothing held (off) and 39.00s at a fixed 100ms. After 8s idle, phase 2 took 36.04s."; short != want {
		t.Errorf("conclusion:\n got %s\nwant %s", short, want)
	}
	var b bytes.Buffer
	writeChart(&b, runs, o, "Chromium", short)
	page := b.String()
	if *chartOut != "" {
		os.WriteFile(*chartOut, b.Bytes(), 0o644)
	}
	for _, want := range []string{
		`<p class="lead">In short: adaptive let the first 22`,
		`<b>off</b></td><td><code>--http-nav-delay 0</code></td>`,
		`<b>fixed100</b></td><td><code>--http-nav-delay 100ms</code></td>`,
		`<b>adaptive</b></td><td>the default</td>`,
		"What to look for",
		"its adaptive line is phase 1's again",
		`<text class="title" x="66.0" y="20">phase 1</text>`,
		`phase 2, after 8s without navigations</text>`,
		"<h2>When the limiter let navigations go (phase 1)</h2>\n<pre>fixed100:\nenforced gap",
		"<h2>What the server saw</h2>\n<pre>mode      phase",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, "dashed") || strings.Contains(page, "stroke-dasharray") {
		t.Errorf("the page still draws or promises dashed lines")
	}
	for _, chart := range []string{"arrivals", "gaps"} {
		svg := regexp.MustCompile(`(?s)<svg id="` + chart + `".*?</svg>`).FindString(page)
		if n1, n2 := strings.Count(svg, `data-phase="1"`), strings.Count(svg, `data-phase="2"`); n1 != 3 || n2 != 3 {
			t.Errorf("%s: %d series in phase 1's panel and %d in phase 2's, want 3 and 3", chart, n1, n2)
		}
	}
	for _, pre := range regexp.MustCompile(`(?s)<pre>(.*?)</pre>`).FindAllStringSubmatch(page, -1) {
		for _, line := range strings.Split(pre[1], "\n") {
			if len([]rune(line)) > 110 {
				t.Errorf("a table line of %d characters overflows the page: %q", len(line), line)
			}
		}
	}
}
