package hold

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
)

// flight follows one held navigation from its hold to its end: its place
// among its bucket's navigations in flight (when the bucket has a cap),
// and when it was let go, for its answer time. The holding strategy ends
// it (end) when the navigation's answer is in, it failed, its page went
// or a later navigation replaced it; its life context ends it too (the
// client's connection, for the strategies held in it), and a navigation
// let go whose answer never comes is forgotten after maxInFlight. Its
// methods are safe for concurrent use, and on a nil flight.
type flight struct {
	h    *browserHold
	ctx  context.Context // ends with the flight: stops its wait for a place
	stop context.CancelFunc

	mu       sync.Mutex
	place    *inflight.Place // guarded by mu; nil without a cap, or given back
	entered  bool            // guarded by mu; it asked for its place
	released time.Time       // guarded by mu; when it was let go
	timer    *time.Timer     // guarded by mu; ends it maxInFlight after its release
	nav      *pace.Nav       // guarded by mu; its departure, followed until the flight ends (the session strategy's)
}

// maxInFlight is how long after its release a navigation's end is
// awaited at most: past it, its flight ends (and its place, if the cap's
// bound has not given it back yet, goes back). It is longer than the
// longest bound --http-nav-concurrency-bound accepts.
const maxInFlight = 61 * time.Minute

// newFlight starts following a navigation to be held, until life ends at
// the latest.
func (h *browserHold) newFlight(life context.Context) *flight {
	fl := &flight{h: h}
	fl.ctx, fl.stop = context.WithCancel(life)
	context.AfterFunc(fl.ctx, fl.giveBack)
	return fl
}

// end ends the flight: its place goes back at once (Place.Leave never
// blocks), so the next navigation of its host may take it before the
// browser goes on; a wait for one stops.
func (fl *flight) end() {
	if fl != nil {
		fl.stop()
		fl.giveBack()
	}
}

// giveBack gives the flight's place back, once; it runs at end, and when
// the flight's life ends.
func (fl *flight) giveBack() {
	fl.mu.Lock()
	p, n := fl.place, fl.nav
	fl.place, fl.nav = nil, nil
	if fl.timer != nil {
		fl.timer.Stop()
	}
	fl.mu.Unlock()
	p.Leave()
	n.End()
}

// follow hands the flight the navigation whose departure is followed
// (holdNav's): it ends with the flight, at once if the flight is over.
func (fl *flight) follow(n *pace.Nav) {
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

// followed is the navigation follow handed the flight, nil when none.
func (fl *flight) followed() *pace.Nav {
	if fl == nil {
		return nil
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.nav
}

// let notes that the navigation was let go at now.
func (fl *flight) let(now time.Time) {
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

// leftAt notes that the navigation's request, let go already, left the
// relay's last hold at now (the Fetch strategy's second connection): its
// answer time counts from then, not from the browser's hand-over between
// the two.
func (fl *flight) leftAt(now time.Time) {
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
func (fl *flight) took(now time.Time) time.Duration {
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

// hold books host's slot for a navigation to rawURL and calls release when
// the slot comes (at once when it has come), booking again while a shared
// store asks to retry. Booking runs on a goroutine of its own, never on the
// caller's: a slow store must not stall the reader that found the
// navigation. When ctx ends first, release is never called. done, when
// set, is called once the hold is over, either way. It returns the
// navigation's flight, which ends with ctx.
func (h *browserHold) hold(ctx context.Context, host, rawURL string, log *zerolog.Logger, release, done func()) *flight {
	fl := h.newFlight(ctx)
	h.holdFlight(ctx, fl, host, rawURL, log, nil, nil, release, done)
	return fl
}

// holdFlight is hold for the navigation fl follows: first it waits for a
// place among its bucket's navigations in flight, when the bucket has a
// cap and fl has no place yet (for as long as fl lives, whatever ctx
// does), then it books; booked (when set) is told the start of the slot
// once it is booked. Before either, a navigation the Limiter refuses
// (Refuser) is handed to refuse instead, when set, and nothing is booked;
// a nil refuse is never asked for.
func (h *browserHold) holdFlight(ctx context.Context, fl *flight, host, rawURL string, log *zerolog.Logger, booked func(time.Time), refuse, release, done func()) {
	var b func(time.Time, *pace.Nav)
	if booked != nil {
		b = func(start time.Time, _ *pace.Nav) { booked(start) }
	}
	h.holdFor(ctx, fl, host, rawURL, log, false, b, nil, refuse, release, done)
}

// holdNav is holdFlight for a navigation whose departure the caller
// follows (depart): the slot's navigation is handed to booked, the caller
// tells it when the request left, and fl's end ends it; the release waits,
// past the slot, for what late departures before it in its bucket ask
// (package pace). Without depart, it is booked's nil. waits, when set, is
// called once, when the navigation may have to wait at all; refuse is
// holdFlight's.
func (h *browserHold) holdNav(ctx context.Context, fl *flight, host, rawURL string, log *zerolog.Logger, depart bool, booked func(time.Time, *pace.Nav), waits, refuse, release func()) {
	h.holdFor(ctx, fl, host, rawURL, log, depart, booked, waits, refuse, release, nil)
}

func (h *browserHold) holdFor(ctx context.Context, fl *flight, host, rawURL string, log *zerolog.Logger, depart bool, booked func(time.Time, *pace.Nav), waits, refuse, release, done func()) {
	h.waiting.Add(1)
	h.holder.limiting.Add(1)
	go func() {
		defer h.holder.limiting.Done()
		hw := &holdWait{h: h, ctx: ctx, host: host, rawURL: rawURL, log: log, depart: depart, booked: booked, waits: waits, done: done}
		if refuse != nil && h.refused(ctx, host, rawURL, log) {
			refuse() // before a place or a slot: it books nothing
			h.end(nil, done)
			return
		}
		if h.holder.capper != nil && h.holder.capper.Caps() {
			hw.waiting() // a place in flight may take long to come
		}
		if !h.enter(fl, host, log) {
			h.end(nil, done)
			return
		}
		hw.release = fl.releasing(release)
		if !hw.book() {
			if ctx.Err() != nil {
				hw.release = nil
			}
			hw.end()
		}
	}()
}

// releasing is release noting, first, when the navigation was let go.
func (fl *flight) releasing(release func()) func() {
	if release == nil {
		return nil
	}
	return func() {
		fl.let(time.Now())
		release()
	}
}

// enter waits for fl's place among the navigations in flight of host's
// bucket, once per flight, and reports false when the flight ended while
// it waited (its page went, the client left, a later navigation replaced
// it): then the navigation is over, and is not let go. The first time the
// cap holds a navigation of a host, it warns (once per host, as the
// spacing does).
func (h *browserHold) enter(fl *flight, host string, log *zerolog.Logger) bool {
	fl.mu.Lock()
	entered := fl.entered
	fl.entered = true
	fl.mu.Unlock()
	if entered || h.holder.capper == nil {
		return true
	}
	p, err := h.holder.capper.Enter(fl.ctx, host)
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
		h.holder.Metrics.Waited(p.Waited)
		if h.holder.warned.first(host) {
			ev := h.holder.log.Warn().Str("host", host)
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

// end ends a hold counted in waiting: it calls release (unless nil: the
// hold was given up), then done (when set).
func (h *browserHold) end(release, done func()) {
	h.waiting.Add(-1)
	if release != nil {
		release()
	}
	if done != nil {
		done()
	}
}

// holdWait is one navigation on its way from its booking to its release.
type holdWait struct {
	h            *browserHold
	ctx          context.Context
	host, rawURL string
	log          *zerolog.Logger
	depart       bool
	booked       func(time.Time, *pace.Nav)
	waits        func() // called once the navigation has to wait, then set to nil
	release      func()
	done         func()
	start        time.Time // when its slot comes
	nav          *pace.Nav // followed to its departure; nil when not
}

// book books and, when the navigation must wait, arms a timer and reports
// true: the timer releases it (or ends the hold alone, when ctx ends
// first). Callers count themselves in waiting.
func (w *holdWait) book() bool {
	h := w.h
	r, d, retry := h.book(w.ctx, w.host, w.rawURL, w.log)
	if !retry {
		w.start = time.Now().Add(max(d, 0))
		if w.depart && r.Tracked && r.Spacing > pace.MinSpacing && !partOff("pace") {
			w.nav = h.holder.pace.Book(r.Bucket, h.up.Name(), w.start, r.Slack, r.Headroom)
		}
		if w.booked != nil {
			w.booked(w.start, w.nav)
		}
	}
	if retry {
		w.waiting()
		after(w.ctx, d, func() {
			if !w.book() {
				w.end()
			}
		}, w.cancelled)
		return true
	}
	return w.due()
}

// waiting tells waits, once, that the navigation waits.
func (w *holdWait) waiting() {
	if w.waits != nil {
		w.waits()
		w.waits = nil
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
	if d := at.Sub(now); d > 0 {
		w.waiting()
		after(w.ctx, d, func() {
			if !w.due() {
				w.end()
			}
		}, w.cancelled)
		return true
	}
	if left != nil {
		// One let go before it has not left the browser yet: going now
		// could overtake it.
		w.log.Debug().Str("host", w.host).Time("until", until).Msg("navigation waits for the one before it to leave the browser")
		w.waiting()
		w.h.holder.limiting.Add(1)
		go func() {
			defer w.h.holder.limiting.Done()
			t := time.NewTimer(time.Until(until))
			defer t.Stop()
			select {
			case <-left:
			case <-t.C:
				w.h.holder.Metrics.Overtook()
				w.log.Debug().Str("host", w.host).Msg("navigation let go: the one before it has not left the browser within the bound")
			case <-w.ctx.Done():
				w.cancelled()
				return
			}
			if !w.due() {
				w.end()
			}
		}()
		return true
	}
	w.nav.Released(now, at)
	return false
}

// end releases the navigation and ends the hold.
func (w *holdWait) end() { w.h.end(w.release, w.done) }

// cancelled ends a hold given up before its release.
func (w *holdWait) cancelled() {
	w.h.ended(w.nav)
	w.h.end(nil, w.done)
}

// ended ends navigations whose departure was followed: answered, failed,
// aborted or their page gone. It is every followed navigation's last
// step, once each.
func (h *browserHold) ended(navs ...*pace.Nav) {
	for _, n := range navs {
		n.End()
	}
}

// holdUntil holds a navigation already booked until start, as when the
// relay's other connection takes over a request the first one held; fl
// has its place already.
func (h *browserHold) holdUntil(ctx context.Context, fl *flight, start time.Time, release, done func()) {
	h.waiting.Add(1)
	after(ctx, time.Until(start), func() { h.end(fl.releasing(release), done) }, func() { h.end(nil, done) })
}

// book reserves the slot of a navigation to rawURL (whose host is host)
// wanted now and returns how long it must wait, logging the first delay of
// each host. retry is set when nothing could be booked (a shared store that
// holds navigations while it is unreachable): the navigation waits d and
// then books again. Booking may block for the site's robots.txt, never
// past ctx.
func (h *browserHold) book(ctx context.Context, host, rawURL string, log *zerolog.Logger) (r limiter.Reservation, d time.Duration, retry bool) {
	h.awaitAnswers(host)
	now := time.Now()
	r = h.holder.Limiter.Reserve(ctx, host, rawURL, now)
	d = time.Until(r.Start)
	if r.Retry {
		log.Debug().Str("host", host).Float64("retry_in_ms", limiter.ShownMillis(d)).Msg("navigation held until the store answers")
		return r, max(d, time.Millisecond), true
	}
	if !r.Tracked {
		h.holder.Metrics.Navigation(NavExempt, 0)
		return r, 0, false
	}
	h.holder.Metrics.Navigation(NavBooked, d)
	h.holder.booked(host, now, r)
	if d <= 0 {
		log.Debug().Str("host", host).Func(logURL(rawURL)).Str("bucket", r.Bucket).Time("slot", r.Start).Float64("skew_ms", limiter.ShownMillis(r.Skew)).Msg("navigation goes at once")
		return r, 0, false
	}
	if h.holder.warned.first(host) {
		// Adaptive spacing surprises; a fixed one was asked for.
		ev := h.holder.log.Warn()
		if r.Mode != limiter.Adaptive {
			ev = h.holder.log.Debug()
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

// observe feeds the answer to a navigation of host, which fl followed (nil
// when none did), back to the limiter with its answer time, on a goroutine
// of its own: a slow store must not stall the reader that saw the answer.
// It does not end fl: a redirect's answer is not the navigation's end.
func (h *browserHold) observe(fl *flight, host string, answer cdp.Outcome, log *zerolog.Logger) {
	now := time.Now()
	o := limiter.Outcome{Status: answer.Status, RetryAfter: answer.RetryAfter, NoAnswer: answer.NoAnswer, Took: fl.took(now), Addr: answer.RemoteIP}
	if o.NoAnswer || o.Status >= 500 || o.Status == 429 || o.Status == 403 {
		log.Debug().Str("host", host).Int("status", o.Status).Bool("no_answer", o.NoAnswer).
			Str("retry_after", o.RetryAfter).Msg("host pushed back")
	}
	h.ansMu.Lock()
	a := h.answering[host]
	if a == nil {
		a = &answering{done: make(chan struct{})}
		h.answering[host] = a
	}
	a.n++
	h.ansMu.Unlock()
	h.holder.limiting.Add(1)
	go func() {
		defer h.holder.limiting.Done()
		effect := h.holder.Limiter.Observe(host, o, now)
		h.holder.Metrics.Feedback(effect)
		h.holder.answered(host, effect, o.Status, now)
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
	n    int           // guarded by browserHold.ansMu
	done chan struct{} // closed when n is back to 0
}

// answerWait bounds how long a booking waits for the answers of its host
// on their way to the limiter (a store answers within its timeout).
const answerWait = time.Second

// awaitAnswers waits until the answers of host that arrived so far are in
// the limiter: a navigation that follows a 503 books with its pressure.
func (h *browserHold) awaitAnswers(host string) {
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

// exempt reports whether navigations to host are neither spaced nor
// capped, so that nothing holds them: loopback, unless the Limiter says
// otherwise (a rule that names it).
func (h *browserHold) exempt(host string) bool {
	if e, ok := h.holder.Limiter.(interface{ Exempt(string) bool }); ok {
		return e.Exempt(host)
	}
	return limiter.Exempt(host)
}

// notBooked counts a top-level navigation that books nothing: exempt when
// it is http(s), untracked otherwise.
func (h *browserHold) notBooked(httpURL bool) {
	if httpURL {
		h.holder.Metrics.Navigation(NavExempt, 0)
	} else {
		h.holder.Metrics.Navigation(NavUntracked, 0)
	}
}

// unheld counts top-level navigations of the relay's clients that reached
// the network without a booking, and says why.
func (h *browserHold) unheld(n int, why string) {
	if n <= 0 {
		return
	}
	h.holder.Metrics.AddUnheld(n)
	h.holder.log.Warn().Str("upstream", h.up.Name()).Int("navigations", n).Str("why", why).
		Msg("navigations reached the network unheld")
}

// after calls fire once d has passed, or cancelled (when set) if ctx ends
// first: exactly one of them, exactly once. No goroutine waits meanwhile.
func after(ctx context.Context, d time.Duration, fire, cancelled func()) {
	ready := make(chan struct{})
	var stop func() bool
	t := time.AfterFunc(d, func() {
		<-ready
		if stop() { // ctx had not ended, and now its hook never runs
			fire()
		} else if cancelled != nil {
			cancelled()
		}
	})
	stop = context.AfterFunc(ctx, func() {
		if t.Stop() && cancelled != nil { // the timer had not fired, and now never will
			cancelled()
		}
	})
	close(ready)
}
