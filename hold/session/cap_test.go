package session

// The cap on navigations in flight, through each client's page session
// (Lightpanda): a document over the cap waits for a place, and its place
// is given back whichever way the navigation ends. The cap is 1 in these
// tests, so a place that leaks holds the next navigation of its host for
// good.

import (
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// TestCapSession: through each client's page session (Lightpanda), every
// way a navigation ends gives its place back.
func TestCapSession(t *testing.T) {
	const S, F = "SID-1", "FID-1"
	doc := func(n int) []byte {
		return holdtest.Paused(S, fmt.Sprintf("INT-%d", n), fmt.Sprintf("REQ-%d", n), F, "Document", "http://a.test/")
	}
	response := func(n, status int) []byte {
		return fmt.Appendf(nil, `{"method":"Network.responseReceived","params":{"requestId":"REQ-%d","frameId":%q,"type":"Document","response":{"url":"http://a.test/","status":%d,"headers":{}}},"sessionId":%q}`, n, F, status, S)
	}
	tests := []struct {
		name string
		end  func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn)
	}{
		{"answer", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { fc.Send(response(1, 200)) }},
		{"5xx", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { fc.Send(response(1, 500)) }},
		{"connection reset", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(fmt.Appendf(nil, `{"method":"Network.loadingFailed","params":{"requestId":"REQ-1","type":"Document","errorText":"net::ERR_EMPTY_RESPONSE","canceled":false},"sessionId":%q}`, S))
		}},
		{"aborted", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(fmt.Appendf(nil, `{"method":"Network.loadingFailed","params":{"requestId":"REQ-1","type":"Document","errorText":"net::ERR_ABORTED","canceled":true},"sessionId":%q}`, S))
		}},
		{"page closed", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(fmt.Appendf(nil, `{"method":"Target.detachedFromTarget","params":{"sessionId":%q,"targetId":%q}}`, S, F))
		}},
		{"a later navigation of the page", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(doc(2))
			holdtest.ContinuedOwn(t, fc, "INT-2")
			fc.Send(response(2, 200))
		}},
		{"client gone", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, c, fc := holdtest.StartCapped(t, ways)
			attach(t, fc, c, S, F)
			fc.Send(doc(1))
			holdtest.ContinuedOwn(t, fc, "INT-1")
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			tt.end(t, fc, c)
			holdtest.AwaitInFlight(t, pol, "a.test", 0)
		})
	}
}

// TestCapSessionHolds: in the session strategy too, a document over the
// cap waits until the one in flight is answered; a held createTarget's
// place passes to its page's document.
func TestCapSessionHolds(t *testing.T) {
	pol, c, fc := holdtest.StartCapped(t, ways)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"http://a.test/"}}`))
	if m := fc.Next(t); m.Wire.Method != "Target.createTarget" {
		t.Fatalf("browser got %s, want the createTarget", m.Data)
	}
	holdtest.AwaitInFlight(t, pol, "a.test", 1)
	attach(t, fc, c, "SID-1", "FID-1")
	fc.Send(holdtest.Paused("SID-1", "INT-1", "REQ-1", "FID-1", "Document", "http://a.test/"))
	holdtest.ContinuedOwn(t, fc, "INT-1") // the createTarget's page: its place already
	holdtest.AwaitInFlight(t, pol, "a.test", 1)
	// Another page's document waits for that place.
	attach(t, fc, c, "SID-2", "FID-2")
	fc.Send(holdtest.Paused("SID-2", "INT-2", "REQ-2", "FID-2", "Document", "http://a.test/2"))
	if fc.GotWithin(300 * time.Millisecond) {
		t.Fatalf("browser got %s while a.test had a navigation in flight, cap 1", fc.Next(t).Data)
	}
	fc.Send([]byte(`{"method":"Network.responseReceived","params":{"requestId":"REQ-1","frameId":"FID-1","type":"Document","response":{"url":"http://a.test/","status":200,"headers":{}}},"sessionId":"SID-1"}`))
	holdtest.ContinuedOwn(t, fc, "INT-2")
	holdtest.AwaitInFlight(t, pol, "a.test", 1)
}
