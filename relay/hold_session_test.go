package relay

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// ownCommand reads the next message the relay sent the browser, which must
// be one of its own (a negative id) calling method on session, and answers
// it as the browser would.
func ownCommand(t *testing.T, fc *fakebrowser.Conn, method, session string) fakebrowser.Msg {
	t.Helper()
	m := fc.Next(t)
	if m.Wire.ID == nil || *m.Wire.ID >= 0 || m.Wire.Method != method || m.Wire.SessionID != session {
		t.Fatalf("browser got %s, want the relay's own %s on %s", m.Data, method, session)
	}
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *m.Wire.ID, session))
	return m
}

// paused is a Fetch.requestPaused on a session.
func paused(session, id, network, frame, typ, url string) []byte {
	b, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "sessionId": session, "params": map[string]any{
		"requestId": id, "networkId": network, "frameId": frame, "resourceType": typ,
		"request": map[string]any{"url": url, "method": "GET", "headers": map[string]string{}},
	}})
	return b
}

// continuedOwn waits for the relay's own Fetch.continueRequest of id,
// answers it as the browser would, and returns when the browser got it.
func continuedOwn(t *testing.T, fc *fakebrowser.Conn, id string) time.Time {
	t.Helper()
	m := continuing(t, fc, id)
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *m.Wire.ID, m.Wire.SessionID))
	return m.At
}

// continuing waits for the relay's own Fetch.continueRequest of id, and
// leaves it to the test to answer.
func continuing(t *testing.T, fc *fakebrowser.Conn, id string) fakebrowser.Msg {
	t.Helper()
	m := fc.Next(t)
	if m.Wire.Method != "Fetch.continueRequest" || !strings.Contains(string(m.Wire.Params), `"`+id+`"`) {
		t.Fatalf("browser got %s, want the relay to continue %s", m.Data, id)
	}
	if m.Wire.ID == nil || *m.Wire.ID >= 0 {
		t.Fatalf("browser got %s, want the relay's own", m.Data)
	}
	return m
}

// TestSessionHoldFollowsLightpandaDepartures: Lightpanda times no send,
// and answers Fetch.continueRequest once it has sent the request. The
// relay takes that answer as the departure, of its own continue and of a
// client's: a document let go whose answer has not come holds the next
// one of its host, and one answered late moves the next one's slot by as
// much.
func TestSessionHoldFollowsLightpandaDepartures(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	const spacing, late = 100 * time.Millisecond, 250 * time.Millisecond
	tp := relayTo(t, fb, fixed(spacing))
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	// Two pages: a page's next document ends the one before.
	const S1, F1, S2, F2 = "SID-1", "FID-0000000001", "SID-2", "FID-0000000002"
	for _, p := range [][2]string{{S1, F1}, {S2, F2}} {
		fc.Send(attachedTo(p[0], p[1], "page"))
		ownCommand(t, fc, "Fetch.enable", p[0])
		ownCommand(t, fc, "Network.enable", p[0])
		readClient(t, c)
	}

	// The relay's own continue: a document held for its slot, which
	// Lightpanda sends only late; the next one of its host, on the other
	// page, waits for it to leave, and then for its spacing.
	tp.lim.Reserve("a.test", time.Now())
	fc.Send(paused(S1, "INT-1", "REQ-1", F1, "Document", "http://a.test/1"))
	first := continuing(t, fc, "INT-1")
	fc.Send(paused(S2, "INT-2", "REQ-2", F2, "Document", "http://a.test/2"))
	time.Sleep(late)
	left := time.Now()
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *first.Wire.ID, S1))
	if at := continuedOwn(t, fc, "INT-2"); at.Sub(left) < spacing-10*time.Millisecond {
		t.Errorf("the second document was let go %v after the first left, want its spacing, %v", at.Sub(left), spacing)
	}

	// The client's own continue, of a document it intercepts too.
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"`+S1+`","method":"Fetch.enable","params":{"patterns":[{"urlPattern":"*"}]}}`))
	fc.Next(t)
	fc.Send([]byte(`{"id":1,"result":{},"sessionId":"` + S1 + `"}`))
	readClient(t, c)
	doc := paused(S1, "INT-3", "REQ-3", F1, "Document", "http://a.test/3")
	fc.Send(doc)
	if _, got := readClient(t, c); string(got) != string(doc) {
		t.Fatalf("client got %s, want its paused document", got)
	}
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"`+S1+`","method":"Fetch.continueRequest","params":{"requestId":"INT-3"}}`))
	if m := fc.Next(t); m.Wire.ID == nil || *m.Wire.ID != 2 {
		t.Fatalf("browser got %s, want the client's continue", m.Data)
	}
	fc.Send(paused(S2, "INT-4", "REQ-4", F2, "Document", "http://a.test/4"))
	time.Sleep(late)
	left = time.Now()
	fc.Send([]byte(`{"id":2,"result":{},"sessionId":"` + S1 + `"}`))
	if _, got := readClient(t, c); !strings.HasPrefix(string(got), `{"id":2,`) {
		t.Fatalf("client got %s, want the answer to its continue", got)
	}
	if at := continuedOwn(t, fc, "INT-4"); at.Sub(left) < spacing-10*time.Millisecond {
		t.Errorf("the fourth document was let go %v after the third left, want its spacing, %v", at.Sub(left), spacing)
	}
}

// TestSessionHold drives the session strategy against a Lightpanda-like
// browser: the relay's own interception in the client's page session,
// invisible to the client; documents held for their slot, everything else
// let go at once; the client's own interception merged with the relay's,
// seeing exactly its own paused requests, across its own Fetch.disable.
func TestSessionHold(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	tp := relayTo(t, fb, fixed(300*time.Millisecond))
	if got := tp.p.ups[0].holding(); got != "session" {
		t.Fatalf("navigations held by %q, want session for Lightpanda", got)
	}
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	const S, F = "SID-1", "FID-0000000001"
	marker := func(n int) []byte {
		return fmt.Appendf(nil, `{"method":"Page.lifecycleEvent","params":{"name":"m%d"},"sessionId":%q}`, n, S)
	}
	expect := func(want []byte) {
		t.Helper()
		if _, got := readClient(t, c); string(got) != string(want) {
			t.Fatalf("client got %s, want %s", got, want)
		}
	}

	// The client learns of its page session; the relay has armed it first.
	fc.Send(attachedTo(S, F, "page"))
	enable := ownCommand(t, fc, "Fetch.enable", S)
	if want := `{"patterns":[{"urlPattern":"*","requestStage":"Request"}]}`; string(enable.Wire.Params) != want {
		t.Errorf("relay's Fetch.enable: got %s, want %s", enable.Wire.Params, want)
	}
	ownCommand(t, fc, "Network.enable", S)
	expect(attachedTo(S, F, "page"))

	// Network events the client did not ask for and paused subresources
	// never reach it.
	fc.Send([]byte(`{"method":"Network.requestWillBeSent","params":{"requestId":"REQ-1","frameId":"` + F + `","type":"Script","request":{"url":"http://a.test/x.js"}},"sessionId":"` + S + `"}`))
	fc.Send(paused(S, "INT-1", "REQ-1", F, "Script", "http://a.test/x.js"))
	continuedOwn(t, fc, "INT-1")
	fc.Send(marker(1))
	expect(marker(1))

	// A document waits for its slot.
	tp.lim.Reserve("a.test", time.Now())
	sent := time.Now()
	fc.Send(paused(S, "INT-2", "REQ-2", F, "Document", "http://a.test/next"))
	if at := continuedOwn(t, fc, "INT-2"); at.Sub(sent) < 250*time.Millisecond {
		t.Errorf("document let go %v after it paused, want about its 300ms slot", at.Sub(sent))
	}

	// The client's own interception: its Fetch.enable reaches the browser
	// with the relay's pattern added, its answer reaches the client.
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"`+S+`","method":"Fetch.enable","params":{"patterns":[{"urlPattern":"*.js"}]}}`))
	m := fc.Next(t)
	if want := `{"id":1,"sessionId":"` + S + `","method":"Fetch.enable","params":{"patterns":[{"urlPattern":"*.js"},{"urlPattern":"*","requestStage":"Request"}]}}`; string(m.Data) != want {
		t.Errorf("browser got %s, want %s", m.Data, want)
	}
	fc.Send([]byte(`{"id":1,"result":{},"sessionId":"` + S + `"}`))
	expect([]byte(`{"id":1,"result":{},"sessionId":"` + S + `"}`))
	// It gets its own paused requests, and only those.
	js := paused(S, "INT-3", "REQ-3", F, "Script", "http://a.test/y.js")
	fc.Send(js)
	expect(js)
	fc.Send(paused(S, "INT-4", "REQ-4", F, "Image", "http://a.test/z.png"))
	continuedOwn(t, fc, "INT-4")
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"`+S+`","method":"Fetch.continueRequest","params":{"requestId":"INT-3"}}`))
	if m := fc.Next(t); *m.Wire.ID != 2 {
		t.Fatalf("browser got %s, want the client's continue", m.Data)
	}

	// Its Fetch.disable is answered by the relay, which keeps its own
	// interception on and lets go what the client still held.
	doc := paused(S, "INT-5", "REQ-5", F, "Document", "http://a.test/held")
	fc.Send(doc)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":3,"sessionId":"`+S+`","method":"Fetch.disable"}`))
	expect([]byte(`{"id":3,"result":{},"sessionId":"` + S + `"}`))
	again := ownCommand(t, fc, "Fetch.enable", S)
	if want := `{"patterns":[{"urlPattern":"*","requestStage":"Request"}]}`; string(again.Wire.Params) != want {
		t.Errorf("relay's Fetch.enable after the client's disable: got %s, want %s", again.Wire.Params, want)
	}
	continuedOwn(t, fc, "INT-5") // held for its slot, and no client interception any more

	// Network events reach the client once it enabled them itself.
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":4,"sessionId":"`+S+`","method":"Network.enable"}`))
	fc.Next(t)
	ev := []byte(`{"method":"Network.loadingFinished","params":{"requestId":"REQ-5","timestamp":1,"encodedDataLength":1},"sessionId":"` + S + `"}`)
	fc.Send(ev)
	expect(ev)
}

// TestSessionHoldCreateTarget holds a Target.createTarget that opens a page
// on a URL (its request may leave before the new session is armed) and
// books the page's first document no second time.
func TestSessionHoldCreateTarget(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	var rec *recorder
	tp := relayTo(t, fb, fixed(300*time.Millisecond), recordBookings(&rec))
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	tp.lim.Reserve("a.test", time.Now())
	sent := time.Now()
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"http://a.test/"}}`))
	if m := fc.Next(t); m.At.Sub(sent) < 250*time.Millisecond || m.Wire.Method != "Target.createTarget" {
		t.Errorf("browser got %s %v after it was sent, want the command after its 300ms slot", m.Data, m.At.Sub(sent))
	}
	fc.Send(attachedTo("SID-1", "FID-1", "page"))
	ownCommand(t, fc, "Fetch.enable", "SID-1")
	ownCommand(t, fc, "Network.enable", "SID-1")
	readClient(t, c)
	fc.Send(paused("SID-1", "INT-1", "REQ-1", "FID-1", "Document", "http://a.test/"))
	continuedOwn(t, fc, "INT-1")
	if n := len(rec.bookings()); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}
