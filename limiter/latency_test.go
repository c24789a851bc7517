package limiter_test

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestBaselines: answers to one bucket at fixed instants, whether each is
// slow, and the baseline after it.
func TestBaselines(t *testing.T) {
	type step struct {
		at       time.Duration // since T0
		status   int
		took     time.Duration
		slow     bool
		baseline time.Duration // after the step
	}
	ms := time.Millisecond
	tests := []struct {
		name   string
		factor float64
		floor  time.Duration
		steps  []step
	}{
		{"the first answer sets the baseline, nothing is slow against none", 3, 0, []step{
			{0, 200, 400 * ms, false, 400 * ms},
		}},
		{"slower than factor × baseline is slow; the baseline is the fastest", 3, 0, []step{
			{0, 200, 100 * ms, false, 100 * ms},
			{1 * time.Second, 200, 300 * ms, false, 100 * ms},
			{2 * time.Second, 200, 301 * ms, true, 100 * ms},
			{3 * time.Second, 200, 60 * ms, false, 60 * ms},
			{4 * time.Second, 200, 181 * ms, true, 60 * ms},
		}},
		{"the floor: a local server's noise never counts", 3, 0, []step{
			{0, 200, 200 * time.Microsecond, false, 200 * time.Microsecond},
			{1 * time.Second, 200, 50 * ms, false, 200 * time.Microsecond},
			{2 * time.Second, 200, 51 * ms, true, 200 * time.Microsecond},
		}},
		{"a floor of its own", 2, 500 * ms, []step{
			{0, 200, 100 * ms, false, 100 * ms},
			{time.Second, 200, 450 * ms, false, 100 * ms},
			{2 * time.Second, 200, 501 * ms, true, 100 * ms},
		}},
		{"only 2xx answers are read", 3, 0, []step{
			{0, 200, 100 * ms, false, 100 * ms},
			{time.Second, 302, 1 * ms, false, 100 * ms},
			{2 * time.Second, 404, 2 * ms, false, 100 * ms},
			{3 * time.Second, 503, 5 * time.Second, false, 100 * ms},
			{4 * time.Second, 204, 10 * ms, false, 10 * ms},
		}},
		{"an answer of unknown time is not read", 3, 0, []step{
			{0, 200, 100 * ms, false, 100 * ms},
			{time.Second, 200, 0, false, 100 * ms},
		}},
		{"the baseline forgets a minute at a time, over ten minutes", 3, 0, []step{
			{0, 200, 100 * ms, false, 100 * ms},
			{90 * time.Second, 200, 250 * ms, false, 100 * ms},
			// Nine minutes and a half on the first slot is still remembered.
			{9*time.Minute + 59*time.Second, 200, 400 * ms, true, 100 * ms},
			// Ten minutes on, the first slot is forgotten: the fastest since is 250 ms.
			{10 * time.Minute, 200, 400 * ms, false, 250 * ms},
			{11*time.Minute + 30*time.Second, 200, 700 * ms, false, 400 * ms},
		}},
		{"after ten idle minutes a bucket starts afresh", 3, 0, []step{
			{0, 200, 10 * ms, false, 10 * ms},
			{30 * time.Minute, 200, 900 * ms, false, 900 * ms},
		}},
		{"a factor of 1 reads nothing as slow", 1, 0, []step{
			{0, 200, 10 * ms, false, 10 * ms},
			{time.Second, 200, 900 * ms, false, 10 * ms},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &limiter.Baselines{Factor: tt.factor, Floor: tt.floor}
			for i, s := range tt.steps {
				now := limitertestT0.Add(s.at)
				if got := b.Answer("a.example", s.status, s.took, now); got != s.slow {
					t.Fatalf("step %d: %d in %v at %v: slow %v, want %v", i, s.status, s.took, s.at, got, s.slow)
				}
				base, _, _ := b.State("a.example", now)
				if base != s.baseline {
					t.Fatalf("step %d: baseline %v, want %v", i, base, s.baseline)
				}
			}
			if _, _, ok := b.State("other.example", limitertestT0); ok {
				t.Error("a bucket never answered has a baseline")
			}
		})
	}
}

// TestBaselinesLast: State reports the last answer read, slow or not.
func TestBaselinesLast(t *testing.T) {
	b := &limiter.Baselines{Factor: 3}
	b.Answer("a.example", 200, 40*time.Millisecond, limitertestT0)
	b.Answer("a.example", 200, 700*time.Millisecond, limitertestT0)
	base, last, ok := b.State("a.example", limitertestT0)
	if !ok || base != 40*time.Millisecond || last != 700*time.Millisecond {
		t.Errorf("State: %v, %v, %v; want 40ms, 700ms, true", base, last, ok)
	}
}

// limitertestT0 is a whole minute, so slots begin on it.
var limitertestT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// TestStatuses: the overload statuses and what each answer does.
func TestStatuses(t *testing.T) {
	var def limiter.Statuses
	if !def.Has(429) || !def.Has(503) || def.Has(403) || def.String() != "429,503" || !def.IsDefault() {
		t.Errorf("zero Statuses: %v, want 429 and 503", def)
	}
	s := limiter.NewStatuses(403, 429, 503, 99, 600)
	if !s.Has(403) || s.Has(500) || s.Has(99) || s.Has(600) || s.String() != "403,429,503" || s.IsDefault() {
		t.Errorf("NewStatuses: %v", s)
	}
	if none := limiter.NewStatuses(); none.Has(429) || none.String() != "" {
		t.Errorf("empty set: %v", none)
	}
	cdn := limiter.Config{Overload: limiter.NewStatuses(403, 429, 503)}
	tests := []struct {
		cfg  limiter.Config
		o    limiter.Outcome
		want limiter.Effect
	}{
		{limiter.Config{}, limiter.Outcome{Status: 200}, limiter.Calm},
		{limiter.Config{}, limiter.Outcome{Status: 403}, limiter.Calm},
		{cdn, limiter.Outcome{Status: 403}, limiter.Overload},
		{limiter.Config{}, limiter.Outcome{Status: 503}, limiter.Overload},
		{limiter.Config{Overload: limiter.NewStatuses(429)}, limiter.Outcome{Status: 503}, limiter.Failure},
		{limiter.Config{}, limiter.Outcome{NoAnswer: true}, limiter.Failure},
		{limiter.Config{}, limiter.Outcome{Status: 200, Slow: true}, limiter.Slow},
		{limiter.Config{}, limiter.Outcome{Status: 500, Slow: true}, limiter.Failure},
		{limiter.Config{}, limiter.Outcome{}, limiter.Calm},
	}
	for _, tt := range tests {
		if got := tt.cfg.Effect(tt.o); got != tt.want {
			t.Errorf("%v: Effect(%+v) = %v, want %v", tt.cfg.Overload, tt.o, got, tt.want)
		}
	}
}
