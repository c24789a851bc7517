package fakebrowser

import (
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Ended is the close code gorilla/websocket reports for a connection that
// ended without a close frame, as a browser's exit ends it.
const Ended = websocket.CloseAbnormalClosure

// CloseOf reads a client's connection c until it ends, within WaitFor, and
// returns the close it got: Ended, with the error as its text, when no
// close frame came (a reset with what the client sent still unread too).
func CloseOf(t *testing.T, c *websocket.Conn) *websocket.CloseError {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(WaitFor))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce
		}
		return &websocket.CloseError{Code: Ended, Text: err.Error()}
	}
}
