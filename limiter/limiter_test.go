package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// pressureAt drains a copy of host's state to now and returns its pressure.
func pressureAt(l *Limiter, hostname string, now time.Time) (int, bool) {
	s := l.shardFor(hostname)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := (*s.read.Load())[hostname]
	if r == nil {
		r = s.dirty[hostname]
	}
	if r == nil {
		return 0, false
	}
	r.mu.Lock()
	h := r.host
	r.mu.Unlock()
	h.drain(l.nanos(now))
	return int(h.pressure), true
}

func TestSweepForgetsOnlyIdleHosts(t *testing.T) {
	l := New(Config{})
	l.Reserve("booked.example", at(0)) // tat 20 ms, pressure 1
	l.Reserve("pressed.example", at(0))
	l.Observe("pressed.example", Outcome{Status: 503}, at(0)) // pressure 51: 5.1 s to drain
	l.Observe("waiting.example", Outcome{Status: 429, RetryAfter: "30"}, at(0))
	l.Reserve("localhost", at(0)) // exempt: never remembered
	if got := l.Len(); got != 3 {
		t.Fatalf("Len: got %d, want 3", got)
	}
	tests := []struct {
		atMS      float64
		forgotten int
		remain    []string
	}{
		// A host is forgotten once it has been idle for forgetGrace (1 s).
		{10, 0, []string{"booked.example", "pressed.example", "waiting.example"}},
		{1099, 0, []string{"booked.example", "pressed.example", "waiting.example"}},
		{1100, 1, []string{"pressed.example", "waiting.example"}}, // booked: idle since 100 ms (tat 20, pressure 1 drained)
		{6099, 0, []string{"pressed.example", "waiting.example"}},
		{6100, 1, []string{"waiting.example"}},   // pressed: pressure 51 drained at 5.1 s
		{31_000, 0, []string{"waiting.example"}}, // waiting: tat = 30 s + tau
		{31_180, 1, nil},
	}
	for _, tt := range tests {
		if got := l.Sweep(at(tt.atMS)); got != tt.forgotten {
			t.Fatalf("Sweep at %vms: got %d forgotten, want %d", tt.atMS, got, tt.forgotten)
		}
		if got := l.Len(); got != len(tt.remain) {
			t.Fatalf("Len after sweep at %vms: got %d, want %d", tt.atMS, got, len(tt.remain))
		}
		for _, h := range tt.remain {
			if _, ok := pressureAt(l, h, at(tt.atMS)); !ok {
				t.Fatalf("after sweep at %vms: %s forgotten, want it remembered", tt.atMS, h)
			}
		}
	}
}

func TestMemoryBoundedAcrossManyHosts(t *testing.T) {
	// A crawl that touches each host once, one host every 10 ms, must not
	// keep every host it ever saw: the shards sweep as they grow.
	l := New(Config{})
	const hosts = 200_000
	for i := range hosts {
		l.Reserve(fmt.Sprintf("h%d.example", i), at(float64(10*i)))
	}
	// Hosts older than 100 ms (pressure 1 drained, tat past) are idle; what
	// remains is what the last sweeps had not yet reached.
	if got := l.Len(); got > shardCount*minSweep*2 {
		t.Fatalf("remembered hosts after %d one-off hosts: got %d, want at most %d", hosts, got, shardCount*minSweep*2)
	}
}

func TestForgettingLosesNothing(t *testing.T) {
	// A host forgotten by a sweep is booked exactly as one kept in memory.
	kept, swept := New(Config{}), New(Config{})
	for _, l := range []*Limiter{kept, swept} {
		now := at(0)
		for range 50 {
			now = l.Reserve("example.com", now).Start
		}
	}
	later := at(30_000)
	if n := swept.Sweep(later); n != 1 {
		t.Fatalf("Sweep: got %d forgotten, want 1", n)
	}
	for i := range 30 {
		now := later.Add(time.Duration(i) * 7 * time.Millisecond)
		a, b := kept.Reserve("example.com", now), swept.Reserve("example.com", now)
		if !a.Start.Equal(b.Start) || a.Pressure != b.Pressure || a.Spacing != b.Spacing {
			t.Fatalf("navigation %d: kept %+v, swept %+v", i, a, b)
		}
	}
}

func TestConcurrentReservesKeepEachHostsSchedule(t *testing.T) {
	// Many goroutines hammer many hosts at once. With burst 1 a host's
	// consecutive bookings must be at least one spacing apart, whatever the
	// interleaving; with a fixed interval exactly that far apart.
	for _, cfg := range []Config{{Burst: 1}, {Mode: Fixed, Interval: 7 * time.Millisecond, Burst: 1}} {
		t.Run(fmt.Sprint(cfg.Mode), func(t *testing.T) {
			l := New(cfg)
			const hosts, workers, perWorker = 16, 32, 400
			type booking struct {
				start   time.Time
				spacing time.Duration
			}
			var mu sync.Mutex
			byHost := make(map[string][]booking)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range perWorker {
						h := fmt.Sprintf("h%d.example", (w*7+i)%hosts)
						now := t0.Add(time.Duration(i) * time.Millisecond)
						// Collect under one lock per booking so the order recorded is
						// the order booked.
						mu.Lock()
						r := l.Reserve(h, now)
						byHost[h] = append(byHost[h], booking{r.Start, r.Spacing})
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			for h, bs := range byHost {
				for i := 1; i < len(bs); i++ {
					if gap := bs[i].start.Sub(bs[i-1].start); gap < bs[i-1].spacing {
						t.Fatalf("%s: bookings %d and %d are %v apart, want at least %v", h, i-1, i, gap, bs[i-1].spacing)
					}
				}
			}
		})
	}
}

func TestConcurrentReservesRace(t *testing.T) {
	// Without an outside lock: the limiter alone must keep every host's
	// slots apart. Each goroutine records what it got; sorted by start, a
	// host's slots with burst 1 in fixed mode are one interval apart.
	const interval = 5 * time.Millisecond
	l := New(Config{Mode: Fixed, Interval: interval, Burst: 1})
	const hosts, workers, perWorker = 50, 64, 300
	starts := make([][]time.Time, hosts)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([][]time.Time, hosts)
			for i := range perWorker {
				h := (w + i*13) % hosts
				r := l.Reserve(fmt.Sprintf("h%d.example", h), t0)
				local[h] = append(local[h], r.Start)
				l.Observe(fmt.Sprintf("h%d.example", h), Outcome{Status: 503}, t0)
			}
			mu.Lock()
			for h := range local {
				starts[h] = append(starts[h], local[h]...)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for h, ss := range starts {
		seen := make(map[time.Duration]bool, len(ss))
		for _, s := range ss {
			d := s.Sub(t0)
			if d%interval != 0 || seen[d] {
				t.Fatalf("h%d: slot at %v collides or is off the %v grid", h, d, interval)
			}
			seen[d] = true
		}
		for i := range len(ss) {
			if !seen[time.Duration(i)*interval] {
				t.Fatalf("h%d: %d bookings but no slot at %v", h, len(ss), time.Duration(i)*interval)
			}
		}
	}
}

func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{Mode: Fixed, Interval: 300 * time.Millisecond, Burst: 1})
		ctx := context.Background()
		begin := time.Now()
		for i := range 3 {
			if _, err := l.Wait(ctx, "example.com"); err != nil {
				t.Fatalf("Wait %d: %v", i, err)
			}
			if got, want := time.Since(begin), time.Duration(i)*300*time.Millisecond; got != want {
				t.Fatalf("Wait %d returned after %v, want %v", i, got, want)
			}
		}
	})
}

func TestWaitCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{Mode: Fixed, Interval: time.Second, Burst: 1})
		l.Reserve("example.com", time.Now())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := l.Wait(ctx, "example.com")
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: got %v, want context.Canceled", err)
		}
		// The cancelled wait keeps its slot: the next one is two intervals out.
		begin := time.Now()
		if _, err := l.Wait(context.Background(), "example.com"); err != nil {
			t.Fatal(err)
		}
		if got, want := time.Since(begin), 1900*time.Millisecond; got != want {
			t.Fatalf("Wait after a cancelled one: got %v, want %v", got, want)
		}
		// synctest fails the test if a goroutine or timer is left behind.
	})
}

func TestRebuildDuringLookupKeepsTheBooking(t *testing.T) {
	// The 16th lookup of a host still waiting in its shard's dirty map
	// rebuilds the shard. When that rebuild forgets the host as idle, the
	// booking must land in a record the shard keeps, not in the forgotten
	// one: two bookings at the same instant with burst 1 are one interval
	// apart.
	l := New(Config{Mode: Fixed, Interval: 70 * time.Millisecond, Burst: 1})
	const host = "example.com"
	for range 16 { // an insert, then 15 lookups in dirty
		l.Reserve(host, at(0))
	}
	// tat is 1120 ms; at 2000 the host is idle and the next lookup rebuilds.
	first, second := l.Reserve(host, at(2000)), l.Reserve(host, at(2000))
	if gap := second.Start.Sub(first.Start); gap != 70*time.Millisecond {
		t.Fatalf("two bookings at 2 s: %v apart, want 70ms", gap)
	}
}

func TestBusiest(t *testing.T) {
	l := New(Config{Burst: 1})
	l.Reserve("quiet.example", at(0))
	for range 3 {
		l.Reserve("busy.example", at(0))
	}
	l.Observe("pushed.example", Outcome{Status: 503}, at(0))
	got := l.Busiest(at(0), 2)
	if len(got) != 2 || got[0].Host != "pushed.example" || got[0].Pressure != 50 || got[1].Host != "busy.example" || got[1].Pressure != 3 {
		t.Fatalf("Busiest(2): got %+v, want pushed.example (50) then busy.example (3)", got)
	}
	// busy: three bookings of 20 ms from 0, burst 1: the next goes at 60 ms.
	if got[1].NextFree != 60*time.Millisecond || got[1].Spacing != 20*time.Millisecond {
		t.Errorf("busy.example: got next free in %v, spacing %v, want 60ms and 20ms", got[1].NextFree, got[1].Spacing)
	}
	if got := l.Busiest(at(10_000), 10); len(got) != 3 || got[0].Pressure != 0 {
		t.Errorf("Busiest after 10 s: got %+v, want three drained hosts", got)
	}
	if got := New(Config{Mode: Off}).Busiest(at(0), 10); got != nil {
		t.Errorf("Busiest of an off limiter: got %+v, want nil", got)
	}
}
