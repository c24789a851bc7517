package hold_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// reasoned records a hold's moments and why it was refused.
type reasoned struct {
	*moments
	mu     sync.Mutex
	reason refusal.Reason
	slot   time.Time
}

func (r *reasoned) Booked(start time.Time, n *pace.Nav) {
	r.mu.Lock()
	r.slot = start
	r.mu.Unlock()
	r.moments.Booked(start, n)
}

func (r *reasoned) Refused(why refusal.Reason) {
	r.mu.Lock()
	r.reason = why
	r.mu.Unlock()
	r.moments.Refused(why)
}

func (r *reasoned) why() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason.Deferred
}

// TestStopDrainThenRefuse follows a stop through the core (stop.go): held
// navigations whose slots come before the drain's end are let go at
// them; one held whose slot lies past the drain's end is answered at once
// (reason stopping), never let go, and so is one asked for during the
// drain whose slot would lie past its end, booking nothing; after Refuse,
// one asked for is answered at once too.
func TestStopDrainThenRefuse(t *testing.T) {
	const spacing = 300 * time.Millisecond
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: spacing, Burst: 1}
	lim := limiter.New(cfg)
	hd, h := armWith(t, policy.New(policy.Config{Default: cfg}, lim), nil)
	ctx := context.Background()
	nav := func() *reasoned {
		m := &reasoned{moments: newMoments()}
		h.Hold(ctx, hold.Request{Flight: h.NewFlight(ctx), Host: "a.test", URL: "http://a.test/", Refusable: true}, m)
		return m
	}
	began := time.Now()
	first := nav()
	if got := first.order(t); got != "booked release done" {
		t.Fatalf("first navigation: got %q, want it let go at once", got)
	}
	held := []*reasoned{nav(), nav(), nav()} // slots at 300, 600 and 900 ms
	for _, m := range held {
		m.seenWithin(t, "booked", 5*time.Second)
	}
	slices.SortFunc(held, func(a, b *reasoned) int { return a.slot.Compare(b.slot) }) // booked in any order
	end := began.Add(750 * time.Millisecond)
	drained := time.Now()
	hd.Drain(end)
	held[2].seenWithin(t, "refused", time.Second)
	if d := held[2].when("refused").Sub(drained); d > 100*time.Millisecond {
		t.Errorf("the navigation held past the drain's end was answered %v after Drain, want at once", d)
	}

	during := nav() // its slot would be 1200 ms: past the drain's end
	if got := during.order(t); got != "refused done" || during.why() != hold.Stopping {
		t.Errorf("a navigation asked for during the drain: got %q (%q), want refused (%q) at once", got, during.why(), hold.Stopping)
	}
	now := time.Now()
	if b := lim.Busiest(now, 1); len(b) != 1 || now.Sub(began)+b[0].NextFree > 1250*time.Millisecond {
		t.Errorf("the host's schedule after the refused navigation: %+v, want its next free slot 1200 ms after the first (it booked nothing)", b)
	}

	time.Sleep(time.Until(end))
	hd.Refuse()
	for i, want := range []string{"booked waits release done", "booked waits release done", "booked waits refused done"} {
		if got := held[i].order(t); got != want {
			t.Errorf("held navigation %d: got %q, want %q", i+2, got, want)
		}
	}
	for i, at := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond} {
		if got := held[i].at["release"].Sub(began); got < at {
			t.Errorf("held navigation %d let go %v after the first, before its slot (%v)", i+2, got, at)
		}
	}
	if why := held[2].why(); why != hold.Stopping {
		t.Errorf("the navigation held past the drain: refused for %q, want %q", why, hold.Stopping)
	}
	after := nav()
	if got := after.order(t); got != "refused done" || after.why() != hold.Stopping {
		t.Errorf("a navigation asked for after Refuse: got %q (%q), want refused at once", got, after.why())
	}
	if n := hd.Held(); n != 0 {
		t.Errorf("held at the end: got %d, want 0", n)
	}
}

// seenWithin waits up to d for the moment what.
func (m *moments) seenWithin(t *testing.T, what string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		m.mu.Lock()
		_, ok := m.at[what]
		m.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, d)
		}
	}
}

// when is when the moment what came, zero if it has not.
func (m *moments) when(what string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.at[what]
}
