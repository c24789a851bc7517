//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// demoTables are the lines of the demo's tables that every run prints,
// on Chromium or Lightpanda, measured or simulated.
var demoTables = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^mode\s+phase\s+reqs\s+span \(s\)\s+req/s\s+gap p50\s+gap p95\s+gap max$`),
	regexp.MustCompile(`(?m)^off\s+1\s+15\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+$`),
	regexp.MustCompile(`(?m)^fixed100\s+1\s+15\s`),
	regexp.MustCompile(`(?m)^adaptive\s+1\s+15\s`),
	regexp.MustCompile(`(?m)^adaptive ph 2(\s+[\d.]+){13}$`),
}

// TestDemo runs `cdp-throttle demo` small, checks the shape of its tables,
// then opens the chart it wrote in Chromium and looks at a screenshot of it.
func TestDemo(t *testing.T) {
	out := filepath.Join(t.TempDir(), "demo.html")
	report, stderr := runDemo(t, nil, "--out", out)
	for _, want := range slices.Concat(demoTables, []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s+2\s+15\s+[\d.]+`),
		regexp.MustCompile(`(?m)^nav\s+2\s+3\s+4\s.*\s14$`),
		regexp.MustCompile(`(?m)^When the limiter let navigations go \(phase 1\):\n\nfixed100:\n`),
		regexp.MustCompile(`(?m)^adaptive:\nenforced gap\s+first at navigation\s+after\n0ms\s+1( to \d+)?\s+0s$`),
		regexp.MustCompile(`(?m)^What the server saw:\n\nmode\s+phase`),
		regexp.MustCompile(`(?m)^In short: adaptive (let the first \d+ of 15 navigations go at once, then spaced them 20ms more at a time up to \d+ms|let all 15 navigations go at once \(an idle host's burst\)); ` +
			`they took [\d.]+s, against [\d.]+s with nothing held \(off\) and [\d.]+s at a fixed 100ms\. After 1s idle, phase 2 took [\d.]+s\.\nchart: .*demo.html$`),
	}) {
		if !want.MatchString(report) {
			t.Errorf("demo output lacks %v", want)
		}
	}
	if !strings.Contains(stderr, "adaptive  phase 2: 15/15 navigations") {
		t.Errorf("no progress line for the last phase on stderr:\n%s", stderr)
	}

	// The chart, in a real browser: three series, drawn.
	r := startRelay(t, limiter.Config{Mode: limiter.Off}) // just a way in
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	rc.mustCall(session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 960, "height": 1000, "deviceScaleFactor": 1, "mobile": false})
	rc.mustCall(session, "Page.navigate", map[string]any{"url": "file://" + out})
	var eval struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
	}
	// Page.navigate answers once the document commits; wait for it to load.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		json.Unmarshal(rc.mustCall(session, "Runtime.evaluate", map[string]any{
			"expression":    `document.readyState != "complete" ? "" : [...new Set([...document.querySelectorAll("#arrivals polyline.series")].map(p => p.dataset.mode + ":" + (p.getAttribute("points").split(" ").length)))].sort().join(",")`,
			"returnByValue": true,
		}), &eval)
		if eval.Result.Value != "" {
			break
		}
	}
	if got := eval.Result.Value; !regexp.MustCompile(`^adaptive:15,fixed100:15,off:15$`).MatchString(got) {
		t.Errorf("series in the arrivals chart: got %q, want adaptive, fixed100 and off with 15 points each", got)
	}
	// Each phase in a panel of its own (phase 2 is not drawn under phase
	// 1), and the page says what each mode is and what to look for, in
	// lines that fit it.
	json.Unmarshal(rc.mustCall(session, "Runtime.evaluate", map[string]any{
		"expression": `JSON.stringify({
			phases: ["#arrivals", "#gaps"].map(id => [...document.querySelectorAll(id + " polyline.series")].map(p => p.dataset.phase).sort().join("")),
			titles: [...document.querySelectorAll("#arrivals text.title")].map(t => t.textContent),
			modes: [...document.querySelectorAll(".modes tr")].map(r => r.cells[0].textContent),
			look: document.body.innerText.includes("What to look for"),
			short: document.querySelector(".lead").textContent.startsWith("In short: adaptive"),
			overflow: document.documentElement.scrollWidth > document.documentElement.clientWidth,
		})`,
		"returnByValue": true,
	}), &eval)
	var page struct {
		Phases, Titles, Modes []string
		Look, Short, Overflow bool
	}
	json.Unmarshal([]byte(eval.Result.Value), &page)
	t.Logf("chart page: %+v", page)
	if strings.Join(page.Phases, " ") != "111222 111222" || strings.Join(page.Titles, "|") != "phase 1|phase 2, after 1s without navigations" {
		t.Errorf("charts: series by phase %q, panels %q; want three series in each of two panels, phase 1 and phase 2", page.Phases, page.Titles)
	}
	if strings.Join(page.Modes, " ") != "off fixed100 adaptive" || !page.Look || !page.Short {
		t.Errorf("the page does not say what each mode is (%q), what to look for (%v) and what the run showed (%v)", page.Modes, page.Look, page.Short)
	}
	if page.Overflow {
		t.Errorf("the page is wider than the window")
	}
	_, img := screenshotImage(t, rc, session)
	colors := map[string][3]uint32{"off": {0x7f, 0x7f, 0x7f}, "fixed100": {0x1b, 0x64, 0xc8}, "adaptive": {0xd9, 0x5f, 0x02}}
	for mode, c := range colors {
		if n := pixelsOf(img, img.Bounds(), c); n < 200 {
			t.Errorf("screenshot has %d pixels of %s's colour, want a drawn series (≥ 200)", n, mode)
		}
	}
}

// runDemo runs `cdp-throttle demo` small (15 navigations, two phases, 1 s
// idle) with args added and env added to the environment, and returns its
// standard output and error.
func runDemo(t *testing.T, env []string, args ...string) (report, stderr string) {
	t.Helper()
	cmd := exec.Command(buildBinary(t), append([]string{"demo", "--navigations", "15", "--phases", "2", "--idle", "1s"}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &errs
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, stdout.String(), errs.String())
	}
	t.Logf("demo output:\n%s", stdout.String())
	return stdout.String(), errs.String()
}

func near(a, b uint32) bool { return a+12 >= b && a <= b+12 }
