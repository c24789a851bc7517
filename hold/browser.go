package hold

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// via is how the navigations of one browser are held.
type via int32

const (
	// viaNone: nothing is held yet (the relay's own connection is not up
	// in Fetch mode); navigations wait until something holds them.
	viaNone via = iota
	// viaFetch: the relay's own browser connections pause document
	// requests (fetch.go).
	viaFetch
	// viaSession: the relay's own interception in each client session
	// (session.go).
	viaSession
	// viaStream: navigation commands held in each client stream
	// (stream.go).
	viaStream
)

func (v via) String() string {
	return [...]string{"none", "fetch", "session", "navigate"}[v]
}

// browserHold holds the navigations of the relay's clients on one browser: it
// chooses how (via), books slots in the Holder's Limiter, lets navigations
// go when their slot comes and feeds answers back. It fails closed: while
// it cannot hold through its chosen way, navigations wait (armed).
type browserHold struct {
	holder  *Holder
	up      Upstream
	browser string // as /json/version names it, for logs
	// lightpanda is set for a browser that gives each connection a browser
	// of its own and honours only the "*" Fetch pattern everywhere.
	lightpanda bool

	way      atomic.Int32 // a via
	fetch    *fetchHold   // the relay's own connections; nil unless Fetch was chosen
	claims   claims       // the pages of the relay's own clients, for Fetch
	waiting  atomic.Int64 // navigations waiting for their slot now
	fellOver atomic.Bool  // it left Fetch (or the session strategy) once

	// mu guards armed; a leaf (hold.go's lock order: taken under
	// watch.mu and fetchHold.netMu, takes none).
	mu    sync.Mutex
	armed chan struct{} // guarded by mu; closed while navigations can be held

	// connsMu guards conns; taken under no other, takes none.
	connsMu sync.Mutex
	conns   map[*watch]struct{} // guarded by connsMu; the client connections started and not ended

	// ansMu guards answering; taken under no other, takes none.
	ansMu     sync.Mutex
	answering map[string]*answering // guarded by ansMu; by host

	// attachedClients counts the sessions the relay's clients have on each
	// target, to tell a client whether a target is attached as it would be
	// without the relay.
	attachedClients counts
	// clientNetwork counts the page sessions of the relay's clients with
	// Network events on, on each page: the Fetch strategy reads when a
	// request left, and its answer, from theirs, and enables its own only
	// where no client did.
	clientNetwork counts
}

// counts is a number per key, safe for concurrent use; a key counted down
// to zero is forgotten.
type counts struct {
	mu sync.Mutex     // a leaf: taken under watch.mu, takes none
	n  map[string]int // guarded by mu
}

// add adds d to key's count and returns the count.
func (c *counts) add(key string, d int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[key] += d
	n := c.n[key]
	if n <= 0 {
		delete(c.n, key)
	}
	return max(n, 0)
}

func (c *counts) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// countOf is count of a key given as bytes, read without a copy.
func (c *counts) countOf(key []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[string(key)]
}

func newBrowserHold(hd *Holder, up Upstream, browser string) *browserHold {
	h := &browserHold{holder: hd, up: up, browser: browser, armed: make(chan struct{}), answering: make(map[string]*answering), conns: make(map[*watch]struct{})}
	h.lightpanda = strings.HasPrefix(strings.ToLower(browser), "lightpanda")
	h.claims.init()
	h.claims.all = hd.EveryPage
	return h
}

// Conn follows a client connection of the browser (Browser.Conn).
func (h *browserHold) Conn(c Client) Conn { return newWatch(c, h) }

// Name is the browser as its /json/version names it (Browser.Name).
func (h *browserHold) Name() string { return h.browser }

// via reports how navigations are held now.
func (h *browserHold) via() via { return via(h.way.Load()) }

// use holds navigations the given way from now on, in every client
// connection of this browser.
func (h *browserHold) use(v via) {
	h.way.Store(int32(v))
	if v == viaSession || v == viaStream {
		h.setArmed(true) // held in each client connection: nothing to wait for
	}
	h.connsMu.Lock()
	conns := make([]*watch, 0, len(h.conns))
	for w := range h.conns {
		conns = append(conns, w)
	}
	h.connsMu.Unlock()
	for _, w := range conns {
		w.switchTo(v)
	}
}

// fallOver leaves the way navigations are held now for the next one, and
// says once what the browser did and what the relay does instead.
func (h *browserHold) fallOver(why string) {
	cur := h.via()
	if cur == viaStream {
		return // the last resort
	}
	next := viaSession
	if cur == viaSession {
		next = viaStream
	}
	if h.fellOver.CompareAndSwap(false, true) {
		h.holder.log.Warn().Str("upstream", h.up.Name()).Str("browser", h.browser).Str("why", why).Str("holding", next.String()).
			Msg(fallOverMsg[next])
	}
	h.use(next)
	if h.fetch != nil {
		h.fetch.stopAll() // after use: its connections ending is no news then
	}
}

var fallOverMsg = map[via]string{
	viaSession: "holding navigations through each client session instead of the relay's own connection: " +
		"popups a client is not attached to go unheld",
	viaStream: "holding navigations in the client stream: only Page.navigate, Page.reload, " +
		"Page.navigateToHistoryEntry and Target.createTarget are held; link clicks, form submissions, " +
		"script navigations, redirects and popups go unheld (counted as unheld when the client enabled Network events)",
}

// setArmed records whether navigations can be held now.
func (h *browserHold) setArmed(on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.armed:
		if !on {
			h.armed = make(chan struct{})
		}
	default:
		if on {
			close(h.armed)
		}
	}
}

// whenArmed returns a channel closed once navigations can be held.
func (h *browserHold) whenArmed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.armed
}

// isArmed reports whether navigations can be held now.
func (h *browserHold) isArmed() bool {
	select {
	case <-h.whenArmed():
		return true
	default:
		return false
	}
}

// Holding says how the browser's navigations are held, for /healthz:
// "fetch", "session", "navigate", or "waiting" while nothing can hold them
// (Browser.Holding).
func (h *browserHold) Holding() string {
	if !h.isArmed() {
		return "waiting"
	}
	return h.via().String()
}

// pageLog is log naming the page (its target id) and the client session a
// navigation is in, for its debug lines: a reader looks for a page, and a
// connection's websocket path is / for most clients. Either may be "".
// Built only when debug lines are written.
func pageLog(log *zerolog.Logger, page, session string) *zerolog.Logger {
	if log.GetLevel() > zerolog.DebugLevel || page == "" && session == "" {
		return log
	}
	c := log.With()
	if page != "" {
		c = c.Str("page", page)
	}
	if session != "" {
		c = c.Str("session", session)
	}
	l := c.Logger()
	return &l
}

// NewPage is called before a client's /json/new (Browser.NewPage): a page
// it opens is that client's, and its first request may pause before the
// answer names it.
func (h *browserHold) NewPage(url string) (created func(target string)) {
	h.claims.creating()
	done := func() {}
	if h.fetch != nil && h.via() == viaFetch && url != "" && url != "about:blank" {
		// The page's first request leaves before any session can
		// attach to it: the relay's browser-level interception pauses
		// every document until the page is armed.
		var covered <-chan struct{}
		covered, done = h.fetch.creatingWithURL()
		<-covered
	}
	return func(target string) {
		h.claims.created(target)
		h.coveredThen(target, done)
	}
}

// coveredThen calls done once the relay's interception covers a page a
// client created (at once when the creation failed), within coverWait.
func (h *browserHold) coveredThen(target string, done func()) {
	f := h.fetch
	if target == "" || f == nil {
		done()
		return
	}
	cover := f.cover(target, false)
	if cover == nil {
		done()
		return
	}
	h.holder.limiting.Add(1)
	go func() {
		defer h.holder.limiting.Done()
		defer done()
		t := time.NewTimer(coverWait)
		defer t.Stop()
		select {
		case <-cover:
		case <-t.C:
		}
	}()
}
