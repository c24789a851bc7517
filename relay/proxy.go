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
// It reads messages with package cdp; it knows neither the limiter's rule
// nor Redis. What one client may do to the others sharing a browser is in
// share.go: a client's Browser.close closes only what it owns (package
// ownership keeps track), and what a vanished client created is closed
// after OrphanTimeout.
//
// Holding navigations is package hold's: Start builds a hold.Holder from
// the Proxy's Limiter, Intercept and HoldBackup and arms it on each
// browser (a hold.Upstream); each client connection is a hold.Client, and
// the relay calls the hold.Conn it gets back at fixed moments (a client's
// message before it is written on, a browser's before it reaches the
// client, the connection started and ended). A browser nothing holds
// (a nil hold.Browser) is relayed as is.
package relay

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/admission"
	"github.com/cdp-throttle/cdp-throttle/dashboard"
	"github.com/cdp-throttle/cdp-throttle/guardian"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/fetch"
	"github.com/cdp-throttle/cdp-throttle/hold/session"
	"github.com/cdp-throttle/cdp-throttle/hold/stream"
	"github.com/cdp-throttle/cdp-throttle/ownership"
)

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
	// Limiter books the navigations (package hold holds them). Nil, or a
	// limiter that is Off, relays without ever delaying.
	Limiter hold.Limiter
	// Intercept chooses how navigations are caught.
	Intercept hold.Intercept
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
	// PingInterval is how often the relay's own connections to the
	// browser are pinged; one that has not answered within two intervals
	// is closed and dialled again. Clients are never pinged (Chromium
	// pings none, and ChromeDriver answers none): a client whose host is
	// gone is found by TCP keepalive (wsconn.go). Zero means
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
	// DrainTimeout is how long a stop (Serve's context ending) goes on
	// letting held navigations go at their slots before it answers the
	// rest with the relay's own 429 (stop.go). Zero means
	// DefaultDrainTimeout; negative answers them at once.
	DrainTimeout time.Duration
	// Hurry, when closed during a stop, ends the drain at once (a second
	// signal): what is held is still answered, never let go. Nil never
	// hurries.
	Hurry <-chan struct{}
	// Guardian, when set, is the unix socket of the relay's guardian
	// (package guardian: the process that started this one): the relay's
	// connections that hold navigations go through it, and the relay
	// reports what its clients created to it (guarded.go), so that the
	// relay's death lets nothing go. "" runs without one.
	Guardian string

	report *guardian.Reporter // set once by Start when Guardian is set
	log    zerolog.Logger     // set once by Start
	ups    []*upstream        // set once by Start
	holder *hold.Holder       // set once by Start; nil when nothing is held
	gate   *admission.Gate    // set once by Start: places in the browsers for clients
	stop   context.CancelFunc // set once by Start; ends the background goroutines
	done   sync.WaitGroup     // background goroutines

	timeline dashboard.Timeline // the page's memory of the last navigations
	page     dashboard.Handler  // set once by Start: the page at / and /status

	drainEnd atomic.Int64 // the stop's drain ends then, in Unix ns; 0 until a stop began (stopping)

	mu      sync.Mutex
	pairs   map[*pair]struct{}   // guarded by mu
	targets map[string]*upstream // guarded by mu; which browser a target is in, with several
	closed  bool                 // guarded by mu
}

// clientHandshake bounds how long a client's connection waits for the
// browser's answer to its upgrade: a browser busy with a hundred pages
// answers in seconds, and a client connected to it directly would have
// waited (the client's leaving ends the wait too).
const clientHandshake = time.Minute

// readBuffer is the size of each relayed connection's read buffer: what
// a busy browser sent since the last read comes in one system call, as a
// byte-copying proxy reads it, and each read with data is one batched
// write to the other side (batch.go).
const readBuffer = 32 << 10

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
	// The relay's own connections to the browsers (upstream.Dial: the
	// holding's, the share's). Read buffers take what a busy browser sent
	// since the last read in one system call.
	dialer := &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   readBuffer,
		WriteBufferSize:  8 << 10,
	}
	for _, up := range p.ups {
		up.dialer, up.readLimit = dialer, p.MaxMessageSize
		if p.Guardian != "" {
			up.guardian = &guardian.Client{Socket: p.Guardian}
		}
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
	if p.Guardian != "" {
		if err := p.startReports(ctx, bg); err != nil {
			stop()
			return err
		}
	}
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
	if b, ok := p.Limiter.(browserAgent); ok {
		for i := range p.ups {
			if errs[i] == nil && versions[i].UserAgent != "" {
				b.SetBrowser(versions[i].UserAgent)
				break
			}
		}
	}
	hd := &hold.Holder{
		Limiter:      p.Limiter,
		Intercept:    p.Intercept,
		Ways:         hold.Ways{Fetch: fetch.New, Session: session.New, Stream: stream.New},
		HoldBackup:   p.HoldBackup,
		Metrics:      p.Metrics,
		Timeline:     &p.timeline,
		Log:          &p.log,
		WriteTimeout: p.WriteTimeout,
		PingInterval: p.PingInterval,
		StartTimeout: p.StartTimeout,
	}
	if !hd.Start() {
		p.log.Info().Msg("limiter off: relaying without holding navigations")
		return nil
	}
	p.holder = hd
	for i, u := range p.ups {
		b, err := hd.Arm(waitCtx, bg, u, versions[i].Browser, errs[i], &p.done)
		if err != nil {
			stop()
			p.done.Wait()
			return err
		}
		u.holds = b
	}
	return nil
}

// Close closes every relayed connection with 1001 (going away), stops the
// relay's own browser connection and waits for its goroutines. Called
// alone, it leaves held navigations to the browser, which lets them go
// as the connections close; Serve's stop (stop.go) answers them first.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.holder != nil {
		p.holder.Close()
	}
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
			pr.shutdown()
			select {
			case <-pr.ended:
			case <-grace.C:
				pr.client.NC.Close()
				pr.browser.NC.Close()
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
	if p.holder != nil {
		p.holder.Wait()
	}
	return nil
}

// Serve answers clients on ln until ctx ends, then stops as stop.go
// says (no new clients, held navigations let go at their slots for
// DrainTimeout and the rest answered by the relay, its clients' pages
// closed), closes every relayed connection and returns nil; or returns
// the error that stopped serving. Call it after Start.
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
	p.drain() // still serving: clients are told it is stopping
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
	path := r.URL.Path
	if p.stopping() && (websocket.IsWebSocketUpgrade(r) || strings.HasPrefix(path, "/json")) {
		p.refuseStopping(w)
		return
	}
	if websocket.IsWebSocketUpgrade(r) {
		p.serveWebsocket(w, r)
		return
	}
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
