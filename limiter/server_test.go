package limiter

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// serverStep is one step of a host's schedule at a fixed instant: an
// answer observed (status, with what its headers said), or a booking and
// the start it must get.
type serverStep struct {
	atMS      float64
	observe   bool
	status    int
	retry     string
	server    ratelimit.Limits
	wantStart float64 // a booking's start, in ms
}

func observeAt(ms float64, status int, server ratelimit.Limits) serverStep {
	return serverStep{atMS: ms, observe: true, status: status, server: server}
}

func book(ms, wantStart float64) serverStep { return serverStep{atMS: ms, wantStart: wantStart} }

func TestServerLimits(t *testing.T) {
	policy := ratelimit.Limits{Spacing: 200 * time.Millisecond}
	hour := float64(ServerPolicyLife / time.Millisecond)
	tests := []struct {
		name  string
		cfg   Config
		steps []serverStep
	}{
		{"no headers: the rule's burst, as before", Config{}, []serverStep{
			observeAt(0, 200, ratelimit.Limits{}),
			book(0, 0), book(0, 0), book(0, 0),
		}},
		{"a policy is the least spacing, with no burst", Config{}, []serverStep{
			observeAt(0, 200, policy),
			book(0, 0), book(0, 200), book(0, 400), book(1000, 1000), book(1000, 1200),
		}},
		{"a policy on a host already booked", Config{}, []serverStep{
			book(0, 0), book(0, 0),
			observeAt(10, 200, policy),
			book(10, 40), book(10, 240), // after the burst's booked slots (tat 40 ms), then 200 ms apart
		}},
		{"the rule when stricter", Config{Mode: Fixed, Interval: time.Second, Burst: 1}, []serverStep{
			observeAt(0, 200, policy),
			book(0, 0), book(0, 1000),
		}},
		{"the server when stricter than a fixed rule", Config{Mode: Fixed, Interval: 50 * time.Millisecond}, []serverStep{
			observeAt(0, 200, policy),
			book(0, 0), book(0, 200),
		}},
		{"a policy lasts an hour after it was last seen", Config{}, []serverStep{
			observeAt(0, 200, policy),
			book(hour-1000, hour-1000), book(hour-1000, hour-800),
			book(hour, hour), book(hour, hour), // expired: the burst again
		}},
		{"a policy sent again lasts an hour from then", Config{}, []serverStep{
			observeAt(0, 200, policy),
			observeAt(1800_000, 200, policy),
			book(hour, hour), book(hour, hour+200),
			book(1800_000+hour, 1800_000+hour), book(1800_000+hour, 1800_000+hour),
		}},
		{"the latest policy replaces the one before", Config{}, []serverStep{
			observeAt(0, 200, ratelimit.Limits{Spacing: time.Second}),
			observeAt(0, 200, policy),
			book(0, 0), book(0, 200),
		}},
		{"r=0 holds the next slot, whatever the status", Config{}, []serverStep{
			observeAt(0, 200, ratelimit.Limits{Wait: 3 * time.Second}),
			book(0, 3000), book(0, 3020), // then the rule's spacing, as after a Retry-After
		}},
		{"r=0 under a policy", Config{}, []serverStep{
			observeAt(0, 200, ratelimit.Limits{Spacing: 200 * time.Millisecond, Wait: 3 * time.Second}),
			book(0, 3000), book(0, 3200),
		}},
		{"r=0 in fixed mode", Config{Mode: Fixed, Interval: 100 * time.Millisecond, Burst: 1}, []serverStep{
			book(0, 0),
			observeAt(50, 200, ratelimit.Limits{Wait: 2 * time.Second}),
			book(60, 2050),
		}},
		{"Retry-After longer than t: the later", Config{}, []serverStep{
			{atMS: 0, observe: true, status: 429, retry: "5", server: ratelimit.Limits{Wait: 3 * time.Second}},
			book(0, 5000),
		}},
		{"t longer than Retry-After: the later", Config{}, []serverStep{
			{atMS: 0, observe: true, status: 429, retry: "1", server: ratelimit.Limits{Wait: 3 * time.Second}},
			book(0, 3000),
		}},
		{"ignored", Config{IgnoreServer: true}, []serverStep{
			observeAt(0, 200, ratelimit.Limits{Spacing: time.Second, Wait: 3 * time.Second}),
			book(0, 0), book(0, 0),
		}},
		{"off", Config{Mode: Off}, []serverStep{
			observeAt(0, 200, ratelimit.Limits{Spacing: time.Second, Wait: 3 * time.Second}),
			book(0, 0), book(0, 0),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(tt.cfg)
			for i, s := range tt.steps {
				if s.observe {
					l.Observe("example.com", Outcome{Status: s.status, RetryAfter: s.retry, Server: s.server}, at(s.atMS))
					continue
				}
				r := l.Reserve("example.com", at(s.atMS))
				if got := Millis(r.Start.Sub(t0)); got != s.wantStart {
					t.Errorf("step %d, booking at %v ms: got start %v ms, want %v", i, s.atMS, got, s.wantStart)
				}
			}
		})
	}
}

// TestServerPolicyRemembered: a host under a server's policy is not
// forgotten while the policy lasts, idle or not, and is once it expires.
func TestServerPolicyRemembered(t *testing.T) {
	l := New(Config{})
	l.Observe("quiet.example", Outcome{Status: 200}, at(0))
	if got := l.Len(); got != 0 {
		t.Fatalf("Len after an answer without headers: got %d, want 0", got)
	}
	l.Observe("policy.example", Outcome{Status: 200, Server: ratelimit.Limits{Spacing: time.Second}}, at(0))
	hour := float64(ServerPolicyLife / time.Millisecond)
	if n := l.Sweep(at(hour - 1)); n != 0 || l.Len() != 1 {
		t.Errorf("Sweep within the hour: got %d forgotten, %d left, want 0 and 1", n, l.Len())
	}
	if n := l.Sweep(at(hour + float64(forgetGrace/time.Millisecond))); n != 1 || l.Len() != 0 {
		t.Errorf("Sweep after the hour: got %d forgotten, %d left, want 1 and 0", n, l.Len())
	}
}
