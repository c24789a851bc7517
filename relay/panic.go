package relay

import (
	"fmt"
	"runtime/debug"

	"github.com/cdp-throttle/cdp-throttle/cdp"

	"github.com/cdp-throttle/cdp-throttle/wire"
)

// A panic in the code of one connection (a bug a message of one client
// or its browser sets off) ends that connection, never the relay: each
// of a pair's pumps recovers, logs the stack once, counts it in
// /metrics (cdp_throttle_panics_total) and ends the pair as a broken
// connection ends, so that every other client's crawl goes on. What the
// connection held stays held (Fetch: in the relay's own connection, let
// go at its slot; the other ways: ended with the connection, as when a
// client leaves).

// errPanicked ends a pair whose pump panicked.
type errPanicked struct{ v any }

func (e errPanicked) Error() string { return fmt.Sprintf("relay: panic: %v", e.v) }

// safePump is pump, ending the pair instead of the process when it
// panics.
func (pr *pair) safePump(src, dst *wire.Conn) (end pumpEnd) {
	defer func() {
		if v := recover(); v != nil {
			pr.p.Metrics.panicked()
			pr.log.Error().Str("from", src.Side).Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).
				Msg("a panic in this connection's code: the connection is ended, the relay goes on")
			end = pumpEnd{from: src, to: dst, err: errPanicked{v}}
		}
	}()
	return pr.pump(src, dst)
}

// faultHook, when set (a build with the faultinject tag, for tests), is
// shown every client command the relay scans.
var faultHook func(hd *cdp.Header)
