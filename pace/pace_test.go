package pace

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// step is one thing that happens to navigation nav (its index in booking
// order) at a fixed instant.
type step struct {
	op  string // book, release, depart (exact), sent (upper bound), end, moved (by ms)
	nav int
	ms  float64 // when; for book, the slot
	// slack and headroom of a booking, ms
	slack, headroom float64
	check           func(t *testing.T, tr *Tracker, navs []*Nav)
}

// due checks navigation i's due time, asked at now.
func due(i int, now, want float64) func(t *testing.T, tr *Tracker, navs []*Nav) {
	return func(t *testing.T, tr *Tracker, navs []*Nav) {
		t.Helper()
		got, _, _ := navs[i].Due(at(now))
		if got != at(want) {
			t.Errorf("navigation %d due at %.1f ms, want %.1f ms", i, msOf(got.Sub(t0)), want)
		}
	}
}

func TestTracker(t *testing.T) {
	tests := []struct {
		name   string
		steps  []step
		pushed float64 // what Push was told in all, ms
	}{
		{
			name: "on-time departures change nothing",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{check: due(1, 200, 200)},
				{op: "release", nav: 1, ms: 200}, {op: "depart", nav: 1, ms: 204.5}, // 2.5 ms more than usual: within tolerance
				{check: due(2, 400, 400)},
			},
		},
		{
			name: "a late departure moves what follows by its lateness less the tolerance",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2}, // usual lag: 2 ms
				{op: "release", nav: 1, ms: 200}, {op: "depart", nav: 1, ms: 252}, // 50 ms late
				{check: due(2, 400, 447)},
			},
			pushed: 47,
		},
		{
			name: "a navigation moved by the one before it does not move the next again",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 32}, // first departure: no usual lag known yet
				{check: due(1, 200, 229)},
				{op: "release", nav: 1, ms: 229}, {op: "depart", nav: 1, ms: 231},
				{check: due(2, 400, 429)},
			},
			pushed: 29,
		},
		{
			name: "the usual lag is the least of the latest",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 100}, {op: "book", nav: 2, ms: 200}, {op: "book", nav: 3, ms: 300},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "release", nav: 1, ms: 100}, {op: "depart", nav: 1, ms: 103},
				// Lag 5 ms against the usual 2: 3 ms late, at the tolerance.
				{op: "release", nav: 2, ms: 200}, {op: "depart", nav: 2, ms: 205},
				{check: due(3, 300, 300)},
			},
		},
		{
			name: "a release late on the relay's side counts as late",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "release", nav: 1, ms: 220}, {op: "depart", nav: 1, ms: 222},
				{check: due(2, 400, 417)},
			},
			pushed: 17,
		},
		{
			name: "an upper bound holds back what follows; the exact time moves the schedule",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "release", nav: 1, ms: 200}, {op: "sent", nav: 1, ms: 215},
				{check: due(2, 400, 410)}, // as if it left at 215: nothing pushed yet
				{op: "depart", nav: 1, ms: 212},
				{check: due(2, 400, 407)},
			},
			pushed: 7,
		},
		{
			name: "an upper bound on time moves nothing",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200},
				{op: "release", nav: 0, ms: 0}, {op: "sent", nav: 0, ms: 1},
				{op: "depart", nav: 0, ms: 0.5},
				{check: due(1, 200, 200)},
			},
		},
		{
			name: "a bucket forgotten once idle starts again from its slots",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 53},
				{op: "end", nav: 0},
				{op: "book", nav: 1, ms: 200},
				{check: due(1, 200, 200)},
			},
			pushed: 50,
		},
		{
			name: "a late departure within its slack (a burst's) moves nothing",
			steps: []step{
				// Burst 2, spacing 200 ms, an idle host: the first two go at
				// once, the second on the burst's allowance.
				{op: "book", nav: 0, ms: 0, headroom: 200}, {op: "book", nav: 1, ms: 0, slack: 200}, {op: "book", nav: 2, ms: 200, slack: 200},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "release", nav: 1, ms: 0}, {op: "depart", nav: 1, ms: 150},
				{check: due(2, 200, 200)},
			},
		},
		{
			name: "a late departure past its slack moves what follows by the excess",
			steps: []step{
				{op: "book", nav: 0, ms: 0, headroom: 200}, {op: "book", nav: 1, ms: 0, slack: 200}, {op: "book", nav: 2, ms: 200, slack: 200},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "release", nav: 1, ms: 0}, {op: "depart", nav: 1, ms: 260},
				{check: due(2, 200, 255)},
			},
			pushed: 55,
		},
		{
			name: "a navigation booked later than the schedule asked keeps its slot while a push is within its headroom",
			steps: []step{
				// Burst 1, spacing 200 ms: the second was asked for 100 ms
				// after the first's schedule let it go; the third was queued.
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 300, headroom: 100}, {op: "book", nav: 2, ms: 500},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 52},
				{check: due(1, 300, 300)},
				{check: due(2, 500, 549)},
			},
			pushed: 49,
		},
		{
			name: "a push beyond a navigation's headroom moves it by the excess",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 300, headroom: 100},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 153},
				{check: due(1, 300, 350)},
			},
			pushed: 150,
		},
		{
			name: "a navigation held back by a shared schedule's push leaves on its moved slot: nothing pushed again",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "moved", nav: 1, ms: 80}, // another relay's navigation left 80 ms late
				{check: due(1, 200, 280)},
				{op: "release", nav: 1, ms: 280}, {op: "depart", nav: 1, ms: 282},
				{check: due(2, 400, 400)}, // its own slot moves with the store's, told when it comes
			},
		},
		{
			name: "a shared schedule's move counts the tracker's own push once",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "release", nav: 1, ms: 200}, {op: "depart", nav: 1, ms: 252}, // 47 pushed, in the store too
				{op: "moved", nav: 2, ms: 47},
				{check: due(2, 400, 447)},
				{op: "moved", nav: 2, ms: 67}, // and 20 by another relay
				{check: due(2, 400, 467)},
				{op: "release", nav: 2, ms: 467}, {op: "depart", nav: 2, ms: 469},
			},
			pushed: 47,
		},
		{
			name: "a navigation leaving late past its moved slot pushes its own lateness only",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200}, {op: "book", nav: 2, ms: 400},
				{op: "release", nav: 0, ms: 0}, {op: "depart", nav: 0, ms: 2},
				{op: "moved", nav: 1, ms: 80},
				{op: "release", nav: 1, ms: 280}, {op: "depart", nav: 1, ms: 312}, // 30 ms late past 280
				{check: due(2, 400, 427)},
			},
			pushed: 27,
		},
		{
			name: "a navigation ended without leaving moves nothing",
			steps: []step{
				{op: "book", nav: 0, ms: 0}, {op: "book", nav: 1, ms: 200},
				{op: "release", nav: 0, ms: 0}, {op: "end", nav: 0},
				{check: due(1, 200, 200)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pushed time.Duration
			tr := &Tracker{Config: Config{Tolerance: 3 * time.Millisecond, Warm: -1, Push: func(bucket string, by time.Duration) {
				if bucket != "a.test" {
					t.Errorf("pushed %q, want a.test", bucket)
				}
				pushed += by
			}}}
			var navs []*Nav
			for _, s := range tt.steps {
				switch s.op {
				case "book":
					navs = append(navs, tr.Book("a.test", "chromium", at(s.ms), time.Duration(s.slack*float64(time.Millisecond)), time.Duration(s.headroom*float64(time.Millisecond))))
				case "release":
					due, _, _ := navs[s.nav].Due(at(s.ms))
					navs[s.nav].Released(at(s.ms), due)
				case "depart":
					navs[s.nav].Departed(at(s.ms), true)
				case "sent":
					navs[s.nav].Departed(at(s.ms), false)
				case "end":
					navs[s.nav].End()
				case "moved":
					navs[s.nav].Moved(time.Duration(s.ms * float64(time.Millisecond)))
				case "":
					s.check(t, tr, navs)
				}
			}
			if msOf(pushed) != tt.pushed {
				t.Errorf("pushed %.1f ms in all, want %.1f ms", msOf(pushed), tt.pushed)
			}
		})
	}
}

// TestTrackerWaitsForTheOneBefore: a navigation is not let go while one
// let go before it in its bucket has not left, but no longer than Wait.
func TestTrackerWaitsForTheOneBefore(t *testing.T) {
	tr := &Tracker{Config: Config{Tolerance: 3 * time.Millisecond, Wait: time.Second, Warm: -1}}
	a := tr.Book("a.test", "chromium", at(0), 0, 0)
	b := tr.Book("a.test", "chromium", at(200), 0, 0)
	other := tr.Book("b.test", "chromium", at(200), 0, 0)
	due, _, _ := a.Due(at(0))
	a.Released(at(0), due)

	if _, wait, _ := other.Due(at(200)); wait != nil {
		t.Errorf("b.test waits for a.test's departure, want only its own bucket's")
	}
	_, wait, until := b.Due(at(200))
	if wait == nil || until != at(1000) {
		t.Fatalf("second navigation: wait %v until %v, want to wait until a.test's first leaves, at most until 1000 ms", wait, until)
	}
	select {
	case <-wait:
		t.Fatal("wait over before the first navigation left")
	default:
	}
	a.Departed(at(250), false)
	select {
	case <-wait:
	default:
		t.Fatal("wait not over once the first navigation left")
	}
	if d, wait, _ := b.Due(at(260)); wait != nil || d != at(447) {
		t.Errorf("second navigation due at %.1f ms (wait %v), want 447 ms: the first left 250 ms late", msOf(d.Sub(t0)), wait)
	}

	// One that never says it left is waited for Wait at most.
	c := tr.Book("a.test", "chromium", at(700), 0, 0)
	b.Released(at(447), at(447))
	if _, wait, _ := c.Due(at(1446)); wait == nil {
		t.Errorf("third navigation does not wait for the second, let go 999 ms before")
	}
	if _, wait, _ := c.Due(at(1447)); wait != nil {
		t.Errorf("third navigation waits for the second after Wait")
	}
	for _, n := range []*Nav{a, b, c, other} {
		n.End()
	}
	if n := tr.Len(); n != 0 {
		t.Errorf("tracker remembers %d buckets with every navigation ended, want 0", n)
	}
}

// TestTrackerWarmsUp: a fresh browser's first departures are slow (11 ms
// after their release), then one leaves in 5. Taken as usual at once, the
// slow lag hides the gap it shortens (194 ms at 200); until Warm
// departures are in, the usual lag is 0 and each slow one moves the
// schedule, so no two leave closer than the spacing less the tolerance.
func TestTrackerWarmsUp(t *testing.T) {
	const tol = time.Millisecond
	for _, warm := range []int{0, -1} {
		tr := &Tracker{Config: Config{Tolerance: tol, Warm: warm}}
		lags := []float64{11, 11, 5, 5}
		var navs []*Nav // booked at once, as a crawl's are
		for i := range lags {
			navs = append(navs, tr.Book("a.test", "chromium", at(float64(200*i)), 0, 0))
		}
		var left []time.Duration
		for i, lag := range lags {
			n := navs[i]
			due, _, _ := n.Due(at(float64(200 * i)))
			n.Released(due, due)
			d := due.Add(time.Duration(lag * float64(time.Millisecond)))
			n.Departed(d, true)
			left = append(left, d.Sub(t0))
			defer n.End()
		}
		short := false
		for i := 1; i < len(left); i++ {
			if gap := left[i] - left[i-1]; gap < 200*time.Millisecond-tol {
				short = true
				if warm == 0 {
					t.Errorf("Warm %d: departures %d and %d %.1f ms apart, want at least %v", warm, i, i+1, msOf(gap), 200*time.Millisecond-tol)
				}
			}
		}
		if warm == -1 && !short {
			t.Errorf("Warm -1 (the first departure's lag usual at once): no gap under the spacing, want the one this guards against")
		}
	}
}

func TestNilNav(t *testing.T) {
	var n *Nav
	if d, wait, _ := n.Due(at(0)); !d.IsZero() || wait != nil {
		t.Errorf("nil Nav due %v, wait %v", d, wait)
	}
	n.Released(at(0), at(0))
	n.Departed(at(1), true)
	n.End()
}

// TestTrackerCancelledDepartures: a navigation whose request the page
// cancelled before any answer (the next navigation replaced it) never gets
// its exact departure; it counts as having left when the relay learned it
// had, judged against the usual lag of such times, and a late one moves
// the schedule as an exact departure would.
func TestTrackerCancelledDepartures(t *testing.T) {
	var pushed time.Duration
	tr := &Tracker{Config: Config{Tolerance: time.Millisecond, Warm: -1, Push: func(_ string, by time.Duration) { pushed += by }}}
	step := func(slot, left float64) {
		n := tr.Book("a.test", "chromium", at(slot), 0, 0)
		due, _, _ := n.Due(at(slot))
		n.Released(at(slot), due)
		n.Departed(at(left), false)
		n.End()
	}
	step(0, 3)     // the first: nothing usual to judge it by yet
	step(200, 203) // as usual
	step(400, 404) // within the tolerance
	if pushed != 0 {
		t.Fatalf("on-time departures pushed the schedule by %v", pushed)
	}
	step(600, 660) // 57 ms later than usual
	if want := 56 * time.Millisecond; pushed != want {
		t.Errorf("a departure 57 ms later than usual pushed %v, want %v (less the tolerance)", pushed, want)
	}
}

// TestTrackerWholeLag: navigations let go as commands, which the browser
// starts when it gets to it, leave after lags that vary by tens of
// milliseconds. Taken as the browser's usual lag, the least of them lets
// the one after a slow one leave too close to it; with WholeLag, every
// lag moves the schedule, and no two leave closer than the spacing less
// the tolerance.
func TestTrackerWholeLag(t *testing.T) {
	const tol, spacing = time.Millisecond, 200 * time.Millisecond
	lags := []float64{40, 12, 80, 5, 60, 30}
	for _, whole := range []bool{true, false} {
		tr := &Tracker{Config: Config{Tolerance: tol, Warm: -1}}
		var pushed time.Duration
		tr.Push = func(_ string, by time.Duration) { pushed += by }
		var navs []*Nav // booked at once, as a crawl's are
		for i := range lags {
			n := tr.Book("a.test", "chromium", at(float64(200*i)), 0, 0)
			if whole {
				n.WholeLag()
			}
			navs = append(navs, n)
		}
		var left []time.Time
		for i, lag := range lags {
			n := navs[i]
			due, _, _ := n.Due(at(float64(200 * i)))
			if i > 0 {
				due = maxTime(due, left[i-1]) // not before the one before it left
			}
			n.Released(due, due)
			d := due.Add(time.Duration(lag * float64(time.Millisecond)))
			n.Departed(d, true)
			left = append(left, d)
			defer n.End()
		}
		short := 0
		for i := 1; i < len(left); i++ {
			if gap := left[i].Sub(left[i-1]); gap < spacing-tol {
				short++
				if whole {
					t.Errorf("WholeLag: departures %d and %d %.1f ms apart, want at least %v", i, i+1, msOf(gap), spacing-tol)
				}
			}
		}
		if !whole && short == 0 {
			t.Errorf("without WholeLag: no gap under the spacing, want the ones this guards against")
		}
		if whole && pushed == 0 {
			t.Errorf("WholeLag: the schedule never moved")
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
