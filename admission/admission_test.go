package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func enter(t *testing.T, g *Gate, accept func(int) bool) *Place {
	t.Helper()
	p, err := g.Enter(context.Background(), accept)
	if err != nil {
		t.Fatalf("Enter: %v", err)
	}
	return p
}

func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want int
	}{
		{"zero", Options{}, -1},
		{"browsers", Options{Capacity: []int{16, 16, 16, 16}}, 64},
		{"one unbounded browser", Options{Capacity: []int{16, 0}}, -1},
		{"relay bound below the browsers'", Options{MaxClients: 10, Capacity: []int{16, 16}}, 10},
		{"relay bound above the browsers'", Options{MaxClients: 100, Capacity: []int{16, 16}}, 32},
		{"relay bound alone", Options{MaxClients: 5}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := New(tc.o).Capacity(); got != tc.want {
				t.Errorf("Capacity: got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestSpreads: each client goes to the browser with the fewest, among
// those with room that the caller accepts.
func TestSpreads(t *testing.T) {
	g := New(Options{Capacity: []int{2, 2, 2}})
	var got []int
	for range 6 {
		got = append(got, enter(t, g, nil).Browser)
	}
	if want := []int{0, 1, 2, 0, 1, 2}; !equal(got, want) {
		t.Errorf("browsers: got %v, want %v", got, want)
	}
	if _, err := g.Enter(context.Background(), nil); !errors.Is(err, ErrFull) {
		t.Errorf("seventh client: got %v, want ErrFull (no queue)", err)
	}
	g = New(Options{Capacity: []int{2, 2}})
	onlyOne := func(b int) bool { return b == 1 }
	if p := enter(t, g, onlyOne); p.Browser != 1 {
		t.Errorf("accepting browser 1 only: got browser %d", p.Browser)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestQueue: clients over capacity wait in order and get the places as
// they free; one more than the queue holds is refused at once.
func TestQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var waits []time.Duration
		var mu sync.Mutex
		g := New(Options{Capacity: []int{1, 1}, Queue: 2, OnWait: func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() }})
		a, b := enter(t, g, nil), enter(t, g, nil)
		order := make(chan int, 2)
		places := make(chan *Place, 2)
		for i := range 2 {
			go func() {
				p, err := g.Enter(context.Background(), nil)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				order <- i
				places <- p
			}()
			synctest.Wait() // queued in this order
		}
		if s := g.Stats(); s.Queued != 2 || s.Connected != 2 {
			t.Fatalf("stats: %+v, want 2 connected, 2 queued", s)
		}
		_, err := g.Enter(context.Background(), nil)
		var r *Refusal
		if !errors.As(err, &r) || !errors.Is(err, ErrFull) || r.RetryAfter < time.Second {
			t.Fatalf("a client over capacity and queue: got %v, want ErrFull with a Retry-After", err)
		}
		time.Sleep(3 * time.Second)
		b.Leave()
		b.Leave() // twice is once
		synctest.Wait()
		if got := <-order; got != 0 {
			t.Errorf("first place went to waiter %d, want 0", got)
		}
		if p := <-places; p.Browser != 1 || p.Waited != 3*time.Second {
			t.Errorf("first waiter's place: browser %d after %v, want browser 1 after 3s", p.Browser, p.Waited)
		}
		if s := g.Stats(); s.Queued != 1 || s.Connected != 2 {
			t.Errorf("stats: %+v, want 2 connected, 1 queued", s)
		}
		a.Leave()
		synctest.Wait()
		if got := <-order; got != 1 {
			t.Errorf("second place went to waiter %d, want 1", got)
		}
		if s := g.Stats(); s.RefusedFull != 1 || s.RefusedTimeout != 0 || s.Queued != 0 {
			t.Errorf("stats: %+v", s)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(waits) != 2 {
			t.Errorf("waits told: %v, want two", waits)
		}
	})
}

// TestTimeout: a wait that sees no place within the timeout is refused;
// one whose client left ends and leaves nothing queued.
func TestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Options{MaxClients: 1, Queue: 5, Timeout: 10 * time.Second})
		p := enter(t, g, nil)
		began := time.Now()
		_, err := g.Enter(context.Background(), nil)
		if !errors.Is(err, ErrTimeout) || time.Since(began) != 10*time.Second {
			t.Errorf("got %v after %v, want ErrTimeout after 10s", err, time.Since(began))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { _, err := g.Enter(ctx, nil); done <- err }()
		synctest.Wait()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("a client that left: got %v, want context.Canceled", err)
		}
		if s := g.Stats(); s.Queued != 0 || s.RefusedTimeout != 1 {
			t.Errorf("stats: %+v, want none queued, one timed out", s)
		}
		p.Leave()
		if q := enter(t, g, nil); q.Waited != 0 {
			t.Errorf("a free place: waited %v", q.Waited)
		}
	})
}

// TestPassedOver: a waiter no free place suits does not hold up those
// behind it; Retry hands it a place once it accepts one.
func TestPassedOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Options{Capacity: []int{1, 1}, Queue: 2})
		p0, p1 := enter(t, g, nil), enter(t, g, nil)
		var mu sync.Mutex
		wantZero := false
		onlyZero := func(b int) bool { mu.Lock(); defer mu.Unlock(); return b == 0 && wantZero }
		first := make(chan *Place)
		go func() { p, _ := g.Enter(context.Background(), onlyZero); first <- p }()
		synctest.Wait()
		second := make(chan *Place)
		go func() { p, _ := g.Enter(context.Background(), nil); second <- p }()
		synctest.Wait()
		p0.Leave()
		p2 := <-second
		if p2.Browser != 0 {
			t.Errorf("second waiter: browser %d, want 0", p2.Browser)
		}
		p1.Leave()
		synctest.Wait()
		if s := g.Stats(); s.Queued != 1 {
			t.Fatalf("stats: %+v: the first waiter accepts no browser yet", s)
		}
		mu.Lock()
		wantZero = true
		mu.Unlock()
		g.Retry() // browser 0 is still full
		synctest.Wait()
		if s := g.Stats(); s.Queued != 1 {
			t.Fatalf("stats: %+v: browser 0 is full", s)
		}
		p2.Leave()
		if p := <-first; p.Browser != 0 {
			t.Errorf("first waiter: browser %d, want 0", p.Browser)
		}
	})
}

// TestFreePlaceNotHeldBack: a waiter that only one full browser suits
// does not keep a newcomer out of a place in another.
func TestFreePlaceNotHeldBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := New(Options{Capacity: []int{1, 1}, Queue: 1})
		enter(t, g, nil) // browser 0
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { g.Enter(ctx, func(b int) bool { return b == 0 }); close(done) }()
		synctest.Wait()
		if p := enter(t, g, nil); p.Browser != 1 {
			t.Errorf("newcomer: browser %d, want 1 at once", p.Browser)
		}
		cancel()
		<-done
	})
}
