// Package relay is a Chrome DevTools Protocol relay: clients connect to it
// as they would to the browser, every message passes through unchanged, and
// each top-level navigation is held until its host's slot in a
// limiter.Limiter comes up.
//
// Navigations are caught in one of two ways. With a Chromium upstream the
// relay opens its own connection to the browser endpoint and enables Fetch
// interception there for document requests; the browser pauses every
// document request of every page for it, however the navigation started,
// and the relay never touches a client's sessions. A browser that does not
// support that (Lightpanda gives each connection a browser of its own) gets
// the fallback: the relay holds Page.navigate, Page.reload and
// Target.createTarget commands in the client's own stream and reads the
// answers from the Network events the client enabled.
package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Intercept chooses how the relay catches navigations.
type Intercept int

const (
	// InterceptAuto uses browser-level Fetch where the browser supports it
	// and falls back to holding navigation commands otherwise.
	InterceptAuto Intercept = iota
	// InterceptFetch requires browser-level Fetch interception.
	InterceptFetch
	// InterceptNavigate holds Page.navigate, Page.reload and
	// Target.createTarget commands in each client's stream.
	InterceptNavigate
)

// ParseIntercept reads "auto", "fetch" or "navigate".
func ParseIntercept(s string) (Intercept, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return InterceptAuto, nil
	case "fetch":
		return InterceptFetch, nil
	case "navigate":
		return InterceptNavigate, nil
	}
	return 0, fmt.Errorf("relay: intercept %q: want auto, fetch or navigate", s)
}

func (i Intercept) String() string {
	return [...]string{"auto", "fetch", "navigate"}[i]
}

// Limiter books navigation slots per host, as *limiter.Limiter does in
// process; a shared store can stand in for it. Its methods must be safe for
// concurrent use.
type Limiter interface {
	// Mode reports whether the limiter is adaptive, fixed or off.
	Mode() limiter.Mode
	// Reserve books host's next slot for a navigation wanted at now.
	Reserve(host string, now time.Time) limiter.Reservation
	// Observe feeds the answer a navigation of host got at now back.
	Observe(host string, o limiter.Outcome, now time.Time)
}

// Defaults for the zero values of Proxy's fields.
const (
	DefaultMaxMessageSize = 256 << 20 // what Puppeteer accepts
	DefaultWriteTimeout   = 30 * time.Second
	DefaultPingInterval   = 30 * time.Second
	DefaultStartTimeout   = 30 * time.Second
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
	// Limiter books the navigations. Nil, or a limiter that is Off, relays
	// without ever delaying.
	Limiter Limiter
	// Intercept chooses how navigations are caught.
	Intercept Intercept
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

	log      zerolog.Logger // set once by Start
	upstream *upstream      // set once by Start
	holder   *holder        // set once by Start; nil when nothing is held
	dialer   *websocket.Dialer
	upgrader *websocket.Upgrader
	warned   warnOnce
	stop     context.CancelFunc // set once by Start; ends the background goroutines
	done     sync.WaitGroup     // background goroutines

	mu     sync.Mutex
	pairs  map[*pair]struct{} // guarded by mu
	closed bool               // guarded by mu
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
	up, err := parseUpstream(p.Upstream)
	if err != nil {
		return err
	}
	p.upstream = up
	p.pairs = make(map[*pair]struct{})
	// Write buffers are per connection and small: the server side writes
	// a message of any size in one frame past its buffer, and Chromium
	// takes a bigger command in fragments. (A shared buffer pool would
	// cost an allocation per message.)
	p.dialer = &websocket.Dialer{
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  8 << 10,
	}
	p.upgrader = &websocket.Upgrader{
		HandshakeTimeout: 10 * time.Second,
		WriteBufferSize:  8 << 10,
		CheckOrigin:      p.checkOrigin,
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			http.Error(w, reason.Error(), status)
		},
	}

	waitCtx, cancel := context.WithTimeout(ctx, p.StartTimeout)
	defer cancel()
	version, err := up.waitVersion(waitCtx, p.log)
	if err != nil {
		return err
	}
	bg, stop := context.WithCancel(context.Background())
	p.stop = stop
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		p.keepalive(bg)
	}()

	if p.Limiter == nil || p.Limiter.Mode() == limiter.Off {
		p.log.Info().Msg("limiter off: relaying without holding navigations")
		return nil
	}
	mode := p.Intercept
	if mode == InterceptAuto && strings.HasPrefix(version.Browser, "Lightpanda") {
		mode = InterceptNavigate // each of its connections is a browser of its own
	}
	h := &holder{p: p}
	p.holder = h
	if mode == InterceptNavigate {
		h.fallback(version.Browser, "requested")
		return nil
	}
	if err := h.start(waitCtx, bg, &p.done); err != nil {
		if mode == InterceptFetch {
			stop()
			p.done.Wait()
			return err
		}
		h.fallback(version.Browser, err.Error())
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
	for _, pr := range pairs {
		pr.shutdown(websocket.CloseGoingAway, "relay shutting down")
	}
	for _, pr := range pairs {
		<-pr.ended
	}
	if p.stop != nil {
		p.stop()
	}
	p.done.Wait()
	return nil
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
		deadline := time.Now().Add(p.WriteTimeout)
		for _, pr := range pairs {
			// An error means the connection is ending; its pumps see to that.
			_ = pr.client.c.WriteControl(websocket.PingMessage, nil, deadline)
		}
	}
}

// upstream is the browser the relay talks to.
type upstream struct {
	http   *url.URL // http://host:port of its /json endpoints
	wsURL  string   // the browser endpoint given as --upstream, "" to discover it
	client *http.Client
	// found is the browser endpoint last discovered through /json/version,
	// so that a client dialling ws://relay/ costs no extra request; it is
	// forgotten when dialling it fails (the browser restarted).
	found atomic.Pointer[string]
}

func parseUpstream(raw string) (*upstream, error) {
	if raw == "" {
		return nil, errors.New("relay: no upstream browser given")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("relay: upstream %q: want http://host:port or a ws:// URL", raw)
	}
	// Lightpanda takes only an IP address in the Host header; every browser
	// takes the loopback address.
	if h, port, err := net.SplitHostPort(u.Host); err == nil && strings.EqualFold(h, "localhost") {
		u.Host = net.JoinHostPort("127.0.0.1", port)
	}
	up := &upstream{client: &http.Client{Timeout: 10 * time.Second}}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		up.http = &url.URL{Scheme: strings.ToLower(u.Scheme), Host: u.Host}
	case "ws", "wss":
		scheme := "http"
		if strings.EqualFold(u.Scheme, "wss") {
			scheme = "https"
		}
		up.http = &url.URL{Scheme: scheme, Host: u.Host}
		if u.Path == "" {
			u.Path = "/"
		}
		up.wsURL = u.String()
	default:
		return nil, fmt.Errorf("relay: upstream %q: want http://host:port or a ws:// URL", raw)
	}
	return up, nil
}

// browserWS returns the URL of the browser endpoint.
func (up *upstream) browserWS(ctx context.Context) (string, error) {
	if up.wsURL != "" {
		return up.wsURL, nil
	}
	if u := up.found.Load(); u != nil {
		return *u, nil
	}
	v, err := up.version(ctx)
	if err != nil {
		return "", err
	}
	return v.WebSocketDebuggerURL, nil
}

// forget drops the discovered browser endpoint after dialling it failed.
func (up *upstream) forget(wsURL string) {
	if u := up.found.Load(); u != nil && *u == wsURL {
		up.found.CompareAndSwap(u, nil)
	}
}

// pageWS maps a websocket path a client asked the relay for to the
// browser's URL for it.
func (up *upstream) pageWS(ctx context.Context, path string) (string, error) {
	if path == "/" || (up.wsURL != "" && strings.HasPrefix(path, "/devtools/browser/")) {
		return up.browserWS(ctx)
	}
	scheme := "ws"
	if up.http.Scheme == "https" {
		scheme = "wss"
	}
	return (&url.URL{Scheme: scheme, Host: up.http.Host, Path: path}).String(), nil
}

// version is the part of /json/version the relay reads.
type version struct {
	Browser              string `json:"Browser"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

func (up *upstream) version(ctx context.Context) (version, error) {
	var v version
	body, _, err := up.get(ctx, http.MethodGet, "/json/version", "")
	if err != nil {
		return v, err
	}
	if err := jsonUnmarshal(body, &v); err != nil {
		return v, fmt.Errorf("relay: upstream /json/version: %w", err)
	}
	if v.WebSocketDebuggerURL == "" {
		return v, errors.New("relay: upstream /json/version has no webSocketDebuggerUrl")
	}
	// Chrome builds the URL from the Host header it was sent; dial the
	// address the relay was given, whatever name the browser printed.
	ws, err := url.Parse(v.WebSocketDebuggerURL)
	if err != nil {
		return v, fmt.Errorf("relay: upstream webSocketDebuggerUrl: %w", err)
	}
	ws.Host = up.http.Host
	v.WebSocketDebuggerURL = ws.String()
	up.found.Store(&v.WebSocketDebuggerURL)
	return v, nil
}

// waitVersion polls /json/version with backoff until the browser answers
// or ctx ends, then reports the last error.
func (up *upstream) waitVersion(ctx context.Context, log zerolog.Logger) (version, error) {
	if up.wsURL != "" {
		// The HTTP side is optional for a ws:// upstream; the websocket is not.
		v, err := up.version(ctx)
		if err == nil {
			v.WebSocketDebuggerURL = up.wsURL
			return v, nil
		}
		return version{WebSocketDebuggerURL: up.wsURL}, waitDial(ctx, up.wsURL, log)
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := up.version(ctx)
		if err == nil {
			return v, nil
		}
		if attempt == 1 {
			log.Info().Str("upstream", up.http.String()).Msg("waiting for the browser")
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("relay: upstream %s did not answer: %w", up.http, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func waitDial(ctx context.Context, wsURL string, log zerolog.Logger) error {
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		c, _, err := websocket.DefaultDialer.DialContext(ctx, wsURL, nil)
		if err == nil {
			return c.Close()
		}
		if attempt == 1 {
			log.Info().Str("upstream", wsURL).Msg("waiting for the browser")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("relay: upstream %s did not answer: %w", wsURL, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
