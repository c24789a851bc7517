package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// fakeClock is a settable now for the in-flight script.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestInflightTable: the places of a bucket, counted in Redis for every
// store that shares it, as steps at fixed instants on a simulated clock:
// the cap holds across stores, a place given back is free at once, and
// the leases of a store that stopped renewing them (a relay that died) run
// out after the lease.
func TestInflightTable(t *testing.T) {
	srv := startRedis(t)
	clock := &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	const lease = 3 * time.Second
	a := newStore(t, srv, limiter.Config{}, Options{Prefix: "cap:", Timeout: patient, Lease: lease})
	b := newStore(t, srv, limiter.Config{}, Options{Prefix: "cap:", Timeout: patient, Lease: lease})
	a.clock, b.clock = clock.now, clock.now
	type step struct {
		at    time.Duration // since the first step
		s     *Redis
		op    string // enter, leave
		id    string
		want  bool // enter: whether it got a place
		count int  // places taken after the step, as InFlight reads them
	}
	steps := []step{
		{0, a, "enter", "1", true, 1},
		{0, b, "enter", "1", true, 2}, // the same id in another store is another lease
		{0, b, "enter", "2", false, 2},
		{0, a, "enter", "2", false, 2},
		{10 * time.Millisecond, a, "leave", "1", false, 1},
		{10 * time.Millisecond, b, "enter", "2", true, 2},
		{20 * time.Millisecond, a, "enter", "3", false, 2},
		// Neither store renews on this clock: b's leases run out together,
		// lease after they were taken.
		{lease - time.Microsecond, a, "enter", "3", false, 2},
		{lease + 10*time.Millisecond, a, "enter", "3", true, 1},
		{lease + 10*time.Millisecond, a, "enter", "4", true, 2},
		{lease + 10*time.Millisecond, b, "enter", "3", false, 2},
	}
	start := clock.now()
	for i, st := range steps {
		clock.mu.Lock()
		clock.t = start.Add(st.at)
		clock.mu.Unlock()
		switch st.op {
		case "enter":
			if got := st.s.Enter("example.com", st.id, 2); got != st.want {
				t.Fatalf("step %d: Enter(%s) at %v: got %v, want %v", i, st.id, st.at, got, st.want)
			}
		case "leave":
			st.s.Leave("example.com", st.id)
		}
		if got := a.InFlight("example.com"); got != st.count {
			t.Fatalf("step %d: in flight %d, want %d", i, got, st.count)
		}
	}
	if n := a.Fallbacks() + b.Fallbacks(); n != 0 {
		t.Errorf("%d calls fell back, want every one answered by Redis", n)
	}
}

// TestInflightRenewed: a place whose navigation lasts longer than the
// lease is renewed and held; given back, it is free at once; a store that
// closes without giving its places back (a relay that died) leaves them to
// run out after the lease.
func TestInflightRenewed(t *testing.T) {
	srv := startRedis(t)
	// Long enough that a busy machine's late renewal (every third of it)
	// does not look like a relay that died.
	const lease = time.Second
	a := newStore(t, srv, limiter.Config{}, Options{Prefix: "renew:", Timeout: patient, Lease: lease})
	b := newStore(t, srv, limiter.Config{}, Options{Prefix: "renew:", Timeout: patient, Lease: lease})
	if !a.Enter("slow.example", "1", 1) {
		t.Fatal("first place refused")
	}
	deadline := time.Now().Add(4 * lease)
	for time.Now().Before(deadline) {
		if b.Enter("slow.example", "1", 1) {
			t.Fatalf("another store took the place %v after it was taken: its lease was not renewed", time.Until(deadline)+4*lease)
		}
		time.Sleep(lease / 10)
	}
	a.Leave("slow.example", "1")
	if !b.Enter("slow.example", "1", 1) {
		t.Fatal("the place given back is not free")
	}
	b.Close() // dies holding it
	died := time.Now()
	for !a.Enter("slow.example", "2", 1) {
		if time.Since(died) > 10*lease {
			t.Fatal("the place of a store that closed is never free")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(died); d < lease-50*time.Millisecond {
		t.Errorf("the dead store's place was free %v after it closed, before its lease (%v) ran out", d, lease)
	}
	t.Logf("the place of a store that closed was free %v after, lease %v", time.Since(died), lease)
}

// TestInflightFallback: with Redis down, places are counted in this
// process only (local), or not given at all (closed).
func TestInflightFallback(t *testing.T) {
	srv := startRedis(t)
	local := newStore(t, srv, limiter.Config{}, Options{Prefix: "fbl:", Timeout: 200 * time.Millisecond, ProbeInterval: time.Hour})
	closed := newStore(t, srv, limiter.Config{}, Options{Prefix: "fbc:", Timeout: 200 * time.Millisecond, ProbeInterval: time.Hour, Fallback: FallbackClosed})
	if !local.Enter("h.example", "0", 2) || !closed.Enter("h.example", "0", 2) {
		t.Fatal("places refused with Redis up")
	}
	srv.stop()
	if !local.Enter("h.example", "1", 2) {
		t.Error("local fallback: the second place under a cap of 2 refused")
	}
	if local.Enter("h.example", "2", 2) {
		t.Error("local fallback: a third place under a cap of 2 given")
	}
	if got := local.InFlight("h.example"); got != 2 {
		t.Errorf("local fallback: in flight %d, want 2 (this relay's)", got)
	}
	local.Leave("h.example", "0")
	if !local.Enter("h.example", "2", 2) {
		t.Error("local fallback: a place given back is not free")
	}
	if closed.Enter("h.example", "1", 2) {
		t.Error("closed fallback: a place given while Redis is down")
	}
	if local.Fallbacks() != 2 {
		t.Errorf("local fallback counted %d places, want 2", local.Fallbacks())
	}
}

// TestInflightCapAcrossStores: two caps (two relays) on one Redis with a
// cap of 2: never more than 2 in flight across both, each relay's
// navigations in arrival order, every one served.
func TestInflightCapAcrossStores(t *testing.T) {
	srv := startRedis(t)
	var caps []*inflight.Cap
	for range 2 {
		s := newStore(t, srv, limiter.Config{}, Options{Prefix: "across:", Timeout: patient})
		c := &inflight.Cap{Table: s, Poll: 5 * time.Millisecond}
		t.Cleanup(c.Close)
		caps = append(caps, c)
	}
	var mu sync.Mutex
	in, most := 0, 0
	var wg sync.WaitGroup
	for i := range 40 {
		c := caps[i%2]
		wg.Go(func() {
			p, err := c.Enter(context.Background(), "across.example", 2)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			in++
			most = max(most, in)
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			in--
			mu.Unlock()
			p.Leave()
		})
	}
	wg.Wait()
	if most > 2 {
		t.Errorf("%d in flight at once across two relays, cap 2", most)
	}
	t.Logf("40 navigations over two relays, cap 2: at most %d in flight", most)
	// Places are given back to Redis on goroutines of their own.
	deadline := time.Now().Add(5 * time.Second)
	for caps[0].StateOf("across.example").InFlight != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if st := caps[0].StateOf("across.example"); st.InFlight != 0 {
		t.Errorf("after all were given back: %+v, want none in flight", st)
	}
}

// TestBusiestSkipsPlaces: the status page reads hosts' schedules, not the
// places of the in-flight cap kept beside them.
func TestBusiestSkipsPlaces(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv, limiter.Config{}, Options{Timeout: patient})
	now := time.Now()
	s.Reserve("booked.example", now)
	s.Enter("booked.example", "1", 2)
	got := s.Busiest(now, 10)
	if len(got) != 1 || got[0].Host != "booked.example" {
		t.Errorf("Busiest: got %+v, want booked.example alone", got)
	}
}
