// Package breakertest holds the breaker's rule as tables of steps at fixed
// instants, so that every implementation is held to the same life cycle:
// the in-process breaker.Local and the Redis store's breaker in package
// store run these same checks and must decide the same at the same
// instants.
//
// It is imported by tests only, and knows nothing of Redis: each
// implementation is driven through the breaker.Breaker interface.
package breakertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
)

// New returns a fresh implementation with cfg, drawing its jitter from r,
// that knows no bucket yet. It may register cleanups on t.
type New func(t *testing.T, cfg breaker.Config, r breaker.Rand) breaker.Breaker

// T0 is the instant the tables count from: a whole number of microseconds
// since the Unix epoch, as every step is, so an implementation that keeps
// microseconds loses nothing.
var T0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// Fixed is a breaker.Rand that always draws the same number.
type Fixed float64

// Uniform returns f.
func (f Fixed) Uniform() float64 { return float64(f) }

// NoJitter draws the least jitter: a breaker opens for its pause exactly.
const NoJitter = Fixed(-1)

// Step is one call at a fixed instant: an Observe when Answer is set, an
// Allow when Want is; then, when State is set, a State check.
type Step struct {
	At     time.Duration // after T0
	Bucket string        // "" means example.com
	Answer *breaker.Answer
	// Want is the Allow's decision, Until as a time after T0 (0: zero).
	Want  *Decision
	State *State
}

// Decision is a breaker.Decision with Until after T0.
type Decision struct {
	Go, Probe bool
	Until     time.Duration
}

// State is a breaker.State with Until after T0.
type State struct {
	Phase    breaker.Phase
	Failures int
	Until    time.Duration
	Pause    time.Duration
	ProbeOut bool
}

// Case is a table of steps run against one fresh implementation.
type Case struct {
	Name   string
	Config breaker.Config
	Rand   breaker.Rand // nil means NoJitter
	Steps  []Step
}

func fail(ra time.Duration) *breaker.Answer { return &breaker.Answer{Failed: true, RetryAfter: ra} }

var (
	failed     = &breaker.Answer{Failed: true}
	ok         = &breaker.Answer{}
	probeOK    = &breaker.Answer{Probe: true}
	probeFail  = &breaker.Answer{Probe: true, Failed: true}
	probeLost  = &breaker.Answer{Probe: true, Lost: true}
	goes       = &Decision{Go: true}
	probes     = &Decision{Go: true, Probe: true}
	fiveOneMin = breaker.Config{Failures: 5, Window: time.Minute}
)

func s(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }

func deferred(until float64) *Decision { return &Decision{Until: s(until)} }

// opens is five failures, one a second from at, the last at at+4 s.
func opens(at float64) []Step {
	var out []Step
	for i := range 5 {
		out = append(out, Step{At: s(at + float64(i)), Answer: failed})
	}
	return out
}

func join(parts ...[]Step) []Step {
	var out []Step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Cases are the tables.
var Cases = []Case{
	{
		Name:   "five failures in a minute open it; one probe at 30 s; a failure doubles; success closes",
		Config: fiveOneMin,
		Steps: join(opens(0)[:4], []Step{
			{At: s(3), State: &State{Phase: breaker.Closed, Failures: 4}},
			{At: s(3.5), Want: goes},
			{At: s(4), Answer: failed, State: &State{Phase: breaker.Open, Until: s(34), Pause: s(30)}},
			{At: s(5), Want: deferred(34)},
			{At: s(33.999999), Want: deferred(34)},
			{At: s(34), Want: probes},
			{At: s(34), Want: deferred(64)},
			{At: s(35), Want: deferred(64), State: &State{Phase: breaker.HalfOpen, Until: s(64), Pause: s(30), ProbeOut: true}},
			{At: s(36), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(96), Pause: s(60)}},
			{At: s(95), Want: deferred(96)},
			{At: s(96), Want: probes},
			{At: s(97), Want: deferred(126)},
			{At: s(98), Answer: probeOK, State: &State{Phase: breaker.Closed}},
			{At: s(98), Want: goes},
			{At: s(98), Want: goes},
		}, opens(100), []Step{
			// Closed again, the pause is back to 30 s.
			{At: s(104), State: &State{Phase: breaker.Open, Until: s(134), Pause: s(30)}},
			{At: s(134), Want: probes},
		}),
	},
	{
		Name:   "the pause doubles up to 10 minutes",
		Config: fiveOneMin,
		Steps: join(opens(0), []Step{
			{At: s(34), Want: probes}, {At: s(34), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(94), Pause: s(60)}},
			{At: s(94), Want: probes}, {At: s(94), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(214), Pause: s(120)}},
			{At: s(214), Want: probes}, {At: s(214), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(454), Pause: s(240)}},
			{At: s(454), Want: probes}, {At: s(454), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(934), Pause: s(480)}},
			{At: s(934), Want: probes}, {At: s(934), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(1534), Pause: s(600)}},
			{At: s(1534), Want: probes}, {At: s(1534), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(2134), Pause: s(600)}},
			{At: s(2134), Want: probes}, {At: s(2135), Answer: probeOK, State: &State{Phase: breaker.Closed}},
		}),
	},
	{
		Name:   "a Retry-After longer than the pause lengthens it; a shorter one does not shorten it",
		Config: fiveOneMin,
		Steps: join(opens(0)[:4], []Step{
			{At: s(4), Answer: fail(120 * time.Second), State: &State{Phase: breaker.Open, Until: s(124), Pause: s(30)}},
			{At: s(50), Want: deferred(124)},
			// A late answer of a navigation that went before it opened.
			{At: s(60), Answer: fail(100 * time.Second), State: &State{Phase: breaker.Open, Until: s(160), Pause: s(30)}},
			{At: s(61), Answer: fail(10 * time.Second), State: &State{Phase: breaker.Open, Until: s(160), Pause: s(30)}},
			{At: s(160), Want: probes},
			{At: s(161), Answer: &breaker.Answer{Probe: true, Failed: true, RetryAfter: 10 * time.Second},
				State: &State{Phase: breaker.Open, Until: s(221), Pause: s(60)}},
			{At: s(221), Want: probes},
			{At: s(222), Answer: &breaker.Answer{Probe: true, Failed: true, RetryAfter: 300 * time.Second},
				State: &State{Phase: breaker.Open, Until: s(522), Pause: s(120)}},
		}),
	},
	{
		Name:   "failures spread over more than the window do not open it",
		Config: fiveOneMin,
		Steps: []Step{
			{At: s(0), Answer: failed}, {At: s(15), Answer: failed}, {At: s(30), Answer: failed}, {At: s(45), Answer: failed},
			{At: s(60), Answer: failed, State: &State{Phase: breaker.Closed, Failures: 4}}, // the first is a minute old: out
			{At: s(60), Want: goes},
			{At: s(119), State: &State{Phase: breaker.Closed, Failures: 1}},
			{At: s(120), State: &State{Phase: breaker.Closed}},
			// Five within the window, the first four minutes later.
			{At: s(300), Answer: failed}, {At: s(330), Answer: failed}, {At: s(340), Answer: failed}, {At: s(350), Answer: failed},
			{At: s(359.9), Answer: failed, State: &State{Phase: breaker.Open, Until: s(389.9), Pause: s(30)}},
		},
	},
	{
		Name:   "answers that are not failures neither count nor close",
		Config: fiveOneMin,
		Steps: join(opens(0)[:3], []Step{
			{At: s(3), Answer: ok}, {At: s(3), Answer: ok, State: &State{Phase: breaker.Closed, Failures: 3}},
			{At: s(4), Answer: failed}, {At: s(5), Answer: failed, State: &State{Phase: breaker.Open, Until: s(35), Pause: s(30)}},
			{At: s(6), Answer: ok, State: &State{Phase: breaker.Open, Until: s(35), Pause: s(30)}},
			// An answer that says it is a probe's when none went.
			{At: s(35), Answer: probeOK, State: &State{Phase: breaker.HalfOpen, Pause: s(30)}},
			{At: s(36), Want: probes},
			// Only the probe's answer decides.
			{At: s(37), Answer: ok}, {At: s(37), Answer: failed, State: &State{Phase: breaker.HalfOpen, Until: s(66), Pause: s(30), ProbeOut: true}},
			{At: s(38), Answer: probeOK, State: &State{Phase: breaker.Closed}},
		}),
	},
	{
		Name:   "a probe whose answer never comes: another after the bound, or at once when lost",
		Config: fiveOneMin,
		Steps: join(opens(0), []Step{
			{At: s(34), Want: probes},
			{At: s(63.9), Want: deferred(64)},
			{At: s(64), Want: probes, State: &State{Phase: breaker.HalfOpen, Until: s(94), Pause: s(30), ProbeOut: true}},
			{At: s(65), Want: deferred(94)},
			{At: s(66), Answer: probeLost, State: &State{Phase: breaker.HalfOpen, Pause: s(30)}},
			{At: s(66), Want: probes},
			{At: s(67), Want: deferred(96)},
			// The first probe's answer, late, still counts: the host answered.
			{At: s(70), Answer: probeOK, State: &State{Phase: breaker.Closed}},
		}),
	},
	{
		Name:   "the jitter lengthens each pause by its draw",
		Config: fiveOneMin, // DefaultJitter 0.2: the draw 0 lengthens by a tenth
		Rand:   Fixed(0),
		Steps: join(opens(0), []Step{
			{At: s(4), State: &State{Phase: breaker.Open, Until: s(37), Pause: s(30)}},
			{At: s(37), Want: probes},
			{At: s(37), Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(103), Pause: s(60)}},
		}),
	},
	{
		Name:   "no jitter when it is negative",
		Config: breaker.Config{Failures: 5, Window: time.Minute, Jitter: -1},
		Rand:   Fixed(0.9),
		Steps:  join(opens(0), []Step{{At: s(4), State: &State{Phase: breaker.Open, Until: s(34), Pause: s(30)}}}),
	},
	{
		Name:   "buckets are apart",
		Config: breaker.Config{Failures: 2, Window: time.Minute, First: 10 * time.Second, Max: 15 * time.Second},
		Steps: []Step{
			{At: s(0), Bucket: "a.example", Answer: failed},
			{At: s(1), Bucket: "b.example", Answer: failed},
			{At: s(2), Bucket: "a.example", Answer: failed, State: &State{Phase: breaker.Open, Until: s(12), Pause: s(10)}},
			{At: s(3), Bucket: "a.example", Want: deferred(12)},
			{At: s(3), Bucket: "b.example", Want: goes, State: &State{Phase: breaker.Closed, Failures: 1}},
			{At: s(12), Bucket: "a.example", Want: probes},
			{At: s(12), Bucket: "a.example", Answer: probeFail, State: &State{Phase: breaker.Open, Until: s(27), Pause: s(15)}},
		},
	},
	{
		Name:   "off",
		Config: breaker.Config{},
		Steps: join(opens(0), opens(5), []Step{
			{At: s(10), Want: goes, State: &State{Phase: breaker.Closed}},
		}),
	},
}

// Run runs every case against a fresh implementation from newB, then
// OneProbe.
func Run(t *testing.T, newB New) {
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			r := c.Rand
			if r == nil {
				r = NoJitter
			}
			b := newB(t, c.Config, r)
			for i, st := range c.Steps {
				bucket := st.Bucket
				if bucket == "" {
					bucket = "example.com"
				}
				now := T0.Add(st.At)
				where := fmt.Sprintf("step %d at %v, %s", i, st.At, bucket)
				if st.Answer != nil {
					b.Observe(bucket, *st.Answer, now)
				}
				if st.Want != nil {
					if got := decision(b.Allow(bucket, now)); got != *st.Want {
						t.Fatalf("%s: Allow: got %+v, want %+v", where, got, *st.Want)
					}
				}
				if st.State != nil {
					if got := state(b.State(bucket, now)); got != *st.State {
						t.Fatalf("%s: State: got %+v, want %+v", where, got, *st.State)
					}
				}
			}
		})
	}
	t.Run("one probe among many at once", func(t *testing.T) { OneProbe(t, newB, nil) })
}

// OneProbe opens a bucket's breaker in one implementation, then asks 32
// times at once, half in the first, half in the second, when its pause
// has ended: exactly one navigation may go, as the probe. The two are
// one process's breakers (the same function twice: two fresh ones would
// not share a bucket), or two relays' on one store.
func OneProbe(t *testing.T, first, second New) {
	cfg := breaker.Config{Failures: 1, Window: time.Minute}
	a := first(t, cfg, NoJitter)
	b := a
	if second != nil {
		b = second(t, cfg, NoJitter)
	}
	a.Observe("one.example", breaker.Answer{Failed: true}, T0)
	if st := b.State("one.example", T0); st.Phase != breaker.Open {
		t.Fatalf("the second sees %v, want open", st.Phase)
	}
	at := T0.Add(breaker.DefaultFirst)
	var wg sync.WaitGroup
	decisions := make(chan breaker.Decision, 32)
	for i := range 32 {
		wg.Go(func() {
			if i%2 == 0 {
				decisions <- a.Allow("one.example", at)
			} else {
				decisions <- b.Allow("one.example", at)
			}
		})
	}
	wg.Wait()
	close(decisions)
	went := 0
	for d := range decisions {
		if d.Go {
			went++
			if !d.Probe {
				t.Errorf("a navigation went without being the probe: %+v", d)
			}
		} else if !d.Until.Equal(at.Add(breaker.DefaultProbeBound)) {
			t.Errorf("deferred until %v, want the probe's bound %v", d.Until.Sub(T0), (breaker.DefaultFirst + breaker.DefaultProbeBound))
		}
	}
	if went != 1 {
		t.Errorf("%d navigations went, want one probe", went)
	}
	ca, cb := a.Counts(), b.Counts()
	probes, deferred := ca.Probes, ca.Deferred
	if b != a {
		probes, deferred = probes+cb.Probes, deferred+cb.Deferred
	}
	if probes != 1 || deferred != 31 {
		t.Errorf("counted %d probes, %d deferred; want 1 and 31", probes, deferred)
	}
}

func decision(d breaker.Decision) Decision {
	out := Decision{Go: d.Go, Probe: d.Probe}
	if !d.Until.IsZero() {
		out.Until = d.Until.Sub(T0)
	}
	return out
}

func state(st breaker.State) State {
	out := State{Phase: st.Phase, Failures: st.Failures, Pause: st.Pause, ProbeOut: st.ProbeOut}
	if !st.Until.IsZero() {
		out.Until = st.Until.Sub(T0)
	}
	return out
}
