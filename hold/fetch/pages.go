package fetch

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/fetch"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// pagesState is what the pages connection owns: its sessions on the
// browser's pages and the document requests it follows. mu guards it,
// and the pageSess and track fields marked so; it is taken after
// fetchHold.mu and the connection's wmu, before the connection's own mu
// and the flights' (hold.go's lock order).
type pagesState struct {
	mu        lockorder.Mutex[hold.RankFetchConn]
	sessions  map[string]*pageSess     // guarded by mu; page sessions by session id
	byTarget  map[string]*pageSess     // guarded by mu; page sessions by target id
	attaching map[string]chan struct{} // guarded by mu; pages being attached to (cover), closed when armed
	tracks    map[string]*track        // guarded by mu; document requests it follows, by trackKey
	byFrame   int                      // guarded by mu; how many of tracks are keyed by their frame
	ready     atomic.Bool              // set once: it knows every page and has armed the clients'
	clock     monoClock                // the browser's monotonic clock on the relay's
}

// The pages connection attaches to every page of the browser
// (Target.setAutoAttach, flat sessions of its own), waiting for the
// debugger: a new page loads nothing until each client that asked for that
// has let it run, so the relay decides whose page it is first. On a page of
// its clients it enables Fetch for the page's document requests and
// Network, whose events say when each request really left the browser and
// how it was answered; every other page it lets run and never touches
// again. A page that a client claims later (it drives a page it did not
// create) is armed before the client's command goes on (FetchWay.Cover, which
// the Watch calls from FromClient).
//
// A document request it holds is let go at its slot straight to the
// network: the net connection behind it has patterns for what is held, and
// drops the request's just before the release.

// pageSess is the pages connection's session on one page.
type pageSess struct {
	id, target string
	arming     bool          // guarded by pagesState.mu: its Fetch is being enabled, or is
	covered    bool          // guarded by pagesState.mu: a client's claim armed it (cover), not only the relay's guess
	armed      chan struct{} // closed once they are on, or arming failed, or the session is gone
	ok         bool          // guarded by pagesState.mu; set before armed is closed: it is on
	network    bool          // guarded by pagesState.mu: the relay enabled Network events in it
}

// networkParams enables the Network events of a page session with no
// buffer for bodies: the relay reads events only.
var networkParams = struct {
	MaxTotalBufferSize    int64 `json:"maxTotalBufferSize"`
	MaxResourceBufferSize int64 `json:"maxResourceBufferSize"`
	MaxPostDataSize       int64 `json:"maxPostDataSize"`
}{}

// autoAttach attaches the pages connection to every page, each waiting
// until the relay lets it run, in flat sessions.
var autoAttach = struct {
	AutoAttach             bool `json:"autoAttach"`
	WaitForDebuggerOnStart bool `json:"waitForDebuggerOnStart"`
	Flatten                bool `json:"flatten"`
}{true, true, true}

// connectPages dials the pages connection: it discovers targets and
// attaches to every page, arming those of the relay's clients. It is ready
// (able to hold) once every client page it found is armed.
func (f *fetchHold) connectPages(ctx context.Context) (*fetchConn, error) {
	fc, err := f.dialDiscovering(ctx, rolePages)
	if err != nil {
		return nil, err
	}
	mode := f.cfg.Intercept
	// Pages announced before the reply are all of them: arm the clients'.
	if r, err := fc.call(ctx, "", "Target.setAutoAttach", autoAttach); err != nil {
		fc.close()
		return nil, refusedOrSilent("browser refused auto-attaching to pages", r, err, mode)
	}
	if err := fc.armClaimed(ctx); err != nil {
		fc.close()
		return nil, refusedOrSilent("browser did not enable Fetch on a page", nil, err, mode)
	}
	return fc, nil
}

// armClaimed arms every client page the connection knows, and waits for
// them, within ctx.
func (fc *fetchConn) armClaimed(ctx context.Context) error {
	fc.pg.mu.Lock()
	var sessions []*pageSess
	for _, ps := range fc.pg.sessions {
		sessions = append(sessions, ps)
	}
	fc.pg.mu.Unlock()
	for _, ps := range sessions {
		if !fc.core.Claimed(ps.target) {
			continue
		}
		select {
		case <-fc.arm(ps):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// attached adopts a target the pages connection was attached to: a page
// of a client is armed before it runs; any other target is let run and
// let go, so that it looks to every client as it would without the relay
// (not attached).
func (fc *fetchConn) attached(params []byte) {
	a, ok := cdp.ReadAttached(params)
	if !ok {
		return
	}
	if a.Target.Type != "page" {
		fc.letGo(a.SessionID, a.Waiting)
		return
	}
	ps := &pageSess{id: a.SessionID, target: a.Target.TargetID, armed: make(chan struct{})}
	fc.pg.mu.Lock()
	if len(fc.pg.sessions) >= hold.MaxClaims {
		clear(fc.pg.sessions)
		clear(fc.pg.byTarget)
	}
	if old := fc.pg.byTarget[ps.target]; old != nil && old.id != ps.id {
		// A session of the relay's on the page already: one is enough
		// (two would each pause and book its requests).
		fc.pg.mu.Unlock()
		fc.log.Debug().Str("target", ps.target).Str("session", ps.id).Str("kept", old.id).Bool("waiting", a.Waiting).Msg("attached to a page twice: letting the new session go")
		fc.letGo(ps.id, a.Waiting)
		return
	}
	fc.pg.sessions[ps.id] = ps
	fc.pg.byTarget[ps.target] = ps
	fc.mu.Lock()
	fc.pages[ps.target] = struct{}{}
	fc.mu.Unlock()
	fc.pg.mu.Unlock()
	fc.log.Debug().Str("target", ps.target).Str("session", ps.id).Bool("waiting", a.Waiting).Str("opener", a.Target.OpenerID).Msg("attached to a page")
	claims := fc.core.Claims()
	if a.Target.OpenerID != "" && claims.Claimed(a.Target.OpenerID) {
		claims.Claim(ps.target) // a popup of a client's page
	}
	switch {
	case claims.Claimed(ps.target):
	case !claims.Unsure():
		fc.foreignPage(ps, a.Waiting)
		return
	}
	// A client's page, or one a client may be creating: arm it while
	// deciding (waiting for the creation's answer: both take a round trip
	// or more, the arming until the page's renderer runs), then let it
	// run; never on the reader. A page that turns out not to be a
	// client's is let go, armed or not.
	armed := fc.arm(ps)
	fc.f.cfg.Limiting.Add(1)
	go func() {
		defer fc.f.cfg.Limiting.Done()
		ctx, cancel := context.WithTimeout(fc.held, hold.ClaimWait)
		ours := claims.Decide(ctx, ps.target)
		cancel()
		if !ours {
			fc.foreignPage(ps, a.Waiting)
			return
		}
		select {
		case <-armed:
		case <-fc.held.Done():
			return
		}
		if a.Waiting {
			fc.send(ps.id, "Runtime.runIfWaitingForDebugger", struct{}{}, nil)
		}
	}()
}

// foreignPage lets a page no client drives run, and lets go of it, unless
// a client claimed it meanwhile.
func (fc *fetchConn) foreignPage(ps *pageSess, waiting bool) {
	fc.pg.mu.Lock()
	arming := ps.covered // armed for a client's claim, not only on a guess
	if !arming && fc.pg.byTarget[ps.target] == ps {
		// Gone from here on: a claim from now on attaches anew.
		delete(fc.pg.byTarget, ps.target)
	}
	fc.pg.mu.Unlock()
	if arming {
		if waiting {
			fc.send(ps.id, "Runtime.runIfWaitingForDebugger", struct{}{}, nil)
		}
		return
	}
	fc.letGo(ps.id, waiting)
}

// letGo lets a target the connection was attached to run, and detaches
// from it.
func (fc *fetchConn) letGo(session string, waiting bool) {
	if waiting {
		fc.send(session, "Runtime.runIfWaitingForDebugger", struct{}{}, nil)
	}
	fc.send("", "Target.detachFromTarget", map[string]string{"sessionId": session}, nil)
}

// arm enables Fetch for the page's document requests in the relay's
// session on it, once, and returns a channel closed once that is done (or
// failed, or the session is gone). A page whose session is still there
// but cannot be armed is left to the net connection, which then pauses
// every document (fail closed). The page's Network events, which say when
// a request it holds left and how it was answered, come from its clients'
// sessions where they enabled them, as Puppeteer, Playwright and chromedp
// do on every page they drive; the relay's own session enables them only
// where no client did (events), as its first request is held.
func (fc *fetchConn) arm(ps *pageSess) <-chan struct{} {
	fc.pg.mu.Lock()
	if ps.arming {
		fc.pg.mu.Unlock()
		return ps.armed
	}
	ps.arming = true
	fc.pg.mu.Unlock()
	done := func(r hold.Reply) {
		bad := r.Err != nil || r.Result == nil
		fc.pg.mu.Lock()
		// Live, and not a page let go meanwhile as not a client's (armed
		// on a guess: the browser may refuse a session being detached).
		_, live := fc.pg.sessions[ps.id]
		live = live && fc.pg.byTarget[ps.target] == ps
		ps.ok = !bad
		closeOnce(ps.armed)
		fc.pg.mu.Unlock()
		if bad && live && !fc.isClosed() {
			fc.log.Warn().Str("target", ps.target).Msg("could not enable the relay's interception on a client's page: " +
				"every document of the browser pauses at the relay's other connection instead")
			fc.f.uncovered(1)
		}
	}
	patterns := documentPattern
	if hold.PartOff("pauses") {
		patterns = noMatch
	}
	if _, err := fc.send(ps.id, "Fetch.enable", &fetch.EnableParams{Patterns: patterns}, done); err != nil {
		done(hold.Reply{})
	}
	return ps.armed
}

// events makes sure the relay reads the Network events of a page whose
// document request it follows: from a client's session on the page when
// one has them on, else from its own, where it enables them now (once).
// It returns a channel closed once they are on (nil: nothing to wait
// for), within eventsWait: Chromium answers a Network.enable only once a
// paused navigation of the page goes on. A request that started before
// they were on shows in them only by its end (Network.responseReceived,
// with the timing of its send, or Network.loadingFailed), and paused with
// no network id: it is followed by its page's frame (trackKey).
func (fc *fetchConn) events(ps *pageSess) <-chan struct{} {
	if fc.core.ClientNetworkOn(ps.target) > 0 {
		return nil
	}
	fc.pg.mu.Lock()
	on := ps.network
	ps.network = true
	fc.pg.mu.Unlock()
	if on {
		return nil
	}
	fc.log.Debug().Str("target", ps.target).Msg("no client reads the page's Network events: the relay's session does")
	ch := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(ch) }) }
	if _, err := fc.send(ps.id, "Network.enable", networkParams, func(hold.Reply) { done() }); err != nil {
		done()
	}
	time.AfterFunc(eventsWait, done)
	return ch
}

// eventsWait bounds how long a client's navigation command waits for the
// relay's Network events to be on in its page.
const eventsWait = time.Second

// eventsOf is events for the page target, when the connection is
// attached to it.
func (fc *fetchConn) eventsOf(target string) <-chan struct{} {
	fc.pg.mu.Lock()
	ps := fc.pg.byTarget[target]
	fc.pg.mu.Unlock()
	if ps == nil {
		return nil
	}
	return fc.events(ps)
}

// closeOnce closes ch unless it is closed already. Callers serialise.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (fc *fetchConn) isClosed() bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.closed
}

// cover arms target's session, attaching to the page first when the
// connection let go of it, and returns a channel closed once it is armed
// (or that failed, or the connection ended); with navigates, once the
// page's Network events are read too (events).
func (fc *fetchConn) cover(target string, navigates bool) <-chan struct{} {
	fc.pg.mu.Lock()
	ps := fc.pg.byTarget[target]
	attaching := fc.pg.attaching[target]
	done := make(chan struct{})
	if ps == nil && attaching == nil {
		if fc.pg.attaching == nil {
			fc.pg.attaching = make(map[string]chan struct{})
		}
		fc.pg.attaching[target] = done
	}
	if ps != nil {
		ps.covered = true
	}
	fc.pg.mu.Unlock()
	switch {
	case ps != nil && navigates:
		return both(fc.arm(ps), fc.events(ps))
	case ps != nil:
		return fc.arm(ps)
	case attaching != nil && navigates:
		return fc.eventsAfter(target, attaching)
	case attaching != nil:
		return attaching // another claim of the page is attaching to it
	}
	fc.f.cfg.Limiting.Add(1)
	go func() {
		defer fc.f.cfg.Limiting.Done()
		defer func() {
			fc.pg.mu.Lock()
			delete(fc.pg.attaching, target)
			fc.pg.mu.Unlock()
			close(done)
		}()
		ctx, cancel := context.WithTimeout(fc.held, hold.CoverWait)
		defer cancel()
		r, err := fc.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true})
		if err != nil {
			return // the page is gone, or the connection
		}
		var res struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(r.Result, &res) != nil || res.SessionID == "" {
			return
		}
		fc.pg.mu.Lock()
		ps := fc.pg.byTarget[target]
		if ps == nil {
			ps = &pageSess{id: res.SessionID, target: target, armed: make(chan struct{}), covered: true}
			fc.pg.sessions[ps.id] = ps
			fc.pg.byTarget[target] = ps
		}
		fc.pg.mu.Unlock()
		if ps.id != res.SessionID {
			// Attached twice meanwhile: one session is enough.
			fc.send("", "Target.detachFromTarget", map[string]string{"sessionId": res.SessionID}, nil)
		}
		armed := fc.arm(ps)
		if navigates {
			armed = both(armed, fc.events(ps))
		}
		select {
		case <-armed:
		case <-ctx.Done():
		}
	}()
	return done
}

// eventsAfter returns a channel closed once attached is, and then the
// Network events of target are read (events).
func (fc *fetchConn) eventsAfter(target string, attached <-chan struct{}) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		select {
		case <-attached:
		case <-fc.held.Done():
			return
		}
		if ev := fc.eventsOf(target); ev != nil {
			select {
			case <-ev:
			case <-fc.held.Done():
			}
		}
	}()
	return ch
}

// detached forgets a page session that is gone: the requests it followed
// are over.
func (fc *fetchConn) detached(session string) {
	fc.pg.mu.Lock()
	ps := fc.pg.sessions[session]
	delete(fc.pg.sessions, session)
	if ps != nil && fc.pg.byTarget[ps.target] == ps {
		delete(fc.pg.byTarget, ps.target)
	}
	if ps != nil {
		closeOnce(ps.armed)
	}
	var over []*trackHop
	for id, tr := range fc.pg.tracks {
		if tr.session == session {
			over = tr.endLocked(over)
			delete(fc.pg.tracks, id)
		}
	}
	fc.countTracksLocked()
	fc.pg.mu.Unlock()
	endHops(over)
}

// endAllTracks gives up every request followed, as the connection ends.
// The navigations of those still held go on to net with their places in
// flight.
func (fc *fetchConn) endAllTracks() {
	fc.pg.mu.Lock()
	var over []*trackHop
	for id, tr := range fc.pg.tracks {
		over = tr.endLocked(over)
		delete(fc.pg.tracks, id)
	}
	fc.countTracksLocked()
	for _, ps := range fc.pg.sessions {
		closeOnce(ps.armed)
	}
	fc.pg.mu.Unlock()
	var fls []*hold.Flight
	for _, th := range over {
		th.nav.End()
		fls = append(fls, th.fl)
	}
	fc.f.endUnheld(fls)
}

// sessionEvent handles an event of one of the pages connection's sessions.
func (fc *fetchConn) sessionEvent(session string, method, params []byte, at time.Time) {
	switch string(method) {
	case "Fetch.requestPaused":
		ev, ok := cdp.ReadRequestPaused(params)
		if !ok {
			fc.log.Warn().Msg("unreadable Fetch.requestPaused")
			return
		}
		fc.pagePaused(session, &ev)
	case "Network.requestWillBeSentExtraInfo", "Network.requestWillBeSent", "Network.responseReceived", "Network.loadingFailed":
		page := ""
		if ps := fc.sessionOf(session); ps != nil {
			page = ps.target
		}
		fc.network(method, params, page, at)
	}
}

// pagePaused handles a request paused in a client page's session: the
// page's own document is held for its slot, anything else (a document of
// an iframe in the page's process) goes on at once.
func (fc *fetchConn) pagePaused(session string, ev *cdp.RequestPaused) {
	id := ev.RequestID
	if _, ok := ev.Outcome(nil); ok {
		fc.release(session, id) // an answer no one asked for here
		return
	}
	fc.pg.mu.Lock()
	ps := fc.pg.sessions[session]
	fc.pg.mu.Unlock()
	if ps == nil || ev.FrameID != ps.target {
		fc.release(session, id)
		fc.f.cfg.Metrics.Navigation(hold.NavUntracked, 0)
		return
	}
	fc.f.sawPause(ps.target)
	if !fc.core.Claimed(ps.target) {
		fc.release(session, id)
		fc.f.cfg.Metrics.Navigation(hold.NavForeign, 0)
		return
	}
	host, ok := limiter.Key(ev.Request.URL)
	exempt := !ok || fc.core.Exempt(host)
	if exempt && !fc.following(ev) {
		fc.release(session, id) // nothing to book, nothing to follow
		fc.core.NotBooked(ok)
		return
	}
	th, prev := fc.follow(session, ev)
	if !exempt {
		if ps := fc.sessionOf(session); ps != nil {
			fc.events(ps)
		}
	}
	if exempt {
		if prev != nil {
			prev.fl.End() // a redirect to a host that is not held: its place goes back
		}
		fc.release(session, id)
		fc.core.NotBooked(ok)
		return
	}
	th.host = host
	if prev != nil && prev.host == host {
		// A hop within the host of the hop before it books nothing, and
		// keeps its place in flight; its answer is read where the hop
		// before it was booked.
		th.booked = prev.booked
		fc.fly(th, prev.fl)
		fc.core.CheckThen(fc.held, hold.Request{Host: host, URL: ev.Request.URL, Log: hold.PageLog(&fc.log, ev.FrameID, ""), Refusable: true},
			pagesHop{fc: fc, session: session, id: id, th: th, fl: prev.fl, key: navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}})
		return
	}
	if prev != nil {
		prev.fl.End() // its answer was the redirect; the hop is a navigation of another host
	}
	th.booked = true
	fc.f.holdPage(fc, session, ev, host, th)
}

// pagesHop is a redirect hop within the host of the hop before it,
// paused in pages: it books nothing, and keeps the place in flight of
// the hop before it, where its answer is read.
type pagesHop struct {
	hold.NoHolding
	fc          *fetchConn
	session, id string
	th          *trackHop
	fl          *hold.Flight
	key         navKey
}

func (h pagesHop) Refused(r refusal.Reason) { h.fc.refuse(h.session, h.id, h.th, h.fl, r) }

func (h pagesHop) Release() {
	h.fc.f.pass(h.key, h.fc)
	h.fc.release(h.session, h.id)
}

// sessionOf returns the page session of id, nil when gone.
func (fc *fetchConn) sessionOf(id string) *pageSess {
	fc.pg.mu.Lock()
	defer fc.pg.mu.Unlock()
	return fc.pg.sessions[id]
}
