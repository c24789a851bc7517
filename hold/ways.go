package hold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold/claims"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Ways are the three ways of holding, each a package of its own
// (hold/fetch, hold/session, hold/stream) that this package does not
// import: the relay hands them to the Holder (Holder.Ways). A way left
// nil is never chosen: a browser falls over to the next one (Fetch, then
// Session, then Stream), and Arm refuses a browser none can hold.
type Ways struct {
	// Fetch holds a Chromium's navigations through the relay's own
	// connections to the browser endpoint; c is the browser's holding,
	// as the way sees it.
	Fetch func(c FetchCore) FetchWay
	// Session holds documents through the relay's own interception in
	// each client session (Lightpanda's way).
	Session func(w *Watch) ConnWay
	// Stream holds navigation commands in each client's stream.
	Stream func(w *Watch) ConnWay
}

// FetchWay is the way of holding through the relay's own connections to
// a browser, as watch.go and browser.go call it.
type FetchWay interface {
	// Start opens the relay's connections, within ctx, and keeps them
	// until bg ends, on goroutines counted in done; up says whether the
	// browser answered at start. An error means Fetch cannot hold.
	Start(ctx, bg context.Context, up bool, done *sync.WaitGroup) error
	// StopAll closes the relay's connections: another way holds now.
	StopAll()
	// Cover returns a channel closed once the relay's interception
	// covers a client's page (nil when it does already); navigates says
	// the client's command navigates it.
	Cover(target string, navigates bool) <-chan struct{}
	// CreatingWithURL pauses every document of the browser while a
	// client creates a page with a URL: covered is closed once that is
	// so, done ends it.
	CreatingWithURL() (covered <-chan struct{}, done func())
	// Unattached rewrites a Target.targetCreated or targetInfoChanged
	// that says a page is attached only because the relay's own
	// connection is (params are its params); false when msg is as it
	// should be.
	Unattached(params, msg []byte) ([]byte, bool)
	// CheckNavigate confirms that the relay's connection saw the document
	// request of a client page's Page.navigate sent at, whose answer is
	// msg; a browser that never pauses it is left (BrowserHold.FallOver).
	CheckNavigate(page string, at time.Time, msg []byte)
	// WantsEvent reports, from its first bytes, whether a client's
	// Network event is one Fetch reads now (ClientEvent).
	WantsEvent(msg []byte) bool
	// ClientEvent reads a Network event a client session received (page
	// names its page for the events that name no frame).
	ClientEvent(method, params []byte, page string, at time.Time)
	// ClientNetworkOff tells that no client session has Network events
	// on a page any more.
	ClientNetworkOff(page string)
}

// Core is what a way held in a client connection (session, stream) asks
// of holding (Watch.Core): book a navigation and wait for its slot, ask
// about one booked already, book one that cannot be held, begin a
// navigation's flight, feed its answer back, count what is not held; and
// the few facts of the browser a way reads. BrowserHold is one.
type Core interface {
	// Hold holds n until its slot, telling w each moment of the hold
	// (BrowserHold.Hold).
	Hold(ctx context.Context, n Request, w Holding)
	// CheckThen asks the Limiter about n, booked already, and tells w
	// whether it goes or is refused.
	CheckThen(ctx context.Context, n Request, w Holding)
	// Book books a slot for a navigation the way cannot hold (a redirect
	// to another host), so that its host's schedule counts it.
	Book(ctx context.Context, host, rawURL string, log *zerolog.Logger) (limiter.Reservation, time.Duration, bool)
	// NewFlight begins the flight of a navigation, which lives while life
	// does.
	NewFlight(life context.Context) *Flight
	// Observe feeds a navigation's answer back to the Limiter.
	Observe(fl *Flight, host string, answer cdp.Outcome, log *zerolog.Logger)
	// Exempt reports whether host is never held.
	Exempt(host string) bool
	// NotBooked counts a navigation the Limiter was not asked about.
	NotBooked(httpURL bool)
	// Unheld counts n navigations that went unheld, and says why.
	Unheld(n int, why string)
	// Claimed reports whether target is one of the relay's clients' pages.
	Claimed(target string) bool
	// AnswerHeaders are the answer headers the Limiter reads.
	AnswerHeaders() []string
	// IsLightpanda reports whether the browser is Lightpanda.
	IsLightpanda() bool
}

// FetchCore is what the Fetch way (hold/fetch) asks of holding: Core's,
// and what a way that holds for the whole browser through connections of
// its own adds: hold on for a navigation its other connection took over,
// the pages that are the clients', arm the browser or leave Fetch for the
// next way, what the clients' sessions do on a page, the browser to dial,
// and the Holder's settings as a value. BrowserHold is one.
type FetchCore interface {
	Core
	// HoldUntil holds a navigation booked already until start, telling w
	// (BrowserHold.HoldUntil).
	HoldUntil(ctx context.Context, fl *Flight, start time.Time, w Holding)
	// Claims is the set of the browser's pages that are the relay's
	// clients'; the way sets its OnClaim once, before it starts.
	Claims() *claims.Set
	// SetArmed records whether navigations can be held now.
	SetArmed(on bool)
	// IsArmed reports whether navigations can be held now.
	IsArmed() bool
	// WhenArmed returns a channel closed once navigations can be held.
	WhenArmed() <-chan struct{}
	// FallOver leaves Fetch for the next way of holding, saying why once.
	FallOver(why string)
	// InFetch reports whether navigations are held through Fetch now.
	InFetch() bool
	// ClientsOn is how many sessions the relay's clients have on target.
	ClientsOn(target string) int
	// ClientNetworkOn is how many sessions of the relay's clients have
	// Network events on, on page.
	ClientNetworkOn(page string) int
	// Upstream is the browser, which the way dials.
	Upstream() Upstream
	// Waiting is how many navigations wait for their slot now (StateOf).
	Waiting() int
	// Fetch is the browser's Fetch way, nil unless Fetch was chosen
	// (StateOf).
	Fetch() FetchWay
	// Settings are what the way reads of the Holder, fixed once it
	// started.
	Settings() FetchSettings
	// Closing reports whether the relay is shutting down: the relay's own
	// connections that end then are not lost.
	Closing() bool
}

var _ FetchCore = (*BrowserHold)(nil)

// FetchSettings are what the Fetch way reads of the Holder that armed
// its browser: the Holder's settings, and the logger, metrics and count
// of work it reports through. All are fixed once the Holder started
// (Holder.Start), before any way is made; the way keeps the value and
// shares no lock with the Holder through it.
type FetchSettings struct {
	// Intercept is Holder.Intercept: in auto mode Fetch falls over to the
	// next way when the browser refuses it or never answers.
	Intercept Intercept
	// HoldBackup and NetLinger are the Holder's (NetLinger never zero).
	HoldBackup bool
	NetLinger  time.Duration
	// WriteTimeout, PingInterval and StartTimeout are the Holder's, for
	// the relay's own connections.
	WriteTimeout, PingInterval, StartTimeout time.Duration
	// Log is holding's logger (Holder.Logger).
	Log *zerolog.Logger
	// Metrics counts what holding does (Holder.Metrics, NoMetrics when
	// none was set).
	Metrics Metrics
	// Limiting counts the work on its way to the Limiter
	// (Holder.Limiting): the way adds what it starts on goroutines of its
	// own.
	Limiting *sync.WaitGroup
}

// ConnWay is a way of holding in one client connection (Session,
// Stream), as the connection's Watch hands it the client's messages.
// It keeps its state under a lock of its own, which takes none of the
// Watch's while held; the Watch calls it with none of its own held.
type ConnWay interface {
	// Arm arms the way on what the connection has already: it holds the
	// connection's navigations from now on.
	Arm()
	// FromClient looks at a client's command (Conn.FromClient).
	FromClient(hd cdp.Header, msg []byte) bool
	// FromBrowser looks at a message for the client (Conn.FromBrowser).
	FromBrowser(hd cdp.Header, msg []byte) bool
	// Ended lets go of what the connection left (Conn.Ended).
	Ended()
}

// choose is the mode a browser is armed in, given the one asked for: a
// way that is nil is skipped in auto mode, and an error when asked for.
func (ws Ways) choose(mode Intercept) (Intercept, error) {
	has := map[Intercept]bool{InterceptFetch: ws.Fetch != nil, InterceptSession: ws.Session != nil, InterceptNavigate: ws.Stream != nil}
	if mode != InterceptAuto {
		if !has[mode] {
			return mode, fmt.Errorf("hold: intercept %s: the relay has no such way of holding", mode)
		}
		return mode, nil
	}
	for _, m := range []Intercept{InterceptFetch, InterceptSession, InterceptNavigate} {
		if has[m] {
			if m == InterceptFetch {
				return InterceptAuto, nil // Fetch, falling over to the others
			}
			return m, nil
		}
	}
	return mode, errors.New("hold: the relay has no way of holding navigations (Holder.Ways)")
}
