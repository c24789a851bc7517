package fakebrowser

// The fake browser's side of one websocket: what it answers to each
// command, how it plays recorded pauses, and what a test reads of it.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Conn is one websocket the fake accepted.
type Conn struct {
	fb     *Browser
	WS     *websocket.Conn // set once: the accepted websocket
	Path   string          // set once: the path the relay dialled
	auto   bool            // set once: answers the relay's own commands as Chromium did
	replay *Recording      // set once: answers from this recording, the one of the relay's pages connection
	wmu    sync.Mutex      // serialises writes

	Mu        sync.Mutex           // guards what says so (the rest of what is guarded is the Browser's)
	holder    bool                 // guarded by fb.Mu: sent browser-level Fetch.enable
	FetchOn   bool                 // guarded by fb.Mu: its browser-level Fetch is on (not disabled since)
	onEpoch   int                  // guarded by fb.Mu: how many times its browser-level Fetch was turned on
	own       bool                 // guarded by fb.Mu: the relay's own (it discovers targets; clients here never do)
	pagesConn bool                 // guarded by fb.Mu: auto-attaches to pages (the relay's pages connection)
	Patterns  []string             // guarded by fb.Mu: its browser-level Fetch patterns' URLs (Document, Request stage)
	Sessions  map[string]*Session  // guarded by fb.Mu: its page sessions, by session id
	Msgs      []Msg                // guarded by Mu; everything received, in order
	nread     int                  // guarded by Mu; Msgs handed out by Next
	arrived   chan struct{}        // guarded by Mu; closed and replaced on each message
	Continued map[string]time.Time // guarded by Mu; Fetch.continueRequest (or failRequest) by requestId
	failed    map[string]string    // guarded by Mu; Fetch.failRequest's errorReason by requestId
	fulfilled map[string]Pause     // guarded by Mu; Fetch.fulfillRequest's answer by requestId
	answers   bool                 // guarded by Mu; its Fetch patterns pause answers too
	watching  map[string]bool      // guarded by Mu; requests continued with interceptResponse
	pings     int                  // guarded by Mu
	closeErr  error                // set before done is closed
	done      chan struct{}        // closed when the reader ends
}

// Session is a session the fake attached a connection to, on a page.
type Session struct {
	ID, Target string
	Seq        int  // attach order: newer sessions pause a request first
	Fetch      bool // guarded by fb.Mu: Fetch enabled for documents
	Network    bool // guarded by fb.Mu: Network enabled
	Ran        bool // guarded by fb.Mu: told to run (Runtime.runIfWaitingForDebugger)
}

// Msg is a message the fake received.
type Msg struct {
	Type int       // websocket message type
	Data []byte    // as it was on the wire
	At   time.Time // when the fake read it
	Wire Wire      // Data, decoded
}

func (fc *Conn) read() {
	defer close(fc.done)
	for {
		typ, data, err := fc.WS.ReadMessage()
		if err != nil {
			fc.closeErr = err
			fc.Mu.Lock()
			close(fc.arrived)
			fc.arrived = make(chan struct{})
			fc.Mu.Unlock()
			return
		}
		msg := Msg{Type: typ, Data: data, At: time.Now()}
		msg.Wire, _ = decodeWire(data)
		fc.Mu.Lock()
		fc.Msgs = append(fc.Msgs, msg)
		fc.Mu.Unlock()
		fc.answer(msg)
		fc.Mu.Lock()
		close(fc.arrived)
		fc.arrived = make(chan struct{})
		fc.Mu.Unlock()
	}
}

// answer answers the commands the relay sends for itself, as Chromium did.
func (fc *Conn) answer(msg Msg) {
	m := msg.Wire
	if !fc.auto || m.ID == nil {
		return
	}
	if fc.replay != nil {
		fc.answerReplay(msg)
		return
	}
	fb := fc.fb
	id := *m.ID
	send := fc.Send
	if fb.cfg.Silent[m.Method] {
		send = func([]byte) error { return nil }
	}
	if m.SessionID != "" {
		fb.Mu.Lock()
		pages := fc.pagesConn
		ss := fc.Sessions[m.SessionID]
		fb.Mu.Unlock()
		if !pages {
			return // a client's session: the test answers
		}
		if ss == nil {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32001,"message":"Session with given id not found."},"sessionId":%q}`, id, m.SessionID))
			return
		}
		switch m.Method {
		case "Fetch.enable", "Network.enable", "Runtime.runIfWaitingForDebugger":
			fb.Mu.Lock()
			switch m.Method {
			case "Fetch.enable":
				ss.Fetch = true
			case "Network.enable":
				ss.Network = true
			default:
				ss.Ran = true
			}
			fb.broadcast()
			fb.Mu.Unlock()
		case "Fetch.continueRequest":
			fc.continuedNow(m.Params, msg.At)
		case "Fetch.failRequest":
			fc.failedNow(m.Params, msg.At)
		case "Fetch.fulfillRequest":
			fc.fulfilledNow(m.Params, msg.At)
		}
		send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, id, m.SessionID))
		return
	}
	switch m.Method {
	case "Target.setAutoAttach":
		fb.Mu.Lock()
		fc.pagesConn = true
		var pages []json.RawMessage
		for _, info := range fb.Targets {
			if t, _, ok := ReadTargetInfo(fmt.Appendf(nil, `{"params":{"targetInfo":%s}}`, info)); ok && t.Type == "page" {
				pages = append(pages, info)
			}
		}
		fb.broadcast()
		fb.Mu.Unlock()
		for _, info := range pages {
			fc.attach(info, false)
		}
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	case "Target.getTargets":
		send(fmt.Appendf(nil, `{"id":%d,"result":{"targetInfos":[]}}`, id))
		return
	case "Browser.getBrowserCommandLine":
		if fb.cfg.CommandLine == nil {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32000,"message":"Command line not returned because --enable-automation not set."}}`, id))
			return
		}
		args, _ := json.Marshal(fb.cfg.CommandLine)
		send(fmt.Appendf(nil, `{"id":%d,"result":{"arguments":%s}}`, id, args))
		return
	case "Target.detachFromTarget":
		var p struct{ SessionID string }
		json.Unmarshal(m.Params, &p)
		fb.Mu.Lock()
		delete(fc.Sessions, p.SessionID)
		fb.broadcast()
		fb.Mu.Unlock()
		fc.WriteFrame(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.detachedFromTarget","params":{"sessionId":%q}}`, p.SessionID))
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	case "Target.attachToTarget":
		target, info, ok := fb.namedTarget(m.Params)
		if !ok {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32602,"message":"No target with given id found"}}`, id))
			return
		}
		fb.Mu.Lock()
		if fc.Sessions == nil {
			fc.Sessions = map[string]*Session{}
		}
		fb.nextJob++
		ss := &Session{ID: fmt.Sprintf("RELAY-%s-%d", target, fb.nextJob), Target: target, Seq: fb.nextJob, Ran: true}
		fc.Sessions[ss.ID] = ss
		fb.broadcast()
		fb.Mu.Unlock()
		fc.WriteFrame(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":%q,"targetInfo":%s,"waitingForDebugger":false}}`, ss.ID, info))
		send(fmt.Appendf(nil, `{"id":%d,"result":{"sessionId":%q}}`, id, ss.ID))
		return
	case "Target.setDiscoverTargets":
		fb.Mu.Lock()
		fc.own = true
		fb.Mu.Unlock()
	}
	switch m.Method {
	case "Target.setDiscoverTargets":
		// Chromium announces the targets it has, then replies.
		for _, rm := range fb.FetchRec.Msgs {
			if rm.From == "browser" && rm.Wire.ID != nil {
				break
			}
			if rm.From == "browser" {
				fc.Send(rm.Msg)
			}
		}
		send(withID(fb.FetchRec.reply(fb.t, m.Method, nil), id))
	case "Fetch.enable":
		switch {
		case fb.cfg.Lightpanda:
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-31998,"message":"BrowserContextNotLoaded"}}`, id))
		case fb.cfg.RejectFetch:
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32601,"message":"'Fetch.enable' wasn't found"}}`, id))
		default:
			// Marked before the reply, so the relay's Start cannot return
			// before the fake knows which connection is the relay's own.
			var p struct {
				Patterns []struct{ URLPattern, RequestStage string }
			}
			json.Unmarshal(m.Params, &p)
			fc.Mu.Lock()
			fc.answers = slices.ContainsFunc(p.Patterns, func(pt struct{ URLPattern, RequestStage string }) bool { return pt.RequestStage == "Response" })
			fc.Mu.Unlock()
			fb.Mu.Lock()
			fc.holder = true
			if !fc.FetchOn {
				fc.FetchOn = true
				fc.onEpoch++
			}
			fc.Patterns = fc.Patterns[:0]
			for _, pt := range p.Patterns {
				fc.Patterns = append(fc.Patterns, pt.URLPattern)
			}
			fb.broadcast()
			fb.Mu.Unlock()
			send(withID(fb.FetchRec.reply(fb.t, m.Method, nil), id))
		}
	case "Fetch.disable":
		fb.Mu.Lock()
		fc.FetchOn = false
		fc.Patterns = nil
		fb.broadcast()
		fb.Mu.Unlock()
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
	case "Fetch.continueRequest":
		send(withID(fb.FetchRec.reply(fb.t, m.Method, nil), id))
		fc.continuedNow(m.Params, msg.At)
	case "Fetch.failRequest":
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		fc.failedNow(m.Params, msg.At)
	case "Fetch.fulfillRequest":
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		fc.fulfilledNow(m.Params, msg.At)
	case "Target.closeTarget", "Target.disposeBrowserContext":
		// As Chromium answers: a target or context whose id starts with
		// GONE is not there (any more).
		var p struct{ TargetID, BrowserContextID string }
		json.Unmarshal(m.Params, &p)
		switch {
		case strings.HasPrefix(p.TargetID, "GONE"):
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32602,"message":"No target with given id found"}}`, id))
		case strings.HasPrefix(p.BrowserContextID, "GONE"):
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32000,"message":"Failed to find context with id %s"}}`, id, p.BrowserContextID))
		case m.Method == "Target.closeTarget":
			send(fmt.Appendf(nil, `{"id":%d,"result":{"success":true}}`, id))
		default:
			send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		}
	case "Target.getTargetInfo":
		_, info, ok := fb.namedTarget(m.Params)
		if ok {
			send(fmt.Appendf(nil, `{"id":%d,"result":{"targetInfo":%s}}`, id, info))
			return
		}
		send(withID(fb.FetchRec.reply(fb.t, m.Method, nil), id)) // No target with given id found
	}
}

// namedTarget reads the target a command's params name (targetId) and
// returns it with its targetInfo; ok is false for a target the browser
// does not have.
func (fb *Browser) namedTarget(params json.RawMessage) (target string, info json.RawMessage, ok bool) {
	var p struct{ TargetID string }
	json.Unmarshal(params, &p)
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	info, ok = fb.Targets[p.TargetID]
	return p.TargetID, info, ok
}

// ReplayNext makes the next connection accepted answer from rec.
func (fb *Browser) ReplayNext(rec *Recording) {
	fb.Mu.Lock()
	fb.replaying = rec
	fb.Mu.Unlock()
}

// answerReplay answers a command from fc.replay: discovery and
// auto-attaching with the events recorded before their replies, and every
// command with the reply recorded (a session's with an empty result).
func (fc *Conn) answerReplay(msg Msg) {
	m := msg.Wire
	rec := fc.replay
	id := *m.ID
	if m.SessionID != "" {
		if m.Method == "Fetch.continueRequest" {
			fc.continuedNow(m.Params, msg.At)
		}
		fc.WriteFrame(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, id, m.SessionID))
		return
	}
	switch m.Method {
	case "Target.setDiscoverTargets", "Target.setAutoAttach":
		fb := fc.fb
		fb.Mu.Lock()
		fc.own = true
		fc.pagesConn = fc.pagesConn || m.Method == "Target.setAutoAttach"
		fb.broadcast()
		fb.Mu.Unlock()
		from := 0
		for i, rm := range rec.Msgs {
			if rm.From == "client" && rm.Wire.Method == m.Method {
				from = i
				break
			}
		}
		for _, rm := range rec.Msgs[from+1:] {
			if rm.From == "browser" && rm.Wire.ID != nil {
				break
			}
			if rm.From == "browser" {
				fc.Send(rm.Msg)
			}
		}
	}
	if m.Method == "Target.detachFromTarget" {
		fc.WriteFrame(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	}
	fc.WriteFrame(websocket.TextMessage, withID(rec.reply(fc.fb.t, m.Method, nil), id))
}

// continuedNow records a Fetch.continueRequest received at at.
func (fc *Conn) continuedNow(params []byte, at time.Time) {
	var p struct {
		RequestID         string
		InterceptResponse bool
	}
	json.Unmarshal(params, &p)
	fc.Mu.Lock()
	fc.Continued[p.RequestID] = at
	if p.InterceptResponse {
		if fc.watching == nil {
			fc.watching = map[string]bool{}
		}
		fc.watching[p.RequestID] = true
	}
	fc.Mu.Unlock()
}

// failedNow records a Fetch.failRequest received at at: the pause is
// over (continuedAt returns), the request failed with its errorReason.
func (fc *Conn) failedNow(params []byte, at time.Time) {
	var p struct{ RequestID, ErrorReason string }
	json.Unmarshal(params, &p)
	fc.Mu.Lock()
	if fc.failed == nil {
		fc.failed = map[string]string{}
	}
	fc.failed[p.RequestID] = p.ErrorReason
	fc.Continued[p.RequestID] = at
	fc.Mu.Unlock()
}

// fulfilledNow records a Fetch.fulfillRequest received at at: the pause
// is over (continuedAt returns), answered with what the relay made.
func (fc *Conn) fulfilledNow(params []byte, at time.Time) {
	var p struct {
		RequestID       string `json:"requestId"`
		ResponseCode    int    `json:"responseCode"`
		ResponseHeaders []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"responseHeaders"`
	}
	json.Unmarshal(params, &p)
	answer := Pause{RequestID: p.RequestID, ResponseStatusCode: p.ResponseCode}
	for _, h := range p.ResponseHeaders {
		answer.ResponseHeaders = append(answer.ResponseHeaders, struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		}{h.Name, h.Value})
	}
	fc.Mu.Lock()
	if fc.fulfilled == nil {
		fc.fulfilled = map[string]Pause{}
	}
	fc.fulfilled[p.RequestID] = answer
	fc.Continued[p.RequestID] = at
	fc.Mu.Unlock()
}

// fulfilledWith returns the answer requestID was fulfilled with, and
// whether it was.
func (fc *Conn) fulfilledWith(requestID string) (Pause, bool) {
	fc.Mu.Lock()
	defer fc.Mu.Unlock()
	p, ok := fc.fulfilled[requestID]
	return p, ok
}

// failedWith returns the errorReason requestID was failed with, "" when
// it was not.
func (fc *Conn) failedWith(requestID string) string {
	fc.Mu.Lock()
	defer fc.Mu.Unlock()
	return fc.failed[requestID]
}

// attach attaches fc, the relay's pages connection, to a page, as
// Chromium's auto-attach does: waiting for the debugger when the page is
// new.
func (fc *Conn) attach(info json.RawMessage, waiting bool) {
	fb := fc.fb
	t, _, ok := ReadTargetInfo(fmt.Appendf(nil, `{"params":{"targetInfo":%s}}`, info))
	if !ok || t.Type != "page" {
		return
	}
	fb.Mu.Lock()
	if fc.Sessions == nil {
		fc.Sessions = map[string]*Session{}
	}
	if fc.SessionLocked(t.TargetID) != nil || fc.replay != nil {
		fb.Mu.Unlock()
		return
	}
	fb.nextJob++
	ss := &Session{ID: fmt.Sprintf("RELAY-%s-%d", t.TargetID, fb.nextJob), Target: t.TargetID, Seq: fb.nextJob, Ran: !waiting}
	fc.Sessions[ss.ID] = ss
	fb.broadcast()
	fb.Mu.Unlock()
	fc.WriteFrame(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":%q,"targetInfo":%s,"waitingForDebugger":%v}}`, ss.ID, info, waiting))
}

// Send writes a text message to the relay; the fake learns the targets it
// announces, and attaches the relay's pages connection to each new page.
func (fc *Conn) Send(data []byte) error {
	var created json.RawMessage
	if m, ok := decodeWire(data); ok && (m.Method == "Target.targetCreated" || m.Method == "Target.targetInfoChanged") {
		if info, raw, ok := ReadTargetInfo(data); ok {
			fc.fb.Announce(info.TargetID, raw)
			if m.Method == "Target.targetCreated" {
				created = raw
			}
		}
	}
	err := fc.WriteFrame(websocket.TextMessage, data)
	if created != nil {
		for _, pc := range fc.fb.PagesConns() {
			pc.attach(created, true)
		}
	}
	return err
}

// PagesConns returns the live connections that auto-attach to pages.
func (fb *Browser) PagesConns() []*Conn {
	return fb.live(func(c *Conn) bool { return c.pagesConn })
}

// live returns the live connections that are what is, in the order the
// browser accepted them; is runs under fb.Mu.
func (fb *Browser) live(is func(*Conn) bool) []*Conn {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	var out []*Conn
	for _, c := range fb.conns {
		if is(c) && !c.ended_() {
			out = append(out, c)
		}
	}
	return out
}

// WriteFrame writes a message of websocket type typ to the relay as it
// is, within WaitFor.
func (fc *Conn) WriteFrame(typ int, data []byte) error {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.WS.SetWriteDeadline(time.Now().Add(WaitFor))
	return fc.WS.WriteMessage(typ, data)
}

// CloseWith sends a close frame with code and text.
func (fc *Conn) CloseWith(code int, text string) error {
	return fc.WS.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}

// Drop ends the connection without a close frame, as a crashed browser does.
func (fc *Conn) Drop() { fc.WS.Close() }

// Next returns the next message the relay sent on this connection, in order.
func (fc *Conn) Next(t testing.TB) Msg {
	t.Helper()
	deadline := time.After(WaitFor)
	for {
		fc.Mu.Lock()
		if fc.nread < len(fc.Msgs) {
			m := fc.Msgs[fc.nread]
			fc.nread++
			fc.Mu.Unlock()
			return m
		}
		arrived := fc.arrived
		fc.Mu.Unlock()
		select {
		case <-arrived:
		case <-fc.done:
			fc.Mu.Lock()
			more := fc.nread < len(fc.Msgs)
			fc.Mu.Unlock()
			if !more {
				t.Fatalf("fake browser: connection ended (%v) while waiting for a message", fc.closeErr)
			}
		case <-deadline:
			t.Fatalf("fake browser: no message from the relay within %v", WaitFor)
		}
	}
}

// Received returns every message received so far.
func (fc *Conn) Received() []Msg {
	fc.Mu.Lock()
	defer fc.Mu.Unlock()
	return append([]Msg(nil), fc.Msgs...)
}

// Ended waits for the connection to end and returns how it ended.
func (fc *Conn) Ended(t testing.TB) error {
	t.Helper()
	select {
	case <-fc.done:
		return fc.closeErr
	case <-time.After(WaitFor):
		t.Fatalf("fake browser: connection still open after %v", WaitFor)
		return nil
	}
}

// ended reports whether the connection has ended.
func (fc *Conn) ended_() bool {
	select {
	case <-fc.done:
		return true
	default:
		return false
	}
}

// PingCount reports how many pings the fake has answered.
func (fc *Conn) PingCount() int {
	fc.Mu.Lock()
	defer fc.Mu.Unlock()
	return fc.pings
}

// ContinuedAt waits for the relay to continue requestID and returns when
// the fake got that command.
func (fc *Conn) ContinuedAt(requestID string) (time.Time, error) {
	deadline := time.After(WaitFor)
	for {
		fc.Mu.Lock()
		at, ok := fc.Continued[requestID]
		arrived := fc.arrived
		fc.Mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-arrived:
		case <-fc.done:
			return time.Time{}, fmt.Errorf("connection ended before %s was continued", requestID)
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not continued within %v", requestID, WaitFor)
		}
	}
}

// Hops is one paused request of a played navigation: when the fake
// paused it and when the relay let it go.
type Hops struct {
	RequestID string
	Paused    time.Time
	Continued time.Time
	Pauses    int    // how many interceptors paused it (navigate)
	Failed    string // the errorReason it was failed with, "" when let go (navigate)
	// Fulfilled is the answer the relay made for it (Fetch.fulfillRequest):
	// its status, 0 when it made none.
	Fulfilled int
	// Headers are that answer's headers, by name.
	Headers map[string]string
}

// Play replays a recorded chain of paused requests the way Chromium
// drives it: each pause is sent once the one before it was continued.
// The chain gets a fresh interception job, so a recording can be played
// many times.
func (fc *Conn) Play(chain [][]byte) ([]Hops, error) {
	job := fc.fb.NewJob()
	var out []Hops
	for _, msg := range chain {
		msg = RenumberJob(msg, job)
		p, _ := ReadPause(msg)
		if !p.requestStage() && !fc.pausesAnswer(p.RequestID) {
			continue // as Chromium: an answer pauses only where it was asked for
		}
		sent := time.Now()
		if err := fc.Send(msg); err != nil {
			return out, err
		}
		at, err := fc.ContinuedAt(p.RequestID)
		if err != nil {
			return out, err
		}
		// A Response-stage pause reuses the requestId of its Request stage.
		fc.Mu.Lock()
		delete(fc.Continued, p.RequestID)
		fc.Mu.Unlock()
		out = append(out, Hops{RequestID: p.RequestID, Paused: sent, Continued: at})
	}
	return out, nil
}

// pausesAnswer reports whether the answer to requestID pauses at fc: its
// patterns ask for answers, or it continued the request asking for its
// answer (interceptResponse).
func (fc *Conn) pausesAnswer(requestID string) bool {
	fc.Mu.Lock()
	defer fc.Mu.Unlock()
	return fc.answers || fc.watching[requestID]
}

// Holders returns the live connections that enabled browser-level Fetch,
// in the order they did: the order Chromium passes a request along.
func (fb *Browser) Holders() []*Conn {
	return fb.live(func(c *Conn) bool { return c.FetchOn })
}

// HeldAtBrowser reports whether a request for url that starts now would
// pause at a live connection's browser-level Fetch, whose patterns match
// it.
func (fb *Browser) HeldAtBrowser(url string) bool {
	return len(fb.live(func(c *Conn) bool {
		return c.FetchOn && slices.ContainsFunc(c.Patterns, func(p string) bool { return matchPattern(p, url) })
	})) > 0
}

// PlayAll replays a recorded chain the way Chromium passes each paused
// request from one interceptor to the next: a Request-stage hop pauses at
// every live holder in turn (a Response-stage hop in the reverse order),
// each with an interception id of its own, and goes on once the last one
// continued it. A holder that ends while it holds a hop hands it to the
// next, as Chromium does. It returns, per hop, when the first holder got it
// and when the last one let it go.
func (fb *Browser) PlayAll(t testing.TB, chain [][]byte) []Hops {
	t.Helper()
	var out []Hops
	jobs := map[*Conn]int{} // each holder's interception job of the request under way
	for _, msg := range chain {
		p, _ := ReadPause(msg)
		hs := fb.Holders()
		if !p.requestStage() {
			slices.Reverse(hs)
		}
		var ht Hops
		for i, hc := range hs {
			job, ok := jobs[hc]
			if p.requestStage() || !ok {
				job = fb.NewJob()
				jobs[hc] = job
			}
			m := RenumberJob(msg, job)
			mp, _ := ReadPause(m)
			if !p.requestStage() && !hc.pausesAnswer(mp.RequestID) {
				continue // as Chromium: an answer pauses only where it was asked for
			}
			sent := time.Now()
			if err := hc.Send(m); err != nil {
				continue // gone already: the next one gets it
			}
			at, err := hc.ContinuedAt(mp.RequestID)
			if err != nil {
				continue // ended while holding: the next one gets it
			}
			if i == 0 || ht.Paused.IsZero() {
				ht.Paused, ht.RequestID = sent, mp.RequestID
			}
			ht.Continued = at
		}
		out = append(out, ht)
	}
	return out
}

// MustPlay is Play, failing t on an error.
func (fc *Conn) MustPlay(t testing.TB, chain [][]byte) []Hops {
	t.Helper()
	hops, err := fc.Play(chain)
	if err != nil {
		t.Fatal(err)
	}
	return hops
}

// GotWithin reports whether the fake has a message the test has not read
// yet within d. The arrived channel it waits on may be one a message the
// test already read closes (the reader closes it only after answering),
// so each wakeup looks again.
func (fc *Conn) GotWithin(d time.Duration) bool {
	deadline := time.After(d)
	for {
		fc.Mu.Lock()
		unread, arrived := fc.nread < len(fc.Msgs), fc.arrived
		fc.Mu.Unlock()
		if unread {
			return true
		}
		select {
		case <-arrived:
		case <-deadline:
			return false
		}
	}
}
