package holdtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// What a client reads and writes, and what the browser says, in the
// tests of holding.

// ReadClient reads the next message a client gets, within
// fakebrowser.WaitFor.
func ReadClient(t *testing.T, c *websocket.Conn) (int, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(fakebrowser.WaitFor))
	typ, data, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("client: reading: %v", err)
	}
	return typ, data
}

// WriteClient writes a message from a client.
func WriteClient(t *testing.T, c *websocket.Conn, typ int, data []byte) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(fakebrowser.WaitFor))
	if err := c.WriteMessage(typ, data); err != nil {
		t.Fatalf("client: writing: %v", err)
	}
}

// AttachedTo is a Target.attachedToTarget a client gets for a target.
func AttachedTo(session, target, typ string) []byte {
	b, _ := json.Marshal(map[string]any{"method": "Target.attachedToTarget", "params": map[string]any{
		"sessionId": session, "waitingForDebugger": false,
		"targetInfo": map[string]any{"targetId": target, "type": typ, "title": "", "url": "about:blank", "attached": true},
	}})
	return b
}

// Paused is a Fetch.requestPaused on a session.
func Paused(session, id, network, frame, typ, url string) []byte {
	b, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "sessionId": session, "params": map[string]any{
		"requestId": id, "networkId": network, "frameId": frame, "resourceType": typ,
		"request": map[string]any{"url": url, "method": "GET", "headers": map[string]string{}},
	}})
	return b
}

// OwnCommand reads the next message the relay sent the browser, which
// must be one of its own (a negative id) calling method on session, and
// answers it as the browser would.
func OwnCommand(t *testing.T, fc *fakebrowser.Conn, method, session string) fakebrowser.Msg {
	t.Helper()
	m := fc.Next(t)
	if m.Wire.ID == nil || *m.Wire.ID >= 0 || m.Wire.Method != method || m.Wire.SessionID != session {
		t.Fatalf("browser got %s, want the relay's own %s on %s", m.Data, method, session)
	}
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *m.Wire.ID, session))
	return m
}

// ContinuedOwn waits for the relay's own Fetch.continueRequest of id,
// answers it as the browser would, and returns when the browser got it.
func ContinuedOwn(t *testing.T, fc *fakebrowser.Conn, id string) time.Time {
	t.Helper()
	m := Continuing(t, fc, id)
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *m.Wire.ID, m.Wire.SessionID))
	return m.At
}

// Continuing waits for the relay's own Fetch.continueRequest of id, and
// leaves it to the test to answer.
func Continuing(t *testing.T, fc *fakebrowser.Conn, id string) fakebrowser.Msg {
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
