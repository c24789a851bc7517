package stream

// The cap on navigations in flight, held in the client stream: a
// navigation command over the cap waits for a place, and its place is
// given back whichever way the navigation ends. The cap is 1 in these
// tests, so a place that leaks holds the next navigation of its host for
// good.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// TestCapStream: held in the client stream, a navigation command waits for
// a place; its place goes back with the answer in the client's Network
// events, the session's next navigation, or the client leaving.
func TestCapStream(t *testing.T) {
	navigate := func(id int, url string) []byte {
		return fmt.Appendf(nil, `{"id":%d,"method":"Page.navigate","params":{"url":%q},"sessionId":"SID-1"}`, id, url)
	}
	sent := func(req string) []byte {
		return fmt.Appendf(nil, `{"method":"Network.requestWillBeSent","params":{"requestId":%q,"frameId":"FID-1","type":"Document","documentURL":"http://a.test/","request":{"url":"http://a.test/","method":"GET"}},"sessionId":"SID-1"}`, req)
	}
	tests := []struct {
		name string
		end  func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn)
	}{
		{"answer in the client's Network events", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(sent("REQ-1"))
			holdtest.ReadClient(t, c)
			fc.Send([]byte(`{"method":"Network.responseReceived","params":{"requestId":"REQ-1","frameId":"FID-1","type":"Document","response":{"url":"http://a.test/","status":200,"headers":{}}},"sessionId":"SID-1"}`))
			holdtest.ReadClient(t, c)
		}},
		{"the session's next navigation", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			holdtest.WriteClient(t, c, websocket.TextMessage, navigate(2, "http://b.test/"))
			if m := fc.Next(t); !strings.Contains(string(m.Data), "b.test") {
				t.Fatalf("browser got %s", m.Data)
			}
		}},
		{"client gone", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, c, fc := holdtest.StartCapped(t, ways, inStream)
			holdtest.WriteClient(t, c, websocket.TextMessage, navigate(1, "http://a.test/"))
			fc.Next(t)
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			tt.end(t, fc, c)
			holdtest.AwaitInFlight(t, pol, "a.test", 0)
		})
	}
	// Over the cap, a navigation command of another session waits.
	t.Run("holds", func(t *testing.T) {
		_, c, fc := holdtest.StartCapped(t, ways, inStream)
		holdtest.WriteClient(t, c, websocket.TextMessage, navigate(1, "http://a.test/"))
		fc.Next(t)
		holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"},"sessionId":"SID-2"}`))
		if fc.GotWithin(300 * time.Millisecond) {
			t.Fatalf("browser got %s while a.test had a navigation in flight, cap 1", fc.Next(t).Data)
		}
		fc.Send(sent("REQ-1"))
		holdtest.ReadClient(t, c)
		fc.Send([]byte(`{"method":"Network.loadingFailed","params":{"requestId":"REQ-1","type":"Document","errorText":"net::ERR_CONNECTION_RESET","canceled":false},"sessionId":"SID-1"}`))
		holdtest.ReadClient(t, c)
		if m := fc.Next(t); !strings.Contains(string(m.Data), `"id":2`) {
			t.Fatalf("browser got %s, want the second navigation", m.Data)
		}
	})
}
