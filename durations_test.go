package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDurationFlags: every duration flag, and a rule's duration, reads a Go
// duration or a bare number of milliseconds, through the real command
// line; a bad value's message names the flag with two dashes, however many
// the user typed, and says what is accepted.
func TestDurationFlags(t *testing.T) {
	relay := func(get func(relayConfig) time.Duration, args ...string) func(*testing.T, string) (time.Duration, error) {
		return func(t *testing.T, v string) (time.Duration, error) {
			cfg, err := relayConfigOf(t, append(args, v)...)
			if err != nil {
				return 0, err
			}
			return get(cfg), nil
		}
	}
	// simulate prints what it read: in CSV, a fixed spacing or a
	// Crawl-delay is the second navigation's gap, the idle time the start
	// of a second phase.
	simulated := func(column int, args ...string) func(*testing.T, string) (time.Duration, error) {
		return func(t *testing.T, v string) (time.Duration, error) {
			out, _, err := runCLI(t, append(append([]string{"simulate", "--csv", "--navigations", "2", "--load", "0"}, args...), v)...)
			if err != nil {
				return 0, err
			}
			rows := strings.Split(strings.TrimSpace(out), "\n")
			ms, err := strconv.ParseFloat(strings.Split(rows[len(rows)-1], ",")[column], 64)
			if err != nil {
				t.Fatalf("CSV %q: %v", out, err)
			}
			return time.Duration(ms * float64(time.Millisecond)), nil
		}
	}
	const startMS, gapMS = 2, 3
	// demo starts Chromium once its flags are read: --navigations 0 stops
	// it at the check after them, so a value is only accepted or refused.
	demo := func(flag string) func(*testing.T, string) (time.Duration, error) {
		return func(t *testing.T, v string) (time.Duration, error) {
			_, _, err := runCLI(t, "demo", "--navigations", "0", flag, v)
			if err == nil || !strings.Contains(err.Error(), "--navigations 0") {
				return 0, err
			}
			return -1, nil
		}
	}
	tests := []struct {
		flag string
		read func(*testing.T, string) (time.Duration, error)
	}{
		{"--http-nav-delay", relay(func(c relayConfig) time.Duration { return c.policy.Default.Interval }, "-http-nav-delay")},
		{"--store-timeout", relay(func(c relayConfig) time.Duration { return c.storeOpts.Timeout }, "-store-timeout")},
		{"--start-timeout", relay(func(c relayConfig) time.Duration { return c.proxy.StartTimeout }, "--start-timeout")},
		{"--http-nav-concurrency-bound", relay(func(c relayConfig) time.Duration { return c.policy.ConcurrencyBound }, "--http-nav-concurrency-bound")},
		{"--rule", relay(func(c relayConfig) time.Duration { return c.policy.Rules[0].Setting.Interval }, "--rule")},
		{"simulate --http-nav-delay", simulated(gapMS, "--http-nav-burst", "1", "--http-nav-delay")},
		{"simulate --crawl-delay", simulated(gapMS, "--crawl-delay")},
		{"simulate --idle", simulated(startMS, "--navigations", "1", "--phases", "2", "--idle")},
		{"simulate --load", func(t *testing.T, v string) (time.Duration, error) {
			out, _, err := runCLI(t, "simulate", "--navigations", "2", "--load", v)
			if err != nil {
				return 0, err
			}
			_, after, _ := strings.Cut(out, "each requested ")
			return time.ParseDuration(strings.Fields(after)[0])
		}},
		{"demo --idle", demo("--idle")},
		{"demo --fixed", demo("--fixed")},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			prefix := ""
			if tt.flag == "--rule" {
				prefix = "a.test=fixed:"
			}
			for _, c := range []struct {
				in   string
				want time.Duration
			}{{"100ms", 100 * time.Millisecond}, {"1.5s", 1500 * time.Millisecond}, {"100", 100 * time.Millisecond}} {
				got, err := tt.read(t, prefix+c.in)
				if err != nil || got != c.want && got != -1 {
					t.Errorf("%s %s: got %v, %v; want %v", tt.flag, c.in, got, err, c.want)
				}
			}
			_, err := tt.read(t, prefix+"soon")
			flag := tt.flag[strings.LastIndex(tt.flag, " ")+1:]
			want := flag + ` "soon": want a duration such as 100ms or 1.5s, or a number of milliseconds`
			if tt.flag == "--rule" {
				want = `--rule "a.test=fixed:soon": "fixed:soon": want a duration such as 100ms or 1.5s, or a number of milliseconds`
			}
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("bad value: got %v, want %s", err, want)
			}
		})
	}
	// demo's own check shows the value it read: a bare number is in ms.
	if _, _, err := runCLI(t, "demo", "--fixed", "0.5"); err == nil || !strings.Contains(err.Error(), "--fixed 500µs") {
		t.Errorf("demo --fixed 0.5: got %v, want it read as 500µs", err)
	}
}
