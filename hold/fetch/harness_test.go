package fetch

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/hold/session"
	"github.com/cdp-throttle/cdp-throttle/hold/stream"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"

	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(lockorder.Checked(m))
}

// ways are the ways the Fetch way's tests hold with: Fetch, and the two
// it falls over to.
var ways = hold.Ways{Fetch: New, Session: session.New, Stream: stream.New}

// holdOn arms a Holder for fb with a limiter for cfg, every page counting
// as a client's, as most tests of the Fetch way play pages no client
// drives; opts adjust it before it starts.
func holdOn(t *testing.T, fb *fakebrowser.Browser, cfg limiter.Config, opts ...func(*hold.Holder)) *holdtest.Holder {
	t.Helper()
	return holdtest.Arm(t, fb, cfg, holdtest.EveryPage(ways), opts...)
}

// armNew arms a Holder, as holdOn does, for a new fake browser, and
// returns the browser with it; the test is checked for leaked goroutines
// (fakebrowser.CheckLeaks).
func armNew(t *testing.T, cfg limiter.Config, opts ...func(*hold.Holder)) (*fakebrowser.Browser, *holdtest.Holder) {
	t.Helper()
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	return fb, holdOn(t, fb, cfg, opts...)
}

// connected arms a Holder for a new fake browser as armNew does, and
// returns them with the relay's two connections to the browser, net and
// pages, once they are up and the recorded pages announced and armed
// (fakebrowser.RelayConns): where most tests of the Fetch way begin.
func connected(t *testing.T, cfg limiter.Config, opts ...func(*hold.Holder)) (fb *fakebrowser.Browser, th *holdtest.Holder, net, pages *fakebrowser.Conn) {
	t.Helper()
	fb, th = armNew(t, cfg, opts...)
	net, pages = fakebrowser.RelayConns(t, fb, false)
	return fb, th, net, pages
}

// netOff waits until the net connection's browser-level Fetch would not
// pause a request for url, as once pages holds: its patterns change on
// their own time, after pages is armed, and a navigation that starts
// before would pause there too.
func netOff(t *testing.T, fb *fakebrowser.Browser, url string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); fb.HeldAtBrowser(url); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the net connection's Fetch still pauses %s 5 s after pages was armed", url)
		}
	}
}
