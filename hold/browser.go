package hold

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/hold/claims"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

// via is how the navigations of one browser are held.
type via int32

const (
	// viaNone: nothing is held yet (the relay's own connection is not up
	// in Fetch mode); navigations wait until something holds them.
	viaNone via = iota
	// viaFetch: the relay's own browser connections pause document
	// requests (hold/fetch).
	viaFetch
	// viaSession: the relay's own interception in each client session
	// (hold/session).
	viaSession
	// viaStream: navigation commands held in each client stream
	// (hold/stream).
	viaStream
)

func (v via) String() string {
	return [...]string{"none", "fetch", "session", "navigate"}[v]
}

// BrowserHold holds the navigations of the relay's clients on one browser: it
// chooses how (via), books slots in the Holder's Limiter, lets navigations
// go when their slot comes and feeds answers back. It fails closed: while
// it cannot hold through its chosen way, navigations wait (armed). The
// ways see it through Core and FetchCore (ways.go), never its fields;
// Holder and Up are set once by Holder.Arm and never change.
type BrowserHold struct {
	Holder  *Holder  // the Holder that armed it
	Up      Upstream // the browser
	browser string   // as /json/version names it, for logs
	// Lightpanda is set for a browser that gives each connection a browser
	// of its own and honours only the "*" Fetch pattern everywhere.
	Lightpanda bool

	way      atomic.Int32 // a via
	fetch    FetchWay     // the relay's own connections; nil unless Fetch was chosen
	claims   claims.Set   // the pages of the relay's own clients, for Fetch (Claims)
	waiting  atomic.Int64 // navigations waiting for their slot now
	fellOver atomic.Bool  // it left Fetch (or the session strategy) once

	// mu guards armed; a leaf (hold.go's lock order: taken under
	// Watch.mu and fetch's mutexes, takes none).
	mu    lockorder.Mutex[lockorder.Leaf]
	armed chan struct{} // guarded by mu; closed while navigations can be held

	// connsMu guards conns; taken under no other, takes none.
	connsMu lockorder.Mutex[lockorder.Lone]
	conns   map[*Watch]struct{} // guarded by connsMu; the client connections started and not ended

	// ansMu guards answering; taken under no other, takes none.
	ansMu     lockorder.Mutex[lockorder.Lone]
	answering map[string]*answering // guarded by ansMu; by host

	// attachedClients counts the sessions the relay's clients have on each
	// target, to tell a client whether a target is attached as it would be
	// without the relay.
	attachedClients Counts
	// clientNetwork counts the page sessions of the relay's clients with
	// Network events on, on each page: the Fetch strategy reads when a
	// request left, and its answer, from theirs, and enables its own only
	// where no client did (ClientNetworkOn).
	clientNetwork Counts
}

// Counts is a number per key, safe for concurrent use; a key counted down
// to zero is forgotten.
type Counts struct {
	mu lockorder.Mutex[lockorder.Leaf] // a leaf: taken under watch.mu, takes none
	n  map[string]int                  // guarded by mu
}

// add adds d to key's count and returns the count.
func (c *Counts) add(key string, d int) int {
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

func (c *Counts) Count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// countOf is count of a key given as bytes, read without a copy.
func (c *Counts) countOf(key []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[string(key)]
}

func newBrowserHold(hd *Holder, up Upstream, browser string) *BrowserHold {
	h := &BrowserHold{Holder: hd, Up: up, browser: browser, armed: make(chan struct{}), answering: make(map[string]*answering), conns: make(map[*Watch]struct{})}
	h.Lightpanda = strings.HasPrefix(strings.ToLower(browser), "lightpanda")
	h.claims.Init()
	return h
}

// Conn follows a client connection of the browser (Browser.Conn).
func (h *BrowserHold) Conn(c Client) Conn { return newWatch(c, h) }

// Name is the browser as its /json/version names it (Browser.Name).
func (h *BrowserHold) Name() string { return h.browser }

// via reports how navigations are held now.
func (h *BrowserHold) via() via { return via(h.way.Load()) }

// use holds navigations the given way from now on, in every client
// connection of this browser.
func (h *BrowserHold) use(v via) {
	h.way.Store(int32(v))
	switch v {
	case viaSession, viaStream:
		h.SetArmed(true) // held in each client connection: nothing to wait for
	case viaNone:
		h.SetArmed(false)
	}
	h.connsMu.Lock()
	conns := make([]*Watch, 0, len(h.conns))
	for w := range h.conns {
		conns = append(conns, w)
	}
	h.connsMu.Unlock()
	for _, w := range conns {
		w.switchTo(v)
	}
}

// FallOver leaves the way navigations are held now for the next one, and
// says once what the browser did and what the relay does instead.
func (h *BrowserHold) FallOver(why string) {
	cur := h.via()
	if cur == viaStream {
		return // the last resort
	}
	next := viaSession
	if cur == viaSession || h.Holder.Ways.Session == nil {
		next = viaStream
	}
	if next == viaStream && h.Holder.Ways.Stream == nil {
		next = viaNone // nothing else can hold: navigations wait
	}
	if h.fellOver.CompareAndSwap(false, true) {
		h.Holder.log.Warn().Str("upstream", h.Up.Name()).Str("browser", h.browser).Str("why", why).Str("holding", next.String()).
			Msg(fallOverMsg[next])
	}
	h.use(next)
	if h.fetch != nil {
		h.fetch.StopAll() // after use: its connections ending is no news then
	}
}

var fallOverMsg = map[via]string{
	viaSession: "holding navigations through each client session instead of the relay's own connection: " +
		"popups a client is not attached to go unheld",
	viaNone: "no other way of holding navigations: they wait",
	viaStream: "holding navigations in the client stream: only Page.navigate, Page.reload, " +
		"Page.navigateToHistoryEntry and Target.createTarget are held; link clicks, form submissions, " +
		"script navigations, redirects and popups go unheld (counted as unheld when the client enabled Network events)",
}

// SetArmed records whether navigations can be held now.
func (h *BrowserHold) SetArmed(on bool) {
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

// WhenArmed returns a channel closed once navigations can be held.
func (h *BrowserHold) WhenArmed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.armed
}

// IsArmed reports whether navigations can be held now.
func (h *BrowserHold) IsArmed() bool {
	select {
	case <-h.WhenArmed():
		return true
	default:
		return false
	}
}

// Holding says how the browser's navigations are held, for /healthz:
// "fetch", "session", "navigate", or "waiting" while nothing can hold them
// (Browser.Holding).
func (h *BrowserHold) Holding() string {
	if !h.IsArmed() {
		return "waiting"
	}
	return h.via().String()
}

// PageLog is log naming the page (its target id) and the client session a
// navigation is in, for its debug lines: a reader looks for a page, and a
// connection's websocket path is / for most clients. Either may be "".
// Built only when debug lines are written.
func PageLog(log *zerolog.Logger, page, session string) *zerolog.Logger {
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
func (h *BrowserHold) NewPage(url string) (created func(target string)) {
	h.claims.Creating()
	done := func() {}
	if h.fetch != nil && h.via() == viaFetch && url != "" && url != "about:blank" {
		// The page's first request leaves before any session can
		// attach to it: the relay's browser-level interception pauses
		// every document until the page is armed.
		var covered <-chan struct{}
		covered, done = h.fetch.CreatingWithURL()
		<-covered
	}
	return func(target string) {
		h.claims.Created(target)
		h.coveredThen(target, done)
	}
}

// coveredThen calls done once the relay's interception covers a page a
// client created (at once when the creation failed), within CoverWait.
func (h *BrowserHold) coveredThen(target string, done func()) {
	f := h.fetch
	if target == "" || f == nil {
		done()
		return
	}
	cover := f.Cover(target, false)
	if cover == nil {
		done()
		return
	}
	h.Holder.limiting.Add(1)
	go func() {
		defer h.Holder.limiting.Done()
		defer done()
		t := time.NewTimer(CoverWait)
		defer t.Stop()
		select {
		case <-cover:
		case <-t.C:
		}
	}()
}

// InFetch reports whether navigations are held through the relay's own
// connections (Fetch) now.
func (h *BrowserHold) InFetch() bool { return h.via() == viaFetch }

// ClientsOn is how many sessions the relay's clients have on a target.
func (h *BrowserHold) ClientsOn(target string) int { return h.attachedClients.Count(target) }

// Waiting is how many navigations wait for their slot now.
func (h *BrowserHold) Waiting() int { return int(h.waiting.Load()) }

// Fetch is the browser's Fetch way, nil unless Fetch was chosen.
func (h *BrowserHold) Fetch() FetchWay { return h.fetch }

// Claims is the set of the browser's pages that are the relay's clients'
// (FetchCore).
func (h *BrowserHold) Claims() *claims.Set { return &h.claims }

// ClientNetworkOn is how many sessions of the relay's clients have
// Network events on, on page (FetchCore).
func (h *BrowserHold) ClientNetworkOn(page string) int { return h.clientNetwork.Count(page) }

// Upstream is the browser (FetchCore).
func (h *BrowserHold) Upstream() Upstream { return h.Up }

// Settings are what the Fetch way reads of the Holder that armed the
// browser (FetchCore).
func (h *BrowserHold) Settings() FetchSettings {
	hd := h.Holder
	return FetchSettings{
		Intercept:    hd.Intercept,
		HoldBackup:   hd.HoldBackup,
		NetLinger:    hd.NetLinger,
		WriteTimeout: hd.WriteTimeout,
		PingInterval: hd.PingInterval,
		StartTimeout: hd.StartTimeout,
		Log:          hd.Logger(),
		Metrics:      hd.Metrics,
		Limiting:     hd.Limiting(),
	}
}

// Closing reports whether the relay is shutting down (Holder.Closing,
// FetchCore).
func (h *BrowserHold) Closing() bool { return h.Holder.Closing() }

// Claimed reports whether target is one of the relay's clients' pages
// (Core).
func (h *BrowserHold) Claimed(target string) bool { return h.claims.Claimed(target) }

// AnswerHeaders are the answer headers the Limiter reads (Core).
func (h *BrowserHold) AnswerHeaders() []string { return h.Holder.AnswerHeaders() }

// IsLightpanda reports whether the browser is Lightpanda (Core).
func (h *BrowserHold) IsLightpanda() bool { return h.Lightpanda }
