//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
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
	bin := buildBinary(t)
	lp := lightpandaBin(t)
	out := filepath.Join(t.TempDir(), "demo.html")
	cmd := exec.Command(bin, "demo", "--browser", "lightpanda", "--navigations", "15", "--phases", "2", "--idle", "1s", "--out", out)
	cmd.Env = append(os.Environ(), "LIGHTPANDA="+lp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	report := stdout.String()
	t.Logf("demo output:\n%s", report)
	measured, simulated, ok := strings.Cut(report, "simulated for the page load measured here")
	if !ok {
		t.Fatalf("no simulated tables after the measured ones")
	}
	if !strings.Contains(measured, "through Lightpanda ("+lp+") and the relay") {
		t.Errorf("the header does not say the run went through Lightpanda")
	}
	for _, part := range []string{measured, simulated} {
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^mode\s+phase\s+reqs\s+span \(s\)\s+req/s\s+gap p50\s+gap p95\s+gap max$`),
			regexp.MustCompile(`(?m)^off\s+1\s+15\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+$`),
			regexp.MustCompile(`(?m)^fixed100\s+1\s+15\s`),
			regexp.MustCompile(`(?m)^adaptive\s+1\s+15\s`),
			regexp.MustCompile(`(?m)^adaptive ph 2(\s+[\d.]+){13}$`),
		} {
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
