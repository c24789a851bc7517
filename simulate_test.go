package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// runCLI runs the command line and returns what it printed.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), append([]string{"cdp-throttle"}, args...), &out, &errb)
	return out.String(), errb.String(), err
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "simulate", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// simulateCase is a replay whose output must contain each of contains,
// and be its golden file, name, in testdata/simulate.
type simulateCase struct {
	name     string
	args     []string
	contains []string
}

// runGoldens replays each case, a subtest each.
func runGoldens(t *testing.T, tests []simulateCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCLI(t, append([]string{"simulate"}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.contains {
				if !strings.Contains(out, c) {
					t.Errorf("output lacks %q:\n%s", c, out)
				}
			}
			golden(t, tt.name, out)
		})
	}
}

// The seed's numbers, which the golden files must keep showing.
func TestSimulateSeedTables(t *testing.T) {
	tests := []simulateCase{
		{"load0.txt", []string{"--load", "0ms"}, []string{
			"0ms           1 to 10              0s\n",
			"20ms          11                   0.02s\n",
			"40ms          12                   0.06s\n",
			"60ms          27                   0.68s\n",
			"80ms          52                   2.20s\n",
			"100ms         100                  6.06s\n",
			"adaptive      1   400     36.06   11.1    100.0    100.0    100.0\n",
		}},
		{"load4.5-phases2.txt", []string{"--load", "4.5ms", "--phases", "2"}, []string{
			"adaptive      1   400     36.06",
			"              2   400     36.06",
			"gap (ms) ph 1     4.5    4.5    4.5    4.5    4.5    4.5    4.5    4.5    4.5    4.5   15.0   40.0   40.0\n",
			"gap (ms) ph 2     4.5    4.5    4.5    4.5    4.5    4.5    4.5    4.5    4.5    4.5   15.0   40.0   40.0\n",
		}},
		{"fixed100.txt", []string{"--http-nav-delay", "100"}, []string{
			"fixed100      1   400     39.00   10.2    100.0    100.0    100.0\n",
		}},
		{"burst1.txt", []string{"--http-nav-burst", "1"}, []string{
			"100ms         102",
			"adaptive      1   400     36.06   11.1    100.0    100.0    100.0\n",
		}},
		{"off.txt", []string{"--http-nav-delay", "0"}, []string{
			"0ms           1 to 400",
			"off           1   400      1.80",
		}},
	}
	runGoldens(t, tests)
}

func TestSimulateCSV(t *testing.T) {
	out, _, err := runCLI(t, "simulate", "--csv", "--phases", "2", "--navigations", "30")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != "phase,nav,start_ms,gap_ms,wait_ms,spacing_ms,pressure" {
		t.Fatalf("header: got %q", lines[0])
	}
	if len(lines) != 61 {
		t.Fatalf("rows: got %d, want 60 and a header", len(lines)-1)
	}
	// Navigation 12 of phase 1 waited 10.5 ms (requested at 49.5, went at 60).
	if lines[12] != "1,12,60.000,15.000,10.500,40.000,12" {
		t.Errorf("row of navigation 12: got %q", lines[12])
	}
	golden(t, "csv-30x2.csv", out)
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--http-nav-delay", "-5"}, `--http-nav-delay "-5"`},
		{[]string{"simulate", "--http-nav-delay", "fast"}, `--http-nav-delay "fast"`},
		{[]string{"simulate", "--http-nav-delay", "1e3"}, `--http-nav-delay "1e3"`},
		{[]string{"simulate", "--http-nav-burst", "-1"}, `--http-nav-burst "-1": want a whole number of navigations ≥ 0 (0 acts as 1)`},
		{[]string{"simulate", "--rule", "*.slow.test=fast"}, `--rule "*.slow.test=fast": "fast": want adaptive, fixed:DURATION, off or exempt`},
		{[]string{"simulate", "--rule", "*.slow.test"}, `--rule "*.slow.test": want PATTERN=SETTING`},
		{[]string{"simulate", "--bucket", "domain"}, `--bucket "domain": want host, site or ip`},
		{[]string{"simulate", "--host", "HTTP://x/"}, `--host "HTTP://x/"`},
		{[]string{"--rules", "/no/such/rules.txt"}, `--rules: open /no/such/rules.txt`},
		{[]string{"--robots", "never"}, `--robots "never": want ignore, crawl-delay`},
		{[]string{"--exempt-host", "http://a/"}, `--exempt-host "http://a/"`},
		{[]string{"simulate", "--http-nav-burst", "ten"}, `--http-nav-burst "ten"`},
		{[]string{"simulate", "--navigations", "0"}, "--navigations 0"},
		{[]string{"simulate", "--load", "soon"}, "soon"},
		{[]string{"simulate", "--no-such-flag"}, "no-such-flag"},
		{[]string{"--http-nav-delay", "x"}, `--http-nav-delay "x"`},
		{[]string{"simulate", "--answer", "10s-11s"}, `--answer "10s-11s": want FROM-TO=STATUS[;NAME: VALUE]...`},
		{[]string{"simulate", "--answer", "10s-11s=429;Retry-After 10"}, `--answer "10s-11s=429;Retry-After 10": header "Retry-After 10": want NAME: VALUE`},
		{[]string{"simulate", "--down", "90s-10s"}, `--down "90s-10s": want FROM-TO`},
		{[]string{"simulate", "--max-wait", "2h"}, `--max-wait "2h": at most an hour`},
		{[]string{"simulate", "--ratelimit-headers", "maybe"}, `--ratelimit-headers "maybe"`},
		{[]string{"simulate", "--retry-after-max", "500ms"}, `--retry-after-max "500ms"`},
		{[]string{"simulate", "--overload-header", "a b"}, `--overload-header "a b"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, err := runCLI(t, tt.args...)
			var ue cmdline.UsageError
			if err == nil || !errorsAs(err, &ue) {
				t.Fatalf("got error %v, want a usage error", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("got %q, want one line naming %q", msg, tt.want)
			}
			if out != "" || errOut != "" {
				t.Errorf("printed %q / %q, want nothing but the error", out, errOut)
			}
		})
	}
}

// TestLimiterFlagsFromEnvironment: the relay reads the limiter's flags from
// CDP_THROTTLE_* variables; simulate does not (a replay says on its command
// line what it replays), even a bad value.
func TestLimiterFlagsFromEnvironment(t *testing.T) {
	t.Setenv("CDP_THROTTLE_HTTP_NAV_DELAY", "100")
	t.Setenv("CDP_THROTTLE_HTTP_NAV_BURST", "1")
	t.Setenv("CDP_THROTTLE_RULE", "example.com=off")
	cfg, err := relayConfigOf(t)
	if err != nil || cfg.policy.Default.Interval != 100*time.Millisecond || cfg.policy.Default.Burst != 1 || len(cfg.policy.Rules) != 1 {
		t.Errorf("relay: got %+v, %v; want fixed 100 ms, burst 1 and one rule from the environment", cfg.policy, err)
	}
	out, _, err := runCLI(t, "simulate", "--navigations", "3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "adaptive      1     3      0.01") || !strings.Contains(out, "burst 10") {
		t.Errorf("simulate read the relay's environment:\n%s", out)
	}
	out, _, err = runCLI(t, "simulate", "--navigations", "3", "--http-nav-delay", "100", "--http-nav-burst", "1")
	if err != nil || !strings.Contains(out, "fixed100      1     3      0.20") {
		t.Errorf("simulate's own flags: got %v\n%s", err, out)
	}
	t.Setenv("CDP_THROTTLE_HTTP_NAV_DELAY", "-1")
	if _, _, err := runCLI(t, "simulate"); err != nil {
		t.Errorf("simulate with a bad CDP_THROTTLE_HTTP_NAV_DELAY: got %v, want it ignored", err)
	}
	if _, err := relayConfigOf(t); err == nil || !strings.Contains(err.Error(), "--http-nav-delay") {
		t.Errorf("relay with a bad CDP_THROTTLE_HTTP_NAV_DELAY: got %v, want an error naming --http-nav-delay", err)
	}
}

func errorsAs(err error, target *cmdline.UsageError) bool { return errors.As(err, target) }

// TestSimulatePolicy replays per-site settings: a rule, one schedule per
// site for two hosts in turn (the span of one host's 200 navigations, where
// two hosts of their own would go much faster), and a Crawl-delay.
func TestSimulatePolicy(t *testing.T) {
	tests := []simulateCase{
		{"rule-fixed300.txt", []string{"--navigations", "20", "--rule", "example.com=fixed:300ms,burst:1", "--rule", "*=off"}, []string{
			"; burst 1, by rule 1\n",
			"fixed300      1    20      5.70    3.3    300.0    300.0    300.0\n",
		}},
		{"site-bucket.txt", []string{"--navigations", "200", "--bucket", "site", "--host", "www.site.test", "--host", "site.test"}, []string{
			"to www.site.test and site.test in turn, bucket site,",
			"adaptive      1   200     16.06   12.4    100.0    100.0    100.0\n",
		}},
		{"host-buckets.txt", []string{"--navigations", "200", "--host", "www.site.test", "--host", "site.test"}, []string{
			"adaptive      1   200      6.06",
		}},
		{"crawl-delay.txt", []string{"--navigations", "10", "--crawl-delay", "500ms"}, []string{
			"Crawl-delay 500ms: no burst",
			"adaptive      1    10      4.50    2.0    500.0    500.0    500.0\n",
		}},
	}
	one, _, err := runCLI(t, "simulate", "--navigations", "200")
	if err != nil || !strings.Contains(one, "adaptive      1   200     16.06") {
		t.Fatalf("one host, 200 navigations: got %v\n%s", err, one)
	}
	runGoldens(t, tests)
}

// TestSimulateConcurrency replays a cap on navigations in flight: eight
// pages at once, each asking for its next navigation when its last one is
// answered 800 ms after it went, two in flight at most: twelve pairs, 800
// ms apart; without the cap all eight go at once.
func TestSimulateConcurrency(t *testing.T) {
	args := []string{"simulate", "--navigations", "24", "--pages", "8", "--load", "800ms"}
	capped, _, err := runCLI(t, append(args, "--http-nav-concurrency", "2")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"from 8 pages at once, each page asking for its next 800ms after its last one started (when it is answered)",
		"adaptive      1    24      8.80    2.6      0.0    800.0    800.0\n",
		"in flight at once, per host: at most 2 (cap 2); 22 of 24 navigations waited for a place",
		"0ms           1 to 24              0s\n", // the cap held them, not the spacing
	} {
		if !strings.Contains(capped, want) {
			t.Errorf("with --http-nav-concurrency 2, output lacks %q:\n%s", want, capped)
		}
	}
	golden(t, "concurrency-2.txt", capped)
	free, _, err := runCLI(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(free, "in flight at once, per host: at most 8 (no cap)\n") || !strings.Contains(free, "adaptive      1    24      1.60") {
		t.Errorf("without a cap:\n%s", free)
	}
	// A rule's cap, and the CSV's page and place columns.
	csv, _, err := runCLI(t, "simulate", "--csv", "--navigations", "4", "--pages", "4", "--load", "1s", "--rule", "example.com=concurrency:1")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv), "\n")
	if lines[0] != "phase,nav,start_ms,gap_ms,wait_ms,spacing_ms,pressure,page,place_wait_ms" || lines[4] != "1,4,3000.000,1000.000,3000.000,20.000,1,4,3000.000" {
		t.Errorf("CSV with a rule's concurrency:1:\n%s", csv)
	}
	if _, _, err := runCLI(t, "simulate", "--pages", "-1"); err == nil || !strings.Contains(err.Error(), "--pages -1") {
		t.Errorf("--pages -1: got %v", err)
	}
}

// TestSimulateJitter replays --jitter: at 200 ms, burst 1, jitter 0.5,
// every held gap is 100 to 300 ms and they spread, the span stays the
// schedule's (19.8 s for 100 navigations, within 2 × 0.5 spacings), the
// adaptive run keeps its 36.06 s within as much, a seed replays the same
// slots, and --jitter 0 prints exactly what no --jitter prints.
func TestSimulateJitter(t *testing.T) {
	args := []string{"simulate", "--http-nav-delay", "200ms", "--http-nav-burst", "1", "--navigations", "100", "--jitter", "0.5"}
	out, _, err := runCLI(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{
		"jitter 0.5 (seed 1): the 99 held navigations came 104.0 to 294.4ms after the one before, mean 199.7ms, stdev 53.4ms\n",
		"fixed200      1   100     19.77    5.0    192.3    289.2    294.4\n",
	} {
		if !strings.Contains(out, c) {
			t.Errorf("output lacks %q:\n%s", c, out)
		}
	}
	golden(t, "jitter.txt", out)
	if again, _, _ := runCLI(t, args...); again != out {
		t.Errorf("the same seed replays other slots:\n%s\nthen\n%s", out, again)
	}
	if other, _, _ := runCLI(t, append(args, "--seed", "2")...); other == out {
		t.Errorf("--seed 2 replays the slots of seed 1")
	}
	adaptive, _, err := runCLI(t, "simulate", "--jitter", "0.5")
	if err != nil || !strings.Contains(adaptive, "adaptive      1   400     36.01") {
		t.Errorf("adaptive with jitter 0.5: got %v, want a span of 36.01 s (36.06 s without, within 2 × 0.5 × 100ms)\n%s", err, adaptive)
	}
	for _, a := range [][]string{nil, {"--http-nav-delay", "100"}, {"--http-nav-burst", "1", "--load", "0"}} {
		without, _, _ := runCLI(t, append([]string{"simulate"}, a...)...)
		zero, _, _ := runCLI(t, append([]string{"simulate", "--jitter", "0"}, a...)...)
		if zero != without {
			t.Errorf("%q: --jitter 0 prints\n%s\nwithout --jitter\n%s", a, zero, without)
		}
	}
	if _, _, err := runCLI(t, "simulate", "--jitter", "1"); err == nil || !strings.Contains(err.Error(), `--jitter "1": want a fraction F`) {
		t.Errorf("--jitter 1: got %v, want a usage error", err)
	}
}

// TestSimulateBreaker: simulate --host-errors replays a host's breaker
// against a site down for a while: five failures open it for 30 s and its
// jitter, the failed probe for twice that, the answered probe closes it;
// the same seed replays the same table (a golden file), an --answer's
// long Retry-After holds it open longer, and --host-errors without a site
// that fails is refused.
func TestSimulateBreaker(t *testing.T) {
	out, _, err := runCLI(t, "simulate", "--host-errors", "5/1m", "--down", "0s-90s", "--navigations", "130", "--load", "1s")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "breaker.txt", out)
	for _, want := range []string{"0s to 4s               5  went, failed", "39s                    1  went as the probe, failed", "104s                   1  went as the probe, answered"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	// --answer replays it too: a 429's Retry-After of 120 s, honoured
	// whole under --retry-after-max 5m, holds it open past its 30 s.
	long, _, err := runCLI(t, "simulate", "--host-errors", "5/1m", "--answer", "0s-20s=429;Retry-After: 120", "--retry-after-max", "5m", "--navigations", "200", "--load", "1s")
	if err != nil || !strings.Contains(long, "the site answers 429 (Retry-After: 120) from 0s up to 20s after the start\n") ||
		!strings.Contains(long, "5s to 124s           120  deferred until 125s\n") {
		t.Errorf("--host-errors 5/1m with a 429 asking for 120 s: got %v\n%s", err, long)
	}
	for _, args := range [][]string{
		{"simulate", "--host-errors", "5/1m"},
		{"simulate", "--down", "90s-10s"},
		{"simulate", "--host-errors", "5/1m", "--down", "90s-10s"},
		{"simulate", "--host-errors", "0/1m", "--down", "0s-10s"},
	} {
		if _, _, err := runCLI(t, args...); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestSimulateAnswers replays answers with headers and --max-wait (issue
// 40): a 429 asking for 10 s under --max-wait 2s defers what is asked
// for meanwhile, each answered at once with the relay's 429 and the
// seconds to the slot, and nothing reaches the site until it; the
// server's RateLimit-Policy spaces a fixed 20 ms rule 200 ms apart
// (unless --ratelimit-headers ignore); a spent quota holds the next
// navigation 3 s. --down FROM-TO replays as --answer FROM-TO=503.
func TestSimulateAnswers(t *testing.T) {
	tests := []simulateCase{
		{"maxwait-429.txt", []string{"--max-wait", "2s", "--answer", "10s-11s=429;Retry-After: 10", "--navigations", "60", "--load", "500ms"}, []string{
			"the site answers 429 (Retry-After: 10) from 10s up to 11s after the start\n",
			"--max-wait 2s: a navigation whose slot lies further ahead is answered at once with the relay's 429 and never reaches the site; its page asks again 500ms later\n",
			"10500ms       21                   20.00s\n",
			"adaptive      1    44     31.50    1.4    500.0    500.0  10500.0\n",
			"phase 1: 44 of 60 reached the site\n  43 answered 200\n  1 answered 429 (Retry-After: 10), at 10s\n",
			"  16 deferred (max-wait), asked from 10s to 17.5s, answered at once with the relay's 429, Retry-After 3 to 10 s\n",
		}},
		{"ratelimit-policy.txt", []string{"--http-nav-delay", "20ms", "--answer", `0s-1h=200;RateLimit-Policy: "p";q=5;w=1`, "--navigations", "30", "--load", "10ms"}, []string{
			"200ms         2                    0.20s\n", // the policy from the first answer on (issue 47: 20 ms at navigation 2)
			"fixed20       1    30      5.80    5.0    200.0    200.0    200.0\n",
			"gap (ms) ph 1   200.0  200.0  200.0  200.0",
		}},
		{"ratelimit-spent.txt", []string{"--http-nav-delay", "20ms", "--http-nav-burst", "1", "--answer", `1s-1.02s=200;RateLimit: "p";r=0;t=3`, "--navigations", "60", "--load", "20ms"}, []string{
			"3020ms        51                   4.00s\n",
			"fixed20       1    60      4.18   14.1     20.0     20.0   3020.0\n",
			`  1 answered 200 (RateLimit: "p";r=0;t=3), at 1s` + "\n",
		}},
	}
	runGoldens(t, tests)

	ignored, _, err := runCLI(t, "simulate", "--http-nav-delay", "20ms", "--answer", `0s-1h=200;RateLimit-Policy: "p";q=5;w=1`, "--navigations", "30", "--load", "10ms", "--ratelimit-headers", "ignore")
	if err != nil || !strings.Contains(ignored, "fixed20       1    30      0.40   72.5     10.0     20.0     20.0\n") {
		t.Errorf("--ratelimit-headers ignore: got %v, want the rule's 20 ms:\n%s", err, ignored)
	}

	// The CSV: a deferred navigation has no gap, the reason and the
	// Retry-After of the relay's 429; the next that reached the site its
	// gap from the last that did.
	csv, _, err := runCLI(t, "simulate", "--csv", "--max-wait", "2s", "--answer", "2s-2.5s=429;Retry-After: 5", "--navigations", "12", "--load", "500ms")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(csv), "\n")
	for i, want := range map[int]string{
		0:  "phase,nav,start_ms,gap_ms,wait_ms,spacing_ms,pressure,status,deferred,retry_after_s",
		4:  "1,4,1500.000,500.000,0.000,20.000,1,429,,",
		5:  "1,5,2000.000,,0.000,0.000,50,,max-wait,5",
		10: "1,10,4500.000,,0.000,0.000,25,,max-wait,3",
		11: "1,11,7000.000,5500.000,2000.000,60.000,21,200,,",
	} {
		if i >= len(lines) || lines[i] != want {
			t.Errorf("CSV line %d: got %q, want %q\n%s", i, lines[min(i, len(lines)-1)], want, csv)
		}
	}
	golden(t, "maxwait.csv", csv)

	down, _, err := runCLI(t, "simulate", "--down", "1s-2s", "--navigations", "40", "--load", "100ms")
	if err != nil {
		t.Fatal(err)
	}
	answered, _, _ := runCLI(t, "simulate", "--answer", "1s-2s=503", "--navigations", "40", "--load", "100ms")
	if down != answered || !strings.Contains(down, "answered 503, from 1s to 1.6s") {
		t.Errorf("--down 1s-2s:\n%s\n--answer 1s-2s=503:\n%s", down, answered)
	}
}
