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
