package relay

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

// fakeConn is one websocket the fake accepted.
type fakeConn struct {
	fb     *fakeBrowser
	c      *websocket.Conn
	path   string
	auto   bool       // set once: answers the relay's own commands as Chromium did
	replay *recording // set once: answers from this recording, the one of the relay's pages connection
	wmu    sync.Mutex // serialises writes

	mu        sync.Mutex
	holder    bool                 // guarded by fb.mu: sent browser-level Fetch.enable
	fetchOn   bool                 // guarded by fb.mu: its browser-level Fetch is on (not disabled since)
	onEpoch   int                  // guarded by fb.mu: how many times its browser-level Fetch was turned on
	own       bool                 // guarded by fb.mu: the relay's own (it discovers targets; clients here never do)
	pagesConn bool                 // guarded by fb.mu: auto-attaches to pages (the relay's pages connection)
	patterns  []string             // guarded by fb.mu: its browser-level Fetch patterns' URLs (Document, Request stage)
	sessions  map[string]*fakeSess // guarded by fb.mu: its page sessions, by session id
	msgs      []fakeMsg            // guarded by mu; everything received, in order
	nread     int                  // guarded by mu; msgs handed out by next
	arrived   chan struct{}        // guarded by mu; closed and replaced on each message
	continued map[string]time.Time // guarded by mu; Fetch.continueRequest (or failRequest) by requestId
	failed    map[string]string    // guarded by mu; Fetch.failRequest's errorReason by requestId
	answers   bool                 // guarded by mu; its Fetch patterns pause answers too
	watching  map[string]bool      // guarded by mu; requests continued with interceptResponse
	pings     int                  // guarded by mu
	closeErr  error                // set before done is closed
	done      chan struct{}        // closed when the reader ends
}

// fakeSess is a session the fake attached a connection to, on a page.
type fakeSess struct {
	id, target string
	seq        int  // attach order: newer sessions pause a request first
	fetch      bool // guarded by fb.mu: Fetch enabled for documents
	network    bool // guarded by fb.mu: Network enabled
	ran        bool // guarded by fb.mu: told to run (Runtime.runIfWaitingForDebugger)
}

// fakeMsg is a message the fake received.
type fakeMsg struct {
	typ  int
	data []byte
	at   time.Time
	m    wireMsg
}

func (fc *fakeConn) read() {
	defer close(fc.done)
	for {
		typ, data, err := fc.c.ReadMessage()
		if err != nil {
			fc.closeErr = err
			fc.mu.Lock()
			close(fc.arrived)
			fc.arrived = make(chan struct{})
			fc.mu.Unlock()
			return
		}
		msg := fakeMsg{typ: typ, data: data, at: time.Now()}
		msg.m, _ = decodeWire(data)
		fc.mu.Lock()
		fc.msgs = append(fc.msgs, msg)
		fc.mu.Unlock()
		fc.answer(msg)
		fc.mu.Lock()
		close(fc.arrived)
		fc.arrived = make(chan struct{})
		fc.mu.Unlock()
	}
}

// answer answers the commands the relay sends for itself, as Chromium did.
func (fc *fakeConn) answer(msg fakeMsg) {
	m := msg.m
	if !fc.auto || m.ID == nil {
		return
	}
	if fc.replay != nil {
		fc.answerReplay(msg)
		return
	}
	fb := fc.fb
	id := *m.ID
	send := fc.send
	if fb.cfg.silent[m.Method] {
		send = func([]byte) error { return nil }
	}
	if m.SessionID != "" {
		fb.mu.Lock()
		pages := fc.pagesConn
		ss := fc.sessions[m.SessionID]
		fb.mu.Unlock()
		if !pages {
			return // a client's session: the test answers
		}
		if ss == nil {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32001,"message":"Session with given id not found."},"sessionId":%q}`, id, m.SessionID))
			return
		}
		switch m.Method {
		case "Fetch.enable", "Network.enable", "Runtime.runIfWaitingForDebugger":
			fb.mu.Lock()
			switch m.Method {
			case "Fetch.enable":
				ss.fetch = true
			case "Network.enable":
				ss.network = true
			default:
				ss.ran = true
			}
			fb.broadcast()
			fb.mu.Unlock()
		case "Fetch.continueRequest":
			fc.continuedNow(m.Params, msg.at)
		case "Fetch.failRequest":
			fc.failedNow(m.Params, msg.at)
		}
		send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, id, m.SessionID))
		return
	}
	switch m.Method {
	case "Target.setAutoAttach":
		fb.mu.Lock()
		fc.pagesConn = true
		var pages []json.RawMessage
		for _, info := range fb.targets {
			if t, _, ok := readTargetInfo(fmt.Appendf(nil, `{"params":{"targetInfo":%s}}`, info)); ok && t.Type == "page" {
				pages = append(pages, info)
			}
		}
		fb.broadcast()
		fb.mu.Unlock()
		for _, info := range pages {
			fc.attach(info, false)
		}
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	case "Target.getTargets":
		send(fmt.Appendf(nil, `{"id":%d,"result":{"targetInfos":[]}}`, id))
		return
	case "Browser.getBrowserCommandLine":
		if fb.cfg.commandLine == nil {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32000,"message":"Command line not returned because --enable-automation not set."}}`, id))
			return
		}
		args, _ := json.Marshal(fb.cfg.commandLine)
		send(fmt.Appendf(nil, `{"id":%d,"result":{"arguments":%s}}`, id, args))
		return
	case "Target.detachFromTarget":
		var p struct{ SessionID string }
		json.Unmarshal(m.Params, &p)
		fb.mu.Lock()
		delete(fc.sessions, p.SessionID)
		fb.broadcast()
		fb.mu.Unlock()
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.detachedFromTarget","params":{"sessionId":%q}}`, p.SessionID))
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	case "Target.attachToTarget":
		var p struct{ TargetID string }
		json.Unmarshal(m.Params, &p)
		fb.mu.Lock()
		info, ok := fb.targets[p.TargetID]
		fb.mu.Unlock()
		if !ok {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32602,"message":"No target with given id found"}}`, id))
			return
		}
		fb.mu.Lock()
		if fc.sessions == nil {
			fc.sessions = map[string]*fakeSess{}
		}
		fb.nextJob++
		ss := &fakeSess{id: fmt.Sprintf("RELAY-%s-%d", p.TargetID, fb.nextJob), target: p.TargetID, seq: fb.nextJob, ran: true}
		fc.sessions[ss.id] = ss
		fb.broadcast()
		fb.mu.Unlock()
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":%q,"targetInfo":%s,"waitingForDebugger":false}}`, ss.id, info))
		send(fmt.Appendf(nil, `{"id":%d,"result":{"sessionId":%q}}`, id, ss.id))
		return
	case "Target.setDiscoverTargets":
		fb.mu.Lock()
		fc.own = true
		fb.mu.Unlock()
	}
	switch m.Method {
	case "Target.setDiscoverTargets":
		// Chromium announces the targets it has, then replies.
		for _, rm := range fb.fetch.msgs {
			if rm.From == "browser" && rm.m.ID != nil {
				break
			}
			if rm.From == "browser" {
				fc.send(rm.Msg)
			}
		}
		send(withID(fb.fetch.reply(fb.t, m.Method, nil), id))
	case "Fetch.enable":
		switch {
		case fb.cfg.lightpanda:
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-31998,"message":"BrowserContextNotLoaded"}}`, id))
		case fb.cfg.rejectFetch:
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32601,"message":"'Fetch.enable' wasn't found"}}`, id))
		default:
			// Marked before the reply, so the relay's Start cannot return
			// before the fake knows which connection is the relay's own.
			var p struct {
				Patterns []struct{ URLPattern, RequestStage string }
			}
			json.Unmarshal(m.Params, &p)
			fc.mu.Lock()
			fc.answers = slices.ContainsFunc(p.Patterns, func(pt struct{ URLPattern, RequestStage string }) bool { return pt.RequestStage == "Response" })
			fc.mu.Unlock()
			fb.mu.Lock()
			fc.holder = true
			if !fc.fetchOn {
				fc.fetchOn = true
				fc.onEpoch++
			}
			fc.patterns = fc.patterns[:0]
			for _, pt := range p.Patterns {
				fc.patterns = append(fc.patterns, pt.URLPattern)
			}
			fb.broadcast()
			fb.mu.Unlock()
			send(withID(fb.fetch.reply(fb.t, m.Method, nil), id))
		}
	case "Fetch.disable":
		fb.mu.Lock()
		fc.fetchOn = false
		fc.patterns = nil
		fb.broadcast()
		fb.mu.Unlock()
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
	case "Fetch.continueRequest":
		send(withID(fb.fetch.reply(fb.t, m.Method, nil), id))
		fc.continuedNow(m.Params, msg.at)
	case "Fetch.failRequest":
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		fc.failedNow(m.Params, msg.at)
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
		var p struct{ TargetID string }
		json.Unmarshal(m.Params, &p)
		fb.mu.Lock()
		info, ok := fb.targets[p.TargetID]
		fb.mu.Unlock()
		if ok {
			send(fmt.Appendf(nil, `{"id":%d,"result":{"targetInfo":%s}}`, id, info))
			return
		}
		send(withID(fb.fetch.reply(fb.t, m.Method, nil), id)) // No target with given id found
	}
}

// replayNext makes the next connection accepted answer from rec.
func (fb *fakeBrowser) replayNext(rec *recording) {
	fb.mu.Lock()
	fb.replaying = rec
	fb.mu.Unlock()
}

// answerReplay answers a command from fc.replay: discovery and
// auto-attaching with the events recorded before their replies, and every
// command with the reply recorded (a session's with an empty result).
func (fc *fakeConn) answerReplay(msg fakeMsg) {
	m := msg.m
	rec := fc.replay
	id := *m.ID
	if m.SessionID != "" {
		if m.Method == "Fetch.continueRequest" {
			fc.continuedNow(m.Params, msg.at)
		}
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, id, m.SessionID))
		return
	}
	switch m.Method {
	case "Target.setDiscoverTargets", "Target.setAutoAttach":
		fb := fc.fb
		fb.mu.Lock()
		fc.own = true
		fc.pagesConn = fc.pagesConn || m.Method == "Target.setAutoAttach"
		fb.broadcast()
		fb.mu.Unlock()
		from := 0
		for i, rm := range rec.msgs {
			if rm.From == "client" && rm.m.Method == m.Method {
				from = i
				break
			}
		}
		for _, rm := range rec.msgs[from+1:] {
			if rm.From == "browser" && rm.m.ID != nil {
				break
			}
			if rm.From == "browser" {
				fc.send(rm.Msg)
			}
		}
	}
	if m.Method == "Target.detachFromTarget" {
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	}
	fc.write(websocket.TextMessage, withID(rec.reply(fc.fb.t, m.Method, nil), id))
}

// continuedNow records a Fetch.continueRequest received at at.
func (fc *fakeConn) continuedNow(params []byte, at time.Time) {
	var p struct {
		RequestID         string
		InterceptResponse bool
	}
	json.Unmarshal(params, &p)
	fc.mu.Lock()
	fc.continued[p.RequestID] = at
	if p.InterceptResponse {
		if fc.watching == nil {
			fc.watching = map[string]bool{}
		}
		fc.watching[p.RequestID] = true
	}
	fc.mu.Unlock()
}

// failedNow records a Fetch.failRequest received at at: the pause is
// over (continuedAt returns), the request failed with its errorReason.
func (fc *fakeConn) failedNow(params []byte, at time.Time) {
	var p struct{ RequestID, ErrorReason string }
	json.Unmarshal(params, &p)
	fc.mu.Lock()
	if fc.failed == nil {
		fc.failed = map[string]string{}
	}
	fc.failed[p.RequestID] = p.ErrorReason
	fc.continued[p.RequestID] = at
	fc.mu.Unlock()
}

// failedWith returns the errorReason requestID was failed with, "" when
// it was not.
func (fc *fakeConn) failedWith(requestID string) string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.failed[requestID]
}

// attach attaches fc, the relay's pages connection, to a page, as
// Chromium's auto-attach does: waiting for the debugger when the page is
// new.
func (fc *fakeConn) attach(info json.RawMessage, waiting bool) {
	fb := fc.fb
	t, _, ok := readTargetInfo(fmt.Appendf(nil, `{"params":{"targetInfo":%s}}`, info))
	if !ok || t.Type != "page" {
		return
	}
	fb.mu.Lock()
	if fc.sessions == nil {
		fc.sessions = map[string]*fakeSess{}
	}
	if fc.sessionLocked(t.TargetID) != nil || fc.replay != nil {
		fb.mu.Unlock()
		return
	}
	fb.nextJob++
	ss := &fakeSess{id: fmt.Sprintf("RELAY-%s-%d", t.TargetID, fb.nextJob), target: t.TargetID, seq: fb.nextJob, ran: !waiting}
	fc.sessions[ss.id] = ss
	fb.broadcast()
	fb.mu.Unlock()
	fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":%q,"targetInfo":%s,"waitingForDebugger":%v}}`, ss.id, info, waiting))
}

// send writes a text message to the relay; the fake learns the targets it
// announces, and attaches the relay's pages connection to each new page.
func (fc *fakeConn) send(data []byte) error {
	var created json.RawMessage
	if m, ok := decodeWire(data); ok && (m.Method == "Target.targetCreated" || m.Method == "Target.targetInfoChanged") {
		if info, raw, ok := readTargetInfo(data); ok {
			fc.fb.announce(info.TargetID, raw)
			if m.Method == "Target.targetCreated" {
				created = raw
			}
		}
	}
	err := fc.write(websocket.TextMessage, data)
	if created != nil {
		for _, pc := range fc.fb.pagesConns() {
			pc.attach(created, true)
		}
	}
	return err
}

// pagesConns returns the live connections that auto-attach to pages.
func (fb *fakeBrowser) pagesConns() []*fakeConn {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out []*fakeConn
	for _, c := range fb.conns {
		if c.pagesConn && !c.ended_() {
			out = append(out, c)
		}
	}
	return out
}

func (fc *fakeConn) write(typ int, data []byte) error {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.c.SetWriteDeadline(time.Now().Add(waitFor))
	return fc.c.WriteMessage(typ, data)
}

// closeWith sends a close frame with code and text.
func (fc *fakeConn) closeWith(code int, text string) error {
	return fc.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}

// drop ends the connection without a close frame, as a crashed browser does.
func (fc *fakeConn) drop() { fc.c.Close() }

// next returns the next message the relay sent on this connection, in order.
func (fc *fakeConn) next(t testing.TB) fakeMsg {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		fc.mu.Lock()
		if fc.nread < len(fc.msgs) {
			m := fc.msgs[fc.nread]
			fc.nread++
			fc.mu.Unlock()
			return m
		}
		arrived := fc.arrived
		fc.mu.Unlock()
		select {
		case <-arrived:
		case <-fc.done:
			fc.mu.Lock()
			more := fc.nread < len(fc.msgs)
			fc.mu.Unlock()
			if !more {
				t.Fatalf("fake browser: connection ended (%v) while waiting for a message", fc.closeErr)
			}
		case <-deadline:
			t.Fatalf("fake browser: no message from the relay within %v", waitFor)
		}
	}
}

// received returns every message received so far.
func (fc *fakeConn) received() []fakeMsg {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]fakeMsg(nil), fc.msgs...)
}

// ended waits for the connection to end and returns how it ended.
func (fc *fakeConn) ended(t testing.TB) error {
	t.Helper()
	select {
	case <-fc.done:
		return fc.closeErr
	case <-time.After(waitFor):
		t.Fatalf("fake browser: connection still open after %v", waitFor)
		return nil
	}
}

// ended reports whether the connection has ended.
func (fc *fakeConn) ended_() bool {
	select {
	case <-fc.done:
		return true
	default:
		return false
	}
}

// pingCount reports how many pings the fake has answered.
func (fc *fakeConn) pingCount() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.pings
}

// continuedAt waits for the relay to continue requestID and returns when
// the fake got that command.
func (fc *fakeConn) continuedAt(requestID string) (time.Time, error) {
	deadline := time.After(waitFor)
	for {
		fc.mu.Lock()
		at, ok := fc.continued[requestID]
		arrived := fc.arrived
		fc.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-arrived:
		case <-fc.done:
			return time.Time{}, fmt.Errorf("connection ended before %s was continued", requestID)
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not continued within %v", requestID, waitFor)
		}
	}
}

// hopTimes is one paused request of a played navigation: when the fake
// paused it and when the relay let it go.
type hopTimes struct {
	requestID string
	paused    time.Time
	continued time.Time
	pauses    int    // how many interceptors paused it (navigate)
	failed    string // the errorReason it was failed with, "" when let go (navigate)
}

// play replays a recorded chain of paused requests the way Chromium
// drives it: each pause is sent once the one before it was continued.
// The chain gets a fresh interception job, so a recording can be played
// many times.
func (fc *fakeConn) play(chain [][]byte) ([]hopTimes, error) {
	job := fc.fb.newJob()
	var out []hopTimes
	for _, msg := range chain {
		msg = renumberJob(msg, job)
		p, _ := readPause(msg)
		if !p.requestStage() && !fc.pausesAnswer(p.RequestID) {
			continue // as Chromium: an answer pauses only where it was asked for
		}
		sent := time.Now()
		if err := fc.send(msg); err != nil {
			return out, err
		}
		at, err := fc.continuedAt(p.RequestID)
		if err != nil {
			return out, err
		}
		// A Response-stage pause reuses the requestId of its Request stage.
		fc.mu.Lock()
		delete(fc.continued, p.RequestID)
		fc.mu.Unlock()
		out = append(out, hopTimes{requestID: p.RequestID, paused: sent, continued: at})
	}
	return out, nil
}

// pausesAnswer reports whether the answer to requestID pauses at fc: its
// patterns ask for answers, or it continued the request asking for its
// answer (interceptResponse).
func (fc *fakeConn) pausesAnswer(requestID string) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.answers || fc.watching[requestID]
}

// holders returns the live connections that enabled browser-level Fetch,
// in the order they did: the order Chromium passes a request along.
func (fb *fakeBrowser) holders() []*fakeConn {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out []*fakeConn
	for _, c := range fb.conns {
		if c.fetchOn && !c.ended_() {
			out = append(out, c)
		}
	}
	return out
}

// playAll replays a recorded chain the way Chromium passes each paused
// request from one interceptor to the next: a Request-stage hop pauses at
// every live holder in turn (a Response-stage hop in the reverse order),
// each with an interception id of its own, and goes on once the last one
// continued it. A holder that ends while it holds a hop hands it to the
// next, as Chromium does. It returns, per hop, when the first holder got it
// and when the last one let it go.
func (fb *fakeBrowser) playAll(t testing.TB, chain [][]byte) []hopTimes {
	t.Helper()
	var out []hopTimes
	jobs := map[*fakeConn]int{} // each holder's interception job of the request under way
	for _, msg := range chain {
		p, _ := readPause(msg)
		hs := fb.holders()
		if !p.requestStage() {
			slices.Reverse(hs)
		}
		var ht hopTimes
		for i, hc := range hs {
			job, ok := jobs[hc]
			if p.requestStage() || !ok {
				job = fb.newJob()
				jobs[hc] = job
			}
			m := renumberJob(msg, job)
			mp, _ := readPause(m)
			if !p.requestStage() && !hc.pausesAnswer(mp.RequestID) {
				continue // as Chromium: an answer pauses only where it was asked for
			}
			sent := time.Now()
			if err := hc.send(m); err != nil {
				continue // gone already: the next one gets it
			}
			at, err := hc.continuedAt(mp.RequestID)
			if err != nil {
				continue // ended while holding: the next one gets it
			}
			if i == 0 || ht.paused.IsZero() {
				ht.paused, ht.requestID = sent, mp.RequestID
			}
			ht.continued = at
		}
		out = append(out, ht)
	}
	return out
}

func (fc *fakeConn) mustPlay(t testing.TB, chain [][]byte) []hopTimes {
	t.Helper()
	hops, err := fc.play(chain)
	if err != nil {
		t.Fatal(err)
	}
	return hops
}
