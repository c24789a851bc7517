// Package pace keeps the spacing a site sees as exact as the schedule it
// was booked on. A held navigation is let go at its slot, but the browser
// sends it when it gets to it: a moment later when idle, tens or hundreds
// of milliseconds later when busy. A navigation that leaves late followed
// by one that leaves on time reaches the site closer to it than the
// schedule allows.
//
// The relay tells a Tracker when it booked each navigation (Book), when it
// let it go (Released) and, from the browser's own timing, when it really
// left (Departed), and asks it before letting the next one go how long it
// must wait still (Due). A departure later than the browser's usual lag by
// more than the Tolerance moves the rest of its bucket's schedule by as
// much: the navigations booked already wait that much longer, and Push
// tells the limiter, so that those booked later get later slots too (and,
// through a shared store, those of other relays). A navigation is not let
// go while one let go before it in its bucket has not left yet, within a
// bound: the next one would otherwise overtake it. Departures on time
// change nothing, so a schedule of on-time departures is the limiter's own
// to the microsecond.
//
// Of a navigation's gap at the site, the Tracker answers for what the
// browser adds after the release; what the network adds beyond the
// browser's send (a longer path for one request than the next) it cannot
// see.
//
// The package knows nothing of CDP, the limiter's rule or the relay: time
// comes in from outside.
package pace

import (
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

// Defaults for the zero values of Config's fields.
const (
	// DefaultTolerance is how much closer than their slots two departures
	// may come: a millisecond, so that what the network adds after the
	// browser's send (a millisecond or two on a busy machine) still leaves
	// the site's gaps within a few milliseconds of the spacing.
	DefaultTolerance = time.Millisecond
	// DefaultWait bounds how long a release waits for an earlier one of
	// its bucket to leave: a browser that holds a request that long after
	// its release (a client's own interception that sits on it) is not
	// waited for. Chromium creating a hundred pages at once took more than
	// 2 s to send some documents it was let go, and the next one, let go
	// at a 2 s bound, reached the site 21.7 ms after one of them
	// (BENCHMARKS.md, what the site sees of a crawl of 100 pages).
	DefaultWait = 10 * time.Second
	// MinSpacing is the spacing up to which a bucket's departures are not
	// followed: what a site sees cannot come closer than the spacing by
	// more than the network's own few milliseconds however they leave,
	// and following them would make each release wait for the one before
	// it to leave (a round trip to the browser), which at such spacings is
	// all the crawl's pace (BENCHMARKS.md, row n).
	MinSpacing = 5 * time.Millisecond
	// lagWindow is how many recent departures the browser's usual lag is
	// the least of.
	lagWindow = 64
	// DefaultWarm is how many departures of a browser its usual lag needs
	// before it counts. Until then it is 0, and a departure's whole lag
	// past the tolerance moves the rest of its bucket's schedule: the first
	// ones of a fresh browser or tab are often slow (11 ms, then 5), and
	// taken as usual, the next one left early by the difference (190.9 ms
	// at 200 with Selenium; 191.7 ms at the start of a crawl of fresh
	// pages).
	DefaultWarm = 8
)

// Config configures a Tracker. The zero Config is the default.
type Config struct {
	// Tolerance is how much later than the browser's usual lag a
	// navigation may leave before the rest of its bucket's schedule moves.
	// Zero means DefaultTolerance.
	Tolerance time.Duration
	// Wait bounds how long a release waits for an earlier release of its
	// bucket to leave. Zero means DefaultWait.
	Wait time.Duration
	// Warm is how many departures of a browser its usual lag needs before
	// it counts. Zero means DefaultWarm; a negative one, the first.
	Warm int
	// Push, when set, is told each time a bucket's schedule moves, and by
	// how much; it is called without the Tracker's lock held.
	Push func(bucket string, by time.Duration)
	// Left, when set, is told of each exact departure: how long the
	// browser took from the release (lag) and its usual lag then; it is
	// called without the Tracker's lock held.
	Left func(bucket string, lag, usual time.Duration)
}

// Tracker follows the navigations of the relay's clients from their
// booking to their departure. It is safe for concurrent use; the zero
// Tracker is usable and has the default Config.
type Tracker struct {
	Config

	mu      lockorder.Mutex[lockorder.Leaf]
	buckets map[string]*bucket // guarded by mu; buckets with navigations not ended
	lags    map[string]*lags   // guarded by mu; by source (browser)
}

// bucket is one schedule's state.
type bucket struct {
	name string
	// shift is how far late departures have moved the schedule since the
	// bucket was last idle: a navigation booked with shift s goes shift − s
	// after its slot.
	shift time.Duration
	live  int           // navigations booked and not ended
	out   map[*Nav]bool // navigations let go whose departure is not known
	left  chan struct{} // closed and replaced when one of out leaves or ends
	// bound are navigations known to have left by some time, not yet
	// exactly when: the navigations after them go no earlier than that
	// time allows, and the schedule moves only once the exact time is in.
	bound map[*Nav]bool
}

// lags are the latest times the browser took from a release to the
// departure, whose least is its usual lag.
type lags struct {
	ring [lagWindow]time.Duration
	n    int
}

func (l *lags) add(d time.Duration) {
	l.ring[l.n%lagWindow] = max(d, 0)
	l.n++
}

func (l *lags) least(warm int) time.Duration {
	if l == nil || l.n < warm {
		return 0
	}
	n := min(l.n, lagWindow)
	if n == 0 {
		return 0
	}
	m := l.ring[0]
	for _, d := range l.ring[1:n] {
		m = min(m, d)
	}
	return m
}

// Nav is one navigation a Tracker follows. Its methods are safe for
// concurrent use; a nil *Nav ignores them all.
type Nav struct {
	t      *Tracker
	b      *bucket
	source string
	slot   time.Time
	sigma  time.Duration // the bucket's shift when it was booked
	// slack is how much later than slot n may leave with the schedule
	// after it unchanged (what a burst allowance gave it); headroom is how
	// far the schedule may move before n's slot moves (how much later than
	// the rule's earliest n was booked).
	slack, headroom time.Duration

	// guarded by t.mu
	moved    time.Duration // how far a shared schedule moved its slot since booking (Moved)
	fleet    time.Duration // of moved, what its bucket's shift did not cover at its release
	due      time.Time     // when it was due at its release
	released time.Time
	departed bool      // its departure is known, exactly or as an upper bound
	exact    bool      // its exact departure is known
	by       time.Time // it had left by then, when only that is known
	ended    bool
	whole    bool // all of its lag is late (WholeLag)
}

// Book starts following a navigation booked in bucket name for slot, that the
// browser source (a name of the caller's) will send. slack is how much
// later than slot it may leave without the navigations after it coming
// closer than the schedule allows (a burst allowance let it go before the
// bucket's steady schedule: 0 with a burst of 1); headroom is how far the
// bucket's schedule may move later before slot moves with it (it was
// booked later than the earliest the rule allowed, the bucket being idle).
// Both are the limiter's (Reservation.Slack, Reservation.Headroom).
func (t *Tracker) Book(name, source string, slot time.Time, slack, headroom time.Duration) *Nav {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.buckets == nil {
		t.buckets = make(map[string]*bucket)
		t.lags = make(map[string]*lags)
	}
	b := t.buckets[name]
	if b == nil {
		b = &bucket{name: name, out: make(map[*Nav]bool), bound: make(map[*Nav]bool), left: make(chan struct{})}
		t.buckets[name] = b
	}
	b.live++
	return &Nav{t: t, b: b, source: source, slot: slot, sigma: b.shift, slack: max(slack, 0), headroom: max(headroom, 0)}
}

// WholeLag makes all of n's lag, from its release to its departure, count
// as late, and none of it teach the browser's usual lag: for a navigation
// let go as a command, which the browser starts when it gets to it (tens
// or hundreds of milliseconds later when busy, a few when idle), the least
// of the latest lags says nothing of the next one's. Call it before n's
// release.
func (n *Nav) WholeLag() {
	if n == nil {
		return
	}
	n.t.mu.Lock()
	n.whole = true
	n.t.mu.Unlock()
}

// Moved tells n that its slot moved by, in all, since it was booked: a
// schedule shared by several relays (a store) was pushed that far since,
// by their late departures and by this Tracker's own (Push). n is due no
// sooner than its slot so moved, and its own departure is judged against
// the moved slot: held back for another relay's lateness, it is not late
// itself, and pushing the schedule again for it would hold back the next
// ones for the same lateness, and so on without end. Pushes of the
// Tracker's own that by includes count once: n's slot moves by the larger
// of by and its bucket's own shift since n was booked. Call it before n's
// release; a smaller by than told before changes nothing.
func (n *Nav) Moved(by time.Duration) {
	if n == nil {
		return
	}
	n.t.mu.Lock()
	n.moved = max(n.moved, by)
	n.t.mu.Unlock()
}

// usualLocked is the browser's usual lag for n, of the lags of src: none
// when all of n's lag is late. Callers hold t.mu.
func (n *Nav) usualLocked(src string) time.Duration {
	if n.whole {
		return 0
	}
	return n.t.lags[src].least(n.t.warm())
}

func (t *Tracker) tolerance() time.Duration {
	if t.Tolerance > 0 {
		return t.Tolerance
	}
	return DefaultTolerance
}

func (t *Tracker) warm() int {
	if t.Warm == 0 {
		return DefaultWarm
	}
	return t.Warm
}

func (t *Tracker) wait() time.Duration {
	if t.Wait > 0 {
		return t.Wait
	}
	return DefaultWait
}

// Due reports when n may be let go: its slot, moved by how far late
// departures moved its bucket's schedule since it was booked (or its shared
// schedule, Moved, when that is further), less its headroom. While a
// navigation of its bucket let go less than Wait before now has not left
// yet, Due also returns a channel that is closed once that changes, and
// the time by which it changes at the latest: ask again then.
func (n *Nav) Due(now time.Time) (due time.Time, wait <-chan struct{}, until time.Time) {
	if n == nil {
		return time.Time{}, nil, time.Time{}
	}
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	shift := n.b.shift
	for o := range n.b.bound {
		shift = max(shift, o.wantLocked(o.by, o.usualLocked(o.source)))
	}
	due = n.slot.Add(max(0, max(shift-n.sigma, n.moved)-n.headroom))
	for o := range n.b.out {
		give := o.released.Add(t.wait())
		if !now.Before(give) || o == n {
			continue
		}
		if wait == nil || give.Before(until) {
			until = give
		}
		wait = n.b.left
	}
	return due, wait, until
}

// Released notes that n was let go at at; it was due at due (its Due).
func (n *Nav) Released(at, due time.Time) {
	if n == nil {
		return
	}
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if n.ended || !n.released.IsZero() {
		return
	}
	n.released, n.due = at, due
	n.fleet = max(0, n.moved-(n.b.shift-n.sigma))
	n.b.out[n] = true
}

// Departed notes that n left the browser at at. exact says at is the
// browser's own timing of the send; otherwise it is a time by which n had
// left (when the relay learned it had), which the navigations after it
// respect until the exact time is in. A departure later than its slack
// and the browser's usual lag past n's slot (moved as its bucket's
// schedule moved), by more than the Tolerance, moves the rest of the
// bucket's schedule by that much.
func (n *Nav) Departed(at time.Time, exact bool) {
	if n == nil {
		return
	}
	t := n.t
	t.mu.Lock()
	if n.released.IsZero() || n.exact || n.ended || n.departed && !exact {
		t.mu.Unlock()
		return
	}
	l := t.lags[n.source]
	if l == nil {
		l = &lags{}
		t.lags[n.source] = l
	}
	n.departed = true
	n.settleLocked()
	if !exact {
		n.by = at
		n.b.bound[n] = true
		t.mu.Unlock()
		return
	}
	usual := n.usualLocked(n.source) // before n's own lag counts: a late one is not usual
	lag := at.Sub(n.released)
	if !n.whole {
		l.add(lag)
	}
	n.exact = true
	delete(n.b.bound, n)
	want := n.wantLocked(at, usual)
	var by time.Duration
	if want > n.b.shift {
		by = want - n.b.shift
		n.b.shift = want
	}
	push, left, name := t.Push, t.Left, n.b.name
	t.mu.Unlock()
	if left != nil {
		left(name, lag, usual)
	}
	if by > 0 && push != nil {
		push(name, by)
	}
}

// wantLocked is the shift the navigations after n need for n to have left
// at at, given the browser's usual lag: n counts as having gone at its slot
// (plus its slack, and what a shared schedule moved it by past its
// bucket's shift) moved by the result − sigma. Callers hold t.mu.
func (n *Nav) wantLocked(at time.Time, usual time.Duration) time.Duration {
	return n.sigma + at.Sub(n.slot) - n.fleet - n.slack - usual - n.t.tolerance()
}

// End notes that n is over: answered, failed, aborted, or its page gone.
// A navigation let go whose departure was never learned counts as left.
// One whose exact departure never came (the page cancelled its request,
// as a navigation that replaces it does, before any answer) but that was
// known to have left by a time counts as having left then, judged against
// the usual lag of such times (the browser's events reach the relay after
// the send): one later than usual moves the rest of its bucket's schedule
// as an exact departure would. Every Nav booked must end, once its answer
// is in or it is given up: its bucket is forgotten when none is left.
func (n *Nav) End() {
	if n == nil {
		return
	}
	t := n.t
	t.mu.Lock()
	if n.ended {
		t.mu.Unlock()
		return
	}
	n.ended = true
	var by, lag, usual time.Duration
	if n.departed && !n.exact && !n.by.IsZero() && !n.released.IsZero() {
		src := n.source + "\x00by"
		l := t.lags[src]
		if l == nil {
			l = &lags{}
			t.lags[src] = l
		}
		usual = n.usualLocked(src)
		lag = n.by.Sub(n.released)
		first := l.n == 0 && !n.whole
		if !n.whole {
			l.add(lag)
		}
		if want := n.wantLocked(n.by, usual); want > n.b.shift && !first {
			by = want - n.b.shift
			n.b.shift = want
		}
	}
	n.settleLocked()
	delete(n.b.bound, n)
	if n.b.live--; n.b.live == 0 && t.buckets[n.b.name] == n.b {
		delete(t.buckets, n.b.name)
	}
	push, name := t.Push, n.b.name
	t.mu.Unlock()
	if by > 0 && push != nil {
		push(name, by)
	}
}

// settleLocked takes n off its bucket's navigations yet to leave. Callers
// hold t.mu.
func (n *Nav) settleLocked() {
	if n.b.out[n] {
		delete(n.b.out, n)
		close(n.b.left)
		n.b.left = make(chan struct{})
	}
}

// Len reports how many buckets have navigations not ended.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buckets)
}
