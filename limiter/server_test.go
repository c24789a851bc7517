package limiter

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

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

// TestBusiestShowsServer: a host's state carries its server's policy and
// how long it holds, its spacing as booked under it (no less than the
// server's, with no burst), and a spent quota's reset while the host waits
// for it; an hour after the last answer that sent it, the policy is gone.
func TestBusiestShowsServer(t *testing.T) {
	l := New(Config{Mode: Fixed, Interval: 20 * time.Millisecond}) // burst 10
	state := func(now time.Time) HostState {
		t.Helper()
		for _, h := range l.Busiest(now, 10) {
			if h.Host == "api.example" {
				return h
			}
		}
		t.Fatalf("Busiest at %v: no api.example", now.Sub(t0))
		return HostState{}
	}
	l.Reserve("api.example", at(0))
	if h := state(at(0)); h.Server != 0 || h.ServerEnds != 0 || h.ServerReset != 0 || h.NextFree != 0 || h.Spacing != 20*time.Millisecond {
		t.Errorf("before any policy: got %+v, want the rule's 20ms, burst left, no server", h)
	}
	l.Observe("api.example", Outcome{Status: 200, Server: ratelimit.Limits{Spacing: 200 * time.Millisecond}}, at(100))
	if r := l.Reserve("api.example", at(100)); r.Server != 200*time.Millisecond || r.Spacing != 200*time.Millisecond {
		t.Errorf("booked under the policy: got spacing %v, server %v; want 200ms, 200ms", r.Spacing, r.Server)
	}
	// That one went at 200 ms, the policy's spacing after the one at 0
	// (issue 47), and the next is free 200 ms after it, with no burst.
	h := state(at(150))
	if h.Server != 200*time.Millisecond || h.ServerEnds != ServerPolicyLife-50*time.Millisecond || h.Spacing != 200*time.Millisecond ||
		h.NextFree != 250*time.Millisecond || h.ServerReset != 0 {
		t.Errorf("50 ms after the policy: got server %v for %v, spacing %v, next free in %v, reset in %v; want 200ms for an hour less 50ms, 200ms, 250ms (no burst), none",
			h.Server, h.ServerEnds, h.Spacing, h.NextFree, h.ServerReset)
	}
	// A spent quota: its reset shows while the host waits for it.
	l.Observe("api.example", Outcome{Status: 200, Server: ratelimit.Limits{Spacing: 200 * time.Millisecond, Wait: 3 * time.Second}}, at(1000))
	if h := state(at(2000)); h.ServerReset != 2*time.Second || h.NextFree != 2*time.Second || h.ServerEnds != ServerPolicyLife-time.Second {
		t.Errorf("1 s after a spent quota of 3 s: got reset in %v, next free in %v, policy for %v; want 2s, 2s, an hour less 1s", h.ServerReset, h.NextFree, h.ServerEnds)
	}
	if h := state(at(4000)); h.ServerReset != 0 || h.Server != 200*time.Millisecond {
		t.Errorf("after the reset: got reset in %v, server %v; want none, 200ms", h.ServerReset, h.Server)
	}
	// Its last answer with the policy came at 1 s: an hour later it is gone.
	end := 1000 + float64(ServerPolicyLife/time.Millisecond)
	if h := state(at(end - 1)); h.Server != 200*time.Millisecond || h.ServerEnds != time.Millisecond {
		t.Errorf("a millisecond before the hour: got server %v for %v, want 200ms for 1ms", h.Server, h.ServerEnds)
	}
	l.Reserve("api.example", at(end)) // remembered by its booking
	if h := state(at(end)); h.Server != 0 || h.ServerEnds != 0 || h.Spacing != 20*time.Millisecond || h.NextFree != 0 {
		t.Errorf("the hour after the last policy: got %+v, want the rule's 20ms with its burst, no server", h)
	}
	if r := l.Reserve("api.example", at(end)); r.Server != 0 || r.Spacing != 20*time.Millisecond {
		t.Errorf("booked after the hour: got spacing %v, server %v; want 20ms, none", r.Spacing, r.Server)
	}
}
