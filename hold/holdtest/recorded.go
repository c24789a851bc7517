package holdtest

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// CheckRecorded checks what the navigations recorded from Chromium leave
// in lim once their answers are in it, whichever way of holding played
// them: a.test's pages, one answered 429 with Retry-After 3; b.test,
// reached by a redirect and a new page; c.test, refused. That is three
// hosts known, a.test's next slot its Retry-After (less slack) after
// busyAnswered, when the 429 was answered, and c.test's pressure raised
// by the refused connection.
func CheckRecorded(t *testing.T, lim *limiter.Limiter, busyAnswered time.Time, slack time.Duration) {
	t.Helper()
	// The replay ends once the last event is sent: its answer (c.test's
	// failure) reaches the limiter a moment later, on the relay's reader.
	for deadline := time.Now().Add(fakebrowser.WaitFor); pressureOf(lim, "c.test") < 5 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := lim.Len(); got != 3 {
		t.Errorf("limiter knows %d hosts, want 3 (a.test, b.test, c.test)", got)
	}
	now := time.Now()
	if r := lim.Reserve("a.test", now); r.Start.Sub(busyAnswered) < 3*time.Second-slack {
		t.Errorf("next a.test slot %v after the 429, want at least its Retry-After 3s (less %v)", r.Start.Sub(busyAnswered), slack)
	}
	if r := lim.Reserve("c.test", now); r.Pressure < 5 {
		t.Errorf("c.test pressure %d after a refused connection, want it raised by 10", r.Pressure)
	}
}

// pressureOf is host's pressure as lim's status shows it, without booking.
func pressureOf(lim *limiter.Limiter, host string) int {
	for _, hs := range lim.Busiest(time.Now(), lim.Len()) {
		if hs.Host == host {
			return hs.Pressure
		}
	}
	return 0
}
