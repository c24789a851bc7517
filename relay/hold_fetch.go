package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// fetchHold holds a Chromium's navigations through the relay's own
// connections to its browser endpoint. Each connection discovers targets,
// to tell a page's main frame (whose id is the page's target id) from an
// iframe, and enables Fetch for every document request of the browser, at
// the Request stage: a navigation of the relay's own clients is held until
// its slot, then let go asking for its answer (interceptResponse), which
// pauses once more to be read. Navigations of pages that are not its
// clients' are let go at once, answer unasked.
//
// There are two connections, so that losing one never lets a held request
// through. Chromium passes a document request from one interceptor to the
// next, and when an interceptor goes away, what it held goes on to the
// next one instead of to the network: the other connection then holds it
// until the slot already booked. With both connections up, each request
// pauses at both, one after the other; the first books and holds, the
// second recognises it (same frame, method and URL, let go by the other
// connection a moment ago) and lets it go.
type fetchHold struct {
	h     *holder
	conns [2]atomic.Pointer[fetchConn]
	stop  context.CancelFunc // set once by start; ends the supervisors
	wasUp atomic.Bool        // a connection has been up
	gone  atomic.Bool        // both connections dropped, which was logged; until one is back

	mu     sync.Mutex
	held   map[navKey]*heldNav  // guarded by mu; documents of clients being held
	passed map[navKey]passedNav // guarded by mu; documents one connection let go, expected at the other
	paused map[string]time.Time // guarded by mu; page target → when its document request last paused
	// life ends every navigation followed (flight) when the browser is
	// lost: then none of their answers can come. Guarded by mu.
	life    context.Context
	endLife context.CancelFunc
}

// navKey is what two pauses of one document request have in common.
type navKey struct{ frame, method, url string }

// heldNav is a document request held for its slot.
type heldNav struct {
	by       *fetchConn    // guarded by fetchHold.mu; the connection holding it
	orphaned time.Time     // guarded by fetchHold.mu; when its connection dropped
	booked   chan struct{} // closed once start is known
	start    time.Time     // set before booked is closed
	fl       *flight       // set once: the navigation, whichever connection holds it
}

// passedNav is a document request a connection let go.
type passedNav struct {
	by *fetchConn
	at time.Time
	fl *flight // the navigation it held, if any: it leaves when the other connection lets it go
}

// echoWindow is how long after one connection let a request go the other
// may see it: about a millisecond on an idle machine, much more on a busy
// one. Only the other connection, up since before, takes it for the same
// request, so a long window mistakes nothing.
const echoWindow = 10 * time.Second

// handOverLate is how far past its slot a handed-over navigation may still
// go on it.
const handOverLate = 10 * time.Millisecond

// orphanWait is how long a request held by a connection that dropped has
// to reach the relay's other connection before it is counted as released
// by the browser to the network.
const orphanWait = 2 * time.Second

func newFetchHold(h *holder) *fetchHold {
	f := &fetchHold{
		h:      h,
		held:   make(map[navKey]*heldNav),
		passed: make(map[navKey]passedNav),
		paused: make(map[string]time.Time),
	}
	f.life, f.endLife = context.WithCancel(context.Background())
	return f
}

// newFlight starts following a navigation held by the relay's own
// connections: it lives until its end is seen, or the browser is lost.
func (f *fetchHold) newFlight() *flight {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.h.newFlight(f.life)
}

// endFlights ends every navigation followed so far: no answer of theirs
// can reach the relay any more.
func (f *fetchHold) endFlights() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endLife()
	f.life, f.endLife = context.WithCancel(context.Background())
}

// maxSilent is how many times in a row a browser may take the relay's own
// connection and leave its commands unanswered before, in auto mode, the
// relay holds navigations another way.
const maxSilent = 3

// errSilent marks a browser that took the connection but never answered.
var errSilent = errors.New("the browser took the connection but did not answer")

// errRefused marks a browser that answered but refuses what the relay
// needs (browser-level Fetch, target discovery): no retry will change it.
type errRefused struct{ err error }

func (e errRefused) Error() string { return e.err.Error() }
func (e errRefused) Unwrap() error { return e.err }

// start opens the first connection within ctx, when the browser is up,
// and then keeps both connections up until bg ends or stop is called. It
// returns an errRefused when the browser refuses Fetch; any other failure
// is retried in the background, navigations waiting meanwhile.
func (f *fetchHold) start(ctx, bg context.Context, up bool, wg *sync.WaitGroup) error {
	var first *fetchConn
	if up {
		fc, err := f.connect(ctx, 0)
		var refused errRefused
		if errors.As(err, &refused) {
			return err
		}
		if err != nil {
			f.h.p.log.Warn().Str("upstream", f.h.up.name).Err(err).
				Msg("the relay's own browser connection is not up: navigations wait until it is")
		} else {
			f.conns[0].Store(fc)
			f.wasUp.Store(true)
			f.h.setArmed(true)
		}
		first = fc
	}
	bg, f.stop = context.WithCancel(bg)
	for i := range f.conns {
		fc := first
		if i > 0 {
			fc = nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.supervise(bg, i, fc)
		}()
	}
	return nil
}

// up reports how many of the relay's connections are up.
func (f *fetchHold) up() int {
	n := 0
	for i := range f.conns {
		if f.conns[i].Load() != nil {
			n++
		}
	}
	return n
}

// upSince reports whether one of the relay's connections has been up since
// before t, and still is.
func (f *fetchHold) upSince(t time.Time) bool {
	for i := range f.conns {
		if fc := f.conns[i].Load(); fc != nil && fc.since.Before(t) {
			return true
		}
	}
	return false
}

// supervise keeps connection i up until ctx ends; fc nil starts by
// connecting.
func (f *fetchHold) supervise(ctx context.Context, i int, fc *fetchConn) {
	for {
		if fc != nil {
			f.mu.Lock() // with dropped's count of those up
			f.conns[i].Store(fc)
			f.gone.Store(false)
			f.mu.Unlock()
			f.wasUp.Store(true)
			f.h.setArmed(true)
			fc.keepalive(ctx, f.h.p.PingInterval, f.h.p.WriteTimeout)
			f.conns[i].Store(nil)
			f.dropped(fc)
			if ctx.Err() != nil {
				return
			}
		}
		fc = nil
		silent := 0 // tries in a row the browser took but never answered
		for backoff := 50 * time.Millisecond; fc == nil; backoff = min(2*backoff, 2*time.Second) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			cctx, cancel := context.WithTimeout(ctx, min(f.h.p.StartTimeout, 10*time.Second))
			next, err := f.connect(cctx, i)
			cancel()
			var refused errRefused
			switch {
			case err == nil:
				fc = next
			case errors.As(err, &refused) && f.h.p.Intercept == InterceptAuto:
				f.h.fallOver(err.Error())
				return
			case errors.Is(err, errSilent) && f.h.p.Intercept == InterceptAuto:
				if silent++; silent >= maxSilent {
					f.h.fallOver(err.Error())
					return
				}
				f.h.p.log.Debug().Err(err).Int("conn", i).Msg("browser did not answer the relay's own connection")
			default:
				silent = 0
				f.h.p.log.Debug().Err(err).Int("conn", i).Msg("browser still unreachable")
			}
		}
		if f.up() == 0 {
			if f.wasUp.Load() {
				f.h.p.log.Info().Str("upstream", f.h.up.name).Msg("the relay's browser connection is back: holding navigations again")
			} else {
				f.h.p.log.Info().Str("upstream", f.h.up.name).Msg("the relay's own browser connection is up: holding navigations")
			}
		}
	}
}

// dropped handles a connection that ended: the browser hands what it held
// to the other connection; what the other one does not get within
// orphanWait went to the network unheld.
func (f *fetchHold) dropped(fc *fetchConn) {
	if f.h.via() != viaFetch {
		f.endFlights() // no answer of a navigation followed here will come
		return         // stopped on purpose: navigations are held another way now
	}
	// What cut one connection may have cut the other, unnoticed yet:
	// navigations wait until the other one answers.
	f.h.setArmed(false)
	now := time.Now()
	f.mu.Lock()
	others := f.up()
	// Both went: the browser stopped (a normal shutdown looks the same on
	// the wire as a crash), restarts, or was cut off. Said once, though
	// each connection may find itself the last.
	gone := others == 0 && f.gone.CompareAndSwap(false, true)
	held := 0
	var lost []string // with no connection left, what any of them held is gone
	for k, hn := range f.held {
		switch {
		case others == 0 && !f.isUp(hn.by):
			delete(f.held, k)
			lost = append(lost, k.frame)
		case hn.by == fc:
			hn.orphaned = now
			held++
		}
	}
	f.mu.Unlock()
	if others == 0 {
		f.endFlights() // the browser is out of reach: no answer will come
	} else {
		fc.endReleased() // the answers fc was to read are lost with it
	}
	if f.h.p.ctxDone() {
		return // shutting down: the browser releases them, on purpose
	}
	if others == 0 {
		if gone {
			f.h.p.log.Warn().Str("upstream", f.h.up.name).Int("held", len(lost)).
				Msg("the browser closed the relay's connections (it stopped, restarts or was cut off): navigations wait until it is back")
		}
		if len(lost) > 0 {
			time.AfterFunc(orphanWait, func() { f.countLost(lost) })
		}
		return
	}
	// When the browser goes away, the other connection drops a moment
	// later, and says so: this one is lost alone only if the other
	// still answers.
	go func() {
		if f.confirm() && !f.h.p.ctxDone() {
			f.h.p.log.Info().Str("upstream", f.h.up.name).Int("held", held).
				Msg("lost one of the relay's browser connections: the other one holds on")
		}
	}()
	if held == 0 {
		return
	}
	time.AfterFunc(orphanWait, func() {
		f.mu.Lock()
		var lost []string
		for k, hn := range f.held {
			if hn.by == fc {
				delete(f.held, k)
				lost = append(lost, k.frame)
				hn.fl.end()
			}
		}
		f.mu.Unlock()
		f.countLost(lost)
	})
}

// endReleased ends the navigations whose answer fc was to read: those it
// let go. Those it still held go on to the relay's other connection.
func (fc *fetchConn) endReleased() {
	f := fc.f
	f.mu.Lock()
	held := make(map[*flight]bool)
	for _, hn := range f.held {
		if hn.by == fc {
			held[hn.fl] = true
		}
	}
	f.mu.Unlock()
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, hp := range fc.hops {
		if hp.fl != nil && !held[hp.fl] {
			hp.fl.end()
		}
	}
}

// isUp reports whether fc is one of the relay's connections that are up.
func (f *fetchHold) isUp(fc *fetchConn) bool {
	for i := range f.conns {
		if f.conns[i].Load() == fc {
			return true
		}
	}
	return false
}

// countLost counts, as unheld, the navigations of pages that are still
// there among those held by connections that dropped: the browser let them
// go. A page that is gone (the browser died with it) sent nothing.
func (f *fetchHold) countLost(frames []string) {
	n := 0
	for _, frame := range frames {
		if f.pageAlive(frame) {
			n++
		}
	}
	f.h.unheld(n, "the browser released what the relay's lost connections held")
}

// pageAlive reports whether the browser still has a page, as far as the
// relay can tell: yes unless a connection of the relay's is up and the
// browser says there is no such target.
func (f *fetchHold) pageAlive(target string) bool {
	for i := range f.conns {
		fc := f.conns[i].Load()
		if fc == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(fc.held, orphanWait)
		r, err := fc.call(ctx, "Target.getTargetInfo", map[string]string{"targetId": target})
		cancel()
		return err == nil || r == nil
	}
	return true
}

// confirm arms holding again once one of the relay's connections answers.
func (f *fetchHold) confirm() bool {
	for i := range f.conns {
		fc := f.conns[i].Load()
		if fc == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(fc.held, time.Second)
		_, err := fc.call(ctx, "Target.getTargets", struct{}{})
		cancel()
		if err == nil && f.conns[i].Load() == fc {
			f.h.setArmed(true)
			return true
		}
	}
	return false
}

// stopAll ends both connections for good: the browser releases what they
// held (nothing, when the relay falls over from a Fetch that never
// pauses).
func (f *fetchHold) stopAll() {
	if f.stop != nil {
		f.stop()
	}
}

// hold decides what to do with a document request of one of the relay's
// clients' pages, paused at fc's Request stage, and does it. It runs on
// fc's reader and never blocks.
func (f *fetchHold) hold(fc *fetchConn, ev *cdp.RequestPaused, host string) {
	id := ev.RequestID
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	now := time.Now()
	prev, redirected := fc.hopFor(ev)

	f.mu.Lock()
	if p, ok := f.passed[key]; ok && p.by != fc && fc.since.Before(p.at) && now.Sub(p.at) < echoWindow {
		// The other connection held it already, and reads its answer. It
		// leaves for the network now: its answer time counts from here.
		delete(f.passed, key)
		f.mu.Unlock()
		p.fl.leftAt(now)
		fc.setHop(id, hop{host: host, frame: ev.FrameID})
		fc.release(id)
		return
	}
	hn, ok := f.held[key]
	if ok && hn.by != fc && (hn.orphaned.IsZero() || fc.since.Before(hn.orphaned)) {
		// The connection that held it dropped (the relay may not have
		// noticed yet), and the browser handed it on. One that came up
		// since cannot be handed anything: the request is one of a
		// browser that died, and this one is new.
		hn.by = fc
		hn.orphaned = time.Time{}
		f.mu.Unlock()
		fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: true, fl: hn.fl})
		go func() {
			select {
			case <-hn.booked:
			case <-fc.held.Done():
				return
			case <-hn.fl.ctx.Done(): // its page went while it waited
				return
			}
			if late := time.Since(hn.start); late > handOverLate {
				// Its slot went by while the browser handed it over: going
				// now would come too close to the navigation after it. It
				// takes the next slot instead.
				log := pageLog(&fc.log, ev.FrameID, "")
				log.Debug().Str("host", host).Float64("late_ms", limiter.ShownMillis(late)).Msg("handed-over navigation booked again")
				f.h.holdFlight(fc.held, hn.fl, host, ev.Request.URL, log, nil, func() { f.let(key, hn, id) }, nil)
				return
			}
			f.h.holdUntil(fc.held, hn.fl, hn.start, func() { f.let(key, hn, id) }, nil)
		}()
		return
	}
	if redirected && prev.host == host {
		// A hop within the host of the hop before it books nothing, and
		// keeps that hop's place in flight.
		f.passLocked(key, fc, now, nil)
		f.mu.Unlock()
		fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: prev.booked, fl: prev.fl})
		fc.continueRequest(id, prev.booked) // the answer is read where the hop before it was booked
		return
	}
	f.mu.Unlock()
	if redirected {
		prev.fl.end() // its answer was the redirect; the hop is a navigation of another host
	}
	fl := f.newFlight()
	f.mu.Lock()
	hn = &heldNav{by: fc, booked: make(chan struct{}), fl: fl}
	f.held[key] = hn // a stale one, of a browser that died, is forgotten
	f.mu.Unlock()
	fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: true, fl: fl})
	booked := func(start time.Time) {
		hn.start = start
		close(hn.booked)
	}
	// The wait for a place in flight lasts as long as the navigation, the
	// one for its slot as long as this connection: when it drops, the
	// other connection gets the request and holds it on hn.
	f.h.holdFlight(fc.held, fl, host, ev.Request.URL, pageLog(&fc.log, ev.FrameID, ""), booked, func() { f.let(key, hn, id) }, nil)
}

// let releases a held document request from the connection that holds it
// now, and notes it for the other connection.
func (f *fetchHold) let(key navKey, hn *heldNav, id string) {
	f.mu.Lock()
	fc := hn.by
	if f.held[key] == hn {
		delete(f.held, key)
	}
	f.passLocked(key, fc, time.Now(), hn.fl)
	f.mu.Unlock()
	fc.releaseWatching(id)
}

// maxPassed bounds the documents remembered as let go; they matter for
// echoWindow only.
const maxPassed = 4096

func (f *fetchHold) passLocked(key navKey, fc *fetchConn, now time.Time, fl *flight) {
	if len(f.passed) >= maxPassed {
		for k, p := range f.passed {
			if now.Sub(p.at) >= echoWindow {
				delete(f.passed, k)
			}
		}
		if len(f.passed) >= maxPassed {
			clear(f.passed)
		}
	}
	f.passed[key] = passedNav{by: fc, at: now, fl: fl}
}

// sawPause notes that a page's document request paused at the relay.
func (f *fetchHold) sawPause(frame string) {
	f.mu.Lock()
	if len(f.paused) >= maxClaims {
		clear(f.paused)
	}
	f.paused[frame] = time.Now()
	f.mu.Unlock()
}

// pausedSince reports whether a document request of the page paused at the
// relay at or after t.
func (f *fetchHold) pausedSince(frame string, t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.paused[frame]
	return ok && !at.Before(t)
}

// forgetPage drops what is known of a page that is gone.
func (f *fetchHold) forgetPage(frame string) {
	f.mu.Lock()
	delete(f.paused, frame)
	f.mu.Unlock()
	f.h.claims.forget(frame)
}

// fetchConn is one of the relay's own connections to the browser endpoint.
type fetchConn struct {
	f     *fetchHold
	h     *holder
	c     *websocket.Conn
	log   zerolog.Logger
	since time.Time // set once, before its Fetch was enabled

	wmu    sync.Mutex // serialises writes
	nextID int64      // guarded by wmu

	mu       sync.Mutex
	closed   bool                 // guarded by mu
	calls    map[int64]chan reply // guarded by mu; commands whose reply someone waits for
	pages    map[string]struct{}  // guarded by mu; target ids of pages
	notPages map[string]struct{}  // guarded by mu; frame ids known not to be pages
	hops     map[string]hop       // guarded by mu; interception id → document request under way
	readDone chan struct{}        // closed when the reader ends
	// held ends when the connection is closed: the navigations it holds
	// are given up (the browser hands their requests on).
	held    context.Context
	dropAll context.CancelFunc
}

// hop is a document request of a page under way.
type hop struct {
	host   string
	frame  string
	booked bool    // its answer is fed back: this connection booked it
	fl     *flight // the navigation, when this connection holds it or reads its answer
}

// reply is the answer to one of the relay's own commands.
type reply struct {
	result json.RawMessage
	err    *cdp.Error
}

// documentPattern pauses every document request of the browser at each of
// the relay's connections before it goes out: a navigation of a page that
// is not a client's costs two pauses. Only the connection that held a
// navigation asks for its answer.
var documentPattern = []*fetch.RequestPattern{
	{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest},
}

// connect dials the browser endpoint and enables discovery and Fetch.
func (f *fetchHold) connect(ctx context.Context, i int) (*fetchConn, error) {
	h := f.h
	wsURL, err := h.up.browserWS(ctx)
	if err != nil {
		return nil, err
	}
	c, _, err := h.p.dialer.DialContext(ctx, wsURL, nil)
	if err != nil {
		h.up.forget(wsURL) // it may have restarted under a new endpoint
		return nil, fmt.Errorf("relay: dialing the browser endpoint: %w", err)
	}
	c.SetReadLimit(h.p.MaxMessageSize)
	fc := &fetchConn{
		f:        f,
		h:        h,
		c:        c,
		since:    time.Now(), // before its Fetch takes effect: what it pauses, the other one let go after this
		log:      h.p.log.With().Str("conn", fmt.Sprintf("relay-%d", i)).Str("upstream", h.up.name).Logger(),
		calls:    make(map[int64]chan reply),
		pages:    make(map[string]struct{}),
		notPages: make(map[string]struct{}),
		hops:     make(map[string]hop),
		readDone: make(chan struct{}),
	}
	fc.held, fc.dropAll = context.WithCancel(context.Background())
	go fc.read()
	if r, err := fc.call(ctx, "Target.setDiscoverTargets", &target.SetDiscoverTargetsParams{Discover: true}); err != nil {
		fc.close()
		return nil, refusal("browser refused target discovery", r, err, h.p.Intercept)
	}
	if r, err := fc.call(ctx, "Fetch.enable", &fetch.EnableParams{Patterns: documentPattern}); err != nil {
		fc.close()
		return nil, refusal("browser refused browser-level Fetch", r, err, h.p.Intercept)
	}
	return fc, nil
}

// refusal says why a command of the relay's own connection failed: an
// error answer is a refusal; no answer in time is silence (a refusal when
// Fetch is required: Start then fails with it).
func refusal(what string, r *reply, err error, mode Intercept) error {
	err = fmt.Errorf("relay: %s: %w", what, err)
	switch {
	case r != nil:
		return errRefused{err}
	case errors.Is(err, context.DeadlineExceeded) && mode == InterceptFetch:
		return errRefused{err}
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", errSilent, err)
	}
	return err
}

// keepalive pings the browser until the connection ends or ctx does, and
// then closes it.
func (fc *fetchConn) keepalive(ctx context.Context, every, timeout time.Duration) {
	pongWait := 2*every + 10*time.Second
	fc.c.SetReadDeadline(time.Now().Add(pongWait))
	fc.c.SetPongHandler(func(string) error { return fc.c.SetReadDeadline(time.Now().Add(pongWait)) })
	t := time.NewTicker(every)
	defer t.Stop()
	defer fc.close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fc.readDone:
			return
		case <-t.C:
			if err := fc.c.WriteControl(websocket.PingMessage, nil, time.Now().Add(timeout)); err != nil {
				return
			}
		}
	}
}

// close ends the connection; the browser then hands every request the
// connection held on, to the relay's other connection when it is up.
func (fc *fetchConn) close() {
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return
	}
	fc.closed = true
	fc.mu.Unlock()
	fc.dropAll()
	fc.c.Close()
	<-fc.readDone
}

var errConnClosed = errors.New("relay: browser connection closed")

// send writes a command and returns its id; its reply goes to answer, or
// is only logged when answer is nil.
func (fc *fetchConn) send(method string, params any, answer chan reply) (int64, error) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.nextID++
	id := fc.nextID
	msg, err := cdp.Command(id, method, "", params)
	if err != nil {
		return 0, fmt.Errorf("relay: %s: %w", method, err)
	}
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return 0, errConnClosed
	}
	if answer != nil {
		fc.calls[id] = answer // a release waits for nothing: its reply is only logged
	}
	fc.mu.Unlock()
	fc.c.SetWriteDeadline(time.Now().Add(fc.h.p.WriteTimeout))
	if err := fc.c.WriteMessage(websocket.TextMessage, msg); err != nil {
		fc.mu.Lock()
		delete(fc.calls, id)
		fc.mu.Unlock()
		return 0, fmt.Errorf("relay: %s: %w", method, err)
	}
	return id, nil
}

// call sends a command and waits for its reply. The reply is nil when the
// browser did not answer; with an error reply, both are set.
func (fc *fetchConn) call(ctx context.Context, method string, params any) (*reply, error) {
	answer := make(chan reply, 1)
	id, err := fc.send(method, params, answer)
	if err != nil {
		return nil, err
	}
	select {
	case r, ok := <-answer:
		if !ok {
			return nil, errConnClosed
		}
		if r.err != nil {
			return &r, fmt.Errorf("relay: %s: %s (%d)", method, r.err.Message, r.err.Code)
		}
		return &r, nil
	case <-ctx.Done():
		fc.mu.Lock()
		delete(fc.calls, id)
		fc.mu.Unlock()
		return nil, fmt.Errorf("relay: %s: %w", method, ctx.Err())
	}
}

// release lets a paused request go on, at either stage.
func (fc *fetchConn) release(id string) { fc.continueRequest(id, false) }

// releaseWatching lets a held document request go on and asks for its
// answer: it pauses again at this connection once it is in.
func (fc *fetchConn) releaseWatching(id string) { fc.continueRequest(id, true) }

// continueRequest lets a paused request go on, asking for its answer when
// answer is set.
func (fc *fetchConn) continueRequest(id string, answer bool) {
	p := &fetch.ContinueRequestParams{RequestID: fetch.RequestID(id)}
	if answer {
		p.InterceptResponse = &answer
	}
	if _, err := fc.send("Fetch.continueRequest", p, nil); err != nil && !errors.Is(err, errConnClosed) {
		fc.log.Debug().Err(err).Str("request", id).Msg("releasing a request failed")
	}
}

// read dispatches what the browser sends until the connection ends.
func (fc *fetchConn) read() {
	defer func() {
		fc.mu.Lock()
		fc.closed = true
		for id, ch := range fc.calls {
			close(ch)
			delete(fc.calls, id)
		}
		fc.mu.Unlock()
		close(fc.readDone)
	}()
	for {
		_, data, err := fc.c.ReadMessage()
		if err != nil {
			fc.log.Debug().Err(err).Msg("browser connection ended")
			return
		}
		hd, err := cdp.Scan(data)
		if err != nil {
			fc.log.Warn().Err(err).Int("size", len(data)).Msg("unreadable message from the browser")
			continue
		}
		if hd.HasID {
			fc.reply(hd.ID, data)
			continue
		}
		fc.event(string(hd.Method), hd.Params)
	}
}

func (fc *fetchConn) reply(id int64, msg []byte) {
	fc.mu.Lock()
	ch, ok := fc.calls[id]
	delete(fc.calls, id)
	fc.mu.Unlock()
	result, e, _ := cdp.ReadReply(msg)
	switch {
	case ok:
		ch <- reply{result: result, err: e}
	case e != nil:
		// A request whose page went away meanwhile; nothing to do.
		fc.log.Debug().Int64("id", id).Int64("code", e.Code).Msg("browser refused a release")
	}
}

func (fc *fetchConn) event(method string, params []byte) {
	switch method {
	case "Fetch.requestPaused":
		ev, ok := cdp.ReadRequestPaused(params)
		if !ok {
			fc.log.Warn().Msg("unreadable Fetch.requestPaused")
			return
		}
		fc.paused(&ev)
	case "Target.targetCreated", "Target.targetInfoChanged":
		ti, ok := cdp.ReadTargetInfo(params)
		if !ok || ti.Type != "page" {
			return
		}
		fc.mu.Lock()
		fc.pages[ti.TargetID] = struct{}{}
		fc.mu.Unlock()
		if ti.OpenerID != "" && fc.h.claims.claimed(ti.OpenerID) {
			fc.h.claims.claim(ti.TargetID) // a popup of a client's page
		}
	case "Target.targetDestroyed":
		if id, ok := cdp.ReadTargetID(params); ok {
			fc.mu.Lock()
			delete(fc.pages, id)
			delete(fc.notPages, id)
			fc.dropFrameHopsLocked(id)
			fc.mu.Unlock()
			fc.f.forgetPage(id)
		}
	}
}

// paused handles one paused document request.
func (fc *fetchConn) paused(ev *cdp.RequestPaused) {
	id := ev.RequestID
	if o, ok := ev.Outcome(); ok {
		fc.mu.Lock()
		hp, tracked := fc.hops[id]
		if tracked && !isRedirect(o.Status) {
			delete(fc.hops, id) // a redirect's entry stays until its next hop names it
		}
		fc.mu.Unlock()
		if tracked && hp.booked {
			fc.h.observe(hp.fl, hp.host, o, pageLog(&fc.log, hp.frame, ""))
		}
		if tracked && !isRedirect(o.Status) {
			hp.fl.end() // answered or failed; a redirect's place goes on with its hop
		}
		fc.release(id)
		return
	}
	frame := ev.FrameID
	fc.mu.Lock()
	_, page := fc.pages[frame]
	_, notPage := fc.notPages[frame]
	fc.mu.Unlock()
	switch {
	case page:
		fc.decide(ev)
	case notPage:
		fc.release(id)
		fc.h.p.Metrics.navigation(navUntracked, 0)
	default:
		// A frame not announced as a page: an iframe, or a page whose
		// announcement has not arrived. Ask, without stopping the reader.
		go fc.classify(ev)
	}
}

// classify asks the browser whether a frame is a page's main frame, then
// decides on its request.
func (fc *fetchConn) classify(ev *cdp.RequestPaused) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	frame := ev.FrameID
	r, err := fc.call(ctx, "Target.getTargetInfo", &target.GetTargetInfoParams{TargetID: target.ID(frame)})
	isPage := false
	var ti cdp.TargetInfo
	if err == nil {
		var ok bool
		ti, ok = cdp.ReadTargetInfo(r.result)
		isPage = ok && ti.Type == "page"
	}
	fc.mu.Lock()
	if isPage {
		fc.pages[frame] = struct{}{}
	} else if r != nil { // only what the browser said: after no answer, ask again next time
		if len(fc.notPages) >= 10_000 {
			clear(fc.notPages)
		}
		fc.notPages[frame] = struct{}{}
	}
	fc.mu.Unlock()
	if isPage && ti.OpenerID != "" && fc.h.claims.claimed(ti.OpenerID) {
		fc.h.claims.claim(frame)
	}
	if isPage {
		fc.decide(ev)
		return
	}
	fc.release(ev.RequestID)
	fc.h.p.Metrics.navigation(navUntracked, 0)
}

// claimWait bounds how long a page's first request waits to learn whether
// a client is creating that page.
const claimWait = 3 * time.Second

// decide holds a page's document request when the page is a client's, and
// lets it go at once otherwise.
func (fc *fetchConn) decide(ev *cdp.RequestPaused) {
	fc.f.sawPause(ev.FrameID)
	if fc.h.claims.claimed(ev.FrameID) {
		fc.ours(ev)
		return
	}
	if !fc.h.claims.unsure() {
		fc.foreign(ev)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(fc.held, claimWait)
		defer cancel()
		if fc.h.claims.decide(ctx, ev.FrameID) {
			fc.ours(ev)
		} else {
			fc.foreign(ev)
		}
	}()
}

// foreign lets a document request of a page that is not a client's go.
func (fc *fetchConn) foreign(ev *cdp.RequestPaused) {
	fc.release(ev.RequestID)
	fc.h.p.Metrics.navigation(navForeign, 0)
}

// ours holds a document request of a client's page for its slot.
func (fc *fetchConn) ours(ev *cdp.RequestPaused) {
	host, ok := limiter.Key(ev.Request.URL)
	if !ok || fc.h.exempt(host) {
		if prev, redirected := fc.hopFor(ev); redirected {
			prev.fl.end() // a redirect to a host that is not held: its place goes back
		}
		fc.release(ev.RequestID)
		fc.h.notBooked(ok)
		return
	}
	fc.f.hold(fc, ev, host)
}

// hopFor returns the document request a redirect hop follows, and forgets
// it (its entry is replaced by the hop's). A request that follows none
// starts a new navigation of its frame, which ends every chain the frame
// had: so what is remembered is bounded by the requests under way.
func (fc *fetchConn) hopFor(ev *cdp.RequestPaused) (hop, bool) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if ev.RedirectedRequestID == "" {
		fc.dropFrameHopsLocked(ev.FrameID)
		return hop{}, false
	}
	prev, ok := fc.hops[ev.RedirectedRequestID]
	delete(fc.hops, ev.RedirectedRequestID)
	return prev, ok
}

func (fc *fetchConn) setHop(id string, hp hop) {
	fc.mu.Lock()
	fc.hops[id] = hp
	fc.mu.Unlock()
}

// dropFrameHopsLocked forgets the requests under way of a frame that
// navigates anew or is gone, which ends their navigations. Callers hold
// fc.mu.
func (fc *fetchConn) dropFrameHopsLocked(frame string) {
	for k, hp := range fc.hops {
		if hp.frame == frame {
			delete(fc.hops, k)
			hp.fl.end()
		}
	}
}

func isRedirect(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}
