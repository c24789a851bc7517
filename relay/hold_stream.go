package relay

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// navHold is the fallback for browsers that cannot pause a browser's
// document requests for the relay: it holds Page.navigate, Page.reload and
// Target.createTarget commands of one client connection until their slot,
// and reads the answers from the Network events of main-frame documents
// that the client enabled itself. It sees nothing else: a link click, a
// form submission or a redirect goes unheld.
type navHold struct {
	pr *pair

	mu sync.Mutex
	// targets maps a session to its page's target id, which is also the
	// id of the page's main frame; "" is the connection's own session,
	// known for a /devtools/page/ID socket.
	targets map[string]string // guarded by mu
	urls    map[string]string // guarded by mu; session → URL it last navigated to, for reloads
	docs    map[string]string // guarded by mu; session+" "+requestId → host of a main-frame document under way
}

func newNavHold(pr *pair) *navHold {
	h := &navHold{
		pr:      pr,
		targets: make(map[string]string),
		urls:    make(map[string]string),
		docs:    make(map[string]string),
	}
	if id, ok := strings.CutPrefix(pr.path, "/devtools/page/"); ok {
		h.targets[""] = id
	}
	return h
}

// maxTracked bounds each of navHold's maps; a client that opens that many
// sessions or documents without their ending has them forgotten.
const maxTracked = 10_000

func put(m map[string]string, k, v string) {
	if len(m) >= maxTracked {
		clear(m)
	}
	m[k] = v
}

// fromClient looks at a message on its way to the browser and reports
// whether it took it: a navigation that must wait, which it writes itself
// when its slot comes.
func (h *navHold) fromClient(msg []byte) bool {
	hd, err := cdp.Scan(msg)
	if err != nil || !hd.HasID || hd.Params == nil && !hd.IsMethod("Page.reload") {
		return false
	}
	session := string(hd.SessionID)
	var rawURL string
	switch {
	case hd.IsMethod("Page.navigate"):
		p, ok := cdp.NavigateParams(hd.Params)
		if !ok {
			return false
		}
		h.mu.Lock()
		main, known := h.targets[session]
		if p.FrameID != "" && known && p.FrameID != main {
			h.mu.Unlock()
			return false // an iframe
		}
		put(h.urls, session, p.URL)
		h.mu.Unlock()
		rawURL = p.URL
	case hd.IsMethod("Page.reload"):
		h.mu.Lock()
		rawURL = h.urls[session]
		h.mu.Unlock()
	case hd.IsMethod("Target.createTarget"):
		p, ok := cdp.NavigateParams(hd.Params)
		if !ok {
			return false
		}
		rawURL = p.URL
	default:
		return false
	}
	if !utf8.Valid(msg) {
		return false // Chromium refuses the whole message (-32700): nothing navigates
	}
	host, ok := limiter.Key(rawURL)
	if !ok || limiter.Exempt(host) {
		if ok {
			h.pr.p.Metrics.navigation(navExempt, 0)
		} else {
			h.pr.p.Metrics.navigation(navUntracked, 0)
		}
		return false
	}
	held := append([]byte(nil), msg...)
	pr := h.pr
	pr.held.Add(1)
	write := func() {
		if err := pr.browser.writeMessage(websocket.TextMessage, held, pr.p.WriteTimeout); err != nil {
			pr.log.Debug().Err(err).Msg("held navigation not delivered")
			return
		}
		pr.p.Metrics.relayed(true, len(held))
	}
	// When the connection ends first, the navigation goes nowhere.
	if !pr.up.holder.wait(pr.ctx, host, rawURL, &pr.log, write, pr.held.Done) {
		pr.held.Done()
		return false
	}
	return true
}

// fromBrowser follows what the browser tells the client: which session is
// which page, where main frames navigate, and how their documents end.
func (h *navHold) fromBrowser(msg []byte) {
	hd, err := cdp.Scan(msg)
	if err != nil || hd.HasID || hd.Params == nil {
		return
	}
	session := string(hd.SessionID)
	switch string(hd.Method) {
	case "Target.attachedToTarget":
		if sid, tid, ok := cdp.AttachedTarget(hd.Params); ok {
			h.mu.Lock()
			put(h.targets, sid, tid)
			h.mu.Unlock()
		}
	case "Target.detachedFromTarget":
		if sid, ok := cdp.DetachedSession(hd.Params); ok {
			h.mu.Lock()
			delete(h.targets, sid)
			delete(h.urls, sid)
			h.mu.Unlock()
		}
	case "Network.requestWillBeSent":
		ev, ok := cdp.RequestWillBeSent(hd.Params)
		if !ok || ev.Type != "Document" || !h.mainFrame(session, ev.FrameID) {
			return
		}
		key := session + " " + ev.RequestID
		h.mu.Lock()
		prev, had := h.docs[key]
		h.mu.Unlock()
		if ev.Redirect != nil && had {
			h.pr.up.holder.observe(prev, limiter.Outcome(*ev.Redirect), &h.pr.log)
		}
		host, ok := limiter.Key(ev.URL)
		if !ok || limiter.Exempt(host) {
			h.mu.Lock()
			delete(h.docs, key)
			h.mu.Unlock()
			return
		}
		if ev.Redirect != nil && host != prev {
			// The browser follows redirects by itself: book the new host so
			// its schedule counts the request, though it cannot be held.
			h.pr.up.holder.book(h.pr.ctx, host, ev.URL, &h.pr.log)
		}
		h.mu.Lock()
		put(h.docs, key, host)
		h.mu.Unlock()
	case "Network.responseReceived", "Network.loadingFailed":
		ev, ok := cdp.DocumentAnswer(hd.Method, hd.Params)
		if !ok {
			return
		}
		key := session + " " + ev.RequestID
		h.mu.Lock()
		host, tracked := h.docs[key]
		delete(h.docs, key)
		h.mu.Unlock()
		if tracked {
			h.pr.up.holder.observe(host, limiter.Outcome(ev.Outcome), &h.pr.log)
		}
	}
}

// mainFrame reports whether frame is the main frame of session's page;
// when the page is unknown it gives the frame the benefit of the doubt.
func (h *navHold) mainFrame(session, frame string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	main, ok := h.targets[session]
	return !ok || main == frame
}
