package hold

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// checkLeaks fails t if goroutines started during the test outlive it and
// its cleanups. Call it first, so its check runs last.
func checkLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// waitFor bounds every wait of the tests, as it bounds the fake browser's.
const waitFor = fakebrowser.WaitFor
