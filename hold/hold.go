// Package hold holds the top-level navigations of a CDP relay's clients
// until their host's slot in a Limiter comes up, and feeds their answers
// back. Package relay relays the messages and calls it at fixed moments
// (hooks.go: a browser armed, a client connected, a message each way, a
// connection gone); this package knows no websocket but the relay's own
// connections to the browsers.
//
// Navigations are held in one of three ways, each a package of its own
// that this one does not import (the relay hands them over: Ways), and
// all go through the same book → wait → release → observe steps of
// flight.go: the way hands the core a Request and its Holding, whose
// methods the core calls at each moment of the hold (a place among its
// host's navigations in flight first, when the Limiter is a Capper that
// caps it, given back when the navigation ends: a Flight). With a
// Chromium browser (hold/fetch) the relay opens its own connections to
// the browser endpoint and pauses every document request of its clients'
// pages there, however the navigation started, never touching a client's
// sessions. Lightpanda gives each connection a browser of its own: there
// the relay pauses documents in each client session (hold/session).
// Where Fetch falls over and no session way was given, or with
// --intercept navigate, the relay holds Page.navigate,
// Page.navigateToHistoryEntry, Page.reload and Target.createTarget
// commands in the client's own stream (hold/stream).
// watch.go follows each client connection and hands its messages to the
// way in use.
package hold

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/dashboard"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
)

// Lock order. The mutexes of holding, this package's, its ways' and those
// of what it calls, are taken in this order, never the other way round (a
// mutex not named takes no other while held):
//
//	Watch.mu → fetch: netPatterns.mu → fetchHold.mu → fetchConn.wmu → pagesState.mu or netState.mu → fetchConn.mu → Flight.mu
//	session: sessionHold.mu → Flight.mu
//	stream: streamHold.mu → Flight.mu
//
// Watch.mu, sessionHold.mu and streamHold.mu are never held together:
// the ways keep their state under their own locks and read the watch's
// through methods that take its lock alone. After any of the above come
// the leaves, which take none: BrowserHold.mu, claims.Set's mu, Counts.mu,
// Holder.stopMu, fetch's netPatterns.ackMu and monoClock.mu, and, when a
// flight ends under a fetch connection's lock or a way's, pace.Tracker.mu and
// inflight.Cap's mu (a flight lets Flight.mu go before it ends its place
// and its pace.Nav). BrowserHold.connsMu, BrowserHold.ansMu and
// warnOnce.mu are leaves taken under none of them. Each mutex's type says
// where it stands (lockorder.Mutex[RankFlight]; the ranks are in
// lockorder.go), and a build with the tag lockorder checks every lock
// taken against this order (package internal/lockorder): the tests of
// hold/..., and relay's, fail on a break of it.
//
// A pace.Nav that ends under a fetch connection's lock may push its bucket's schedule
// (pace.Config.Push): with a shared store that is a Redis call, within
// the store's timeout, made under that lock.

// Intercept chooses how the relay catches navigations.
type Intercept int

const (
	// InterceptAuto uses browser-level Fetch where the browser supports it
	// and falls back to holding navigation commands otherwise.
	InterceptAuto Intercept = iota
	// InterceptFetch requires browser-level Fetch interception.
	InterceptFetch
	// InterceptNavigate holds Page.navigate, Page.reload,
	// Page.navigateToHistoryEntry and Target.createTarget commands in each
	// client's stream.
	InterceptNavigate
	// InterceptSession holds documents through the relay's own
	// interception in each client session.
	InterceptSession
)

// ParseIntercept reads "auto", "fetch", "session" or "navigate".
func ParseIntercept(s string) (Intercept, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return InterceptAuto, nil
	case "fetch":
		return InterceptFetch, nil
	case "navigate":
		return InterceptNavigate, nil
	case "session":
		return InterceptSession, nil
	}
	return 0, fmt.Errorf("hold: intercept %q: want auto, fetch, session or navigate", s)
}

func (i Intercept) String() string {
	return [...]string{"auto", "fetch", "navigate", "session"}[i]
}

// Limiter books navigation slots, as *policy.Policy does over the
// in-process limiter or a shared store. Its methods must be safe for
// concurrent use.
type Limiter interface {
	// Mode reports the global mode: Off means nothing is ever booked, so
	// the relay arms no holding at all, unless the Limiter is a Capper
	// that caps some host.
	Mode() limiter.Mode
	// Reserve books the slot of a navigation to rawURL, wanted at now; host
	// is limiter.Key(rawURL). It may block, to read the site's robots.txt
	// or to learn the host's address (--bucket ip, 1 s at most), but never
	// past ctx. A slot that would start after ctx's deadline (the relay
	// is stopping: Holder.Drain) is not booked: the reservation is
	// Deferred limiter.PastDeadline instead. A Limiter that ignores the
	// deadline books it, and Refuse answers it at the drain's end. A
	// reservation that is not Tracked has nothing to
	// hold (an exempt host, an off rule); Mode, Bucket, Source and Rule say
	// what was booked and why.
	Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation
	// Observe feeds the answer a navigation of host got at now back, with
	// how long it took (o.Took), and says what the answer was: overload, a
	// failure, slow, or calm.
	Observe(host string, o limiter.Outcome, now time.Time) limiter.Effect
}

// Capper is what a Limiter adds when it also caps the navigations of each
// bucket in flight (*policy.Policy does): the relay asks it for a place
// before it books a navigation, and gives the place back when the
// navigation ends.
type Capper interface {
	// Caps reports whether any host has a cap: then navigations are held
	// even where nothing is spaced.
	Caps() bool
	// Enter waits, behind the navigations that came first, for a place
	// among the navigations in flight of host's bucket, and returns it, nil
	// when host has no cap; it returns ctx's error when ctx ends first.
	Enter(ctx context.Context, host string) (*inflight.Place, error)
}

// The features below are what a Limiter may add to Limiter (and Capper,
// Refuser): the relay finds each by its interface, and a Limiter without
// one works, with what the interface says it then does instead
// (TestPlainLimiter). *policy.Policy has them all.

// Pusher is what a Limiter adds when a late departure moves its
// bucket's schedule in the limiter too (a shared store moves every
// relay's). Without it, the departure moves this relay's own wait only
// (package pace), and the next booking does not see it.
type Pusher interface {
	// Push moves bucket's schedule later by by, at now.
	Push(bucket string, by time.Duration, now time.Time)
}

// PushReader is what a Limiter adds when its schedules are shared by
// several relays (a store): a late departure that moved a bucket's
// schedule in one relay (Pusher) must also hold back the navigations
// other relays booked before it, whose slots do not move. Such a
// booking says how far the bucket had been pushed when it was made
// (limiter.Reservation.Pushed, Shared); when its slot comes, the
// navigation waits as much longer as the bucket was pushed since.
// Without it, a relay's own late departures hold back its own
// navigations only (package pace).
type PushReader interface {
	// Pushed reports how far bucket's schedule was pushed in all; ok is
	// false when that cannot be told now.
	Pushed(bucket string) (time.Duration, bool)
}

// Prober is what a Limiter adds when some navigations go as probes
// (Reservation.Probe: a bucket's breaker's, with --host-errors): a probe
// whose flight ends with no answer (its page went, its client left,
// another navigation replaced it) is told, so that another may go at once
// rather than when the breaker stops waiting for its answer.
type Prober interface {
	ProbeLost(bucket string, now time.Time)
}

// Bucketer is what a Limiter adds when hosts share schedules (--bucket
// site or ip). Without it, each host is its own bucket on the relay's
// page.
type Bucketer interface {
	// Bucket is the schedule host books in.
	Bucket(host string) string
}

// Exempter is what a Limiter adds when it knows, without booking, which
// hosts it never holds (loopback, --exempt-host, exempt or off rules), so
// that their navigations are let go without a booking at all. Without
// it, loopback alone is exempt (limiter.Exempt).
type Exempter interface {
	// Exempt reports whether navigations to host are never held.
	Exempt(host string) bool
}

// HeaderReader is what a Limiter adds when it reads headers of a
// document's answer besides Retry-After (--overload-header): the ways
// keep those of each answer (cdp.Outcome.Headers) for Observe
// (limiter.Outcome.Headers). Without it, only Retry-After is kept.
type HeaderReader interface {
	// AnswerHeaders names the headers; it does not change once the
	// Limiter is in use.
	AnswerHeaders() []string
}

// LimitsReader is what a Limiter adds when it tells whose answers it
// reads for the server's own limits (--ratelimit-headers): the answers
// of a host it does not read them for are not parsed, and their
// malformed RateLimit headers are not warned about. Without it, every
// document answer's are read into limiter.Outcome.Server.
type LimitsReader interface {
	// ReadsLimits reports whether the answers of host are read for
	// what they say of the server's own limits.
	ReadsLimits(host string) bool
}

// Holder holds the navigations of a relay's clients on every browser it
// fronts. Set its fields, call Start, then Arm each browser; fields must
// not change after Start. Its methods are safe for concurrent use.
type Holder struct {
	// Limiter books the navigations. Nil holds nothing (Start says so).
	Limiter Limiter
	// Intercept chooses how navigations are caught.
	Intercept Intercept
	// Ways are the ways of holding the Holder may use (ways.go).
	Ways Ways
	// HoldBackup keeps, in Fetch mode, the relay's browser-level
	// interception on while its clients have pages (relay.Proxy.HoldBackup
	// says what that costs and gives).
	HoldBackup bool
	// NetLinger is how long, with HoldBackup, the relay's browser-level
	// interception stays on after its clients' last page is gone. Zero
	// means DefaultNetLinger.
	NetLinger time.Duration
	// Metrics, when set, counts what holding does.
	Metrics Metrics
	// Timeline, when set, is told of each navigation booked and answered,
	// for the relay's page.
	Timeline *dashboard.Timeline
	// Log receives holding's logs. Nil logs nothing.
	Log *zerolog.Logger
	// WriteTimeout bounds writing one message on the relay's own
	// connections, and how long each of their pings may wait. This and
	// the durations below are the relay's own (relay.Proxy sets them from
	// its fields).
	WriteTimeout time.Duration
	// PingInterval is how often the relay's own connections are pinged.
	PingInterval time.Duration
	// StartTimeout bounds setting up one of the relay's own connections
	// (10 s at most).
	StartTimeout time.Duration

	log           zerolog.Logger // set once by Start
	capper        Capper         // set once by Start: the Limiter, when it caps navigations in flight
	warned        warnOnce
	refusedWarned warnOnce       // hosts whose refusal was said
	deferWarned   warnOnce       // hosts whose deferral was said
	badWarned     warnOnce       // hosts whose Retry-After did not read, said once
	headers       []string       // set once by Start: the answer headers the Limiter reads (HeaderReader)
	limitsWarned  warnOnce       // hosts whose malformed RateLimit headers were said
	pace          pace.Tracker   // the departures of held navigations, across browsers; Push set once by Start
	limiting      sync.WaitGroup // bookings and answers on their way to the limiter
	closing       atomic.Bool    // set by Close: the relay is shutting down

	// A stop (stop.go). stopMu is a leaf: it guards the waits a stop may
	// end and whether Refuse was called.
	stopMu   lockorder.Mutex[lockorder.Leaf]
	stops    map[*stopper]struct{} // guarded by stopMu
	refusing bool                  // guarded by stopMu
	drainEnd atomic.Int64          // the drain's end in Unix ns, 0 before Drain
	held     atomic.Int64          // navigations held now, over every browser
}

// AnswerHeaders names the headers of a document's answer the ways keep
// besides Retry-After (HeaderReader), nil when none; set by Start.
func (hd *Holder) AnswerHeaders() []string { return hd.headers }

// Start readies the Holder and reports whether it holds anything: false
// when the Limiter books nothing (Off), caps nothing and refuses nothing,
// and the relay relays without holding.
func (hd *Holder) Start() bool {
	hd.log = zerolog.Nop()
	if hd.Log != nil {
		hd.log = *hd.Log
	}
	if hd.Metrics == nil {
		hd.Metrics = NoMetrics{}
	}
	if hd.NetLinger <= 0 {
		hd.NetLinger = DefaultNetLinger
	}
	if c, ok := hd.Limiter.(Capper); ok && c.Caps() {
		hd.capper = c
	}
	if r, ok := hd.Limiter.(HeaderReader); ok {
		hd.headers = r.AnswerHeaders()
	}
	if hd.Limiter == nil || hd.Limiter.Mode() == limiter.Off && hd.capper == nil && hd.refuser() == nil {
		return false
	}
	// A navigation that left the browser late moves its bucket's schedule,
	// in the limiter too when it can (a shared store: every relay's).
	if pusher, ok := hd.Limiter.(Pusher); ok {
		hd.pace.Push = func(bucket string, by time.Duration) {
			hd.pushed(bucket, by)
			pusher.Push(bucket, by, time.Now())
		}
	} else {
		hd.pace.Push = hd.pushed
	}
	hd.pace.Left = func(bucket string, lag, usual time.Duration) {
		hd.log.Debug().Str("bucket", bucket).Float64("lag_ms", limiter.ShownMillis(lag)).Float64("usual_ms", limiter.ShownMillis(usual)).Msg("a navigation left the browser")
	}
	return true
}

// pushed counts and logs a late departure that moved bucket's schedule.
func (hd *Holder) pushed(bucket string, by time.Duration) {
	hd.Metrics.Pushed(by)
	hd.log.Debug().Str("bucket", bucket).Float64("by_ms", limiter.ShownMillis(by)).Msg("a navigation left the browser late: its schedule moves")
}

// Arm sets up how the navigations of one browser are held, after Start:
// through the relay's own connections (Fetch) for Chromium, through each
// client's sessions for Lightpanda, as Intercept says otherwise. browser
// is the browser as its /json/version names it, "" when up did not
// answer at start (notUp). In auto mode a browser that refuses Fetch gets
// the session strategy, and a Fetch connection that cannot be made yet is
// retried, navigations waiting meanwhile, never passed unheld. ctx bounds
// the setting up; the relay's own connections live until bg ends, on
// goroutines counted in done.
func (hd *Holder) Arm(ctx, bg context.Context, up Upstream, browser string, notUp error, done *sync.WaitGroup) (Browser, error) {
	h := newBrowserHold(hd, up, browser)
	mode := hd.Intercept
	if mode == InterceptAuto && h.Lightpanda && hd.Ways.Session != nil {
		mode = InterceptSession // each of its connections is a browser of its own
	}
	mode, err := hd.Ways.choose(mode)
	if err != nil {
		return nil, err
	}
	switch mode {
	case InterceptNavigate:
		h.use(viaStream)
		hd.log.Warn().Str("upstream", up.Name()).Str("browser", browser).Msg(fallOverMsg[viaStream])
		return h, nil
	case InterceptSession:
		h.use(viaSession)
		hd.log.Info().Str("upstream", up.Name()).Msg("holding navigations through the relay's own interception in each client session")
		return h, nil
	}
	h.fetch = hd.Ways.Fetch(h)
	h.way.Store(int32(viaFetch))
	if err := h.fetch.Start(ctx, bg, notUp == nil, done); err != nil {
		if mode == InterceptFetch {
			return nil, err
		}
		h.FallOver(err.Error())
		return h, nil
	}
	if h.IsArmed() {
		hd.log.Info().Str("upstream", up.Name()).Msg("holding top-level navigations through the relay's own browser connections (Fetch)")
	}
	return h, nil
}

// Close tells holding that the relay is shutting down: its own
// connections ending from now on are not lost. Call it before the relay
// closes its connections.
func (hd *Holder) Close() { hd.closing.Store(true) }

// Wait waits for the bookings and answers on their way to the Limiter.
// Call it once no client connection and none of the relay's own is left.
func (hd *Holder) Wait() { hd.limiting.Wait() }

// booked tells the page's timeline of a navigation booked at now.
func (hd *Holder) booked(host string, now time.Time, r limiter.Reservation) {
	if hd.Timeline == nil {
		return
	}
	hd.Timeline.Booked(dashboard.Booking{Bucket: cmp.Or(r.Bucket, host), Host: host, At: now, Start: r.Start,
		Spacing: r.Spacing, Pressure: r.Pressure, Mode: r.Mode.String(), Source: r.Source, Rule: r.Rule})
}

// answered tells the page's timeline of the answer a navigation of host
// got at, with status, and what it did to the host (e).
func (hd *Holder) answered(host string, e limiter.Effect, status int, at time.Time) {
	if hd.Timeline == nil {
		return
	}
	bucket := host
	if b, ok := hd.Limiter.(Bucketer); ok {
		bucket = b.Bucket(host)
	}
	hd.Timeline.Answered(bucket, host, answerClass(e), status, at)
}

// answerClass is the class of an answer as the limiter heard it, for the
// page: overload (its setting's overload statuses: the overload
// pressure), failure (another 5xx, no answer, or slower than its host's
// baseline: the failure pressure) or ok (the rest).
func answerClass(e limiter.Effect) dashboard.Answer {
	switch e {
	case limiter.Overload:
		return dashboard.Overload
	case limiter.Failure, limiter.Slow:
		return dashboard.Failure
	}
	return dashboard.OK
}

// DefaultNetLinger is how long net's Fetch stays on after the relay's
// clients closed their last page (Holder.NetLinger): a client that closes
// and opens pages in a loop does not wait for it each time.
const DefaultNetLinger = 10 * time.Second

// Logger is holding's logger, for the ways of holding (Log, or none).
func (hd *Holder) Logger() *zerolog.Logger { return &hd.log }

// Limiting counts the work on its way to the Limiter (bookings, answers,
// waits for a page's cover): Wait waits for it. A way of holding adds what
// it starts on goroutines of its own.
func (hd *Holder) Limiting() *sync.WaitGroup { return &hd.limiting }

// Closing reports whether the relay is shutting down (Close): the relay's
// own connections that end are not lost then.
func (hd *Holder) Closing() bool { return hd.closing.Load() }

// readsLimits reports whether the answers of host are read for the
// server's own limits (LimitsReader); every host's are without one.
func (hd *Holder) readsLimits(host string) bool {
	r, ok := hd.Limiter.(LimitsReader)
	return !ok || r.ReadsLimits(host)
}
