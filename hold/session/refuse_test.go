package session

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestSessionHoldRefusesDisallowed: held in the client's page session (as
// for Lightpanda), a disallowed document, and a redirect hop within its
// host into a disallowed path, are failed there with BlockedByClient and
// book nothing; an allowed one goes on.
func TestSessionHoldRefusesDisallowed(t *testing.T) {
	const S, F = "SID-1", "FID-1"
	obey, lim := holdtest.Obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1")
	tp, c, fc := holdtest.StartLightpanda(t, limiter.Config{}, ways, obey)
	attach(t, fc, c, S, F)

	failedOwn := func(id string) {
		t.Helper()
		m := fc.Next(t)
		if m.Wire.Method != "Fetch.failRequest" || !strings.Contains(string(m.Wire.Params), `"`+id+`"`) || !strings.Contains(string(m.Wire.Params), `"errorReason":"BlockedByClient"`) {
			t.Fatalf("browser got %s, want the relay to fail %s with BlockedByClient", m.Data, id)
		}
		fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *m.Wire.ID, S))
	}
	fc.Send(holdtest.Paused(S, "INT-1", "REQ-1", F, "Document", "http://a.test/private/x"))
	failedOwn("INT-1")
	if n := (*lim).Len(); n != 0 {
		t.Errorf("limiter knows %d hosts after a refusal, want none", n)
	}
	// Allowed, then redirected within the host into /private/.
	fc.Send(holdtest.Paused(S, "INT-2", "REQ-2", F, "Document", "http://a.test/public/redir"))
	holdtest.ContinuedOwn(t, fc, "INT-2")
	redirect, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "sessionId": S, "params": map[string]any{
		"requestId": "INT-3", "networkId": "REQ-2", "redirectedRequestId": "INT-2", "frameId": F, "resourceType": "Document",
		"request": map[string]any{"url": "http://a.test/private/z", "method": "GET", "headers": map[string]string{}},
	}})
	fc.Send(redirect)
	failedOwn("INT-3")
	// Subresources are never held, so never refused.
	fc.Send(holdtest.Paused(S, "INT-4", "REQ-4", F, "Image", "http://a.test/private/img.png"))
	holdtest.ContinuedOwn(t, fc, "INT-4")
	if n := tp.Counts.Disallowed.Load(); n != 2 {
		t.Errorf("holding counted %d disallowed navigations, want 2", n)
	}
}

// TestSessionHoldRefusesCreateTarget: held in the client's session, a
// Target.createTarget with a disallowed URL never reaches the browser and
// is answered with a CDP error net::ERR_BLOCKED_BY_CLIENT.
func TestSessionHoldRefusesCreateTarget(t *testing.T) {
	obey, lim := holdtest.Obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1")
	_, c, fc := holdtest.StartLightpanda(t, limiter.Config{}, ways, obey)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"http://a.test/private/x"}}`))
	_, data := holdtest.ReadClient(t, c)
	if got := string(data); !strings.Contains(got, `"id":1`) || !strings.Contains(got, `"error":`) || !strings.Contains(got, "net::ERR_BLOCKED_BY_CLIENT") {
		t.Fatalf("client got %s, want a CDP error net::ERR_BLOCKED_BY_CLIENT", got)
	}
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Target.createTarget","params":{"url":"http://a.test/public/x"}}`))
	if m := fc.Next(t); m.Wire.Method != "Target.createTarget" || !strings.Contains(string(m.Data), "/public/x") {
		t.Fatalf("browser got %s, want the allowed createTarget (and never the refused one)", m.Data)
	}
	if n := (*lim).Len(); n != 1 {
		t.Errorf("limiter knows %d hosts, want a.test, booked once by the allowed one", n)
	}
}
