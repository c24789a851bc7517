package session

import (
	"testing"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/hold/stream"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// ways are the ways of holding the session way's tests hold with: the
// session way, and the stream one it falls over to.
var ways = hold.Ways{Session: New, Stream: stream.New}

// attach attaches the client c to a page, as Lightpanda announces one
// (Target.attachedToTarget in session on target), and answers the
// relay's own Fetch.enable and Network.enable in that session, with
// which the session way arms the page before the client hears of it.
func attach(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn, session, target string) {
	t.Helper()
	fc.Send(holdtest.AttachedTo(session, target, "page"))
	holdtest.OwnCommand(t, fc, "Fetch.enable", session)
	holdtest.OwnCommand(t, fc, "Network.enable", session)
	holdtest.ReadClient(t, c)
}
