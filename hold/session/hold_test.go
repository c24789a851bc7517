package session

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
)

// TestSessionHoldFollowsLightpandaDepartures: Lightpanda times no send,
// and answers Fetch.continueRequest once it has sent the request. The
// relay takes that answer as the departure, of its own continue and of a
// client's: a document let go whose answer has not come holds the next
// one of its host, and one answered late moves the next one's slot by as
// much.
func TestSessionHoldFollowsLightpandaDepartures(t *testing.T) {
	const spacing, late = 100 * time.Millisecond, 250 * time.Millisecond
	tp, c, fc := holdtest.StartLightpanda(t, holdtest.Fixed(spacing), ways)
	// Two pages: a page's next document ends the one before.
	const S1, F1, S2, F2 = "SID-1", "FID-0000000001", "SID-2", "FID-0000000002"
	for _, p := range [][2]string{{S1, F1}, {S2, F2}} {
		attach(t, fc, c, p[0], p[1])
	}

	// The relay's own continue: a document held for its slot, which
	// Lightpanda sends only late; the next one of its host, on the other
	// page, waits for it to leave, and then for its spacing.
	tp.Lim.Reserve("a.test", time.Now())
	fc.Send(holdtest.Paused(S1, "INT-1", "REQ-1", F1, "Document", "http://a.test/1"))
	first := holdtest.Continuing(t, fc, "INT-1")
	fc.Send(holdtest.Paused(S2, "INT-2", "REQ-2", F2, "Document", "http://a.test/2"))
	time.Sleep(late)
	left := time.Now()
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *first.Wire.ID, S1))
	if at := holdtest.ContinuedOwn(t, fc, "INT-2"); at.Sub(left) < spacing-10*time.Millisecond {
		t.Errorf("the second document was let go %v after the first left, want its spacing, %v", at.Sub(left), spacing)
	}

	// The client's own continue, of a document it intercepts too.
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"`+S1+`","method":"Fetch.enable","params":{"patterns":[{"urlPattern":"*"}]}}`))
	fc.Next(t)
	fc.Send([]byte(`{"id":1,"result":{},"sessionId":"` + S1 + `"}`))
	holdtest.ReadClient(t, c)
	doc := holdtest.Paused(S1, "INT-3", "REQ-3", F1, "Document", "http://a.test/3")
	fc.Send(doc)
	if _, got := holdtest.ReadClient(t, c); string(got) != string(doc) {
		t.Fatalf("client got %s, want its paused document", got)
	}
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"`+S1+`","method":"Fetch.continueRequest","params":{"requestId":"INT-3"}}`))
	if m := fc.Next(t); m.Wire.ID == nil || *m.Wire.ID != 2 {
		t.Fatalf("browser got %s, want the client's continue", m.Data)
	}
	fc.Send(holdtest.Paused(S2, "INT-4", "REQ-4", F2, "Document", "http://a.test/4"))
	time.Sleep(late)
	left = time.Now()
	fc.Send([]byte(`{"id":2,"result":{},"sessionId":"` + S1 + `"}`))
	if _, got := holdtest.ReadClient(t, c); !strings.HasPrefix(string(got), `{"id":2,`) {
		t.Fatalf("client got %s, want the answer to its continue", got)
	}
	if at := holdtest.ContinuedOwn(t, fc, "INT-4"); at.Sub(left) < spacing-10*time.Millisecond {
		t.Errorf("the fourth document was let go %v after the third left, want its spacing, %v", at.Sub(left), spacing)
	}
}

// TestSessionHold drives the session strategy against a Lightpanda-like
// browser: the relay's own interception in the client's page session,
// invisible to the client; documents held for their slot, everything else
// let go at once; the client's own interception merged with the relay's,
// seeing exactly its own paused requests, across its own Fetch.disable.
func TestSessionHold(t *testing.T) {
	tp, c, fc := holdtest.StartLightpanda(t, holdtest.Fixed(300*time.Millisecond), ways)
	if got := tp.Browser.Holding(); got != "session" {
		t.Fatalf("navigations held by %q, want session for Lightpanda", got)
	}
	const S, F = "SID-1", "FID-0000000001"
	marker := func(n int) []byte {
		return fmt.Appendf(nil, `{"method":"Page.lifecycleEvent","params":{"name":"m%d"},"sessionId":%q}`, n, S)
	}
	expect := func(want []byte) {
		t.Helper()
		if _, got := holdtest.ReadClient(t, c); string(got) != string(want) {
			t.Fatalf("client got %s, want %s", got, want)
		}
	}

	// The client learns of its page session; the relay has armed it first.
	fc.Send(holdtest.AttachedTo(S, F, "page"))
	enable := holdtest.OwnCommand(t, fc, "Fetch.enable", S)
	if want := `{"patterns":[{"urlPattern":"*","requestStage":"Request"}]}`; string(enable.Wire.Params) != want {
		t.Errorf("relay's Fetch.enable: got %s, want %s", enable.Wire.Params, want)
	}
	holdtest.OwnCommand(t, fc, "Network.enable", S)
	expect(holdtest.AttachedTo(S, F, "page"))

	// Network events the client did not ask for and paused subresources
	// never reach it.
	fc.Send([]byte(`{"method":"Network.requestWillBeSent","params":{"requestId":"REQ-1","frameId":"` + F + `","type":"Script","request":{"url":"http://a.test/x.js"}},"sessionId":"` + S + `"}`))
	fc.Send(holdtest.Paused(S, "INT-1", "REQ-1", F, "Script", "http://a.test/x.js"))
	holdtest.ContinuedOwn(t, fc, "INT-1")
	fc.Send(marker(1))
	expect(marker(1))

	// A document waits for its slot.
	tp.Lim.Reserve("a.test", time.Now())
	sent := time.Now()
	fc.Send(holdtest.Paused(S, "INT-2", "REQ-2", F, "Document", "http://a.test/next"))
	if at := holdtest.ContinuedOwn(t, fc, "INT-2"); at.Sub(sent) < 250*time.Millisecond {
		t.Errorf("document let go %v after it paused, want about its 300ms slot", at.Sub(sent))
	}

	// The client's own interception: its Fetch.enable reaches the browser
	// with the relay's pattern added, its answer reaches the client.
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"`+S+`","method":"Fetch.enable","params":{"patterns":[{"urlPattern":"*.js"}]}}`))
	m := fc.Next(t)
	if want := `{"id":1,"sessionId":"` + S + `","method":"Fetch.enable","params":{"patterns":[{"urlPattern":"*.js"},{"urlPattern":"*","requestStage":"Request"}]}}`; string(m.Data) != want {
		t.Errorf("browser got %s, want %s", m.Data, want)
	}
	fc.Send([]byte(`{"id":1,"result":{},"sessionId":"` + S + `"}`))
	expect([]byte(`{"id":1,"result":{},"sessionId":"` + S + `"}`))
	// It gets its own paused requests, and only those.
	js := holdtest.Paused(S, "INT-3", "REQ-3", F, "Script", "http://a.test/y.js")
	fc.Send(js)
	expect(js)
	fc.Send(holdtest.Paused(S, "INT-4", "REQ-4", F, "Image", "http://a.test/z.png"))
	holdtest.ContinuedOwn(t, fc, "INT-4")
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"`+S+`","method":"Fetch.continueRequest","params":{"requestId":"INT-3"}}`))
	if m := fc.Next(t); *m.Wire.ID != 2 {
		t.Fatalf("browser got %s, want the client's continue", m.Data)
	}

	// Its Fetch.disable is answered by the relay, which keeps its own
	// interception on and lets go what the client still held.
	doc := holdtest.Paused(S, "INT-5", "REQ-5", F, "Document", "http://a.test/held")
	fc.Send(doc)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":3,"sessionId":"`+S+`","method":"Fetch.disable"}`))
	expect([]byte(`{"id":3,"result":{},"sessionId":"` + S + `"}`))
	again := holdtest.OwnCommand(t, fc, "Fetch.enable", S)
	if want := `{"patterns":[{"urlPattern":"*","requestStage":"Request"}]}`; string(again.Wire.Params) != want {
		t.Errorf("relay's Fetch.enable after the client's disable: got %s, want %s", again.Wire.Params, want)
	}
	holdtest.ContinuedOwn(t, fc, "INT-5") // held for its slot, and no client interception any more

	// Network events reach the client once it enabled them itself.
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":4,"sessionId":"`+S+`","method":"Network.enable"}`))
	fc.Next(t)
	ev := []byte(`{"method":"Network.loadingFinished","params":{"requestId":"REQ-5","timestamp":1,"encodedDataLength":1},"sessionId":"` + S + `"}`)
	fc.Send(ev)
	expect(ev)
}

// TestSessionHoldCreateTarget holds a Target.createTarget that opens a page
// on a URL (its request may leave before the new session is armed) and
// books the page's first document no second time.
func TestSessionHoldCreateTarget(t *testing.T) {
	var rec *holdtest.Recorder
	tp, c, fc := holdtest.StartLightpanda(t, holdtest.Fixed(300*time.Millisecond), ways, holdtest.RecordBookings(&rec))
	tp.Lim.Reserve("a.test", time.Now())
	sent := time.Now()
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"http://a.test/"}}`))
	if m := fc.Next(t); m.At.Sub(sent) < 250*time.Millisecond || m.Wire.Method != "Target.createTarget" {
		t.Errorf("browser got %s %v after it was sent, want the command after its 300ms slot", m.Data, m.At.Sub(sent))
	}
	attach(t, fc, c, "SID-1", "FID-1")
	fc.Send(holdtest.Paused("SID-1", "INT-1", "REQ-1", "FID-1", "Document", "http://a.test/"))
	holdtest.ContinuedOwn(t, fc, "INT-1")
	if n := len(rec.Bookings()); n != 1 {
		t.Errorf("%d bookings, want 1", n)
	}
}
