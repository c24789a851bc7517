package hold_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// sharedStore books as a shared store does for a fleet: each booking
// says how far its bucket had been pushed (Reservation.Pushed, Shared),
// and Pushed says how far it is now, as other relays' late departures
// push it.
type sharedStore struct {
	mu     sync.Mutex
	next   time.Time     // the next slot, 100 ms apart
	pushed time.Duration // guarded by mu
}

func (s *sharedStore) Mode() limiter.Mode { return limiter.Fixed }
func (s *sharedStore) Reserve(_ context.Context, host, _ string, now time.Time) limiter.Reservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := now
	if s.next.After(now) {
		start = s.next
	}
	s.next = start.Add(100 * time.Millisecond)
	return limiter.Reservation{Start: start, Spacing: 100 * time.Millisecond, Tracked: true, Mode: limiter.Fixed, Bucket: host,
		Pushed: s.pushed, Shared: true}
}
func (s *sharedStore) Observe(string, limiter.Outcome, time.Time) limiter.Effect { return limiter.Calm }
func (s *sharedStore) Pushed(string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pushed, true
}
func (s *sharedStore) push(by time.Duration) {
	s.mu.Lock()
	s.pushed += by
	s.mu.Unlock()
}

// TestPushedByTheFleet: a navigation booked in a shared store waits, when
// its slot comes, as much longer as the bucket's schedule was pushed
// since it was booked (another relay's navigation left the browser late:
// the slots booked after that push moved, this one did not), and no
// longer when nothing was pushed.
func TestPushedByTheFleet(t *testing.T) {
	store := &sharedStore{}
	_, h := armWith(t, store, nil)
	ctx := context.Background()
	nav := func() *moments {
		m := newMoments()
		h.Hold(ctx, hold.Request{Flight: h.NewFlight(ctx), Host: "a.test", URL: "http://a.test/"}, m)
		return m
	}
	began := time.Now()
	first := nav()
	first.seenWithin(t, "release", time.Second)
	second := nav() // its slot: 100 ms
	second.seenWithin(t, "booked", time.Second)
	store.push(80 * time.Millisecond) // another relay's navigation left 80 ms late
	third := nav()                    // booked after the push: 200 ms on the store's grid, which it keeps
	if got := second.order(t); got != "booked waits release done" {
		t.Fatalf("second: %q", got)
	}
	if d := second.when("release").Sub(began); d < 180*time.Millisecond {
		t.Errorf("the navigation booked before the push was let go %v after the first, want its slot (100 ms) and the push (80 ms)", d)
	}
	if got := third.order(t); got != "booked waits release done" {
		t.Fatalf("third: %q", got)
	}
	if d := third.when("release").Sub(began); d < 200*time.Millisecond || d > 260*time.Millisecond {
		t.Errorf("the navigation booked after the push was let go %v after the first, want its slot, 200 ms, and no more", d)
	}
}
