package limitertest

import (
	"cmp"
	"math"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// WithSettings is what an implementation that books with a setting per
// booking adds to Limiter.
type WithSettings interface {
	ReserveWith(host string, cfg limiter.Config, now time.Time) limiter.Reservation
	ObserveWith(host string, cfg limiter.Config, o limiter.Outcome, now time.Time)
}

// SettingStep is a Step made with a setting of its own (ReserveWith,
// ObserveWith).
type SettingStep struct {
	Step
	Setting limiter.Config
}

var (
	adaptive1 = limiter.Config{Burst: 1}
	fixed300  = limiter.Config{Mode: limiter.Fixed, Interval: 300 * time.Millisecond, Burst: 1}
	cdn       = limiter.Config{Burst: 1, Overload: limiter.NewStatuses(403, 429)}
	// challenged reads a challenge page as overload, whatever its status.
	challenged = limiter.Config{Burst: 1, OverloadHeaders: limiter.NewHeaders(limiter.Header{Name: "cf-mitigated", Value: "challenge"})}
)

// SettingCases are bookings whose setting travels with them: the rule of
// a policy that gives hosts settings of their own, and Crawl-delay floors.
var SettingCases = []struct {
	Name  string
	Steps []SettingStep
}{
	{"a floor spaces from the second navigation: no burst", []SettingStep{
		{Step{0, "", nil, 0}, limiter.Config{Floor: 500 * time.Millisecond}},
		{Step{0, "", nil, 500}, limiter.Config{Floor: 500 * time.Millisecond}},
		{Step{0, "", nil, 1000}, limiter.Config{Floor: 500 * time.Millisecond}},
	}},
	{"a floor raises a fixed interval", []SettingStep{
		{Step{0, "", nil, 0}, limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 3, Floor: 300 * time.Millisecond}},
		{Step{0, "", nil, 300}, limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 3, Floor: 300 * time.Millisecond}},
	}},
	{"off ignores a floor", []SettingStep{
		{Step{0, "", nil, 0}, limiter.Config{Mode: limiter.Off, Floor: time.Second}},
		{Step{0, "", nil, 0}, limiter.Config{Mode: limiter.Off, Floor: time.Second}},
	}},
	{"one schedule, each booking spaced by its own setting", []SettingStep{
		// fixed: tat 300. adaptive, burst 10: max(0, 300−180) = 120, tat 320.
		// fixed again: 320.
		{Step{0, "", nil, 0}, fixed300},
		{Step{0, "", nil, 120}, limiter.Config{}},
		{Step{0, "", nil, 320}, fixed300},
	}},
	{"an off setting books nothing", []SettingStep{
		{Step{0, "", nil, 0}, limiter.Config{Mode: limiter.Off}},
		{Step{0, "", nil, 0}, adaptive1},
		{Step{0, "", nil, 20}, adaptive1},
	}},
	{"only an adaptive setting hears answers", []SettingStep{
		{Step{0, "", nil, 0}, adaptive1},
		{Step{10, "", status(503, ""), 0}, fixed300},
		{Step{10, "", nil, 20}, adaptive1},
		// pressure 2 + 50: spacing 20 × (1 + 5) = 120 from tat 40.
		{Step{10, "", status(503, ""), 0}, adaptive1},
		{Step{20, "", nil, 40}, adaptive1},
		{Step{20, "", nil, 160}, adaptive1},
	}},
	{"the setting's overload statuses: a 403 in them adds 50, a 503 outside them 10", []SettingStep{
		// pressure 1 → 51 after the 403: spacing 120 from tat 20.
		{Step{0, "", nil, 0}, cdn},
		{Step{10, "", status(403, ""), 0}, cdn},
		{Step{10, "", nil, 20}, cdn},
		// 52 → 62 after the 503, which is no overload here: spacing 20 × (1 + 6) = 140.
		{Step{10, "", status(503, ""), 0}, cdn},
		{Step{10, "", nil, 140}, cdn},
		{Step{10, "", nil, 280}, cdn},
	}},
	{"Retry-After is honoured on the setting's overload statuses only", []SettingStep{
		{Step{0, "", nil, 0}, cdn},
		{Step{10, "", status(503, "5"), 0}, cdn}, // not overload here: Retry-After ignored
		{Step{10, "", nil, 20}, cdn},
		{Step{20, "", status(403, "2"), 0}, cdn},
		{Step{30, "", nil, 2020}, cdn},
	}},
	{"no overload statuses: 429 is calm, 503 a failure", []SettingStep{
		{Step{0, "", nil, 0}, limiter.Config{Burst: 1, Overload: limiter.NewStatuses()}},
		{Step{10, "", status(429, "30"), 0}, limiter.Config{Burst: 1, Overload: limiter.NewStatuses()}},
		{Step{10, "", nil, 20}, limiter.Config{Burst: 1, Overload: limiter.NewStatuses()}},
		{Step{10, "", status(503, ""), 0}, limiter.Config{Burst: 1, Overload: limiter.NewStatuses()}},
		// pressure 2 → 12 after the 503: spacing 40.
		{Step{10, "", nil, 40}, limiter.Config{Burst: 1, Overload: limiter.NewStatuses()}},
		{Step{10, "", nil, 80}, limiter.Config{Burst: 1, Overload: limiter.NewStatuses()}},
	}},
	{"a slow answer adds 10, as a failure", []SettingStep{
		// pressure 1 → 11: spacing 40 from tat 20.
		{Step{0, "", nil, 0}, adaptive1},
		{Step{10, "", &limiter.Outcome{Status: 200, Slow: true}, 0}, adaptive1},
		{Step{10, "", nil, 20}, adaptive1},
		{Step{10, "", nil, 60}, adaptive1},
	}},
	{"a booking with a setting books loopback: a policy decides what is exempt", []SettingStep{
		{Step{0, "127.0.0.1", nil, 0}, fixed300},
		{Step{0, "127.0.0.1", nil, 300}, fixed300},
		{Step{0, "localhost", nil, 0}, adaptive1},
		{Step{0, "localhost", nil, 20}, adaptive1},
	}},
	{"an HTTP-date Retry-After waits until the date, in each of its three forms", []SettingStep{
		// T0 is Sun, 29 Nov 2026 12:00:00 GMT: the dates are 3 s, 5 s and 7 s after it.
		{Step{0, "", nil, 0}, adaptive1},
		{Step{10, "", status(429, "Sun, 29 Nov 2026 12:00:03 GMT"), 0}, adaptive1},
		{Step{20, "", nil, 3000}, adaptive1},
		{Step{3010, "", status(503, "Sunday, 29-Nov-26 12:00:05 GMT"), 0}, adaptive1},
		{Step{3020, "", nil, 5000}, adaptive1},
		{Step{5010, "", status(429, "Sun Nov 29 12:00:07 2026"), 0}, adaptive1},
		{Step{5020, "", nil, 7000}, adaptive1},
	}},
	{"an HTTP-date already past waits nothing more", []SettingStep{
		// pressure 1 → 51: spacing 120 from tat 20, as with no Retry-After.
		{Step{0, "", nil, 0}, adaptive1},
		{Step{10, "", status(429, "Sun, 29 Nov 2026 11:59:00 GMT"), 0}, adaptive1},
		{Step{20, "", nil, 20}, adaptive1},
		{Step{20, "", nil, 140}, adaptive1},
	}},
	{"Retry-After is capped at the setting's RetryAfterMax: 60 s unless it says", []SettingStep{
		{Step{0, "", nil, 0}, adaptive1},
		{Step{10, "", status(429, "120"), 0}, adaptive1},
		{Step{20, "", nil, 60010}, adaptive1},
		{Step{0, "b.example", nil, 0}, limiter.Config{Burst: 1, RetryAfterMax: 90 * time.Second}},
		{Step{10, "b.example", status(429, "120"), 0}, limiter.Config{Burst: 1, RetryAfterMax: 90 * time.Second}},
		{Step{20, "b.example", nil, 90010}, limiter.Config{Burst: 1, RetryAfterMax: 90 * time.Second}},
		{Step{0, "c.example", nil, 0}, limiter.Config{Burst: 1, RetryAfterMax: 2 * time.Hour}}, // acts as an hour
		{Step{10, "c.example", status(503, "Mon, 30 Nov 2026 12:00:00 GMT"), 0}, limiter.Config{Burst: 1, RetryAfterMax: 2 * time.Hour}},
		{Step{20, "c.example", nil, 3600010}, limiter.Config{Burst: 1, RetryAfterMax: 2 * time.Hour}},
	}},
	{"an overload header makes a 200 overload, its Retry-After honoured", []SettingStep{
		// pressure 1 → 51 after the challenge: spacing 120 from tat 20.
		{Step{0, "", nil, 0}, challenged},
		{Step{10, "", &limiter.Outcome{Status: 200, Headers: []limiter.Header{{Name: "CF-Mitigated", Value: "Challenge"}}}, 0}, challenged},
		{Step{10, "", nil, 20}, challenged},
		{Step{10, "", nil, 140}, challenged},
		{Step{0, "b.example", nil, 0}, challenged},
		{Step{10, "b.example", &limiter.Outcome{Status: 200, RetryAfter: "2", Headers: []limiter.Header{{Name: "cf-mitigated", Value: "challenge"}}}, 0}, challenged},
		{Step{20, "b.example", nil, 2010}, challenged},
	}},
	{"an overload header with another value, or on a setting without it, is calm", []SettingStep{
		{Step{0, "", nil, 0}, challenged},
		{Step{10, "", &limiter.Outcome{Status: 200, RetryAfter: "5", Headers: []limiter.Header{{Name: "cf-mitigated", Value: "managed"}}}, 0}, challenged},
		{Step{10, "", nil, 20}, challenged},
		{Step{10, "", &limiter.Outcome{Status: 200, RetryAfter: "5", Headers: []limiter.Header{{Name: "cf-mitigated", Value: "challenge"}}}, 0}, adaptive1},
		{Step{10, "", nil, 40}, adaptive1},
	}},
	{"Retry-After with a floor", []SettingStep{
		{Step{0, "", nil, 0}, limiter.Config{Floor: 500 * time.Millisecond}},
		{Step{10, "", status(429, "2"), 0}, limiter.Config{Floor: 500 * time.Millisecond}},
		{Step{20, "", nil, 2010}, limiter.Config{Floor: 500 * time.Millisecond}},
		{Step{20, "", nil, 2510}, limiter.Config{Floor: 500 * time.Millisecond}},
	}},
}

// Settings runs SettingCases, each against a fresh implementation, which
// must implement WithSettings.
func Settings(t *testing.T, newL New) {
	for _, tt := range SettingCases {
		t.Run(tt.Name, func(t *testing.T) {
			l, ok := newL(t, limiter.Config{}).Limiter.(WithSettings)
			if !ok {
				t.Fatal("the implementation has no ReserveWith and ObserveWith")
			}
			for i, s := range tt.Steps {
				host := cmp.Or(s.Host, "example.com")
				if s.Outcome != nil {
					l.ObserveWith(host, s.Setting, *s.Outcome, At(s.AtMS))
					continue
				}
				r := l.ReserveWith(host, s.Setting, At(s.AtMS))
				if got := r.Start.Sub(T0); got != time.Duration(s.WantStart*float64(time.Millisecond)) {
					t.Fatalf("step %d: ReserveWith(%s, %+v, %vms): got start %v, want %vms", i, host, s.Setting, s.AtMS, got, s.WantStart)
				}
				if r.Tracked != (s.Setting.Mode != limiter.Off) {
					t.Errorf("step %d: got Tracked %v with mode %v", i, r.Tracked, s.Setting.Mode)
				}
				if r.Tracked && (r.Mode != s.Setting.Mode || r.Bucket != host) {
					t.Errorf("step %d: got mode %v bucket %q, want %v and %q", i, r.Mode, r.Bucket, s.Setting.Mode, host)
				}
			}
		})
	}
}

// Pusher is what an implementation that follows late departures adds to
// Limiter (package pace tells it).
type Pusher interface {
	Push(host string, by time.Duration, now time.Time)
}

// Push checks that a push moves the slots booked after it, and only those:
// a host not known, or an exempt one, has nothing to move.
func Push(t *testing.T, newL New) {
	l := newL(t, limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1})
	p, ok := l.Limiter.(Pusher)
	if !ok {
		t.Fatalf("%T does not implement Pusher", l.Limiter)
	}
	RunSteps(t, l, []Step{{0, "", nil, 0}, {0, "", nil, 100}})
	p.Push("example.com", 30*time.Millisecond, At(10))
	RunSteps(t, l, []Step{{20, "", nil, 230}, {20, "", nil, 330}})
	// Pushes add up.
	p.Push("example.com", 5*time.Millisecond, At(30))
	p.Push("example.com", 5*time.Millisecond, At(30))
	RunSteps(t, l, []Step{{40, "", nil, 440}})
	// An idle host's schedule ran out long ago: what it is pushed by from
	// there does not reach now.
	p.Push("example.com", 200*time.Millisecond, At(2000))
	RunSteps(t, l, []Step{{2000, "", nil, 2000}})
	// A host never booked has no schedule to move; neither does a
	// loopback one.
	p.Push("other.example", 50*time.Millisecond, At(3000))
	p.Push("127.0.0.1", 50*time.Millisecond, At(3000))
	RunSteps(t, l, []Step{{3000, "other.example", nil, 3000}, {3000, "127.0.0.1", nil, 3000}})
}

// SlackAndHeadroom checks what a booking says of its place in the rule:
// how much sooner than the steady schedule a burst let it start (Slack),
// and how much later than the earliest the rule allowed it starts
// (Headroom).
func SlackAndHeadroom(t *testing.T, newL New) {
	l := newL(t, limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 3})
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for i, s := range []struct {
		at, start, slack, headroom float64
	}{
		{0, 0, 0, 200},   // unknown host: at once, tau to spare
		{0, 0, 100, 100}, // the burst: 100 ms before its steady slot
		{0, 0, 200, 0},
		{0, 100, 200, 0},     // the burst spent: one interval later
		{1000, 1000, 0, 800}, // idle: asked 800 ms after the earliest allowed
	} {
		r := l.Reserve("example.com", At(s.at))
		if r.Start != At(s.start) || r.Slack != ms(s.slack) || r.Headroom != ms(s.headroom) {
			t.Errorf("booking %d at %vms: start %v slack %v headroom %v, want %vms %vms %vms",
				i, s.at, r.Start.Sub(T0), r.Slack, r.Headroom, s.start, s.slack, s.headroom)
		}
	}
	// With a burst of 1 nothing goes before its steady slot.
	l = newL(t, limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1})
	for i, s := range []struct {
		at, start, headroom float64
	}{{0, 0, 0}, {0, 100, 0}, {150, 200, 0}, {450, 450, 150}} {
		r := l.Reserve("example.com", At(s.at))
		if r.Start != At(s.start) || r.Slack != 0 || r.Headroom != ms(s.headroom) {
			t.Errorf("burst 1, booking %d at %vms: start %v slack %v headroom %v, want %vms 0 %vms",
				i, s.at, r.Start.Sub(T0), r.Slack, r.Headroom, s.start, s.headroom)
		}
	}
}

// Randomised is what an implementation that jitters its slots adds to
// Limiter: a seeded source, so that its jitter is the same each run.
type Randomised interface {
	SetRand(r *limiter.Rand)
}

// JitterCases are the settings Jitter checks, each with navigations asked
// for every 5 ms from T0, so that every one after the first is held.
var JitterCases = []struct {
	Name string
	limiter.Config
	// MinStdev is the least standard deviation of the gaps, as a fraction
	// of F × spacing (0: not checked): jitter must spread them, and put
	// no more of them at either bound than elsewhere.
	MinStdev float64
}{
	{"fixed 200ms F 0.5", limiter.Config{Mode: limiter.Fixed, Interval: 200 * time.Millisecond, Burst: 1, Jitter: 0.5}, 0.4},
	{"fixed 200ms F 0.25", limiter.Config{Mode: limiter.Fixed, Interval: 200 * time.Millisecond, Burst: 1, Jitter: 0.25}, 0.4},
	{"fixed 100ms F 0.9 burst 10", limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Jitter: 0.9}, 0.4},
	{"adaptive F 0.5", limiter.Config{Jitter: 0.5}, 0.4},
	{"adaptive burst 1 F 0.5", limiter.Config{Burst: 1, Jitter: 0.5}, 0.4},
	// A Crawl-delay that sets the spacing stays a floor: jitter can only
	// lengthen a gap then, and settles late.
	{"Crawl-delay 300ms over fixed 200ms F 0.5", limiter.Config{Mode: limiter.Fixed, Interval: 200 * time.Millisecond, Floor: 300 * time.Millisecond, Jitter: 0.5}, 0},
}

// Jitter checks Config.Jitter with seeded randomness: every held slot is
// within ±F × spacing of the slot the rule gives without jitter, never
// closer to the one before than (1 − F) × spacing (nor than a Crawl-delay)
// nor further than (1 + F) × spacing, the span of 1000 navigations is the
// rule's within 2F spacings (the mean rate unchanged), the gaps spread,
// and a jitter of 0, or one out of [0, 1), books exactly the rule's
// schedule. The slots are limiter.Limiter's with the same seed, within
// 0.1 ms: an implementation in microseconds rounds each slot down, and a
// slot spaced from the one before carries its rounding on (a few µs over
// 1000 navigations). A Retry-After and a push are never shortened by jitter.
func Jitter(t *testing.T, newL New) {
	const n = 1000
	us := time.Microsecond // an implementation in microseconds rounds each slot down by less than this
	seeded := func(t *testing.T, cfg limiter.Config, seed uint64) Limiter {
		t.Helper()
		l := newL(t, cfg).Limiter
		r, ok := l.(Randomised)
		if !ok {
			t.Fatalf("%T does not implement Randomised", l)
		}
		r.SetRand(limiter.NewRand(seed))
		return l
	}
	book := func(l Limiter) []limiter.Reservation {
		out := make([]limiter.Reservation, n)
		for i := range out {
			out[i] = l.Reserve("example.com", T0.Add(time.Duration(i)*5*time.Millisecond))
		}
		return out
	}
	for _, tt := range JitterCases {
		t.Run(tt.Name, func(t *testing.T) {
			f := tt.Jitter
			grid := tt.Config
			grid.Jitter = 0
			want := book(newL(t, grid).Limiter)
			got := book(seeded(t, tt.Config, 1))
			ref := limiter.New(tt.Config)
			ref.SetRand(limiter.NewRand(1))
			same := book(ref)
			var sum, sq float64
			var most time.Duration
			held, atBound := 0, 0
			for i := 1; i < n; i++ {
				s, g := got[i].Spacing, got[i].Start
				most = max(most, s)
				if s != want[i].Spacing {
					t.Fatalf("navigation %d: spacing %v, want %v as without jitter", i+1, s, want[i].Spacing)
				}
				if d := g.Sub(same[i].Start); d.Abs() > 100*us {
					t.Fatalf("navigation %d: start %v, want %v as limiter.Limiter books it with the same seed", i+1, g.Sub(T0), same[i].Start.Sub(T0))
				}
				if !want[i].Start.After(T0.Add(time.Duration(i) * 5 * time.Millisecond)) {
					if g != want[i].Start {
						t.Fatalf("navigation %d, not held: start %v, want %v as without jitter", i+1, g.Sub(T0), want[i].Start.Sub(T0))
					}
					continue // the burst: it goes when asked
				}
				held++
				if d := g.Sub(want[i].Start); d.Abs() > time.Duration(f*float64(s))+us {
					t.Fatalf("navigation %d: %v from its unjittered slot, want at most %v", i+1, d, time.Duration(f*float64(s)))
				}
				gap := g.Sub(got[i-1].Start)
				if lo := max(time.Duration((1-f)*float64(s)), tt.Floor); gap < lo-us {
					t.Fatalf("navigation %d: %v after the one before, want at least %v", i+1, gap, lo)
				}
				if hi := time.Duration((1 + f) * float64(s)); gap > hi+us {
					t.Fatalf("navigation %d: %v after the one before, want at most %v", i+1, gap, hi)
				}
				if lo, hi := time.Duration((1-f)*float64(s)), time.Duration((1+f)*float64(s)); gap-lo < s/200 || hi-gap < s/200 {
					atBound++
				}
				ms := limiter.Millis(gap)
				sum, sq = sum+ms, sq+ms*ms
			}
			span, span0 := got[n-1].Start.Sub(got[0].Start), want[n-1].Start.Sub(want[0].Start)
			if d := span - span0; d.Abs() > time.Duration(2*f*float64(most))+us {
				t.Errorf("span of %d navigations: %v, want the rule's %v within %v", n, span, span0, time.Duration(2*f*float64(most)))
			}
			mean := sum / float64(held)
			stdev := math.Sqrt(max(0, sq/float64(held)-mean*mean))
			if min := tt.MinStdev * f * limiter.Millis(want[n-1].Spacing); stdev < min {
				t.Errorf("stdev of the gaps: %.1fms, want at least %.1fms", stdev, min)
			}
			// Within 0.5% of a spacing of either bound, uniform gaps
			// would put about 0.5% / F of them: a few times that is a beat.
			if tt.MinStdev > 0 && float64(atBound) > 3*0.005/f*float64(held) {
				t.Errorf("%d of %d gaps within 0.5%% of a spacing of (1 ± F) × spacing, want at most %.0f", atBound, held, 3*0.005/f*float64(held))
			}
			t.Logf("%d held: gaps mean %.1fms stdev %.1fms, %d at a bound; span %v, %v without jitter", held, mean, stdev, atBound, span, span0)
		})
	}
	t.Run("0 or out of range is the rule's schedule", func(t *testing.T) {
		for _, f := range []float64{0, -0.5, 1, 1.5, math.NaN()} {
			for _, cfg := range []limiter.Config{{}, {Burst: 1}, {Mode: limiter.Fixed, Interval: 100 * time.Millisecond}} {
				want := book(newL(t, cfg).Limiter)
				cfg.Jitter = f
				got := book(seeded(t, cfg, 7))
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("jitter %v, %+v: navigation %d: got %+v, want %+v", f, cfg, i+1, got[i], want[i])
					}
				}
			}
		}
	})
	t.Run("Retry-After", func(t *testing.T) {
		for seed := range uint64(20) {
			l := seeded(t, limiter.Config{Burst: 1, Jitter: 0.5}, seed)
			l.Reserve("example.com", At(0))
			l.Observe("example.com", limiter.Outcome{Status: 429, RetryAfter: "3"}, At(50))
			if r := l.Reserve("example.com", At(60)); r.Start.Before(At(3050)) {
				t.Fatalf("seed %d: after Retry-After: 3 at 50ms: start %v, want no earlier than 3.05s", seed, r.Start.Sub(T0))
			}
		}
	})
	t.Run("Push", func(t *testing.T) {
		for seed := range uint64(20) {
			l := seeded(t, limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1, Jitter: 0.5}, seed)
			l.Reserve("example.com", At(0))
			r1 := l.Reserve("example.com", At(0))
			if r1.Slack != 0 {
				t.Fatalf("seed %d: a jittered slot has slack %v, want 0: its lateness moves the next ones", seed, r1.Slack)
			}
			l.(Pusher).Push("example.com", 30*time.Millisecond, At(10))
			if r2 := l.Reserve("example.com", At(20)); r2.Start.Sub(r1.Start) < 80*time.Millisecond {
				t.Fatalf("seed %d: after a push of 30ms: %v after the pushed navigation's slot, want at least 30ms + 50ms", seed, r2.Start.Sub(r1.Start))
			}
		}
	})
}
