//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemoLightpanda runs `cdp-throttle demo --browser lightpanda` small:
// the measurement through `lightpanda serve` prints the same tables as on
// Chromium, then simulate's for the page load it measured; the fixed
// mode's span through Lightpanda matches the simulated one.
func TestDemoLightpanda(t *testing.T) {
	lp := lightpandaBin(t)
	out := filepath.Join(t.TempDir(), "demo.html")
	report, _ := runDemo(t, []string{"LIGHTPANDA=" + lp}, "--browser", "lightpanda", "--out", out)
	measured, simulated, ok := strings.Cut(report, "simulated for the page load measured here")
	if !ok {
		t.Fatalf("no simulated tables after the measured ones")
	}
	if !strings.Contains(measured, "through Lightpanda ("+lp+") and the relay") {
		t.Errorf("the header does not say the run went through Lightpanda")
	}
	for _, part := range []string{measured, simulated} {
		for _, want := range demoTables {
			if !want.MatchString(part) {
				t.Errorf("demo output lacks %v in\n%s", want, part)
			}
		}
	}
	if !regexp.MustCompile(`(?m)^\./cdp-throttle simulate --navigations 15 --phases 2 --idle 1s --load [\d.]+(µs|ms|s) `).MatchString(simulated) {
		t.Errorf("the simulated tables do not give their command")
	}
	span := regexp.MustCompile(`(?m)^fixed100\s+1\s+15\s+([\d.]+)`)
	m, s := span.FindStringSubmatch(measured), span.FindStringSubmatch(simulated)
	if m == nil || s == nil {
		t.Fatal("no fixed100 phase 1 span in both tables")
	}
	got, _ := strconv.ParseFloat(m[1], 64)
	want, _ := strconv.ParseFloat(s[1], 64)
	if got < want-0.1 || got > want+0.1 {
		t.Errorf("fixed100 phase 1 through Lightpanda spans %.2fs, simulated %.2fs: want within 0.1s", got, want)
	}
	if _, err := os.Stat(out); err != nil {
		t.Errorf("no chart: %v", err)
	}
}
