package limitertest

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// MaxWaitStep is one Reserve of MaxWaitCases: when, the start it must
// get, and whether it must be deferred (nothing booked).
type MaxWaitStep struct {
	AtMS, WantStart float64
	Deferred        bool
	Outcome         *limiter.Outcome // observed at AtMS instead, when set
}

// MaxWaitCases are the tables of a setting's MaxWait (--max-wait): a
// navigation whose slot lies further ahead is not booked, and the host's
// schedule stays as it was.
var MaxWaitCases = []struct {
	Name   string
	Config limiter.Config
	Steps  []MaxWaitStep
}{
	{"a slot further than MaxWait books nothing", limiter.Config{Mode: limiter.Fixed, Interval: time.Second, Burst: 1, MaxWait: 1500 * time.Millisecond}, []MaxWaitStep{
		{AtMS: 0, WantStart: 0},
		{AtMS: 0, WantStart: 1000},
		{AtMS: 0, WantStart: 2000, Deferred: true},
		{AtMS: 0, WantStart: 2000, Deferred: true}, // the same slot: nothing was booked
		{AtMS: 600, WantStart: 2000},
		{AtMS: 600, WantStart: 3000, Deferred: true},
	}},
	{"a Retry-After past MaxWait defers until it ends", limiter.Config{MaxWait: 2 * time.Second}, []MaxWaitStep{
		{AtMS: 0, WantStart: 0},
		{AtMS: 100, Outcome: status(429, "10")},
		{AtMS: 200, WantStart: 10_100, Deferred: true},
		{AtMS: 8200, WantStart: 10_100},
	}},
	{"without MaxWait nothing is deferred", limiter.Config{Mode: limiter.Fixed, Interval: time.Minute, Burst: 1}, []MaxWaitStep{
		{AtMS: 0, WantStart: 0}, {AtMS: 0, WantStart: 60_000}, {AtMS: 0, WantStart: 120_000},
	}},
}

// MaxWait runs MaxWaitCases, each against a fresh implementation.
func MaxWait(t *testing.T, newL New) {
	for _, tt := range MaxWaitCases {
		t.Run(tt.Name, func(t *testing.T) {
			l := newL(t, tt.Config)
			for i, s := range tt.Steps {
				if s.Outcome != nil {
					l.Observe("example.com", *s.Outcome, At(s.AtMS))
					continue
				}
				r := l.Reserve("example.com", At(s.AtMS))
				got := r.Start.Sub(T0)
				if d := got - time.Duration(s.WantStart*float64(time.Millisecond)); d < 0 || d > time.Millisecond {
					t.Fatalf("step %d at %vms: start %v, want %vms (to the ms)", i, s.AtMS, got, s.WantStart)
				}
				if (r.Deferred == "max-wait") != s.Deferred || r.Tracked == s.Deferred {
					t.Fatalf("step %d at %vms: deferred %q, tracked %v; want deferred %v", i, s.AtMS, r.Deferred, r.Tracked, s.Deferred)
				}
			}
		})
	}
}
