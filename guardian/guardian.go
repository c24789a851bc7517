// Package guardian keeps what a relay holds from reaching the sites when
// the relay's process dies without a stop: SIGKILL, the OOM killer, a
// panic nothing recovered.
//
// The relay holds its clients' navigations as requests paused in sessions
// of a connection of its own to the browser (hold/fetch's pages
// connection), and Chromium lets go every request paused in a session
// whose connection goes away. With a guardian, that connection runs
// through a second, small process (Supervise starts the relay as its
// child): the guardian relays it message for message, noting which
// requests are paused and not yet answered. When the relay's side ends
// without a close frame (its process is gone: a deliberate close sends
// one), the guardian keeps the browser's side open and takes over: it
// answers every request still paused with the relay's own 429
// (X-Cdp-Throttle: deferred; reason=relay-gone), and any that pauses
// after, lets new pages run, and, once the relay's report connection has
// ended the same way, closes the pages and browser contexts the relay's
// clients had created (the relay reports them as they change: Reporter).
// Then it lets go of the browser. It knows no limiter: a navigation the
// relay held is never let go early, it is answered.
package guardian

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/redact"
)

// EnvSocket names the environment variable through which Supervise tells
// the relay's process where its guardian listens (a unix socket path).
const EnvSocket = "CDP_THROTTLE_GUARDIAN_SOCKET"

// Reason is the refusal reason (X-Cdp-Throttle: deferred; reason=...) of
// a navigation the guardian answers for a relay that is gone.
const Reason = "relay-gone"

// DefaultLinger is Guardian.Linger's default: long enough for what was on
// its way to pause when the relay died, and for the pages to be closed.
const DefaultLinger = 2 * time.Second

// closeDelay is how long the guardian waits after a relay's report ends
// before it closes the pages: Chromium (156) keeps a page open when its
// Target.closeTarget comes within ~10 ms of the answer to its navigation.
const closeDelay = 150 * time.Millisecond

// Guardian relays the connections a relay's process holds navigations in
// and takes them over when that process dies. Serve it as an
// http.Handler on a listener only the relay reaches (a unix socket in a
// private directory). Its zero value is ready; set its fields before
// serving. Its methods are safe for concurrent use.
type Guardian struct {
	// Log receives what the guardian does. Nil logs nothing.
	Log *zerolog.Logger
	// Linger is how long a connection taken over stays open, answering
	// what pauses in it. Zero means DefaultLinger.
	Linger time.Duration

	mu       sync.Mutex
	reports  map[string]Report // guarded by mu; the relay's last report, by browser endpoint
	said     Stats             // guarded by mu; what takeovers did
	takeover sync.WaitGroup    // connections taken over, and closings, under way
	// live counts the relay's connections (pages, report) not seen to end
	// yet: one that ends registers its takeover, if any, before it is
	// counted out, so that Wait, which waits for live first, never comes
	// out before a takeover the relay's death calls for has begun. The
	// relay's process may be seen to exit before its sockets are.
	live liveCount
}

// liveCount counts connections up. Unlike a sync.WaitGroup's, its count
// may rise from zero while Wait waits: a connection the relay opened
// just before it died is accepted whenever it is accepted.
type liveCount struct {
	mu   sync.Mutex
	n    int        // guarded by mu
	none *sync.Cond // on mu; broadcast when n falls to zero
}

func (l *liveCount) Add(d int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += d
	if l.n == 0 && l.none != nil {
		l.none.Broadcast()
	}
}

func (l *liveCount) Done() { l.Add(-1) }

// Wait waits until no connection is up.
func (l *liveCount) Wait() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.none == nil {
		l.none = sync.NewCond(&l.mu)
	}
	for l.n > 0 {
		l.none.Wait()
	}
}

// Stats is what the guardian did for relays that went away.
type Stats struct {
	Connections int // connections taken over
	Answered    int // navigations answered with the relay's 429
	Pages       int // pages closed
	Contexts    int // browser contexts closed
}

// Report is what the relay tells its guardian of one browser: the pages
// and browser contexts its clients created there, to close if the relay
// dies. Bye, sent by a relay that stops, says there is nothing to do.
type Report struct {
	Upstream string   `json:"upstream"` // the browser endpoint (ws://)
	Pages    []string `json:"pages,omitempty"`
	Contexts []string `json:"contexts,omitempty"`
	Bye      bool     `json:"bye,omitempty"`
}

// ServeHTTP answers the relay's websockets: /pages?to=URL relays a
// connection to the browser endpoint URL, /report takes the relay's
// reports.
func (g *Guardian) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/pages":
		g.servePages(w, r)
	case "/report":
		g.serveReport(w, r)
	default:
		http.NotFound(w, r)
	}
}

// Wait waits for the relay's connections to end and the takeovers they
// call for, and returns what all of them did. Call it once the relay's
// process has ended: its connections then end too.
func (g *Guardian) Wait() Stats {
	g.live.Wait()
	g.takeover.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.said
}

func (g *Guardian) log() *zerolog.Logger {
	if g.Log == nil {
		nop := zerolog.Nop()
		return &nop
	}
	return g.Log
}

func (g *Guardian) linger() time.Duration {
	if g.Linger <= 0 {
		return DefaultLinger
	}
	return g.Linger
}

// upgrader takes the relay's side: the relay alone reaches the socket.
var upgrader = websocket.Upgrader{
	ReadBufferSize:  32 << 10,
	WriteBufferSize: 32 << 10,
	CheckOrigin:     func(*http.Request) bool { return true },
}

// maxMessage bounds a message read on either side, as the relay's own
// default does.
const maxMessage = 256 << 20

// serveReport reads the relay's reports until its connection ends; one
// that ends without a close frame and without Bye means the relay died:
// what its clients created is closed.
func (g *Guardian) serveReport(w http.ResponseWriter, r *http.Request) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	g.live.Add(1)
	defer c.Close()
	c.SetReadLimit(maxMessage)
	bye := false
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			if bye || closed(err) {
				g.live.Done()
				return // the relay stopped, and closed what it had to itself
			}
			break
		}
		var rep Report
		if json.Unmarshal(data, &rep) != nil {
			continue
		}
		if rep.Bye {
			bye = true
			continue
		}
		g.mu.Lock()
		if g.reports == nil {
			g.reports = make(map[string]Report)
		}
		g.reports[rep.Upstream] = rep
		g.mu.Unlock()
	}
	g.log().Warn().Msg("guardian: the relay's process is gone without a stop: closing the pages its clients created")
	g.takeover.Add(1)
	g.live.Done() // after: Wait sees the takeover
	go func() {
		defer g.takeover.Done()
		time.Sleep(closeDelay)
		g.closeReported()
	}()
}

// closed reports whether a connection ended with its peer's close frame
// (gorilla reads an end without one as a close 1006): the relay meant it.
func closed(err error) bool {
	var ce *websocket.CloseError
	return errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure
}

// closeReported closes the pages and contexts of every report.
func (g *Guardian) closeReported() {
	g.mu.Lock()
	reports := g.reports
	g.reports = nil
	g.mu.Unlock()
	var wg sync.WaitGroup
	for _, rep := range reports {
		if len(rep.Pages)+len(rep.Contexts) == 0 {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), closeWait)
			defer cancel()
			pages, contexts, err := closeTargets(ctx, rep)
			g.mu.Lock()
			g.said.Pages += pages
			g.said.Contexts += contexts
			g.mu.Unlock()
			ev := g.log().Info()
			if err != nil {
				ev = g.log().Warn().Err(err)
			}
			ev.Str("upstream", redact.URL(rep.Upstream)).Int("pages", pages).Int("contexts", contexts).
				Msg("guardian: closed the pages and contexts the gone relay's clients created")
		})
	}
	wg.Wait()
}
