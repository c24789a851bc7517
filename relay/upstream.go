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

	"github.com/cdp-throttle/cdp-throttle/redact"
)

// upstream is one browser the relay talks to.
type upstream struct {
	name   string   // as given, without credentials, for logs
	http   *url.URL // http://host:port of its /json endpoints
	wsURL  string   // the browser endpoint given as --upstream, "" to discover it
	client *http.Client
	holder *holder // set once by Start; nil when nothing is held
	// found is the browser endpoint last discovered through /json/version,
	// so that a client dialling ws://relay/ costs no extra request; it is
	// forgotten when dialling it fails (the browser restarted).
	found atomic.Pointer[string]
	conns atomic.Int64 // client connections relayed to it now
	alive atomic.Bool  // it answered its last health check
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
	up := &upstream{name: redact.URL(raw), client: &http.Client{Timeout: 10 * time.Second}}
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
	UserAgent            string `json:"User-Agent"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

func (up *upstream) version(ctx context.Context) (version, error) {
	var v version
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
			log.Info().Str("upstream", redact.URL(wsURL)).Msg("waiting for the browser")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("relay: upstream %s did not answer: %w", redact.URL(wsURL), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
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
const healthEvery = 2 * time.Second

// health keeps up.alive current until ctx ends.
func (up *upstream) health(ctx context.Context, log zerolog.Logger) {
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
		if err != nil && up.wsURL != "" {
			// A ws:// upstream may have no HTTP side: try its websocket.
			dctx, cancel := context.WithTimeout(ctx, healthEvery)
			var c *websocket.Conn
			if c, _, err = websocket.DefaultDialer.DialContext(dctx, up.wsURL, nil); err == nil {
				c.Close()
			}
			cancel()
		}
		was := up.alive.Swap(err == nil)
		switch {
		case was && err != nil:
			log.Warn().Str("upstream", up.name).Err(err).Msg("browser not answering: new clients go elsewhere")
		case !was && err == nil:
			log.Info().Str("upstream", up.name).Msg("browser answering again")
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

// remember notes which browser a target belongs to.
func (p *Proxy) remember(target string, up *upstream) {
	if len(p.ups) == 1 || target == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.targets) >= maxTracked {
		clear(p.targets)
	}
	p.targets[target] = up
}

// holding says how the browser's navigations are held: "fetch" (the
// relay's own connections), "session" (in each client session), "navigate"
// (in the client streams), "waiting" while nothing can hold them, or
// "off".
func (up *upstream) holding() string {
	if up.holder == nil {
		return "off"
	}
	return up.holder.holding()
}
