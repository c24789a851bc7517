package hold

import (
	"context"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// The relay and the holding meet at the interfaces of this file, the way
// httputil.ReverseProxy meets its Rewrite and ModifyResponse hooks: the
// relay (package relay) owns the connections and hands holding each
// browser (Upstream) and each client connection (Client); holding answers
// with what the relay calls at fixed moments (Browser, Conn). A nil
// Browser or Conn means the relay holds nothing there.

// Upstream is what holding needs of one browser the relay fronts. Its
// methods must be safe for concurrent use.
type Upstream interface {
	// Name names the browser in logs, without credentials.
	Name() string
	// Dial opens a connection of the relay's own to the browser
	// endpoint, waiting while the browser is (re)starting, until ctx
	// ends, with the relay's read limit. A dial that fails makes the next
	// one look the endpoint up again: the browser may have restarted
	// under another.
	Dial(ctx context.Context) (*websocket.Conn, error)
}

// Guarded is what an Upstream adds when the relay runs beside a guardian
// (package guardian, another process): the connection that holds paused
// requests (Fetch's pages connection) is dialled through it, so that the
// relay's death hands them to the guardian, which answers them, instead
// of the browser letting them go. A connection dialled so is closed
// with a close frame when the relay means to close it.
type Guarded interface {
	DialGuarded(ctx context.Context) (*websocket.Conn, error)
}

// Client is what holding needs of one client connection the relay
// relays. Its methods must be safe for concurrent use.
type Client interface {
	// Path is the websocket path the client asked for.
	Path() string
	// Context ends when either side of the connection closes: every hold
	// of the connection gives up.
	Context() context.Context
	// Held counts the work of holding on this connection (held commands,
	// bookings): the connection waits for it, once its Context ended,
	// before it ends.
	Held() *sync.WaitGroup
	// Log is the connection's logger.
	Log() *zerolog.Logger
	// ToBrowser writes a message to the browser, as the relay would have
	// written the client's, within the relay's write timeout.
	ToBrowser(msg []byte) error
	// ToClient writes a message to the client, as the relay would have
	// written the browser's, within the relay's write timeout.
	ToClient(msg []byte) error
}

// Browser holds the navigations of the relay's clients on one browser.
// Its methods are safe for concurrent use.
type Browser interface {
	// Conn is called for each client connection of the browser, before
	// any of its messages is relayed, and returns what the relay calls
	// with them.
	Conn(c Client) Conn
	// NewPage is called before the relay asks the browser for a new page
	// on url with /json/new (url may be ""), on the goroutine serving the
	// request; it may wait until the page's first request can be held.
	// The relay calls created with the new page's id ("" when none was
	// made) once it has the answer.
	NewPage(url string) (created func(target string))
	// Holding says how navigations are held now: "fetch" (the relay's own
	// connections), "session" (in each client session), "navigate" (in
	// the client streams) or "waiting" while nothing can hold them.
	Holding() string
	// Name is the browser as its /json/version names it.
	Name() string
}

// Conn holds the navigations of one client connection. The relay calls
// FromClient on the client's reader and Wants and FromBrowser on the
// browser's, each with a whole message; Start before the first and Ended
// after the last. The header comes by value: a pointer to the
// relay's own would escape through the interface, one allocation more for
// every message the relay scans (BenchmarkPassThrough).
type Conn interface {
	// Start arms the connection's holding, before any message is relayed.
	Start()
	// FromClient looks at a command on its way to the browser, whose
	// header is hd, and reports whether it took it: holding then writes
	// it (or its answer) itself, later or rewritten (Client.ToBrowser,
	// Client.ToClient).
	FromClient(hd cdp.Header, msg []byte) bool
	// Wants reports, from its first bytes, whether FromBrowser needs to
	// see a message from the browser, so that the rest are relayed
	// without being scanned.
	Wants(msg []byte) bool
	// FromBrowser looks at a message on its way to the client, whose
	// header is hd, and reports whether to drop it: an answer to a
	// command of the relay's own, or an event the client did not ask for.
	FromBrowser(hd cdp.Header, msg []byte) bool
	// ReadsAll reports whether holding reads the browser's messages of
	// every session now, so that the relay reads each one whole (up to a
	// navigation's size) before it hands it over.
	ReadsAll() bool
	// Ended lets go of what the connection left under way, once both its
	// sides are closed and its Held work is done.
	Ended()
}

// Metrics counts what holding does (the relay's Prometheus metrics). Its
// methods must be safe for concurrent use.
type Metrics interface {
	// Navigation counts one navigation: booked for a wait of d (exempt
	// and untracked ones pass nothing to book).
	Navigation(outcome NavOutcome, d time.Duration)
	// Waited counts a navigation that waited d for a place among its
	// host's navigations in flight.
	Waited(d time.Duration)
	// Feedback counts one answer fed back to the limiter.
	Feedback(e limiter.Effect)
	// Pushed counts a late departure that moved its schedule by by.
	Pushed(by time.Duration)
	// Overtook counts a navigation let go while one let go before it in
	// its bucket had not left the browser yet, once it had waited
	// pace's bound (Wait) for it.
	Overtook()
	// AddUnheld counts n navigations that reached the network without a
	// booking.
	AddUnheld(n int)
	// Panicked counts a panic recovered in the code of one held
	// navigation (the navigation is answered by the relay, never let go).
	Panicked()
}

// NavOutcome is what became of a navigation, for Metrics.
type NavOutcome int

// The outcomes of a navigation.
const (
	NavBooked     NavOutcome = iota // booked (it may go at once or wait)
	NavExempt                       // exempt: loopback, --exempt-host, an exempt or off rule
	NavUntracked                    // not a page's main frame, or not http
	NavForeign                      // a page none of the relay's clients drives: let go at once
	NavDisallowed                   // refused (Refuser): its site's robots.txt disallows it
	NavDeferred                     // deferred (limiter.Reservation.Deferred): answered at once, never sent
	NavStopped                      // answered at once because the relay is stopping (reason Stopping), never sent
)

// NoMetrics counts nothing: a Holder without Metrics has it, and a
// Metrics that counts some embeds it.
type NoMetrics struct{}

func (NoMetrics) Navigation(NavOutcome, time.Duration) {}
func (NoMetrics) Waited(time.Duration)                 {}
func (NoMetrics) Feedback(limiter.Effect)              {}
func (NoMetrics) Pushed(time.Duration)                 {}
func (NoMetrics) Panicked()                            {}
func (NoMetrics) Overtook()                            {}
func (NoMetrics) AddUnheld(int)                        {}
