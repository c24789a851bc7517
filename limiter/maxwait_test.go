package limiter

import (
	"testing"
	"time"
)

// TestMaxWait: a navigation whose slot lies further ahead than MaxWait is
// not booked: it is told its slot and why (Deferred), and the host's
// schedule stays as it was, so the navigations after it get the slots
// they would have had; once the slot comes within MaxWait, it books.
func TestMaxWait(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cfg := Config{Mode: Fixed, Interval: time.Second, Burst: 1, MaxWait: 1500 * time.Millisecond}
	l := New(cfg)
	steps := []struct {
		at, start int // ms
		deferred  bool
	}{
		{0, 0, false},
		{0, 1000, false},
		{0, 2000, true}, // 2 s ahead, over 1.5 s: not booked
		{0, 2000, true}, // the same slot: nothing was booked
		{600, 2000, false},
		{600, 3000, true},
	}
	for i, s := range steps {
		r := l.Reserve("a.test", at(s.at))
		got := int(r.Start.Sub(t0) / time.Millisecond)
		if got != s.start || (r.Deferred == "max-wait") != s.deferred || r.Tracked == s.deferred {
			t.Errorf("step %d at %d ms: start %d ms, deferred %q, tracked %v; want %d ms, deferred %v",
				i+1, s.at, got, r.Deferred, r.Tracked, s.start, s.deferred)
		}
	}

	// An overload's Retry-After further than MaxWait defers the next
	// navigation until it ends.
	l = New(Config{Mode: Adaptive, MaxWait: 2 * time.Second})
	l.Reserve("b.test", at(0))
	l.Observe("b.test", Outcome{Status: 429, RetryAfter: "10"}, at(100))
	if r := l.Reserve("b.test", at(200)); r.Deferred != "max-wait" || r.Start.Before(at(10_100)) {
		t.Errorf("after Retry-After: 10: deferred %q until %v, want max-wait until 10.1 s", r.Deferred, r.Start.Sub(t0))
	}
	if r := l.Reserve("b.test", at(8200)); r.Deferred != "" || !r.Tracked {
		t.Errorf("2 s before the Retry-After ends: deferred %q, tracked %v; want booked", r.Deferred, r.Tracked)
	}

	// Without MaxWait, nothing is ever deferred.
	l = New(Config{Mode: Fixed, Interval: time.Minute, Burst: 1})
	for i := range 3 {
		if r := l.Reserve("c.test", t0); r.Deferred != "" || r.Start != t0.Add(time.Duration(i)*time.Minute) {
			t.Errorf("no MaxWait, booking %d: deferred %q, start %v", i+1, r.Deferred, r.Start.Sub(t0))
		}
	}
}
