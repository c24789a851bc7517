package hold

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
)

// fetchHold holds a Chromium's navigations through two connections of the
// relay's own to its browser endpoint, with a role each:
//
//   - pages (hold_fetch_pages.go) attaches to every page and intercepts the
//     document requests of the relay's clients' pages only, in sessions of
//     its own, where it also reads their Network events: when each request
//     really left, which keeps what the site sees exact (package pace),
//     and its answer. A page no client drives is never paused.
//   - net intercepts at the browser level, where Chromium pauses a request
//     after every session has let it go. Its patterns name only what pages
//     holds, so that a request pages lets go leaves at once, and one pages
//     holds when pages is lost is handed to net by Chromium, which holds it
//     on. While pages cannot hold (not up yet, reconnecting, a client page
//     it could not arm) or a client creates a page with a URL, whose first
//     request leaves before any session can attach, net pauses every
//     document of the browser instead (wide), and holds those of the
//     relay's clients itself.
//
// Chromium puts a browser-level interceptor on a request's way only if it
// was enabled when the request started, and then every request of the
// browser passes it, which costs other clients' navigations a few ms. So
// net's Fetch is on only while the relay's clients have pages (and for
// Holder.NetLinger after their last one), or net is wide: a client's page is not
// let navigate (cover) before net is on.
//
// Losing either connection never lets a held request through: Chromium
// hands what pages held to net, and net holds nothing pages does not hold
// too unless it is wide.
type fetchHold struct {
	h     *browserHold
	pages atomic.Pointer[fetchConn]
	net   atomic.Pointer[fetchConn]
	stop  context.CancelFunc // set once by start; ends the supervisors
	wasUp atomic.Bool        // a connection has been up
	gone  atomic.Bool        // both connections dropped, which was logged; until one is back
	// tracked is how many document requests the pages connection follows
	// now (its tracks).
	tracked atomic.Int64

	netMu sync.Mutex // serialises the net connection's pattern updates: each is written in order

	mu        sync.Mutex
	held      map[navKey]*heldNav  // guarded by mu; documents of clients being held
	passed    map[navKey]passedNav // guarded by mu; documents one connection let go, expected at the other
	paused    map[string]time.Time // guarded by mu; page target → when its document request last paused
	urls      map[string]int       // guarded by mu; net's patterns: held URLs → how many held
	creating  int                  // guarded by mu; clients' page creations with a URL under way
	holes     int                  // guarded by mu; client pages pages could not arm
	wideAsked bool                 // guarded by mu; the last patterns written to net were wide
	wideSince int64                // guarded by mu; the pattern update that made net wide
	wideAcked int64                // guarded by mu; the last pattern update net answered (named for the wide one it may be)
	onAsked   bool                 // guarded by mu; the last update written to net enabled its Fetch
	onSince   int64                // guarded by mu; the update that enabled net's Fetch, 0 while off
	clientsAt time.Time            // guarded by mu; when net last saw the clients with a page
	recheck   *time.Timer          // guarded by mu; turns net's Fetch off once NetLinger is over
	netSeq    int64                // guarded by mu; pattern updates written to net
	netAcked  chan struct{}        // guarded by mu; closed and replaced when net takes an update
	netBusy   *fetchConn           // guarded by mu; the connection an update is under way on
	netDirty  bool                 // guarded by mu; what net should pause changed since that update
	confirmed bool                 // guarded by mu; no connection dropped since the others last answered
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
	session  string        // guarded by fetchHold.mu; of by, "" at the browser level
	url      string        // its URL, as net's pattern for it
	named    bool          // guarded by fetchHold.mu; net's patterns name it
	orphaned time.Time     // guarded by fetchHold.mu; when its connection dropped
	booked   chan struct{} // closed once start is known
	start    time.Time     // set before booked is closed
	fl       *flight       // set once: the navigation, whichever connection holds it
	refused  bool          // guarded by fetchHold.mu; refused, not let go: whoever holds it fails it
}

// passedNav is a document request a connection let go.
type passedNav struct {
	by *fetchConn
	at time.Time
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

// DefaultNetLinger is how long net's Fetch stays on after the relay's
// clients closed their last page (Holder.NetLinger): a client that closes
// and opens pages in a loop does not wait for it each time.
const DefaultNetLinger = 10 * time.Second

// maxNetPatterns bounds the URLs net's patterns name; with more held at
// once, net pauses every document instead.
const maxNetPatterns = 256

// maxPatternURL bounds the part of a URL a pattern names; the rest is a
// wildcard.
const maxPatternURL = 512

func newFetchHold(h *browserHold) *fetchHold {
	f := &fetchHold{
		h:      h,
		held:   make(map[navKey]*heldNav),
		passed: make(map[navKey]passedNav),
		paused: make(map[string]time.Time),
		urls:   make(map[string]int),

		netAcked: make(chan struct{}),
	}
	h.claims.onClaim = f.claimed
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
// needs (browser-level Fetch, target discovery, auto-attaching): no retry
// will change it.
type errRefused struct{ err error }

func (e errRefused) Error() string { return e.err.Error() }
func (e errRefused) Unwrap() error { return e.err }

// start opens the connections within ctx, when the browser is up, and then
// keeps them up until bg ends or stop is called. It returns an errRefused
// when the browser refuses what the relay needs; any other failure is
// retried in the background, navigations waiting meanwhile.
func (f *fetchHold) start(ctx, bg context.Context, up bool, wg *sync.WaitGroup) error {
	var first [2]*fetchConn
	if up {
		for _, role := range []connRole{roleNet, rolePages} {
			fc, err := f.connect(ctx, role)
			var refused errRefused
			if errors.As(err, &refused) {
				for _, c := range first {
					if c != nil {
						c.close()
					}
				}
				return err
			}
			if err != nil {
				f.h.holder.log.Warn().Str("upstream", f.h.up.Name()).Str("conn", role.String()).Err(err).
					Msg("the relay's own browser connection is not up: navigations wait until it is")
				continue
			}
			first[role] = fc
			f.attach(role, fc)
		}
	}
	bg, f.stop = context.WithCancel(bg)
	for _, role := range []connRole{rolePages, roleNet} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.supervise(bg, role, first[role])
		}()
	}
	return nil
}

// conn returns the connection of role, nil while it is down.
func (f *fetchHold) conn(role connRole) *fetchConn {
	if role == rolePages {
		return f.pages.Load()
	}
	return f.net.Load()
}

// connect dials a connection of role and sets it up.
func (f *fetchHold) connect(ctx context.Context, role connRole) (*fetchConn, error) {
	if role == rolePages {
		return f.connectPages(ctx)
	}
	return f.connectNet(ctx)
}

// dialDiscovering dials a connection of role with target discovery on,
// which both roles need.
func (f *fetchHold) dialDiscovering(ctx context.Context, role connRole) (*fetchConn, error) {
	fc, err := f.dial(ctx, role)
	if err != nil {
		return nil, err
	}
	if r, err := fc.call(ctx, "", "Target.setDiscoverTargets", &target.SetDiscoverTargetsParams{Discover: true}); err != nil {
		fc.close()
		return nil, refusal("browser refused target discovery", r, err, f.h.holder.Intercept)
	}
	return fc, nil
}

// connectNet dials the net connection: it discovers targets, to tell a
// page's main frame (whose id is the page's target id) from an iframe, and
// enables browser-level Fetch with the patterns in force.
func (f *fetchHold) connectNet(ctx context.Context) (*fetchConn, error) {
	fc, err := f.dialDiscovering(ctx, roleNet)
	if err != nil {
		return nil, err
	}
	mode := f.h.holder.Intercept
	f.netMu.Lock()
	f.mu.Lock()
	patterns, wide := f.patternsLocked()
	if patterns == nil {
		// Enabled once all the same, to learn that the browser can; the
		// update attach writes turns it off.
		patterns = noMatch
	}
	f.netSeq++
	seq := f.netSeq
	f.onAsked, f.onSince = true, seq
	f.mu.Unlock()
	r, err := fc.call(ctx, "", "Fetch.enable", &fetch.EnableParams{Patterns: patterns})
	if err == nil {
		f.acked(seq, wide)
	}
	f.netMu.Unlock()
	if err != nil {
		fc.close()
		return nil, refusal("browser refused browser-level Fetch", r, err, mode)
	}
	return fc, nil
}

// attach makes fc the connection of role and says whether holding is
// possible now. It reports whether fc is the first of the two up, and
// whether one had been up before.
func (f *fetchHold) attach(role connRole, fc *fetchConn) (first, before bool) {
	f.mu.Lock() // with dropped's count of those up, and the other's attach
	first = f.up() == 0
	if role == rolePages {
		f.pages.Store(fc)
	} else {
		f.net.Store(fc)
	}
	f.gone.Store(false)
	before = f.wasUp.Swap(true)
	f.mu.Unlock()
	if role == rolePages {
		// Pages claimed while it was connecting were not armed by their
		// claim: arm them now, then it holds every client page.
		fc.armClaimed(fc.held)
		fc.mu.Lock()
		fc.ready = true
		fc.mu.Unlock()
	}
	f.mu.Lock()
	f.confirmed = true
	f.mu.Unlock()
	f.updateNet() // with pages ready, net needs only what it holds
	f.rearm()
	return first, before
}

// supervise keeps the connection of role up until ctx ends; fc nil starts
// by connecting.
func (f *fetchHold) supervise(ctx context.Context, role connRole, fc *fetchConn) {
	reconnected := false
	for {
		if fc != nil {
			if f.conn(role) != fc {
				// Said once, by the first of the two back (both may be
				// reconnecting at once).
				first, before := f.attach(role, fc)
				switch {
				case reconnected && first && before:
					f.h.holder.log.Info().Str("upstream", f.h.up.Name()).Msg("the relay's browser connection is back: holding navigations again")
				case reconnected && first:
					f.h.holder.log.Info().Str("upstream", f.h.up.Name()).Msg("the relay's own browser connection is up: holding navigations")
				}
			}
			fc.keepalive(ctx, f.h.holder.PingInterval, f.h.holder.WriteTimeout)
			if role == rolePages {
				f.pages.Store(nil)
			} else {
				f.net.Store(nil)
			}
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
			cctx, cancel := context.WithTimeout(ctx, min(f.h.holder.StartTimeout, 10*time.Second))
			next, err := f.connect(cctx, role)
			cancel()
			var refused errRefused
			switch {
			case err == nil:
				fc = next
			case errors.As(err, &refused) && f.h.holder.Intercept == InterceptAuto:
				f.h.fallOver(err.Error())
				return
			case errors.Is(err, errSilent) && f.h.holder.Intercept == InterceptAuto:
				if silent++; silent >= maxSilent {
					f.h.fallOver(err.Error())
					return
				}
				f.h.holder.log.Debug().Err(err).Str("conn", role.String()).Msg("browser did not answer the relay's own connection")
			default:
				silent = 0
				f.h.holder.log.Debug().Err(err).Str("conn", role.String()).Msg("browser still unreachable")
			}
		}
		reconnected = true
	}
}

// up reports how many of the relay's connections are up.
func (f *fetchHold) up() int {
	n := 0
	if f.pages.Load() != nil {
		n++
	}
	if f.net.Load() != nil {
		n++
	}
	return n
}

// upSince reports whether one of the relay's connections has been up since
// before t, and still is.
func (f *fetchHold) upSince(t time.Time) bool {
	for _, fc := range []*fetchConn{f.pages.Load(), f.net.Load()} {
		if fc != nil && fc.since.Before(t) {
			return true
		}
	}
	return false
}

// isUp reports whether fc is one of the relay's connections that are up.
func (f *fetchHold) isUp(fc *fetchConn) bool {
	return fc != nil && (f.pages.Load() == fc || f.net.Load() == fc)
}

// pagesReady reports whether the pages connection holds the documents of
// every client page.
func (f *fetchHold) pagesReady() bool {
	fc := f.pages.Load()
	if fc == nil {
		return false
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.ready && !fc.closed
}

// wideLocked reports whether net must pause every document. Callers hold
// mu.
func (f *fetchHold) wideLocked() bool {
	return f.creating > 0 || f.holes > 0 || len(f.urls) > maxNetPatterns || !f.pagesReady()
}

// noMatch is a pattern no request matches: net's Fetch stays on, so that
// a request of a client's page that starts now passes it, and can be held
// there later.
var noMatch = []*fetch.RequestPattern{{URLPattern: "cdp-throttle:none", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest}}

// patternsLocked returns net's patterns: every document, the URLs held, or
// none (nil: Fetch off) while no client has a page. Callers hold mu.
func (f *fetchHold) patternsLocked() ([]*fetch.RequestPattern, bool) {
	if f.wideLocked() {
		return documentPattern, true
	}
	if len(f.urls) == 0 {
		if !f.clientsLocked() {
			return nil, false
		}
		return noMatch, false
	}
	out := make([]*fetch.RequestPattern, 0, len(f.urls))
	for u := range f.urls {
		out = append(out, &fetch.RequestPattern{URLPattern: u, ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest})
	}
	return out, false
}

// clientsLocked reports whether net's Fetch must be on for the relay's
// clients: they have a page, or had one within Holder.NetLinger, after which it
// looks again. Callers hold mu.
func (f *fetchHold) clientsLocked() bool {
	if !f.h.holder.HoldBackup {
		return false
	}
	now := time.Now()
	if f.h.claims.any() {
		f.clientsAt = now
		return true
	}
	left := f.h.holder.NetLinger - now.Sub(f.clientsAt)
	if left <= 0 {
		return false
	}
	if f.recheck == nil {
		f.recheck = time.AfterFunc(left, func() {
			f.mu.Lock()
			f.recheck = nil
			f.mu.Unlock()
			f.updateNet()
		})
	}
	return true
}

// urlPattern is the Fetch pattern that matches rawURL: wildcards and the
// escape character escaped, and a wildcard for what is past maxPatternURL.
func urlPattern(rawURL string) string {
	tail := ""
	if len(rawURL) > maxPatternURL {
		rawURL, tail = rawURL[:maxPatternURL], "*"
	}
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`).Replace(rawURL) + tail
}

// updateNet writes net's patterns as they should be now (or turns its
// Fetch off). One update
// is under way at a time: while one is, the next waits for its answer and
// then carries the patterns of that moment, so that a crawl of many held
// navigations writes what changed, not every change. They reach the
// browser in order.
func (f *fetchHold) updateNet() {
	f.netMu.Lock()
	defer f.netMu.Unlock()
	nc := f.net.Load()
	if nc == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.netBusy == nc {
		f.netDirty = true
		return
	}
	f.writeNetLocked(nc)
}

// writeNetLocked writes net's patterns to nc. Callers hold netMu and mu.
func (f *fetchHold) writeNetLocked(nc *fetchConn) {
	patterns, wide := f.patternsLocked()
	on := patterns != nil
	if !on && !f.onAsked {
		return // off, and net knows
	}
	f.wideAsked = wide
	f.netSeq++
	seq := f.netSeq
	if wide && f.wideSince == 0 {
		f.wideSince = seq
	}
	if !wide {
		f.wideSince = 0
	}
	if on && !f.onAsked {
		f.onSince = seq
	}
	if !on {
		f.onSince = 0
	}
	f.onAsked = on
	f.netBusy, f.netDirty = nc, false
	method, params := "Fetch.enable", any(&fetch.EnableParams{Patterns: patterns})
	if !on {
		method, params = "Fetch.disable", struct{}{}
	}
	_, err := nc.send("", method, params, func(r reply) {
		if r.err == nil && r.result != nil {
			f.acked(seq, wide)
		}
		f.netMu.Lock()
		f.mu.Lock()
		if f.netBusy == nc {
			f.netBusy = nil
			if f.netDirty && f.net.Load() == nc {
				f.writeNetLocked(nc)
			}
		}
		f.mu.Unlock()
		f.netMu.Unlock()
	})
	if err != nil {
		f.netBusy = nil
		if !errors.Is(err, errConnClosed) {
			nc.log.Debug().Err(err).Msg("updating the relay's browser-level patterns failed")
		}
	}
}

// acked notes that net took pattern update seq.
func (f *fetchHold) acked(seq int64, wide bool) {
	f.mu.Lock()
	f.wideAcked = max(f.wideAcked, seq)
	if wide && f.wideSince == 0 {
		f.wideSince = seq
	}
	close(f.netAcked)
	f.netAcked = make(chan struct{})
	f.mu.Unlock()
	if wide {
		f.rearm()
	}
}

// netWide reports whether net pauses every document now: it took the
// update that made it wide, and no narrower one was written since.
func (f *fetchHold) netWideLocked() bool {
	return f.net.Load() != nil && f.wideAsked && f.wideSince > 0 && f.wideAcked >= f.wideSince
}

// netOnLocked reports whether net's Fetch is on: net took the update that
// enabled it, and none turned it off since. Callers hold mu.
func (f *fetchHold) netOnLocked() bool {
	return f.net.Load() != nil && f.onAsked && f.onSince > 0 && f.wideAcked >= f.onSince
}

// netCovering turns net's Fetch on for a client's page, and returns a
// channel closed once it is on, or net is down (pages holds alone then),
// within coverWait. Nil means it is on already.
func (f *fetchHold) netCovering() <-chan struct{} {
	if !f.h.holder.HoldBackup {
		return nil
	}
	f.mu.Lock()
	ok := f.net.Load() == nil || f.netOnLocked()
	f.mu.Unlock()
	if ok {
		return nil
	}
	f.updateNet()
	return f.whenNet(func() bool { return f.net.Load() == nil || f.netOnLocked() }, coverWait)
}

// whenNet returns a channel closed once ok, asked under mu, holds (asked
// again each time net takes an update), or within is over.
func (f *fetchHold) whenNet(ok func() bool, within time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	f.h.holder.limiting.Add(1)
	go func() {
		defer f.h.holder.limiting.Done()
		defer close(ch)
		t := time.NewTimer(within)
		defer t.Stop()
		for {
			f.mu.Lock()
			done, changed := ok(), f.netAcked
			f.mu.Unlock()
			if done {
				return
			}
			select {
			case <-t.C:
				return
			case <-changed:
			}
		}
	}()
	return ch
}

// rearm says whether navigations can be held now: pages holds every client
// page, or net pauses every document; and no connection dropped since the
// other one last answered.
func (f *fetchHold) rearm() {
	f.mu.Lock()
	ok := f.confirmed && (f.pagesReady() || f.netWideLocked())
	f.mu.Unlock()
	f.h.setArmed(ok)
}

// uncovered notes n more (or, negative, fewer) client pages that the
// pages connection could not arm: net covers them by pausing everything.
func (f *fetchHold) uncovered(n int) {
	f.mu.Lock()
	f.holes = max(f.holes+n, 0)
	f.mu.Unlock()
	f.updateNet()
	f.rearm()
}

// relayAttached reports whether the relay's pages connection is attached
// to target (to every client page, and to other pages only while deciding).
func (f *fetchHold) relayAttached(target string) bool {
	fc := f.pages.Load()
	if fc == nil {
		return false
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	_, ok := fc.byTarget[target]
	return ok
}

// claimed arms a page a client has just claimed, in the pages connection,
// and turns net's Fetch on.
func (f *fetchHold) claimed(target string) {
	if fc := f.pages.Load(); fc != nil {
		fc.cover(target, false)
	}
	f.netCovering()
}

// cover returns a channel closed once a page a client drives is held
// wherever it navigates: the pages connection armed it and net's Fetch is
// on to take it over, or net pauses every document. Nil means there is
// nothing to wait for.
//
// A client about to navigate the page (navigates) also has the page's
// Network events read: from its own session when it enabled them, else
// the relay's session enables them now, before the navigation starts (a
// request that started before they were on never shows in them).
func (f *fetchHold) cover(target string, navigates bool) <-chan struct{} {
	var ch <-chan struct{}
	if fc := f.pages.Load(); fc != nil {
		ch = fc.cover(target, navigates)
	}
	if ch == nil && !f.h.isArmed() {
		ch = f.h.whenArmed()
	}
	return both(ch, f.netCovering())
}

// both returns a channel closed once a and b are (nil ones count as
// closed), or coverWait is over; nil if both are nil.
func both(a, b <-chan struct{}) <-chan struct{} {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		t := time.NewTimer(coverWait)
		defer t.Stop()
		for _, c := range []<-chan struct{}{a, b} {
			select {
			case <-c:
			case <-t.C:
				return
			}
		}
	}()
	return ch
}

// creatingLinger is how long net stays wide after a client's page created
// with a URL was created: its first request is paused by then.
const creatingLinger = time.Second

// creatingWithURL notes a client creating a page with a URL: its first
// request leaves before any session can attach to it, so net pauses every
// document until done is called. It returns a channel closed once net
// does.
func (f *fetchHold) creatingWithURL() (covered <-chan struct{}, done func()) {
	f.mu.Lock()
	f.creating++
	f.mu.Unlock()
	f.updateNet()
	var once sync.Once
	done = func() {
		// The page's first request may reach net after the answer that
		// ends the creation, and narrowing net may turn its Fetch off,
		// which lets what it paused go: net stays wide a moment longer.
		once.Do(func() {
			time.AfterFunc(creatingLinger, func() {
				f.mu.Lock()
				f.creating--
				f.mu.Unlock()
				f.updateNet()
			})
		})
	}
	// Without net, navigations wait for a connection anyway (armed).
	return f.whenNet(func() bool { return f.netWideLocked() || f.net.Load() == nil }, claimWait), done
}

// dropped handles a connection that ended: what pages held the browser
// hands to net; what net does not get within orphanWait went to the
// network unheld.
func (f *fetchHold) dropped(fc *fetchConn) {
	if f.h.via() != viaFetch || f.h.holder.closing.Load() {
		f.endFlights() // no answer of a navigation followed here will come
		return         // stopped on purpose: navigations are held another way now, or not at all
	}
	// What cut one connection may have cut the other, unnoticed yet:
	// navigations wait until the other one answers.
	f.mu.Lock()
	f.confirmed = false
	f.mu.Unlock()
	f.h.setArmed(false)
	if fc.role == rolePages {
		f.updateNet() // net holds everything while pages is away
	}
	now := time.Now()
	f.mu.Lock()
	others := f.up()
	// Both went: the browser stopped (a normal shutdown looks the same on
	// the wire as a crash), restarts, or was cut off. Said once, though
	// each connection may find itself the last.
	gone := others == 0 && f.gone.CompareAndSwap(false, true)
	// What fc let go can no longer reach the other connection as an echo
	// (but for a request under way this very moment): a request with the
	// same frame and URL that reaches net from now on is a new one.
	for k, p := range f.passed {
		if p.by == fc {
			delete(f.passed, k)
		}
	}
	held := 0
	var lost []string // with no connection left, what any of them held is gone
	for k, hn := range f.held {
		switch {
		case others == 0 && !f.isUp(hn.by):
			delete(f.held, k)
			if hn.named {
				f.dropURLLocked(hn.url)
			}
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
	if others == 0 {
		if gone {
			f.h.holder.log.Warn().Str("upstream", f.h.up.Name()).Int("held", len(lost)).
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
		if f.confirm() && !f.h.holder.closing.Load() {
			f.h.holder.log.Info().Str("upstream", f.h.up.Name()).Str("conn", fc.role.String()).Int("held", held).
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
				if hn.named {
					f.dropURLLocked(hn.url)
				}
				lost = append(lost, k.frame)
				hn.fl.end()
			}
		}
		f.mu.Unlock()
		f.updateNet()
		f.countLost(lost)
	})
}

// endReleased ends the navigations whose answer net connection fc was to
// read: those it let go. Those it still held go on to the relay's other
// connection. (The pages connection's are ended as it ends: endAllTracks.)
func (fc *fetchConn) endReleased() {
	fc.mu.Lock()
	var fls []*flight
	for _, hp := range fc.hops {
		fls = append(fls, hp.fl)
	}
	fc.mu.Unlock()
	fc.f.endUnheld(fls)
}

// endUnheld ends the navigations of fls that are not held: their
// connection is gone, and with it what it was to read of them. Those it
// held go on to the relay's other connection, and so do those the browser
// handed over before the relay saw it go (held by the other one already).
func (f *fetchHold) endUnheld(fls []*flight) {
	f.mu.Lock()
	held := make(map[*flight]bool)
	for _, hn := range f.held {
		held[hn.fl] = true
	}
	f.mu.Unlock()
	for _, fl := range fls {
		if !held[fl] {
			fl.end()
		}
	}
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
	for _, fc := range []*fetchConn{f.net.Load(), f.pages.Load()} {
		if fc == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(fc.held, orphanWait)
		r, err := fc.call(ctx, "", "Target.getTargetInfo", map[string]string{"targetId": target})
		cancel()
		return err == nil || r == nil
	}
	return true
}

// confirm arms holding again once one of the relay's connections answers.
func (f *fetchHold) confirm() bool {
	for _, fc := range []*fetchConn{f.pages.Load(), f.net.Load()} {
		if fc == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(fc.held, time.Second)
		_, err := fc.call(ctx, "", "Target.getTargets", struct{}{})
		cancel()
		if err == nil && f.isUp(fc) {
			f.mu.Lock()
			f.confirmed = true
			f.mu.Unlock()
			f.rearm()
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

// addURLLocked adds a held URL to net's patterns. Callers hold mu.
func (f *fetchHold) addURLLocked(rawURL string) {
	f.urls[urlPattern(rawURL)]++
}

// dropURLLocked takes a held URL out of net's patterns. Callers hold mu.
func (f *fetchHold) dropURLLocked(rawURL string) {
	p := urlPattern(rawURL)
	if f.urls[p]--; f.urls[p] <= 0 {
		delete(f.urls, p)
	}
}

// holdPage holds a client page's document request paused in the pages
// connection's session: net's patterns name it while it waits, so that
// losing pages hands it to net.
func (f *fetchHold) holdPage(fc *fetchConn, session string, ev *cdp.RequestPaused, host string, th *trackHop) {
	id := ev.RequestID
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	fl := f.newFlight()
	fc.fly(th, fl)
	hn := &heldNav{by: fc, session: session, url: ev.Request.URL, booked: make(chan struct{}), fl: fl}
	f.mu.Lock()
	if old := f.held[key]; old != nil && old.named {
		f.dropURLLocked(old.url) // one of a browser that died: forgotten
	}
	f.held[key] = hn
	f.mu.Unlock()
	context.AfterFunc(fl.ctx, func() { f.forget(key, hn) })
	booked := func(start time.Time, nav *pace.Nav) {
		hn.start = start
		close(hn.booked)
		fc.booked(th, nav)
	}
	waits := func() {
		// Net's patterns name it while it waits, so that losing pages
		// hands it to net. (One that goes at once is let go before an
		// update could reach the browser: pages lost while it is being
		// booked lets it out, counted unheld.)
		if !f.h.holder.HoldBackup {
			return // net is off: losing pages lets it go (counted)
		}
		f.mu.Lock()
		if f.held[key] == hn && !hn.named {
			hn.named = true
			f.addURLLocked(hn.url)
		}
		f.mu.Unlock()
		f.updateNet()
	}
	// The wait for a place in flight lasts as long as the navigation, the
	// one for its slot as long as this connection: when it drops, net gets
	// the request and holds it on hn.
	refuse := func() {
		f.mu.Lock()
		hn.refused = true // handed to net meanwhile: net fails it (handedOver)
		f.mu.Unlock()
		fc.refuse(session, id, th, fl)
	}
	f.h.holdNav(fc.held, fl, host, ev.Request.URL, pageLog(&fc.log, ev.FrameID, ""), true, booked, waits, refuse, func() { f.let(fc, key, hn, session, id) })
}

// forget drops a held request whose navigation ended before its release
// (its page went, a later navigation replaced it, the browser was lost
// while it waited for a place in flight): net's patterns stop naming it.
// After a release it finds nothing to do.
func (f *fetchHold) forget(key navKey, hn *heldNav) {
	f.mu.Lock()
	if f.held[key] != hn {
		f.mu.Unlock()
		return
	}
	delete(f.held, key)
	named := hn.named
	if named {
		f.dropURLLocked(hn.url)
		hn.named = false
	}
	f.mu.Unlock()
	if named {
		f.updateNet()
	}
}

// let releases a held document request from the connection that holds it
// now. Released from pages, it is taken out of net's patterns first, so
// that it goes straight to the network (noted for net when net may pause
// it all the same); released from net, its answer is asked for.
func (f *fetchHold) let(fc *fetchConn, key navKey, hn *heldNav, session, id string) {
	f.mu.Lock()
	if hn.by != fc || !hn.orphaned.IsZero() {
		// Handed on by the browser, and the connection that has it now
		// lets it go; or fc dropped, and the browser let it go unless it
		// hands it on: dropped counts it then.
		f.mu.Unlock()
		return
	}
	named := hn.named
	if f.held[key] == hn {
		delete(f.held, key)
		if named {
			f.dropURLLocked(hn.url)
			hn.named = false
		}
	}
	// Net may pause it all the same (the browser applies the update that
	// drops it after the release, or net pauses every document): it then
	// lets it go at once.
	f.passLocked(key, fc, time.Now())
	f.mu.Unlock()
	if fc.role == roleNet {
		fc.continueRequest("", id, true)
		return
	}
	if named {
		f.updateNet()
	}
	fc.release(session, id)
}

// pass notes a document request fc let go at once, for the other
// connection, when the other may pause it.
func (f *fetchHold) pass(key navKey, fc *fetchConn) {
	f.mu.Lock()
	f.passLocked(key, fc, time.Now())
	f.mu.Unlock()
}

// maxPassed bounds the documents remembered as let go; they matter for
// echoWindow only.
const maxPassed = 4096

func (f *fetchHold) passLocked(key navKey, fc *fetchConn, now time.Time) {
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
	f.passed[key] = passedNav{by: fc, at: now}
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
	f.updateNet() // the clients' last page may have gone: net's Fetch goes off after NetLinger
}

// The net connection: browser-level pauses.

// paused handles one document request paused at the browser level (net).
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
		fc.release("", id)
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
		fc.release("", id)
		fc.h.holder.Metrics.Navigation(NavUntracked, 0)
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
	r, err := fc.call(ctx, "", "Target.getTargetInfo", &target.GetTargetInfoParams{TargetID: target.ID(frame)})
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
	fc.release("", ev.RequestID)
	fc.h.holder.Metrics.Navigation(NavUntracked, 0)
}

// claimWait bounds how long a page's first request waits to learn whether
// a client is creating that page.
const claimWait = 3 * time.Second

// decide holds a page's document request when the page is a client's, and
// lets it go at once otherwise.
func (fc *fetchConn) decide(ev *cdp.RequestPaused) {
	fc.f.sawPause(ev.FrameID)
	// A request held by pages that reaches net was handed over: pages is
	// gone, though the relay may not know yet (a frame's earlier request
	// let go by pages, with the same URL, is cancelled by the held one).
	if fc.f.handedOver(fc, ev) || fc.f.echo(fc, ev) {
		return
	}
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
	fc.release("", ev.RequestID)
	fc.h.holder.Metrics.Navigation(NavForeign, 0)
}

// ours holds a document request of a client's page for its slot.
func (fc *fetchConn) ours(ev *cdp.RequestPaused) {
	host, ok := limiter.Key(ev.Request.URL)
	if !ok || fc.h.exempt(host) {
		if prev, redirected := fc.hopFor(ev); redirected {
			prev.fl.end() // a redirect to a host that is not held: its place goes back
		}
		fc.release("", ev.RequestID)
		fc.h.notBooked(ok)
		return
	}
	fc.f.holdNet(fc, ev, host)
}

// echo lets go at once a request the pages connection let go a moment ago,
// which net pauses all the same: the browser applied the update that
// dropped it from net's patterns after the release (net's pauses are
// decided apart from its answers, so the order on its socket does not
// tell), or net pauses every document. It reports whether it did. While
// pages is up, a client page's request reaches net only past pages: one
// with a frame and URL pages let go is that one. Pages' entries go when
// it does.
func (f *fetchHold) echo(fc *fetchConn, ev *cdp.RequestPaused) bool {
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	f.mu.Lock()
	p, ok := f.passed[key]
	if !ok || p.by == fc || !fc.since.Before(p.at) || time.Since(p.at) >= echoWindow {
		f.mu.Unlock()
		return false
	}
	delete(f.passed, key)
	f.mu.Unlock()
	fc.release("", ev.RequestID)
	return true
}

// handedOver holds on a request that the connection holding it let go by
// dropping (the relay may not have noticed yet), which the browser handed
// to fc: until the slot already booked. It reports whether the request
// was one. A connection that came up since cannot be handed anything: the
// request is then one of a browser that died, and this one is new.
func (f *fetchHold) handedOver(fc *fetchConn, ev *cdp.RequestPaused) bool {
	id := ev.RequestID
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	f.mu.Lock()
	hn, ok := f.held[key]
	if !ok || hn.by == fc || !hn.orphaned.IsZero() && !fc.since.Before(hn.orphaned) {
		f.mu.Unlock()
		return false
	}
	hn.by, hn.session = fc, ""
	hn.orphaned = time.Time{}
	f.mu.Unlock()
	host, _ := limiter.Key(ev.Request.URL)
	fc.hopFor(ev)
	fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: true, fl: hn.fl})
	f.h.holder.limiting.Add(1)
	go func() {
		defer f.h.holder.limiting.Done()
		select {
		case <-hn.booked:
		case <-fc.held.Done():
			return
		case <-hn.fl.ctx.Done(): // its page went while it waited, or it was refused
			f.mu.Lock()
			refused := hn.refused
			f.mu.Unlock()
			if refused {
				fc.refuse("", id, nil, hn.fl)
			}
			return
		}
		if late := time.Since(hn.start); late > handOverLate {
			// Its slot went by while the browser handed it over: going now
			// would come too close to the navigation after it. It takes
			// the next slot instead.
			log := pageLog(&fc.log, ev.FrameID, "")
			log.Debug().Str("host", host).Float64("late_ms", limiter.ShownMillis(late)).Msg("handed-over navigation booked again")
			f.h.holdNav(fc.held, hn.fl, host, ev.Request.URL, log, false, nil, nil, nil, func() { f.let(fc, key, hn, "", id) })
			return
		}
		f.h.holdUntil(fc.held, hn.fl, hn.start, func() { f.let(fc, key, hn, "", id) }, nil)
	}()
	return true
}

// holdNet books and holds a client page's document request paused at the
// browser level, while net pauses every document.
func (f *fetchHold) holdNet(fc *fetchConn, ev *cdp.RequestPaused, host string) {
	id := ev.RequestID
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	prev, redirected := fc.hopFor(ev)

	f.mu.Lock()
	if redirected && prev.host == host {
		// A hop within the host of the hop before it books nothing, and
		// keeps that hop's place in flight.
		f.passLocked(key, fc, time.Now())
		f.mu.Unlock()
		fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: prev.booked, fl: prev.fl})
		refuse := func() {
			fc.setHop(id, hop{host: host, frame: ev.FrameID, fl: prev.fl})
			fc.refuse("", id, nil, prev.fl)
		}
		f.h.checkThen(fc.held, host, ev.Request.URL, pageLog(&fc.log, ev.FrameID, ""), refuse, func() {
			fc.continueRequest("", id, prev.booked) // the answer is read where the hop before was booked
		})
		return
	}
	f.mu.Unlock()
	if redirected {
		prev.fl.end() // its answer was the redirect; the hop is a navigation of another host
	}
	fl := f.newFlight()
	f.mu.Lock()
	hn := &heldNav{by: fc, url: ev.Request.URL, booked: make(chan struct{}), named: true, fl: fl}
	if old := f.held[key]; old != nil && old.named {
		f.dropURLLocked(old.url) // one of a browser that died: forgotten
	}
	f.held[key] = hn
	f.addURLLocked(hn.url)
	f.mu.Unlock()
	context.AfterFunc(fl.ctx, func() { f.forget(key, hn) })
	fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: true, fl: fl})
	booked := func(start time.Time, _ *pace.Nav) {
		hn.start = start
		close(hn.booked)
	}
	refuse := func() {
		fc.setHop(id, hop{host: host, frame: ev.FrameID, fl: fl})
		fc.refuse("", id, nil, fl)
	}
	f.h.holdNav(fc.held, fl, host, ev.Request.URL, pageLog(&fc.log, ev.FrameID, ""), false, booked, nil, refuse, func() { f.let(fc, key, hn, "", id) })
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

func isRedirect(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}
