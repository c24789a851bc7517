package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/guardian"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/ownership"
	"github.com/cdp-throttle/cdp-throttle/redact"
)

// Endpoint is a browser whose address can change while the relay runs,
// such as one the relay launched, which comes back on another port when
// it is restarted. Its method must be safe for concurrent use.
type Endpoint interface {
	// Endpoint returns where the browser serves CDP now, in the forms of
	// Proxy.Upstream (http://host:port, or the ws:// URL of its browser
	// endpoint), waiting while that is not known (the browser is starting
	// or restarting) until ctx ends.
	Endpoint(ctx context.Context) (string, error)
}

// capacityTeller is an Endpoint that says how many clients its browser
// takes (a launched lightpanda serve announces max_browser_connections).
// Without it, ClientsPerBrowser alone bounds them.
type capacityTeller interface {
	Capacity() int
}

// upstream is one browser the relay talks to.
type upstream struct {
	name  string   // as given, without credentials, for logs
	http  *url.URL // http://host:port of its /json endpoints; nil with ep
	wsURL string   // the browser endpoint given as --upstream, "" to discover it
	ep    Endpoint // set for a browser whose address can change; then ask addr
	// last is ep's address as last parsed, so that an unchanged one is
	// not parsed again.
	last   atomic.Pointer[address]
	client *http.Client
	holds  hold.Browser // set once by Start; nil when nothing is held
	// owners knows which client owns which of its pages and contexts; set
	// once by Start, nil for a browser that gives each connection a
	// browser of its own (Lightpanda).
	owners *ownership.Registry
	// found is the browser endpoint last discovered through /json/version,
	// so that a client dialling ws://relay/ costs no extra request; it is
	// forgotten when dialling it fails (the browser restarted).
	found atomic.Pointer[string]
	conns atomic.Int64 // client connections relayed to it now
	alive atomic.Bool  // it answered its last health check
	// dialer and readLimit are the relay's own connections' (Dial); set
	// once by Start, with guardian, the relay's guardian, when it has one
	// (DialGuarded).
	dialer    *websocket.Dialer
	readLimit int64
	guardian  *guardian.Client
}

func parseUpstream(raw string) (*upstream, error) {
	if raw == "" {
		return nil, errors.New("relay: no upstream browser given")
	}
	a, err := parseAddress(raw)
	if err != nil {
		return nil, err
	}
	return &upstream{name: redact.URL(raw), http: a.http, wsURL: a.ws, client: &http.Client{Timeout: 10 * time.Second}}, nil
}

// endpointUpstream is a browser whose address is asked of ep each time.
func endpointUpstream(ep Endpoint, i int) *upstream {
	name := fmt.Sprintf("browser %d", i+1)
	if s, ok := ep.(fmt.Stringer); ok {
		name = s.String()
	}
	return &upstream{name: name, ep: ep, client: &http.Client{Timeout: 10 * time.Second}}
}

// address is where a browser serves CDP.
type address struct {
	raw  string
	http *url.URL // http://host:port of its /json endpoints
	ws   string   // its browser endpoint when given as a ws:// URL, else ""
}

func parseAddress(raw string) (*address, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("relay: upstream %q: want http://host:port or a ws:// URL", redact.URL(raw))
	}
	// Lightpanda takes only an IP address in the Host header; every browser
	// takes the loopback address.
	if h, port, err := net.SplitHostPort(u.Host); err == nil && strings.EqualFold(h, "localhost") {
		u.Host = net.JoinHostPort("127.0.0.1", port)
	}
	a := &address{raw: raw}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		a.http = &url.URL{Scheme: strings.ToLower(u.Scheme), Host: u.Host}
	case "ws", "wss":
		scheme := "http"
		if strings.EqualFold(u.Scheme, "wss") {
			scheme = "https"
		}
		a.http = &url.URL{Scheme: scheme, Host: u.Host}
		if u.Path == "" {
			u.Path = "/"
		}
		a.ws = u.String()
	default:
		return nil, fmt.Errorf("relay: upstream %q: want http://host:port or a ws:// URL", redact.URL(raw))
	}
	return a, nil
}

// addr returns where the browser serves CDP now: the http:// base of its
// /json endpoints and, when it was given as one, its ws:// browser
// endpoint. For an Endpoint it waits, bounded by ctx, while the browser
// is (re)starting.
func (up *upstream) addr(ctx context.Context) (*url.URL, string, error) {
	if up.ep == nil {
		return up.http, up.wsURL, nil
	}
	raw, err := up.ep.Endpoint(ctx)
	if err != nil {
		return nil, "", err
	}
	if a := up.last.Load(); a != nil && a.raw == raw {
		return a.http, a.ws, nil
	}
	a, err := parseAddress(raw)
	if err != nil {
		return nil, "", err
	}
	up.last.Store(a)
	return a.http, a.ws, nil
}

// browserWS returns the URL of the browser endpoint.
func (up *upstream) browserWS(ctx context.Context) (string, error) {
	base, ws, err := up.addr(ctx)
	if err != nil {
		return "", err
	}
	if ws != "" {
		return ws, nil
	}
	// One discovered at another address is a previous process's.
	if u := up.found.Load(); u != nil && strings.Contains(*u, "://"+base.Host+"/") {
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
	base, ws, err := up.addr(ctx)
	if err != nil {
		return "", err
	}
	if path == "/" || (ws != "" && strings.HasPrefix(path, "/devtools/browser/")) {
		return up.browserWS(ctx)
	}
	scheme := "ws"
	if base.Scheme == "https" {
		scheme = "wss"
	}
	return (&url.URL{Scheme: scheme, Host: base.Host, Path: path}).String(), nil
}

// version is the part of /json/version the relay reads.
type version struct {
	Browser              string `json:"Browser"`
	UserAgent            string `json:"User-Agent"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// lightpanda reports whether the browser is Lightpanda, which gives each
// connection a browser of its own.
func (v version) lightpanda() bool {
	return strings.HasPrefix(strings.ToLower(v.Browser), "lightpanda")
}

func (up *upstream) version(ctx context.Context) (version, error) {
	var v version
	base, _, err := up.addr(ctx)
	if err != nil {
		return v, err
	}
	body, _, err := up.get(ctx, http.MethodGet, "/json/version", "")
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(body, &v); err != nil {
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
	ws.Host = base.Host
	v.WebSocketDebuggerURL = ws.String()
	up.found.Store(&v.WebSocketDebuggerURL)
	return v, nil
}

// waitNotice is how often the wait for a browser says it still waits.
var waitNotice = 5 * time.Second // a variable for tests

// waitVersion polls /json/version with backoff until the browser answers
// or ctx ends, saying every waitNotice what it waits for; then it reports
// the last error. bound is the StartTimeout that Start put on ctx, for the
// messages; hint, when set, goes with the first (Proxy.StartHint).
func (up *upstream) waitVersion(ctx context.Context, log zerolog.Logger, bound time.Duration, hint string) (version, error) {
	log = log.With().Str("upstream", up.name).Logger()
	began, noticed := time.Now(), time.Now()
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := up.probe(ctx, attempt == 1)
		if err == nil {
			return v, nil
		}
		switch {
		case attempt == 1 && hint != "":
			log.Info().Stringer("start_timeout", bound).Str("error", reason(err)).Msg("waiting for the browser: " + hint)
		case attempt == 1:
			log.Info().Stringer("start_timeout", bound).Str("error", reason(err)).Msg("waiting for the browser")
		case time.Since(noticed) >= waitNotice:
			noticed = time.Now()
			log.Info().Stringer("waited", time.Since(began).Round(100*time.Millisecond)).Stringer("start_timeout", bound).Str("error", reason(err)).
				Msg("no answer from the browser yet; --start-timeout bounds the wait")
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return v, fmt.Errorf("relay: browser %s did not answer within %v (--start-timeout): %s", up.name, bound, reason(err))
			}
			return v, fmt.Errorf("relay: waiting for browser %s: %w", up.name, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second, waitNotice)
	}
}

// probe asks the browser once whether it is up: /json/version, or for a
// browser given as a ws:// URL its websocket, whose HTTP side is optional
// (asked on the first probe only, unless its address can change).
func (up *upstream) probe(ctx context.Context, first bool) (version, error) {
	_, ws, err := up.addr(ctx)
	if err != nil {
		return version{}, err
	}
	if ws == "" || first || up.ep != nil {
		v, err := up.version(ctx)
		if err == nil && ws != "" {
			v.WebSocketDebuggerURL = ws
		}
		if err == nil || ws == "" {
			return v, err
		}
	}
	c, _, err := websocket.DefaultDialer.DialContext(ctx, ws, nil)
	if err != nil {
		return version{}, fmt.Errorf("relay: dialing %s: %w", redact.URL(ws), err)
	}
	c.Close()
	return version{WebSocketDebuggerURL: ws}, nil
}

// reason is err's text without this package's prefix, for a message that
// carries it already.
func reason(err error) string {
	return strings.TrimPrefix(err.Error(), "relay: ")
}

// browserID is the id in the browser endpoint's path (/devtools/browser/ID),
// "" when it has none (Lightpanda) or is not known yet.
func (up *upstream) browserID() string {
	u := up.found.Load()
	if u == nil {
		return ""
	}
	_, id, ok := strings.Cut(*u, "/devtools/browser/")
	if !ok {
		return ""
	}
	return id
}

// healthEvery is how often each browser's /json/version is asked.
var healthEvery = 2 * time.Second // a variable for tests

// health keeps up.alive current until ctx ends. alone says the relay has
// no other browser for new clients; revived is called when the browser
// answers again (clients waiting for a place may go to it).
func (up *upstream) health(ctx context.Context, log zerolog.Logger, alone bool, revived func()) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, healthEvery)
		_, err := up.version(cctx)
		cancel()
		if err != nil {
			dctx, cancel := context.WithTimeout(ctx, healthEvery)
			if _, ws, aerr := up.addr(dctx); aerr == nil && ws != "" {
				// A ws:// upstream may have no HTTP side: try its websocket.
				var c *websocket.Conn
				if c, _, err = websocket.DefaultDialer.DialContext(dctx, ws, nil); err == nil {
					c.Close()
				}
			}
			cancel()
		}
		was := up.alive.Swap(err == nil)
		switch {
		case was && err != nil && alone:
			log.Warn().Str("upstream", up.name).Err(err).Msg("browser not answering")
		case was && err != nil:
			log.Warn().Str("upstream", up.name).Err(err).Msg("browser not answering: new clients go elsewhere")
		case !was && err == nil:
			log.Info().Str("upstream", up.name).Msg("browser answering again")
			revived()
		}
	}
}

// pick chooses the browser for a new client: the live one with the fewest
// connections, the first one when none answers.
func (p *Proxy) pick() *upstream {
	var best *upstream
	for _, up := range p.ups {
		if !up.alive.Load() {
			continue
		}
		if best == nil || up.conns.Load() < best.conns.Load() {
			best = up
		}
	}
	if best == nil {
		return p.ups[0]
	}
	return best
}

// byBrowserID finds the browser whose endpoint is /devtools/browser/id.
func (p *Proxy) byBrowserID(id string) *upstream {
	if len(p.ups) == 1 {
		return p.ups[0]
	}
	for _, up := range p.ups {
		if up.browserID() == id {
			return up
		}
	}
	return nil
}

// owner finds the browser a target (a page's id) belongs to, asking each
// live browser's /json/list when it is not known yet.
func (p *Proxy) owner(ctx context.Context, target string) *upstream {
	if len(p.ups) == 1 {
		return p.ups[0]
	}
	p.mu.Lock()
	up := p.targets[target]
	p.mu.Unlock()
	if up != nil {
		return up
	}
	for _, up := range p.ups {
		if !up.alive.Load() {
			continue
		}
		body, _, err := up.get(ctx, http.MethodGet, "/json/list", "")
		if err != nil {
			continue
		}
		var list []struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(body, &list) != nil {
			continue
		}
		for _, t := range list {
			p.remember(t.ID, up)
		}
		if slices.ContainsFunc(list, func(t struct {
			ID string `json:"id"`
		}) bool {
			return t.ID == target
		}) {
			return up
		}
	}
	return nil
}

// maxTargets bounds how many targets' browsers the relay remembers; past
// it, it forgets them all and asks again.
const maxTargets = 10_000

// remember notes which browser a target belongs to.
func (p *Proxy) remember(target string, up *upstream) {
	if len(p.ups) == 1 || target == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.targets) >= maxTargets {
		clear(p.targets)
	}
	p.targets[target] = up
}

// holding says how the browser's navigations are held: "fetch" (the
// relay's own connections), "session" (in each client session), "navigate"
// (in the client streams), "waiting" while nothing can hold them, or
// "off".
func (up *upstream) holding() string {
	if up.holds == nil {
		return "off"
	}
	return up.holds.Holding()
}

// Name names the browser in logs (hold.Upstream).
func (up *upstream) Name() string { return up.name }

// Dial opens a connection of the relay's own to the browser endpoint
// (hold.Upstream): the holding's, the share's, the command line's. One
// that fails forgets the discovered endpoint: the browser may have
// restarted under another.
func (up *upstream) Dial(ctx context.Context) (*websocket.Conn, error) {
	wsURL, err := up.browserWS(ctx)
	if err != nil {
		return nil, err
	}
	c, _, err := up.dialer.DialContext(ctx, wsURL, nil)
	if err != nil {
		up.forget(wsURL)
		return nil, fmt.Errorf("relay: dialing the browser endpoint: %w", err)
	}
	c.SetReadLimit(up.readLimit)
	return c, nil
}

// dialBrief opens a short-lived connection of the relay's own to the
// browser endpoint (Dial), whose reads and writes end at ctx's deadline.
func (up *upstream) dialBrief(ctx context.Context) (*websocket.Conn, error) {
	c, err := up.Dial(ctx)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	c.SetWriteDeadline(deadline)
	c.SetReadDeadline(deadline)
	return c, nil
}
