package hold

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// Flight follows one held navigation from its hold to its end: its place
// among its bucket's navigations in Flight (when the bucket has a cap),
// and when it was let go, for its answer time. The holding strategy ends
// it (end) when the navigation's answer is in, it failed, its page went
// or a later navigation replaced it; its life context ends it too (the
// client's connection, for the strategies held in it), and a navigation
// let go whose answer never comes is forgotten after maxInFlight. Its
// methods are safe for concurrent use, and on a nil Flight.
type Flight struct {
	h    *BrowserHold
	ctx  context.Context // ends with the flight: stops its wait for a place
	stop context.CancelFunc

	// mu guards the fields below; the last of hold.go's lock order: taken
	// under a way's lock or a fetch connection's, takes none.
	mu       lockorder.Mutex[RankFlight]
	place    *inflight.Place // guarded by mu; nil without a cap, or given back
	entered  bool            // guarded by mu; it asked for its place
	released time.Time       // guarded by mu; when it was let go
	timer    *time.Timer     // guarded by mu; ends it maxInFlight after its release
	nav      *pace.Nav       // guarded by mu; its departure, followed until the flight ends (the session strategy's)
	probe    string          // guarded by mu; the bucket whose breaker's probe it is until its answer, "" when none (Prober)
}

// maxInFlight is how long after its release a navigation's end is
// awaited at most: past it, its flight ends (and its place, if the cap's
// bound has not given it back yet, goes back). It is longer than the
// longest bound --http-nav-concurrency-bound accepts.
const maxInFlight = 61 * time.Minute

// NewFlight starts following a navigation to be held, until life ends at
// the latest.
func (h *BrowserHold) NewFlight(life context.Context) *Flight {
	fl := &Flight{h: h}
	fl.ctx, fl.stop = context.WithCancel(life)
	context.AfterFunc(fl.ctx, fl.giveBack)
	return fl
}

// End ends the flight: its place goes back at once (Place.Leave never
// blocks), so the next navigation of its host may take it before the
// browser goes on; a wait for one stops.
func (fl *Flight) End() {
	if fl != nil {
		fl.stop()
		fl.giveBack()
	}
}

// giveBack gives the flight's place back, once; it runs at end, and when
// the flight's life ends.
func (fl *Flight) giveBack() {
	fl.mu.Lock()
	p, n, probe := fl.place, fl.nav, fl.probe
	fl.place, fl.nav, fl.probe = nil, nil, ""
	if fl.timer != nil {
		fl.timer.Stop()
	}
	fl.mu.Unlock()
	p.Leave()
	n.End()
	if probe != "" {
		fl.h.probeLost(probe)
	}
}

// probing notes that the navigation goes as bucket's probe, until
// answered notes its answer.
func (fl *Flight) probing(bucket string) {
	if fl != nil {
		fl.mu.Lock()
		fl.probe = bucket
		fl.mu.Unlock()
	}
}

// answered notes that the navigation's answer came: a probe's is told
// with it.
func (fl *Flight) answered() { fl.probing("") }

// Follow hands the flight the navigation whose departure is followed
// (with Request.Depart): it ends with the flight, at once if the flight is over.
func (fl *Flight) Follow(n *pace.Nav) {
	if fl == nil || n == nil {
		return
	}
	fl.mu.Lock()
	over := fl.ctx.Err() != nil
	if !over {
		fl.nav = n
	}
	fl.mu.Unlock()
	if over {
		n.End()
	}
}

// Context ends with the flight: its page went, the client left, a later
// navigation replaced it, or its answer came.
func (fl *Flight) Context() context.Context { return fl.ctx }

// Followed is the navigation follow handed the flight, nil when none.
func (fl *Flight) Followed() *pace.Nav {
	if fl == nil {
		return nil
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.nav
}

// let notes that the navigation was let go at now.
func (fl *Flight) let(now time.Time) {
	if fl == nil {
		return
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.released.IsZero() {
		fl.released = now
		fl.timer = time.AfterFunc(maxInFlight, fl.stop)
	}
}

// LeftAt notes that the navigation's request, let go already, left the
// relay's last hold at now (the Fetch strategy's second connection): its
// answer time counts from then, not from the browser's hand-over between
// the two.
func (fl *Flight) LeftAt(now time.Time) {
	if fl == nil {
		return
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if !fl.released.IsZero() && now.After(fl.released) {
		fl.released = now
	}
}

// took is how long the answer received at now took since the release; 0
// when unknown.
func (fl *Flight) took(now time.Time) time.Duration {
	if fl == nil {
		return 0
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.released.IsZero() {
		return 0
	}
	return max(now.Sub(fl.released), time.Nanosecond)
}

// Request is one navigation a way of holding hands the core: its
// flight, its host (limiter.Key of its URL) and URL, where it logs, and
// what the way follows of it.
type Request struct {
	Flight    *Flight
	Host, URL string
	Log       *zerolog.Logger // nil: the Holder's
	// Depart: the way tells when the request left the browser. The core
	// then books the slot a pace.Nav, hands it to booked, and lets the
	// navigation go no sooner than the late departures before it in its
	// bucket allow (package pace).
	Depart bool
	// Refusable: a Limiter that refuses navigations (Refuser) is asked
	// about it before anything is booked; false for one asked already
	// (a navigation booked again).
	Refusable bool
}

// Holding is what a way of Holding does at the moments of one hold. The
// core calls its methods on goroutines of its own, never on the reader
// that found the navigation (a slow store must not stall it), each at
// most once, in this order: refused, or booked, waits, release; then
// done, whatever happened (after nothing at all, when the hold's context
// ended first or the flight ended while it waited for a place). A stop
// (stop.go) or a panic in holding may tell refused after booked and
// waits, in place of release.
type Holding interface {
	// Booked is told the start of the navigation's slot once it is
	// Booked, and the pace.Nav that follows its departure (nil without
	// depart).
	Booked(start time.Time, nav *pace.Nav)
	// Waits is told that the navigation may have to wait: for a place in
	// flight, for the store, for its slot, for the one before it to leave.
	Waits()
	// Refused takes a navigation the Limiter refuses or defers (r says
	// which): nothing is booked, and the way answers it at once.
	Refused(r refusal.Reason)
	// Release lets the navigation go: its slot came.
	Release()
	// Done ends the hold.
	Done()
}

// NoHolding does nothing at any moment of a hold: a way's holding
// embeds it and says what it does at the moments it cares for.
type NoHolding struct{}

func (NoHolding) Booked(time.Time, *pace.Nav) {}
func (NoHolding) Waits()                      {}
func (NoHolding) Refused(refusal.Reason)      {}
func (NoHolding) Done()                       {}

// Hold holds the navigation n: first it waits for a place among its
// bucket's navigations in flight, when the bucket has a cap and n's
// flight has none yet (for as long as the flight lives, whatever ctx
// does), then it books, booking again while a shared store asks to
// retry, and lets the navigation go (w.Release) when its slot comes, at
// once when it has come. When ctx ends first, nothing is let go. All of
// it runs on a goroutine of its own.
func (h *BrowserHold) Hold(ctx context.Context, n Request, w Holding) {
	if n.Log == nil {
		n.Log = h.Holder.Logger()
	}
	h.holding(1)
	h.Holder.limiting.Add(1)
	go func() {
		defer h.Holder.limiting.Done()
		ctx, st, unhook := h.Holder.stoppable(ctx)
		hw := &holdWait{h: h, ctx: ctx, n: n, w: w, st: st, unhook: unhook}
		defer hw.recover()
		if isStopping(ctx) {
			hw.stopping() // the relay is on its way out: nothing more is booked
			return
		}
		if n.Refusable && h.refused(ctx, n.Host, n.URL, n.Log) {
			w.Refused(refusal.Disallowed) // before a place or a slot: it books nothing
			hw.end(false)
			return
		}
		if h.Holder.capper != nil && h.Holder.capper.Caps() {
			hw.waiting() // a place in flight may take long to come
		}
		if !h.enter(n.Flight, n.Host, n.Log) {
			if h.Holder.stopped() {
				hw.stopping()
				return
			}
			hw.end(false)
			return
		}
		if !hw.book() {
			if isStopping(ctx) {
				hw.stopping()
				return
			}
			hw.end(ctx.Err() == nil)
		}
	}()
}

// holding counts n more navigations held (n < 0: fewer), in this browser
// and in the Holder.
func (h *BrowserHold) holding(n int64) {
	h.waiting.Add(n)
	h.Holder.held.Add(n)
}

// enter waits for fl's place among the navigations in flight of host's
// bucket, once per flight, and reports false when the flight ended while
// it waited (its page went, the client left, a later navigation replaced
// it): then the navigation is over, and is not let go. The first time the
// cap holds a navigation of a host, it warns (once per host, as the
// spacing does).
func (h *BrowserHold) enter(fl *Flight, host string, log *zerolog.Logger) bool {
	fl.mu.Lock()
	entered := fl.entered
	fl.entered = true
	fl.mu.Unlock()
	if entered || h.Holder.capper == nil {
		return true
	}
	ctx, _, unhook := h.Holder.stoppable(fl.ctx) // a stop refuses it rather than wait on
	p, err := h.Holder.capper.Enter(ctx, host)
	unhook()
	if err != nil {
		return false
	}
	if p == nil {
		return true
	}
	fl.mu.Lock()
	fl.place = p
	fl.mu.Unlock()
	if fl.ctx.Err() != nil { // ended as it got its place: giveBack may have run before
		fl.giveBack()
		return false
	}
	if p.Waited > 0 {
		h.Holder.Metrics.Waited(p.Waited)
		if h.Holder.warned.first(host) {
			ev := h.Holder.log.Warn().Str("host", host)
			if p.Bucket != host {
				ev = ev.Str("bucket", p.Bucket)
			}
			ev = ev.Int("concurrency", p.Limit).Float64("waited_ms", limiter.ShownMillis(p.Waited)).Str("source", p.Source)
			if p.Rule != "" {
				ev = ev.Str("rule", p.Rule)
			}
			ev.Msg("holding navigations to this host until one in flight is answered")
		}
		log.Debug().Str("host", host).Str("bucket", p.Bucket).Int("concurrency", p.Limit).
			Float64("waited_ms", limiter.ShownMillis(p.Waited)).Msg("navigation waited for a place in flight")
	}
	return true
}

// end ends a hold counted in waiting: it lets the navigation go when
// released (noting when, in its flight), then ends the hold.
func (h *BrowserHold) end(w Holding, released bool, fl *Flight) {
	h.holding(-1)
	if released {
		fl.let(time.Now())
		w.Release()
	}
	w.Done()
}

// holdWait is one navigation on its way from its booking to its release.
type holdWait struct {
	h        *BrowserHold
	ctx      context.Context
	n        Request
	w        Holding
	st       *stopper      // the stop's hold on ctx: told the slot
	unhook   func()        // lets go of ctx's tie to the Holder's stop, at the end
	over     atomic.Bool   // end ran: the hold is over
	waited   bool          // waits was told
	retrying bool          // its timer books again (the store asked to retry), rather than looks at its slot
	start    time.Time     // when its slot comes
	nav      *pace.Nav     // followed to its departure; nil when not
	bucket   string        // booked in
	pushed   time.Duration // how far the bucket was pushed as it was booked, in a shared store, and as last looked
	moved    time.Duration // how far its slot moved with the bucket's pushes since it was booked
	shared   bool          // booked in a shared store that says how far its buckets are pushed (PushReader)
}

// book books and, when the navigation must wait, arms a timer and reports
// true: the timer releases it (or ends the hold alone, when ctx ends
// first). A navigation the Limiter defers is refused and its hold ended
// here, also reporting true. Callers count themselves in waiting.
func (w *holdWait) book() bool {
	h := w.h
	r, d, retry := h.Book(w.ctx, w.n.Host, w.n.URL, w.n.Log)
	if r.Deferred != "" {
		// Answered at once, by the way, which ends its flight: it never
		// reaches the site.
		w.w.Refused(refusal.Reason{Deferred: r.Deferred, Until: r.Start})
		w.end(false)
		return true // ended here
	}
	if retry {
		w.waiting()
		w.retrying = true
		after(w.ctx, d, w)
		return true
	}
	if r.Probe {
		w.n.Flight.probing(r.Bucket)
	}
	w.start = time.Now().Add(max(d, 0))
	if _, ok := h.Holder.Limiter.(PushReader); ok && r.Shared && d > 0 {
		w.bucket, w.pushed, w.shared = r.Bucket, r.Pushed, true
	}
	if w.n.Depart && r.Tracked && r.Spacing > pace.MinSpacing && !PartOff("pace") {
		w.nav = h.Holder.pace.Book(r.Bucket, h.Up.Name(), w.start, r.Slack, r.Headroom)
	}
	w.w.Booked(w.start, w.nav)
	h.Holder.bookedSlot(w.st, w.start)
	return w.due()
}

// waiting tells the way, once, that the navigation waits.
func (w *holdWait) waiting() {
	if !w.waited {
		w.waited = true
		w.w.Waits()
	}
}

// fire is after's: the time the hold waited for has come.
func (w *holdWait) fire() {
	defer w.recover()
	if w.retrying {
		w.retrying = false
		if !w.book() {
			w.end(true)
		}
		return
	}
	if !w.due() {
		w.end(true)
	}
}

// due waits, past the slot, for what late departures before this
// navigation in its bucket ask, and reports whether it must wait; when it
// need not, the caller ends the hold.
func (w *holdWait) due() bool {
	now := time.Now()
	at, left, until := w.start, (<-chan struct{})(nil), time.Time{}
	if w.nav != nil {
		at, left, until = w.nav.Due(now)
	}
	if !at.After(now) && w.shared {
		if by := w.pushedSince(); by > 0 {
			// Its slot moves with the schedule it was booked in, as the
			// slots booked after the push did. Pace judges its departure
			// against the moved slot: held back for another relay's
			// lateness, it is not late itself.
			w.moved += by
			w.start = w.start.Add(by)
			at = w.start
			if w.nav != nil {
				w.nav.Moved(w.moved)
				at, left, until = w.nav.Due(now)
			}
			w.h.Holder.bookedSlot(w.st, at) // a drain ending before it answers it
			w.n.Log.Debug().Str("host", w.n.Host).Float64("by_ms", limiter.ShownMillis(by)).Msg("navigation waits for the late departures its bucket's schedule was pushed by since it was booked")
		}
	}
	if d := at.Sub(now); d > 0 {
		w.waiting()
		after(w.ctx, d, w)
		return true
	}
	if left != nil {
		// One let go before it has not left the browser yet: going now
		// could overtake it.
		w.n.Log.Debug().Str("host", w.n.Host).Time("until", until).Msg("navigation waits for the one before it to leave the browser")
		w.waiting()
		w.h.Holder.limiting.Add(1)
		go func() {
			defer w.h.Holder.limiting.Done()
			defer w.recover()
			t := time.NewTimer(time.Until(until))
			defer t.Stop()
			select {
			case <-left:
			case <-t.C:
				w.h.Holder.Metrics.Overtook()
				w.n.Log.Debug().Str("host", w.n.Host).Msg("navigation let go: the one before it has not left the browser within the bound")
			case <-w.ctx.Done():
				w.cancelled()
				return
			}
			if !w.due() {
				w.end(true)
			}
		}()
		return true
	}
	w.nav.Released(now, at)
	return false
}

// pushedSince is how far other relays' late departures (and this
// relay's) pushed the bucket's shared schedule since the navigation was
// booked: its slot did not move with them. Asked of the store each time
// its slot comes; 0 when the store does not say.
func (w *holdWait) pushedSince() time.Duration {
	now, ok := w.h.Holder.Limiter.(PushReader).Pushed(w.bucket)
	if !ok || now <= w.pushed {
		return 0
	}
	by := now - w.pushed
	w.pushed = now // a later look counts only what comes after
	return by
}

// end ends the hold, letting the navigation go when released.
func (w *holdWait) end(released bool) {
	w.over.Store(true)
	w.unhook()
	w.h.end(w.w, released, w.n.Flight)
}

// recover, deferred first on each goroutine that carries the hold on,
// stops a panic in holding's code from ending the relay: it is logged
// with its stack and counted, and a hold not over yet is answered by the
// relay (reason "error"), never let go.
func (w *holdWait) recover() {
	v := recover()
	if v == nil {
		return
	}
	w.h.Holder.Metrics.Panicked()
	w.n.Log.Error().Str("host", w.n.Host).Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).
		Msg("a panic in holding a navigation: it is answered by the relay, never let go; the relay goes on")
	if !w.over.Load() {
		w.w.Refused(refusal.Reason{Deferred: "error", Until: w.start})
		w.end(false)
	}
}

// cancelled ends a hold given up before its release: its context ended.
// When the relay is stopping (Refuse), the navigation is refused rather
// than left to the browser, which would let it go with the relay's
// connections.
func (w *holdWait) cancelled() {
	defer w.recover()
	if isStopping(w.ctx) {
		w.stopping()
		return
	}
	w.h.ended(w.nav)
	w.end(false)
}

// stopping answers the navigation at once because the relay is stopping:
// the relay's own 429, its Retry-After saying when its slot was (1 s when
// it had none yet). It never reaches the site.
func (w *holdWait) stopping() {
	w.h.ended(w.nav)
	w.h.Holder.stoppedOne(w.n.Host, w.start, w.n.Log)
	w.w.Refused(refusal.Reason{Deferred: Stopping, Until: w.start})
	w.end(false)
}

// ended ends navigations whose departure was followed: answered, failed,
// aborted or their page gone. It is every followed navigation's last
// step, once each.
func (h *BrowserHold) ended(navs ...*pace.Nav) {
	for _, n := range navs {
		n.End()
	}
}

// HoldUntil holds a navigation already booked until start, as when the
// relay's other connection takes over a request the first one held; fl
// has its place already. w is told release and done, or done alone when
// ctx ends first.
func (h *BrowserHold) HoldUntil(ctx context.Context, fl *Flight, start time.Time, w Holding) {
	h.holding(1)
	ctx, st, unhook := h.Holder.stoppable(ctx)
	h.Holder.bookedSlot(st, start)
	after(ctx, time.Until(start), untilHold{h: h, ctx: ctx, fl: fl, w: w, start: start, unhook: unhook})
}

// untilHold is holdUntil's wait.
type untilHold struct {
	h      *BrowserHold
	ctx    context.Context
	fl     *Flight
	w      Holding
	start  time.Time
	unhook func()
}

func (u untilHold) fire() {
	u.unhook()
	u.h.end(u.w, true, u.fl)
}

func (u untilHold) cancelled() {
	u.unhook()
	if isStopping(u.ctx) {
		u.h.Holder.stoppedOne("", u.start, u.h.Holder.Logger())
		u.w.Refused(refusal.Reason{Deferred: Stopping, Until: u.start})
	}
	u.h.end(u.w, false, u.fl)
}

// Book reserves the slot of a navigation to rawURL (whose host is host)
// wanted now and returns how long it must wait, logging the first delay of
// each host. retry is set when nothing could be booked (a shared store that
// holds navigations while it is unreachable): the navigation waits d and
// then books again. Booking may block for the site's robots.txt, never
// past ctx.
func (h *BrowserHold) Book(ctx context.Context, host, rawURL string, log *zerolog.Logger) (r limiter.Reservation, d time.Duration, retry bool) {
	h.awaitAnswers(host)
	now := time.Now()
	end := h.Holder.drainDeadline()
	if !end.IsZero() {
		// Stopping: a slot past the drain's end could never be kept.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, end)
		defer cancel()
	}
	r = h.Holder.Limiter.Reserve(ctx, host, rawURL, now)
	if r.Deferred == limiter.PastDeadline {
		r.Deferred = Stopping
	}
	d = time.Until(r.Start)
	if r.Retry {
		log.Debug().Str("host", host).Float64("retry_in_ms", limiter.ShownMillis(d)).Msg("navigation held until the store answers")
		return r, max(d, time.Millisecond), true
	}
	if r.Deferred != "" {
		h.Holder.Metrics.Navigation(NavDeferred, d)
		if h.Holder.deferWarned.first(host) {
			ev := h.Holder.log.Warn().Str("host", host).Str("reason", r.Deferred).Float64("until_ms", limiter.ShownMillis(d))
			if r.Bucket != host {
				ev = ev.Str("bucket", r.Bucket)
			}
			ev.Msg("deferring navigations to this host: answered at once with the relay's own 429")
		}
		log.Debug().Str("host", host).Func(logURL(rawURL)).Str("bucket", r.Bucket).Time("until", r.Start).Float64("until_ms", limiter.ShownMillis(d)).
			Str("reason", r.Deferred).Msg("navigation deferred")
		return r, d, false
	}
	if !r.Tracked {
		h.Holder.Metrics.Navigation(NavExempt, 0)
		return r, 0, false
	}
	h.Holder.Metrics.Navigation(NavBooked, d)
	h.Holder.booked(host, now, r)
	if d <= 0 {
		log.Debug().Str("host", host).Func(logURL(rawURL)).Str("bucket", r.Bucket).Time("slot", r.Start).Float64("skew_ms", limiter.ShownMillis(r.Skew)).Msg("navigation goes at once")
		return r, 0, false
	}
	if h.Holder.warned.first(host) {
		// Adaptive spacing surprises; a fixed one was asked for.
		ev := h.Holder.log.Warn()
		if r.Mode != limiter.Adaptive {
			ev = h.Holder.log.Debug()
		}
		if r.Bucket != host {
			ev = ev.Str("bucket", r.Bucket)
		}
		ev = ev.Str("host", host).Float64("delay_ms", limiter.ShownMillis(d)).Str("mode", r.Mode.String()).Str("source", r.Source)
		switch r.Source {
		case "", "flag":
			ev = ev.Str("tip", "use --http-nav-delay 0 to disable")
		default:
			ev = ev.Str("rule", r.Rule)
		}
		ev.Msg("spacing out navigations to this host")
	}
	log.Debug().Str("host", host).Func(logURL(rawURL)).Str("bucket", r.Bucket).Time("slot", r.Start).Float64("delay_ms", limiter.ShownMillis(d)).Int("pressure", r.Pressure).
		Float64("spacing_ms", limiter.ShownMillis(r.Spacing)).Float64("skew_ms", limiter.ShownMillis(r.Skew)).Str("source", r.Source).Msg("navigation held")
	return r, d, false
}

// logURL adds a navigation's URL to a log line as a hash (url_hash, the
// 64-bit FNV-1a of the URL as the browser gave it, in hex), only when the
// line is written: it tells the bookings of one navigation from others,
// retries included, and says nothing of what the URL holds.
func logURL(rawURL string) func(*zerolog.Event) {
	return func(e *zerolog.Event) {
		h := fnv.New64a()
		h.Write([]byte(rawURL))
		e.Hex("url_hash", h.Sum(nil))
	}
}

// Observe feeds the answer to a navigation of host, which fl followed (nil
// when none did), back to the limiter with its answer time, on a goroutine
// of its own: a slow store must not stall the reader that saw the answer.
// It does not end fl: a redirect's answer is not the navigation's end.
func (h *BrowserHold) Observe(fl *Flight, host string, answer cdp.Outcome, log *zerolog.Logger) {
	now := time.Now()
	fl.answered()
	o := limiter.Outcome{Status: answer.Status, RetryAfter: answer.RetryAfter, NoAnswer: answer.NoAnswer, Took: fl.took(now), Addr: answer.RemoteIP}
	for name, value := range answer.Headers.All() {
		o.Headers = append(o.Headers, limiter.Header{Name: name, Value: value})
	}
	if !answer.Limits.IsZero() && h.Holder.readsLimits(host) {
		var err error
		if o.Server, err = answer.Limits.Read(now); err != nil && h.Holder.limitsWarned.first(host) {
			// Said once per host: a server sends the same fields with every answer.
			log.Warn().Str("host", host).Err(err).Msg("malformed RateLimit headers ignored")
		}
		if o.Server != (ratelimit.Limits{}) {
			log.Debug().Str("host", host).Float64("server_spacing_ms", limiter.ShownMillis(o.Server.Spacing)).
				Float64("server_wait_ms", limiter.ShownMillis(o.Server.Wait)).Msg("server said its limits")
		}
	}
	if o.NoAnswer || o.Status >= 500 || o.Status == 429 || o.Status == 403 || o.Headers != nil {
		log.Debug().Str("host", host).Int("status", o.Status).Bool("no_answer", o.NoAnswer).
			Str("retry_after", o.RetryAfter).Int("headers_kept", len(o.Headers)).Msg("host pushed back")
	}
	h.ansMu.Lock()
	a := h.answering[host]
	if a == nil {
		a = &answering{done: make(chan struct{})}
		h.answering[host] = a
	}
	a.n++
	h.ansMu.Unlock()
	h.Holder.limiting.Add(1)
	go func() {
		defer h.Holder.limiting.Done()
		effect := h.Holder.Limiter.Observe(host, o, now)
		h.Holder.Metrics.Feedback(effect)
		if effect == limiter.Overload && o.RetryAfter != "" {
			if _, ok := limiter.ParseRetryAfter(o.RetryAfter, now, 0); !ok && h.Holder.badWarned.first(host) {
				// Ignored, as the limiter ignores it; said once a host, not once an answer.
				h.Holder.log.Warn().Str("host", host).Int("status", o.Status).Str("retry_after", o.RetryAfter[:min(len(o.RetryAfter), 64)]).
					Msg("ignoring a Retry-After that is neither seconds nor an HTTP-date")
			}
		}
		h.Holder.answered(host, effect, o.Status, now)
		log.Debug().Str("host", host).Int("status", o.Status).Float64("answer_ms", limiter.ShownMillis(o.Took)).Str("effect", effect.String()).Msg("navigation answered")
		h.ansMu.Lock()
		if a.n--; a.n == 0 {
			delete(h.answering, host)
			close(a.done)
		}
		h.ansMu.Unlock()
	}()
}

// answering counts the answers of a host on their way to the limiter.
type answering struct {
	n    int           // guarded by BrowserHold.ansMu
	done chan struct{} // closed when n is back to 0
}

// answerWait bounds how long a booking waits for the answers of its host
// on their way to the limiter (a store answers within its timeout).
const answerWait = time.Second

// probeLost tells a Prober Limiter that bucket's probe ended with no
// answer, on a goroutine of its own: a store's breaker is a round trip
// away, and a flight ends on the readers.
func (h *BrowserHold) probeLost(bucket string) {
	if p, ok := h.Holder.Limiter.(Prober); ok {
		h.Holder.limiting.Add(1)
		go func() {
			defer h.Holder.limiting.Done()
			p.ProbeLost(bucket, time.Now())
		}()
	}
}

// awaitAnswers waits until the answers of host that arrived so far are in
// the limiter: a navigation that follows a 503 books with its pressure.
func (h *BrowserHold) awaitAnswers(host string) {
	h.ansMu.Lock()
	a := h.answering[host]
	h.ansMu.Unlock()
	if a == nil {
		return
	}
	t := time.NewTimer(answerWait)
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
	}
}

// Exempt reports whether navigations to host are neither spaced nor
// capped, so that nothing holds them: loopback, unless the Limiter says
// otherwise (a rule that names it).
func (h *BrowserHold) Exempt(host string) bool {
	if e, ok := h.Holder.Limiter.(Exempter); ok {
		return e.Exempt(host)
	}
	return limiter.Exempt(host)
}

// NotBooked counts a top-level navigation that books nothing: exempt when
// it is http(s), untracked otherwise.
func (h *BrowserHold) NotBooked(httpURL bool) {
	if httpURL {
		h.Holder.Metrics.Navigation(NavExempt, 0)
	} else {
		h.Holder.Metrics.Navigation(NavUntracked, 0)
	}
}

// Unheld counts top-level navigations of the relay's clients that reached
// the network without a booking, and says why.
func (h *BrowserHold) Unheld(n int, why string) {
	if n <= 0 {
		return
	}
	h.Holder.Metrics.AddUnheld(n)
	h.Holder.log.Warn().Str("upstream", h.Up.Name()).Int("navigations", n).Str("why", why).
		Msg("navigations reached the network unheld")
}

// timed is what after calls: fire once the time has come, cancelled when
// the context ended first.
type timed interface {
	fire()
	cancelled()
}

// after calls t.fire once d has passed, or t.cancelled if ctx ends first:
// exactly one of them, exactly once. No goroutine waits meanwhile.
func after(ctx context.Context, d time.Duration, t timed) {
	ready := make(chan struct{})
	var stop func() bool
	timer := time.AfterFunc(d, func() {
		<-ready
		if stop() { // ctx had not ended, and now its hook never runs
			t.fire()
		} else {
			t.cancelled()
		}
	})
	stop = context.AfterFunc(ctx, func() {
		if timer.Stop() { // the timer had not fired, and now never will
			t.cancelled()
		}
	})
	close(ready)
}
