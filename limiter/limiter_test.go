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

// step is one call at a fixed instant: a Reserve when outcome is nil,
// otherwise an Observe.
type step struct {
	atMS      float64
	host      string
	outcome   *Outcome
	wantStart float64 // ms after t0; checked for Reserve steps
}

func runSteps(t *testing.T, l *Limiter, steps []step) {
	t.Helper()
	for i, s := range steps {
		host := s.host
		if host == "" {
			host = "example.com"
		}
		if s.outcome != nil {
			l.Observe(host, *s.outcome, at(s.atMS))
			continue
		}
		r := l.Reserve(host, at(s.atMS))
		if got := r.Start.Sub(t0); got != time.Duration(s.wantStart*float64(time.Millisecond)) {
			t.Fatalf("step %d: Reserve(%s, %vms): got start %v, want %vms", i, host, s.atMS, got, s.wantStart)
		}
	}
}

func TestReserveRule(t *testing.T) {
	status := func(code int, retryAfter string) *Outcome { return &Outcome{Status: code, RetryAfter: retryAfter} }
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"unknown host goes at once", Config{}, []step{{atMS: 5, wantStart: 5}}},
		{"burst of ten then spacing", Config{}, []step{
			{0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0},
			{0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0},
			// tat = 200 after ten bookings at 20 ms; tau = 180.
			{0, "", nil, 20},
			// pressure 10 now: spacing 40.
			{20, "", nil, 60},
		}},
		{"burst 1 spaces from the second", Config{Burst: 1}, []step{
			{0, "", nil, 0}, {0, "", nil, 20}, {0, "", nil, 40},
		}},
		{"negative burst acts as 1", Config{Burst: -3}, []step{
			{0, "", nil, 0}, {0, "", nil, 20},
		}},
		{"hosts are independent", Config{Burst: 1}, []step{
			{0, "a.example", nil, 0}, {0, "b.example", nil, 0}, {0, "a.example", nil, 20}, {0, "b.example", nil, 20},
		}},
		{"fixed spacing ignores pressure", Config{Mode: Fixed, Interval: 100 * time.Millisecond, Burst: 1}, []step{
			{0, "", nil, 0}, {0, "", nil, 100}, {0, "", nil, 200}, {0, "", nil, 300},
		}},
		{"fixed burst", Config{Mode: Fixed, Interval: 100 * time.Millisecond, Burst: 3}, []step{
			{0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 100}, {0, "", nil, 200},
		}},
		{"fixed ignores 429 and Retry-After", Config{Mode: Fixed, Interval: 100 * time.Millisecond, Burst: 1}, []step{
			{0, "", nil, 0}, {1, "", status(429, "30"), 0}, {1, "", status(503, ""), 0}, {1, "", &Outcome{NoAnswer: true}, 0},
			{100, "", nil, 100}, {100, "", nil, 200},
		}},
		{"off never delays", Config{Mode: Off}, []step{
			{0, "", nil, 0}, {0, "", nil, 0}, {0, "", status(429, "60"), 0}, {0, "", nil, 0},
		}},
		{"fixed with no interval is off", Config{Mode: Fixed}, []step{
			{0, "", nil, 0}, {0, "", nil, 0},
		}},
		{"exempt hosts are never delayed", Config{Burst: 1}, []step{
			{0, "localhost", nil, 0}, {0, "localhost", nil, 0}, {0, "LocalHost", nil, 0},
			{0, "127.0.0.1", nil, 0}, {0, "127.0.0.1", nil, 0}, {0, "[::1]", nil, 0}, {0, "[::1]", nil, 0},
			{0, "127.0.0.1", status(429, "60"), 0}, {1, "127.0.0.1", nil, 1},
			{0, "127.0.0.2", nil, 0}, {0, "127.0.0.2", nil, 20},
		}},
		{"503 adds 100 ms at once", Config{Burst: 1}, []step{
			// pressure 1 after the first booking, 51 after the 503: spacing 20×(1+5) = 120.
			{0, "", nil, 0}, {10, "", status(503, ""), 0}, {10, "", nil, 20}, {20, "", nil, 140},
		}},
		{"429 adds like 503", Config{Burst: 1}, []step{
			{0, "", nil, 0}, {10, "", status(429, ""), 0}, {10, "", nil, 20}, {20, "", nil, 140},
		}},
		{"500 and no answer add 20 ms", Config{Burst: 1}, []step{
			// pressure 1 → 11 after the 500: spacing 40; 12 → 22 after no answer: spacing 60.
			{0, "", nil, 0}, {10, "", status(500, ""), 0}, {10, "", nil, 20},
			{20, "", &Outcome{NoAnswer: true}, 0}, {20, "", nil, 60}, {30, "", nil, 120},
		}},
		{"2xx 3xx 4xx and aborts add nothing", Config{Burst: 1}, []step{
			{0, "", nil, 0}, {1, "", status(200, ""), 0}, {1, "", status(302, ""), 0}, {1, "", status(404, "5"), 0},
			{1, "", status(403, ""), 0}, {1, "", &Outcome{}, 0}, {1, "", status(599+1, ""), 0},
			{1, "", nil, 20}, {1, "", nil, 40},
		}},
		{"Retry-After seconds pushes the next slot past the burst", Config{}, []step{
			{0, "", nil, 0}, {50, "", status(429, "3"), 0}, {60, "", nil, 3050}, {3100, "", nil, 3170},
		}},
		{"Retry-After over 60 s is capped", Config{}, []step{
			{0, "", nil, 0}, {0, "", status(503, "3600"), 0}, {1, "", nil, 60000},
		}},
		{"Retry-After HTTP-date is ignored", Config{}, []step{
			{0, "", nil, 0}, {0, "", status(429, "Wed, 21 Oct 2026 07:28:00 GMT"), 0}, {1, "", nil, 1},
		}},
		{"Retry-After garbage and negative are ignored", Config{}, []step{
			{0, "", nil, 0}, {0, "", status(429, "soon"), 0}, {0, "", status(429, "-5"), 0}, {0, "", status(429, "1.5"), 0},
			{1, "", nil, 1},
		}},
		{"Retry-After on a 500 is ignored", Config{}, []step{
			{0, "", nil, 0}, {0, "", status(500, "30"), 0}, {1, "", nil, 1},
		}},
		{"Retry-After on an unknown host", Config{}, []step{
			{0, "redirected.example", status(503, "2"), 0}, {10, "redirected.example", nil, 2000},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runSteps(t, New(tt.cfg), tt.steps)
		})
	}
}

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

func TestPressureCapAndDrain(t *testing.T) {
	l := New(Config{})
	const host = "example.com"
	l.Reserve(host, at(0))
	for range 20 {
		l.Observe(host, Outcome{Status: 429}, at(0))
	}
	if p, _ := pressureAt(l, host, at(0)); p != 590 {
		t.Fatalf("pressure after 20 429s: got %d, want the cap 590", p)
	}
	// At the cap the spacing is 1200 ms, never more.
	r1 := l.Reserve(host, at(0))
	r2 := l.Reserve(host, at(0))
	if r1.Spacing != 1200*time.Millisecond || r2.Spacing != 1200*time.Millisecond {
		t.Fatalf("spacing at the cap: got %v and %v, want 1.2s", r1.Spacing, r2.Spacing)
	}
	if r2.Pressure != 590 {
		t.Fatalf("pressure after booking at the cap: got %d, want 590", r2.Pressure)
	}
	// 590 units drain in 59 s, one per 100 ms.
	if p, _ := pressureAt(l, host, at(58_900)); p != 1 {
		t.Fatalf("pressure after 58.9 s: got %d, want 1", p)
	}
	if p, _ := pressureAt(l, host, at(59_000)); p != 0 {
		t.Fatalf("pressure after 59 s: got %d, want 0", p)
	}
}

func TestDrainFromPlateau(t *testing.T) {
	// Back to back at the 100 ms plateau the pressure sits at 41.
	l := New(Config{})
	const host = "example.com"
	var now time.Time = at(0)
	var r Reservation
	for range 400 {
		r = l.Reserve(host, now)
		now = r.Start
	}
	if r.Spacing != 100*time.Millisecond {
		t.Fatalf("plateau spacing: got %v, want 100ms", r.Spacing)
	}
	if r.Pressure != 41 {
		t.Fatalf("plateau pressure: got %d, want 41", r.Pressure)
	}
	if p, _ := pressureAt(l, host, now.Add(3900*time.Millisecond)); p == 0 {
		t.Fatalf("pressure 3.9 s after the plateau: got 0, want some left")
	}
	if p, _ := pressureAt(l, host, now.Add(4200*time.Millisecond)); p != 0 {
		t.Fatalf("pressure 4.2 s after the plateau: got %d, want 0", p)
	}
}

func TestDrainWholeSteps(t *testing.T) {
	// Touching a host every 60 ms must not lose the partial steps: 30
	// touches span 1.74 s, which forgives 17 units, not 0.
	l := New(Config{})
	const host = "example.com"
	l.Observe(host, Outcome{Status: 503}, at(0)) // 50 units
	for i := 1; i <= 29; i++ {
		l.Observe(host, Outcome{Status: 200}, at(float64(60*i)))
	}
	if p, _ := pressureAt(l, host, at(1740)); p != 50-17 {
		t.Fatalf("pressure after 1.74 s of 60 ms touches: got %d, want %d", p, 50-17)
	}
}

func TestIdleHostStartsFromZero(t *testing.T) {
	l := New(Config{})
	const host = "example.com"
	now := at(0)
	for range 400 {
		now = l.Reserve(host, now).Start
	}
	// After 8 s without navigations the host is back to a fresh burst.
	now = now.Add(8 * time.Second)
	for i := range 10 {
		if r := l.Reserve(host, now); !r.Start.Equal(now) {
			t.Fatalf("navigation %d after 8 s idle: delayed by %v, want none", i+1, r.Start.Sub(now))
		}
	}
	if r := l.Reserve(host, now); r.Start.Sub(now) != 20*time.Millisecond {
		t.Fatalf("navigation 11 after 8 s idle: delayed by %v, want 20ms", r.Start.Sub(now))
	}
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
		{10, 0, []string{"booked.example", "pressed.example", "waiting.example"}},
		{100, 1, []string{"pressed.example", "waiting.example"}}, // booked: tat past, pressure 1 drained
		{5099, 0, []string{"pressed.example", "waiting.example"}},
		{5100, 1, []string{"waiting.example"}},
		{30_000, 0, []string{"waiting.example"}}, // tat = 30 s + tau
		{30_180, 1, nil},
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
