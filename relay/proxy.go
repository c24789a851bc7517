// Package relay is a Chrome DevTools Protocol relay: clients connect to it
// as they would to the browser, every message passes through unchanged, and
// each top-level navigation is held until its host's slot in a
// limiter.Limiter comes up.
//
// It owns the connections (pipe.go: one client and its browser connection,
// a reading goroutine each), the browsers it fronts (upstream.go), the
// browser's HTTP surface as Chrome serves it (devtools.go: /json/*, its
// URLs rewritten to the relay), its own status surface (status.go,
// metrics.go: /hosts, /healthz, /metrics, and the page at / of package
// dashboard) and who may use it (access.go).
// It reads messages with package cdp and books slots through the Limiter
// interface; it knows neither the limiter's rule nor Redis. What one
// client may do to the others sharing a browser is in share.go: a
// client's Browser.close closes only what it owns (package ownership
// keeps track), and what a vanished client created is closed after
// OrphanTimeout.
//
// Navigations are held in one of two ways, each in a file of its own, and
// both go through the same book → wait → release → observe steps of
// hold.go (a place among its host's navigations in flight first, when the
// Limiter is a Capper that caps it, given back when the navigation ends:
// a flight). With a Chromium upstream (hold_fetch.go) the relay opens its own
// connection to the browser endpoint and enables Fetch interception there
// for document requests; the browser pauses every document request of
// every page for it, however the navigation started, and the relay never
// touches a client's sessions. A browser that does not support that
// (Lightpanda gives each connection a browser of its own) gets the
// in-stream fallback (hold_stream.go): the relay holds Page.navigate,
// Page.reload and Target.createTarget commands in the client's own stream
// and reads the answers from the Network events the client enabled.
package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/admission"
	"github.com/cdp-throttle/cdp-throttle/dashboard"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/ownership"
	"github.com/cdp-throttle/cdp-throttle/pace"
)

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
	return 0, fmt.Errorf("relay: intercept %q: want auto, fetch, session or navigate", s)
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
	// past ctx. A reservation that is not Tracked has nothing to
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

// Defaults for the zero values of Proxy's fields.
const (
	DefaultMaxMessageSize = 256 << 20 // what Puppeteer accepts
	DefaultWriteTimeout   = 30 * time.Second
	DefaultPingInterval   = 30 * time.Second
	DefaultStartTimeout   = 30 * time.Second
	DefaultOrphanTimeout  = 30 * time.Second
)

// Proxy relays CDP between clients and one browser. Set its fields, call
// Start, then serve it as an http.Handler; Close ends every connection.
// Fields must not change after Start. Its methods are safe for concurrent use.
type Proxy struct {
	// Upstream is the browser's CDP endpoint: "http://host:port", where
	// Chrome's --remote-debugging-port serves /json/version, or the ws://
	// URL of its browser endpoint ("ws://127.0.0.1:9222/" for lightpanda
	// serve).
	Upstream string
	// Upstreams are more browsers, in the same forms, after Upstream. A new
	// client goes to the live browser with the fewest clients; a browser
	// that stops answering is skipped until it answers again.
	Upstreams []string
	// Browsers are more browsers, after Upstreams, whose address can
	// change while the relay runs (those it launched, which may come back
	// on another port): the relay asks each for its address whenever it
	// needs it.
	Browsers []Endpoint
	// Metrics, when set, counts what the relay does and serves /metrics.
	Metrics *Metrics
	// Limiter books the navigations. Nil, or a limiter that is Off, relays
	// without ever delaying.
	Limiter Limiter
	// Intercept chooses how navigations are caught.
	Intercept Intercept
	// HoldBackup keeps, in Fetch mode, the relay's browser-level
	// interception on while its clients have pages, naming each navigation
	// the relay holds, so that losing the relay's pages connection hands
	// what it held to the browser-level one instead of letting it go.
	// Chromium then passes every request of the browser through that
	// interceptor too (BENCHMARKS.md: about 5% of its CPU in a crawl of
	// 100 pages, and a few ms a navigation of other clients). Unset, the
	// browser-level interception is on only while it must pause every
	// document (a client creating a page with a URL, the pages connection
	// reconnecting), and a held navigation the browser lets go with a lost
	// pages connection is counted unheld.
	HoldBackup bool
	// Log receives the relay's logs. Nil logs nothing.
	Log *zerolog.Logger
	// MaxMessageSize is the largest message read from either side; a bigger
	// one closes the connection with 1009. Zero means DefaultMaxMessageSize.
	MaxMessageSize int64
	// WriteTimeout bounds writing one message; a peer that does not read for
	// that long is closed. Zero means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// PingInterval is how often each client is pinged; a client that has
	// not answered within two intervals is closed. Zero means
	// DefaultPingInterval.
	PingInterval time.Duration
	// StartTimeout bounds how long Start waits for the browser to come up.
	// Zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// StartHint, when set, says what to do about a browser that does not
	// answer at start (how to start one): it is logged with the first
	// failed attempt, not only in the error once StartTimeout is over.
	StartHint string
	// AllowOrigins lists the Origin header values a websocket upgrade may
	// carry, like Chrome's --remote-allow-origins; "*" allows any. An
	// upgrade without an Origin header, as automation clients send it, is
	// always allowed.
	AllowOrigins []string
	// AllowHosts lists the names, besides IP literals and localhost, that a
	// request's Host header may carry.
	AllowHosts []string
	// Token, when set, is required on every request, as "Authorization:
	// Bearer TOKEN" or "?token=TOKEN"; the URLs the relay advertises carry it.
	Token string
	// OrphanTimeout is how long the pages and browser contexts a client
	// created outlive its connection: once it has been gone that long
	// and no other connection has taken them over (by driving or
	// attaching to one), the relay closes them. Zero means
	// DefaultOrphanTimeout; negative keeps them, as the browser would.
	OrphanTimeout time.Duration
	// AllowBrowserClose lets a client's Browser.close, Browser.crash and
	// Browser.crashGpuProcess reach the browser, which then exits (or
	// crashes) for every client. Unset, Browser.close closes only what
	// that client owns and ends its connection, and the crash commands
	// are refused with a CDP error. (Lightpanda gives each connection a
	// browser of its own: there Browser.close always passes.)
	AllowBrowserClose bool
	// MaxClients bounds the client connections relayed at once; zero means
	// no bound but the browsers'.
	MaxClients int
	// ClientsPerBrowser bounds the clients of each browser, for browsers
	// that do not say how many they take (a launched lightpanda serve
	// does), or when it is less than what they say; zero means no bound.
	ClientsPerBrowser int
	// Queue is how many clients over capacity may wait for a place, their
	// websocket upgrade unanswered until one frees; one more is answered
	// 429 with Retry-After. Zero means none wait.
	Queue int
	// QueueTimeout is how long a client waits for a place before it is
	// answered 503. Zero means admission.DefaultTimeout.
	QueueTimeout time.Duration

	// everyPage makes every page count as one of the relay's clients',
	// for tests of the holding itself, which play pauses of pages no
	// client drives.
	everyPage bool

	capper Capper // set once by Start: the Limiter, when it caps navigations in flight

	log           zerolog.Logger    // set once by Start
	ups           []*upstream       // set once by Start
	dialer        *websocket.Dialer // the relay's own connections to the browsers
	clientDialer  *websocket.Dialer // a client's connection to its browser
	upgrader      *websocket.Upgrader
	warned        warnOnce
	refusedWarned warnOnce           // hosts whose refusal was said
	pace          pace.Tracker       // the departures of held navigations, across browsers; Push set once by Start
	gate          *admission.Gate    // set once by Start: places in the browsers for clients
	stop          context.CancelFunc // set once by Start; ends the background goroutines
	done          sync.WaitGroup     // background goroutines
	limiting      sync.WaitGroup     // bookings and answers on their way to the limiter

	timeline dashboard.Timeline // the page's memory of the last navigations
	page     dashboard.Handler  // set once by Start: the page at / and /status

	mu      sync.Mutex
	pairs   map[*pair]struct{}   // guarded by mu
	targets map[string]*upstream // guarded by mu; which browser a target is in, with several
	closed  bool                 // guarded by mu
}

// clientHandshake bounds how long a client's connection waits for the
// browser's websocket handshake.
const clientHandshake = time.Minute

// pushed counts and logs a late departure that moved bucket's schedule.
func (p *Proxy) pushed(bucket string, by time.Duration) {
	p.Metrics.pushed(by)
	p.log.Debug().Str("bucket", bucket).Float64("by_ms", limiter.ShownMillis(by)).Msg("a navigation left the browser late: its schedule moves")
}

// Start checks the upstream browser, waiting up to StartTimeout for it to
// come up, and arms the navigation holder. ctx bounds the wait only.
func (p *Proxy) Start(ctx context.Context) error {
	p.log = zerolog.Nop()
	if p.Log != nil {
		p.log = *p.Log
	}
	if p.MaxMessageSize <= 0 {
		p.MaxMessageSize = DefaultMaxMessageSize
	}
	if p.WriteTimeout <= 0 {
		p.WriteTimeout = DefaultWriteTimeout
	}
	if p.PingInterval <= 0 {
		p.PingInterval = DefaultPingInterval
	}
	if p.StartTimeout <= 0 {
		p.StartTimeout = DefaultStartTimeout
	}
	if p.OrphanTimeout == 0 {
		p.OrphanTimeout = DefaultOrphanTimeout
	}
	for _, raw := range append([]string{p.Upstream}, p.Upstreams...) {
		if raw == "" {
			continue
		}
		up, err := parseUpstream(raw)
		if err != nil {
			return err
		}
		p.ups = append(p.ups, up)
	}
	for i, ep := range p.Browsers {
		p.ups = append(p.ups, endpointUpstream(ep, i))
	}
	if len(p.ups) == 0 {
		return errors.New("relay: no upstream browser given")
	}
	p.pairs = make(map[*pair]struct{})
	p.targets = make(map[string]*upstream)
	p.page = dashboard.Handler{Source: p, Timeline: &p.timeline}
	// Write buffers are per connection and small: the server side writes
	// a message of any size in one frame past its buffer, and Chromium
	// takes a bigger command in fragments. (A shared buffer pool would
	// cost an allocation per message.)
	p.dialer = &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  8 << 10,
	}
	// A client's connection waits for the browser as long as the client
	// does (its request's context), up to clientHandshake: a browser busy
	// with a hundred pages answers an upgrade in seconds, and a client
	// connected to it directly would have waited.
	cd := *p.dialer
	cd.HandshakeTimeout = clientHandshake
	p.clientDialer = &cd
	p.upgrader = &websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		WriteBufferSize:  8 << 10,
		CheckOrigin:      p.checkOrigin,
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			http.Error(w, reason.Error(), status)
		},
	}

	// Wait for every browser, up to StartTimeout; one that answered is
	// enough to start, the others are picked up when they answer.
	waitCtx, cancel := context.WithTimeout(ctx, p.StartTimeout)
	defer cancel()
	versions := make([]version, len(p.ups))
	errs := make([]error, len(p.ups))
	var wg sync.WaitGroup
	for i, up := range p.ups {
		wg.Go(func() { versions[i], errs[i] = up.waitVersion(waitCtx, p.log, p.StartTimeout, p.StartHint) })
	}
	wg.Wait()
	up := 0
	for i := range p.ups {
		if errs[i] == nil {
			p.ups[i].alive.Store(true)
			up++
		}
	}
	if up == 0 {
		return errors.Join(errs...)
	}
	for i, u := range p.ups {
		// A browser not up yet is taken for a Chromium: closing what it
		// does not have is harmless.
		if errs[i] == nil && versions[i].lightpanda() {
			continue // each connection is a browser of its own, ended with it
		}
		u.owners = &ownership.Registry{Timeout: p.OrphanTimeout, Close: p.orphanClose(u, p.OrphanTimeout)}
	}
	p.gate = p.newGate()
	p.Metrics.admission(p.gate)
	switch {
	case p.gate.Limited() && p.Queue > 0:
		p.log.Info().Int("capacity", p.gate.Capacity()).Int("queue", p.Queue).Stringer("queue_timeout", p.queueTimeout()).
			Msg("clients over capacity wait for a place")
	case p.gate.Limited():
		p.log.Info().Int("capacity", p.gate.Capacity()).Msg("clients over capacity are refused (--queue 0): 429 with Retry-After")
	}

	bg, stop := context.WithCancel(context.Background())
	p.stop = stop
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		p.keepalive(bg)
	}()
	for i, u := range p.ups {
		if errs[i] != nil {
			p.log.Warn().Str("upstream", u.name).Err(errs[i]).Msg("browser not answering at start: skipped until it does")
		}
		p.done.Add(1)
		go func() {
			defer p.done.Done()
			u.health(bg, p.log, len(p.ups) == 1, p.gate.Retry)
		}()
	}

	p.readBrowserArgs(ctx, versions, errs)
	// robots.txt is read for the browser's own user agent, unless told
	// otherwise.
	if b, ok := p.Limiter.(interface{ SetBrowser(string) }); ok {
		for i := range p.ups {
			if errs[i] == nil && versions[i].UserAgent != "" {
				b.SetBrowser(versions[i].UserAgent)
				break
			}
		}
	}
	if c, ok := p.Limiter.(Capper); ok && c.Caps() {
		p.capper = c
	}
	if p.Limiter == nil || p.Limiter.Mode() == limiter.Off && p.capper == nil && p.refuser() == nil {
		p.log.Info().Msg("limiter off: relaying without holding navigations")
		return nil
	}
	// A navigation that left the browser late moves its bucket's schedule,
	// in the limiter too when it can (a shared store: every relay's).
	if pusher, ok := p.Limiter.(interface {
		Push(bucket string, by time.Duration, now time.Time)
	}); ok {
		p.pace.Push = func(bucket string, by time.Duration) {
			p.pushed(bucket, by)
			pusher.Push(bucket, by, time.Now())
		}
	} else {
		p.pace.Push = p.pushed
	}
	p.pace.Left = func(bucket string, lag, usual time.Duration) {
		p.log.Debug().Str("bucket", bucket).Float64("lag_ms", limiter.ShownMillis(lag)).Float64("usual_ms", limiter.ShownMillis(usual)).Msg("a navigation left the browser")
	}
	for i, u := range p.ups {
		if err := p.arm(waitCtx, bg, u, versions[i], errs[i]); err != nil {
			stop()
			p.done.Wait()
			return err
		}
	}
	return nil
}

// arm sets up how the navigations of one browser are held: through the
// relay's own connections (Fetch) for Chromium, through each client's
// sessions for Lightpanda, as Intercept says otherwise. In auto mode a
// browser that refuses Fetch gets the session strategy, and a Fetch
// connection that cannot be made yet is retried, navigations waiting
// meanwhile, never passed unheld.
func (p *Proxy) arm(ctx, bg context.Context, up *upstream, v version, notUp error) error {
	h := newHolder(p, up, v)
	up.holder = h
	mode := p.Intercept
	if mode == InterceptAuto && h.lightpanda {
		mode = InterceptSession // each of its connections is a browser of its own
	}
	switch mode {
	case InterceptNavigate:
		h.use(viaStream)
		p.log.Warn().Str("upstream", up.name).Str("browser", v.Browser).Msg(fallOverMsg[viaStream])
		return nil
	case InterceptSession:
		h.use(viaSession)
		p.log.Info().Str("upstream", up.name).Msg("holding navigations through the relay's own interception in each client session")
		return nil
	}
	h.fetch = newFetchHold(h)
	h.way.Store(int32(viaFetch))
	if err := h.fetch.start(ctx, bg, notUp == nil, &p.done); err != nil {
		if mode == InterceptFetch {
			return err
		}
		h.fallOver(err.Error())
		return nil
	}
	if h.isArmed() {
		p.log.Info().Str("upstream", up.name).Msg("holding top-level navigations through the relay's own browser connections (Fetch)")
	}
	return nil
}

// Close closes every relayed connection with 1001 (going away), stops the
// relay's own browser connection and waits for its goroutines. Held
// navigations are released to the browser as their connections close.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	// All at once, and a peer that does not read is cut off after the
	// close grace: one after another, stalled clients would each cost the
	// grace, and their pumps' writes WriteTimeout.
	var wg sync.WaitGroup
	for _, pr := range pairs {
		wg.Go(func() {
			grace := time.NewTimer(closeGrace)
			defer grace.Stop()
			pr.shutdown(websocket.CloseGoingAway, "relay shutting down")
			select {
			case <-pr.ended:
			case <-grace.C:
				pr.client.c.Close()
				pr.browser.c.Close()
				<-pr.ended
			}
		})
	}
	wg.Wait()
	for _, up := range p.ups {
		if up.owners != nil {
			up.owners.Stop() // what clients left stays: the relay is going, not they
		}
	}
	if p.stop != nil {
		p.stop()
	}
	p.done.Wait()
	p.limiting.Wait()
	return nil
}

// ctxDone reports whether the relay is shutting down.
func (p *Proxy) ctxDone() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Serve answers clients on ln until ctx ends, then closes every relayed
// connection and returns nil; or returns the error that stopped serving.
// Call it after Start.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	p.log.Info().Str("listen", "http://"+ln.Addr().String()).Msg("relay ready")
	var err error
	select {
	case <-ctx.Done():
		p.log.Info().Msg("shutting down")
	case err = <-serveErr:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdownCtx)
	p.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// ServeHTTP serves the browser's HTTP endpoints, with every URL in them
// pointing at the relay, and relays websockets.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.authorize(w, r) {
		return
	}
	if websocket.IsWebSocketUpgrade(r) {
		p.serveWebsocket(w, r)
		return
	}
	path := r.URL.Path
	switch {
	case path == "/json/version" || path == "/json/version/":
		p.serveJSON(w, r, p.pick(), http.MethodGet, "/json/version", rewriteObject)
	case path == "/json" || path == "/json/" || path == "/json/list" || path == "/json/list/":
		p.serveList(w, r)
	case path == "/json/new" || path == "/json/new/":
		if r.Method != http.MethodPut && r.Method != http.MethodGet {
			http.Error(w, "Using unsafe HTTP verb "+r.Method+" to invoke /json/new. This action supports only PUT verb.", http.StatusMethodNotAllowed)
			return
		}
		// Chrome wants PUT; older clients still GET.
		p.serveJSON(w, r, p.pick(), http.MethodPut, "/json/new", rewriteObject)
	case strings.HasPrefix(path, "/json/activate/"), strings.HasPrefix(path, "/json/close/"):
		up := p.owner(r.Context(), path[strings.LastIndexByte(path, '/')+1:])
		if up == nil {
			http.Error(w, "No such target id: "+path[strings.LastIndexByte(path, '/')+1:], http.StatusNotFound)
			return
		}
		p.serveJSON(w, r, up, http.MethodGet, path, nil)
	case path == "/json/protocol" || path == "/json/protocol/":
		p.serveJSON(w, r, p.pick(), http.MethodGet, "/json/protocol", nil)
	case path == "/metrics" && p.Metrics != nil:
		p.Metrics.Handler().ServeHTTP(w, r)
	case path == "/hosts":
		p.serveHosts(w, r)
	case path == "/healthz":
		p.serveHealth(w, r)
	default:
		p.page.ServeHTTP(w, r) // the page at /, its /status; anything else is not found
	}
}

// Conns reports how many client connections are being relayed.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pairs)
}

func (p *Proxy) checkOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	for _, o := range p.AllowOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	p.log.Warn().Str("origin", origin).Str("remote", r.RemoteAddr).
		Msg("websocket upgrade refused: Origin not allowed (see --allow-origin)")
	return false
}

// keepalive pings every client each PingInterval.
func (p *Proxy) keepalive(ctx context.Context) {
	t := time.NewTicker(p.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		pairs := make([]*pair, 0, len(p.pairs))
		for pr := range p.pairs {
			pairs = append(pairs, pr)
		}
		p.mu.Unlock()
		// Each ping waits for its connection's writer, so one at a time a
		// client stalled in a write would hold up the pings of the others
		// (who are closed when not pinged): ping all at once, each for at
		// most an interval.
		deadline := time.Now().Add(min(p.PingInterval, p.WriteTimeout))
		var wg sync.WaitGroup
		for _, pr := range pairs {
			// An error means the connection is ending; its pumps see to that.
			wg.Go(func() { _ = pr.client.c.WriteControl(websocket.PingMessage, nil, deadline) })
		}
		wg.Wait()
	}
}
