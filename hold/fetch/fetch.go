// Package fetch holds a Chromium's navigations through two connections of
// the relay's own to the browser endpoint, pausing every document request
// of the relay's clients' pages with Fetch, however the navigation
// started (fetchHold says how). It is one of the ways of package hold
// (hold.Ways.Fetch).
package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/target"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// fetchHold holds a Chromium's navigations through two connections of the
// relay's own to its browser endpoint, with a role each:
//
//   - pages (pages.go) attaches to every page and intercepts the
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
	core  hold.FetchCore     // what it asks of holding
	cfg   hold.FetchSettings // set once by New: what it reads of the Holder
	pages atomic.Pointer[fetchConn]
	net   atomic.Pointer[fetchConn]
	stop  context.CancelFunc // set once by start; ends the supervisors
	wasUp atomic.Bool        // a connection has been up
	gone  atomic.Bool        // both connections dropped, which was logged; until one is back
	// tracked is how many document requests the pages connection follows
	// now (its tracks).
	tracked atomic.Int64

	// np is what was asked of net's Fetch patterns and what net took
	// (net.go); its mutex comes before mu in hold.go's lock order.
	np netPatterns

	// mu guards the fields below and heldNav's; it comes after np.mu, before
	// the connections' wmu and mu and the flights' (hold.go's lock order).
	mu        lockorder.Mutex[hold.RankFetch]
	held      map[navKey]*heldNav  // guarded by mu; documents of clients being held
	passed    map[navKey]passedNav // guarded by mu; documents one connection let go, expected at the other
	paused    map[string]time.Time // guarded by mu; page target → when its document request last paused
	gonePages []gonePage           // guarded by mu; pages destroyed in the last pausedLinger, oldest first
	urls      map[string]int       // guarded by mu; net's patterns: held URLs → how many held
	creating  int                  // guarded by mu; clients' page creations with a URL under way
	holes     int                  // guarded by mu; client pages pages could not arm
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
	by       *fetchConn      // guarded by fetchHold.mu; the connection holding it
	session  string          // guarded by fetchHold.mu; of by, "" at the browser level
	url      string          // its URL, as net's pattern for it
	named    bool            // guarded by fetchHold.mu; net's patterns name it
	orphaned time.Time       // guarded by fetchHold.mu; when its connection dropped
	booked   chan struct{}   // closed once start is known
	start    time.Time       // set before booked is closed
	fl       *hold.Flight    // set once: the navigation, whichever connection holds it
	refused  *refusal.Reason // guarded by fetchHold.mu; refused, not let go: whoever holds it answers it so
}

// gonePage is a page destroyed at a time, whose last pause is still kept.
type gonePage struct {
	frame string
	at    time.Time
}

// passedNav is a document request a connection let go.
type passedNav struct {
	by *fetchConn
	at time.Time
}

// New is the Fetch way of holding the navigations of one Chromium
// (hold.Ways.Fetch).
func New(c hold.FetchCore) hold.FetchWay {
	f := &fetchHold{
		core:   c,
		cfg:    c.Settings(),
		held:   make(map[navKey]*heldNav),
		passed: make(map[navKey]passedNav),
		paused: make(map[string]time.Time),
		urls:   make(map[string]int),
	}
	f.np = netPatterns{f: f, taken: make(chan struct{})}
	c.Claims().OnClaim = f.claimed
	f.life, f.endLife = context.WithCancel(context.Background())
	return f
}

// newFlight starts following a navigation held by the relay's own
// connections: it lives until its end is seen, or the browser is lost.
func (f *fetchHold) newFlight() *hold.Flight {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.core.NewFlight(f.life)
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

// Start opens the connections within ctx, when the browser is up, and then
// keeps them up until bg ends or stop is called. It returns an errRefused
// when the browser refuses what the relay needs; any other failure is
// retried in the background, navigations waiting meanwhile.
func (f *fetchHold) Start(ctx, bg context.Context, up bool, wg *sync.WaitGroup) error {
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
				f.cfg.Log.Warn().Str("upstream", f.core.Upstream().Name()).Str("conn", role.String()).Err(err).
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
		return nil, refusedOrSilent("browser refused target discovery", r, err, f.cfg.Intercept)
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
	mode := f.cfg.Intercept
	r, err := f.np.enable(ctx, fc)
	if err != nil {
		fc.close()
		return nil, refusedOrSilent("browser refused browser-level Fetch", r, err, mode)
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
		fc.pg.ready.Store(true)
	}
	f.mu.Lock()
	f.confirmed = true
	f.mu.Unlock()
	f.np.update() // with pages ready, net needs only what it holds
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
					f.cfg.Log.Info().Str("upstream", f.core.Upstream().Name()).Msg("the relay's browser connection is back: holding navigations again")
				case reconnected && first:
					f.cfg.Log.Info().Str("upstream", f.core.Upstream().Name()).Msg("the relay's own browser connection is up: holding navigations")
				}
			}
			fc.keepalive(ctx, f.cfg.PingInterval, f.cfg.WriteTimeout)
			if role == rolePages {
				f.pages.Store(nil)
			} else {
				f.net.Store(nil)
				f.np.wake() // those waiting for net to take an update: it never will
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
			cctx, cancel := context.WithTimeout(ctx, min(f.cfg.StartTimeout, 10*time.Second))
			next, err := f.connect(cctx, role)
			cancel()
			var refused errRefused
			switch {
			case err == nil:
				fc = next
			case errors.As(err, &refused) && f.cfg.Intercept == hold.InterceptAuto:
				f.core.FallOver(err.Error())
				return
			case errors.Is(err, errSilent) && f.cfg.Intercept == hold.InterceptAuto:
				if silent++; silent >= maxSilent {
					f.core.FallOver(err.Error())
					return
				}
				f.cfg.Log.Debug().Err(err).Str("conn", role.String()).Msg("browser did not answer the relay's own connection")
			default:
				silent = 0
				f.cfg.Log.Debug().Err(err).Str("conn", role.String()).Msg("browser still unreachable")
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
	return fc.pg.ready.Load() && !fc.closed
}

// wideLocked reports whether net must pause every document. Callers hold
// mu.
func (f *fetchHold) wideLocked() bool {
	return f.creating > 0 || f.holes > 0 || len(f.urls) > maxNetPatterns || !f.pagesReady()
}

// rearm says whether navigations can be held now: pages holds every client
// page, or net pauses every document; and no connection dropped since the
// other one last answered.
func (f *fetchHold) rearm() {
	f.mu.Lock()
	ok := f.confirmed && (f.pagesReady() || f.np.wide())
	f.mu.Unlock()
	f.core.SetArmed(ok)
}

// uncovered notes n more (or, negative, fewer) client pages that the
// pages connection could not arm: net covers them by pausing everything.
func (f *fetchHold) uncovered(n int) {
	f.mu.Lock()
	f.holes = max(f.holes+n, 0)
	f.mu.Unlock()
	f.np.update()
	f.rearm()
}

// relayAttached reports whether the relay's pages connection is attached
// to target (to every client page, and to other pages only while deciding).
func (f *fetchHold) relayAttached(target string) bool {
	fc := f.pages.Load()
	if fc == nil {
		return false
	}
	fc.pg.mu.Lock()
	defer fc.pg.mu.Unlock()
	_, ok := fc.pg.byTarget[target]
	return ok
}

// claimed arms a page a client has just claimed, in the pages connection,
// and turns net's Fetch on.
func (f *fetchHold) claimed(target string) {
	if fc := f.pages.Load(); fc != nil {
		fc.cover(target, false)
	}
	f.np.covering()
}

// Cover returns a channel closed once a page a client drives is held
// wherever it navigates: the pages connection armed it and net's Fetch is
// on to take it over, or net pauses every document. Nil means there is
// nothing to wait for.
//
// A client about to navigate the page (navigates) also has the page's
// Network events read: from its own session when it enabled them, else
// the relay's session enables them now, before the navigation starts (a
// request that started before they were on never shows in them).
func (f *fetchHold) Cover(target string, navigates bool) <-chan struct{} {
	var ch <-chan struct{}
	if fc := f.pages.Load(); fc != nil {
		ch = fc.cover(target, navigates)
	}
	if ch == nil && !f.core.IsArmed() {
		ch = f.core.WhenArmed()
	}
	return both(ch, f.np.covering())
}

// both returns a channel closed once a and b are (nil ones count as
// closed), or CoverWait is over; nil if both are nil.
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
		t := time.NewTimer(hold.CoverWait)
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

// CreatingWithURL notes a client creating a page with a URL: its first
// request leaves before any session can attach to it, so net pauses every
// document until done is called. It returns a channel closed once net
// does.
func (f *fetchHold) CreatingWithURL() (covered <-chan struct{}, done func()) {
	f.mu.Lock()
	f.creating++
	f.mu.Unlock()
	f.np.update()
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
				f.np.update()
			})
		})
	}
	// Without net, navigations wait for a connection anyway (armed).
	return f.np.when(func() bool { return f.np.wide() || f.net.Load() == nil }, hold.ClaimWait), done
}

// Unattached rewrites a target's info that says it is attached only
// because the relay's own connection is (Fetch mode attaches the relay to
// its clients' pages): a client sees it attached as it would without the
// relay, by none of the relay's clients; chromedp, for one, takes only an
// unattached target for a new one. It reports false when msg is as it
// should be (hold.FetchWay).
func (f *fetchHold) Unattached(params, msg []byte) ([]byte, bool) {
	attached := []byte(`"attached":true`)
	if !bytes.Contains(msg, attached) {
		return nil, false
	}
	// The id alone tells most: the relay attaches to pages only, so a
	// target it is attached to is a page.
	id, ok := cdp.LeadingTargetID(params)
	target := string(id)
	if !ok {
		ti, ok := cdp.ReadTargetInfo(params)
		if !ok || ti.Type != "page" {
			return nil, false
		}
		target = ti.TargetID
	}
	if !f.relayAttached(target) || f.core.ClientsOn(target) > 0 {
		return nil, false
	}
	return bytes.Replace(msg, attached, []byte(`"attached":false`), 1), true
}

// CheckNavigate confirms that the relay's own connection saw the document
// request of a page's Page.navigate: a browser that acknowledges Fetch and
// never pauses would leave every navigation unheld. msg is the answer to
// the Page.navigate of a client's page, sent at (hold.FetchWay).
func (f *fetchHold) CheckNavigate(page string, at time.Time, msg []byte) {
	if !f.core.InFetch() || hold.PartOff("pauses") {
		return
	}
	result, e, _ := cdp.ReadReply(msg)
	var r struct {
		LoaderID  string `json:"loaderId"`
		ErrorText string `json:"errorText"`
	}
	if e != nil || json.Unmarshal(result, &r) != nil || r.LoaderID == "" || r.ErrorText != "" {
		return // no new document: nothing went to the network
	}
	if f.pausedSince(page, at) {
		return
	}
	if !f.upSince(at) {
		// The relay's connections went away meanwhile: the browser let
		// the request go with them, and nothing says Fetch does not work.
		f.core.Unheld(1, "the relay's own connections were lost while a navigation went out")
		return
	}
	f.core.Unheld(1, "the browser did not pause the document request for the relay's own connection")
	f.core.FallOver("the browser acknowledged Fetch on the relay's own connection but did not pause a page's document request")
}
