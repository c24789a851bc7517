package breaker_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/breaker/breakertest"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRule runs the breaker's tables against Local.
func TestRule(t *testing.T) {
	breakertest.Run(t, func(t *testing.T, cfg breaker.Config, r breaker.Rand) breaker.Breaker {
		return breaker.NewLocal(cfg, r)
	})
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want breaker.Config
		err  string
	}{
		{"5/1m", breaker.Config{Failures: 5, Window: time.Minute}, ""},
		{" 3 / 30s ", breaker.Config{Failures: 3, Window: 30 * time.Second}, ""},
		{"1/1ns", breaker.Config{Failures: 1, Window: 1}, ""},
		{"1000/24h", breaker.Config{Failures: 1000, Window: 24 * time.Hour}, ""},
		{"", breaker.Config{}, ""},
		{"off", breaker.Config{}, ""},
		{"OFF", breaker.Config{}, ""},
		{"0/1m", breaker.Config{}, "N 0 is not within 1 to 1000"},
		{"-1/1m", breaker.Config{}, "N -1 is not within 1 to 1000"},
		{"1001/1m", breaker.Config{}, "N 1001 is not within 1 to 1000"},
		{"5", breaker.Config{}, "no /WINDOW"},
		{"5/", breaker.Config{}, `WINDOW "" is not a duration`},
		{"5/-1s", breaker.Config{}, "WINDOW -1s is not within"},
		{"5/0s", breaker.Config{}, "WINDOW 0s is not within"},
		{"5/25h", breaker.Config{}, "WINDOW 25h0m0s is not within"},
		{"5/60", breaker.Config{}, `WINDOW "60" is not a duration`},
		{"x/1m", breaker.Config{}, `N "x" is not a whole number`},
		{"5.5/1m", breaker.Config{}, `N "5.5" is not a whole number`},
		{"/1m", breaker.Config{}, `N "" is not a whole number`},
		{"5/1m/2", breaker.Config{}, `WINDOW "1m/2" is not a duration`},
	} {
		got, err := breaker.Parse(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "--host-errors") {
				t.Errorf("Parse(%q): got %+v, %v; want an error with %q", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q): got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if back, err := breaker.Parse(got.String()); err != nil || back != got {
			t.Errorf("Parse(%q).String() = %q reads back as %+v, %v", tt.in, got.String(), back, err)
		}
	}
}

func TestNormalized(t *testing.T) {
	for _, tt := range []struct {
		in, want breaker.Config
	}{
		{breaker.Config{}, breaker.Config{First: 30 * time.Second, Max: 10 * time.Minute, Jitter: 0.2, ProbeBound: 30 * time.Second}},
		{breaker.Config{First: time.Minute, Max: time.Second, Jitter: -0.5}, breaker.Config{First: time.Minute, Max: time.Minute, ProbeBound: 30 * time.Second}},
		{breaker.Config{Jitter: 3, ProbeBound: time.Second}, breaker.Config{First: 30 * time.Second, Max: 10 * time.Minute, Jitter: 1, ProbeBound: time.Second}},
	} {
		if got := tt.in.Normalized(); got != tt.want {
			t.Errorf("%+v.Normalized(): got %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// TestJitterBounds: over many openings with a seeded draw, each pause is
// lengthened by 0 to a fifth of itself, never shortened, and the draws
// spread over that range; the same seed opens at the same instants.
func TestJitterBounds(t *testing.T) {
	run := func(seed uint64) []time.Duration {
		b := breaker.NewLocal(breaker.Config{Failures: 1, Window: time.Minute}, limiter.NewRand(seed))
		now := breakertest.T0
		var extra []time.Duration
		for range 500 {
			b.Observe("j.example", breaker.Answer{Failed: true}, now)
			st := b.State("j.example", now)
			extra = append(extra, st.Until.Sub(now)-st.Pause)
			now = st.Until
			if d := b.Allow("j.example", now); !d.Probe {
				t.Fatalf("no probe at the end of the pause: %+v", d)
			}
			b.Observe("j.example", breaker.Answer{Probe: true}, now) // closes: the pause is back to 30 s
		}
		return extra
	}
	a := run(1)
	var lo, hi int
	for _, d := range a {
		if d < 0 || d >= 6*time.Second {
			t.Fatalf("a 30 s pause lengthened by %v, want 0 to 6 s", d)
		}
		if d < time.Second {
			lo++
		}
		if d >= 5*time.Second {
			hi++
		}
	}
	if lo < 50 || hi < 50 {
		t.Errorf("of 500 draws, %d lengthened under 1 s and %d over 5 s, want about 83 each", lo, hi)
	}
	if b := run(1); !slices.Equal(a, b) {
		t.Errorf("the same seed drew other pauses")
	}
}

// TestForgets: a Local forgets a bucket once it is idle, and one that
// comes back after that opens with the first pause again.
func TestForgets(t *testing.T) {
	b := breaker.NewLocal(breaker.Config{Failures: 1, Window: time.Minute}, breakertest.NoJitter)
	now := breakertest.T0
	b.Observe("gone.example", breaker.Answer{Failed: true}, now)
	now = now.Add(30 * time.Second)
	b.Allow("gone.example", now) // the probe
	b.Observe("gone.example", breaker.Answer{Probe: true, Failed: true}, now)
	if st := b.State("gone.example", now); st.Pause != time.Minute {
		t.Fatalf("after a failed probe: %+v, want a pause of 1m", st)
	}
	now = now.Add(time.Minute + breaker.DefaultMax + time.Second)
	b.Allow("other.example", now) // sweeps
	if st := b.State("gone.example", now); st != (breaker.State{}) {
		t.Errorf("an idle bucket is still known: %+v", st)
	}
	b.Observe("gone.example", breaker.Answer{Failed: true}, now)
	if st := b.State("gone.example", now); st.Pause != 30*time.Second {
		t.Errorf("a forgotten bucket opened with %v, want the first pause, 30s", st.Pause)
	}
}
