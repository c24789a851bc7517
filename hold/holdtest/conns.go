package holdtest

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// Sockets reports how many websockets the relay has open, the client's
// and the browser's of each connection it relays: 0 once it has let go
// of every connection, holding told (hold.Conn.Ended).
func (r *Relay) Sockets() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// WaitLetGo waits, within fakebrowser.WaitFor, until the relay has let
// go of every connection (Sockets is 0), and fails the test if it never
// does.
func (r *Relay) WaitLetGo(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(fakebrowser.WaitFor)
	for r.Sockets() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("relay still has %d websockets open, want none", r.Sockets())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
