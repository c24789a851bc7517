package guardian

import (
	"net/http"
	"sync"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/redact"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// ownIDs is where the ids of the guardian's own commands start: far above
// any the relay's connection reaches, so that their replies are told
// apart and never relayed.
const ownIDs = 1 << 50

// writeWait bounds one write on either side.
const writeWait = 10 * time.Second

// pause is a request paused in a session and not answered yet.
type pause struct {
	session, id string
}

// pagesConn is one relayed connection: the relay's side and the
// browser's. Its reader of each side is the only reader of that side.
type pagesConn struct {
	g       *Guardian
	relay   *websocket.Conn
	browser *websocket.Conn
	log     zerolog.Logger

	bmu sync.Mutex // serialises writes to the browser

	// mu guards the fields below; a leaf.
	mu        sync.Mutex
	paused    map[pause]bool // requests paused and not answered; true for the Response stage
	takenOver bool           // the relay is gone: the guardian answers
	next      int64          // the guardian's next own command id
	answered  int            // navigations the guardian answered
}

// servePages relays one connection of the relay's to the browser
// endpoint its to parameter names.
func (g *Guardian) servePages(w http.ResponseWriter, r *http.Request) {
	to := r.URL.Query().Get("to")
	if to == "" {
		http.Error(w, "guardian: no browser endpoint (to=)", http.StatusBadRequest)
		return
	}
	dialer := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10}
	browser, _, err := dialer.DialContext(r.Context(), to, nil)
	if err != nil {
		http.Error(w, "guardian: dialing the browser: "+err.Error(), http.StatusBadGateway)
		return
	}
	relay, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		browser.Close()
		return
	}
	g.live.Add(1) // counted out by run, once the relay's side ended
	relay.SetReadLimit(maxMessage)
	browser.SetReadLimit(maxMessage)
	pc := &pagesConn{g: g, relay: relay, browser: browser, paused: make(map[pause]bool), next: ownIDs,
		log: g.log().With().Str("upstream", redact.URL(to)).Logger()}
	pc.run()
}

// run relays until either side ends. The relay's side ending without a
// close frame is the relay's death: the guardian takes over.
func (pc *pagesConn) run() {
	browserDone := make(chan struct{})
	go func() {
		defer close(browserDone)
		pc.fromBrowser()
	}()
	gone := pc.fromRelay()
	if !gone {
		pc.g.live.Done()
		pc.bmu.Lock()
		pc.browser.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		pc.bmu.Unlock()
		pc.browser.Close()
		<-browserDone
		return
	}
	pc.g.takeover.Add(1)
	pc.g.live.Done() // after: Wait sees the takeover
	defer pc.g.takeover.Done()
	pc.takeOver()
	select {
	case <-browserDone: // the browser went too
	case <-time.After(pc.g.linger()):
	}
	pc.bmu.Lock()
	pc.browser.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	pc.bmu.Unlock()
	pc.browser.Close()
	<-browserDone
	pc.mu.Lock()
	n := pc.answered
	pc.mu.Unlock()
	pc.g.mu.Lock()
	pc.g.said.Connections++
	pc.g.said.Answered += n
	pc.g.mu.Unlock()
	pc.log.Warn().Int("answered", n).Msg("guardian: the relay's process is gone: what it held was answered with the relay's 429, never let go")
}

// fromRelay relays the relay's messages to the browser, noting the
// paused requests they answer, and reports whether the relay's side
// ended without a close (the relay is gone).
func (pc *pagesConn) fromRelay() (gone bool) {
	for {
		typ, data, err := pc.relay.ReadMessage()
		if err != nil {
			return !closed(err)
		}
		if hd, err := cdp.Scan(data); err == nil && answers(hd.Method) {
			if id, ok := cdp.ReadRequestID(hd.Params); ok {
				pc.mu.Lock()
				delete(pc.paused, pause{string(hd.SessionID), id})
				pc.mu.Unlock()
			}
		}
		pc.bmu.Lock()
		pc.browser.SetWriteDeadline(time.Now().Add(writeWait))
		err = pc.browser.WriteMessage(typ, data)
		pc.bmu.Unlock()
		if err != nil {
			return false // the browser is gone: nothing paused is left to answer
		}
	}
}

// fromBrowser relays the browser's messages to the relay, noting the
// requests that pause; once the relay is gone it answers them itself.
func (pc *pagesConn) fromBrowser() {
	for {
		typ, data, err := pc.browser.ReadMessage()
		if err != nil {
			pc.relay.Close() // the relay's connection ends with the browser's
			return
		}
		hd, err := cdp.Scan(data)
		if err == nil && hd.HasID && hd.ID >= ownIDs {
			continue // an answer to the guardian's own command
		}
		var p pause
		paused, response := false, false
		if err == nil && hd.IsMethod("Fetch.requestPaused") {
			if ev, ok := cdp.ReadRequestPaused(hd.Params); ok {
				p, paused = pause{string(hd.SessionID), ev.RequestID}, true
				response = ev.ResponseStatusCode != 0 || ev.ResponseErrorReason != ""
			}
		}
		pc.mu.Lock()
		taken := pc.takenOver
		if paused && !taken {
			pc.paused[p] = response
		}
		pc.mu.Unlock()
		if taken {
			if paused {
				pc.answer(p, response)
			}
			if err == nil && hd.IsMethod("Target.attachedToTarget") {
				if a, ok := cdp.ReadAttached(hd.Params); ok && a.Waiting {
					pc.command(a.SessionID, "Runtime.runIfWaitingForDebugger", nil) // nobody else will let it run
				}
			}
			continue
		}
		pc.relay.SetWriteDeadline(time.Now().Add(writeWait))
		if pc.relay.WriteMessage(typ, data) != nil {
			// The relay is not reading: its reader finds out how it ended.
			continue
		}
	}
}

// takeOver answers every request still paused, and from now on every
// one that pauses.
func (pc *pagesConn) takeOver() {
	pc.mu.Lock()
	pc.takenOver = true
	paused := pc.paused
	pc.paused = nil
	pc.mu.Unlock()
	for p, response := range paused {
		pc.answer(p, response)
	}
}

// answer answers a paused request for the relay that is gone: a document
// request with the relay's own 429, a response (the relay asked to see
// it) let through, as it has already reached its site.
func (pc *pagesConn) answer(p pause, response bool) {
	if response {
		pc.command(p.session, "Fetch.continueRequest", &fetch.ContinueRequestParams{RequestID: fetch.RequestID(p.id)})
		return
	}
	now := time.Now()
	pc.command(p.session, "Fetch.fulfillRequest", refusal.Reason{Deferred: Reason, Until: now}.Fulfill(p.id, now))
	pc.mu.Lock()
	pc.answered++
	pc.mu.Unlock()
	pc.log.Debug().Str("request", p.id).Msg("guardian: a held navigation answered with the relay's 429")
}

// command sends a command of the guardian's own on session.
func (pc *pagesConn) command(session, method string, params any) {
	pc.mu.Lock()
	id := pc.next
	pc.next++
	pc.mu.Unlock()
	msg, err := cdp.Command(id, method, session, params)
	if err != nil {
		return
	}
	pc.bmu.Lock()
	defer pc.bmu.Unlock()
	pc.browser.SetWriteDeadline(time.Now().Add(writeWait))
	if err := pc.browser.WriteMessage(websocket.TextMessage, msg); err != nil {
		pc.log.Debug().Err(err).Str("method", method).Msg("guardian: a command not sent")
	}
}

// answers reports whether a command answers a paused request.
func answers(method []byte) bool {
	switch string(method) {
	case "Fetch.continueRequest", "Fetch.fulfillRequest", "Fetch.failRequest", "Fetch.continueResponse", "Fetch.continueWithAuth":
		return true
	}
	return false
}
