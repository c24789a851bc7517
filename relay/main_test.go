package relay

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor bounds every wait of the tests, as it bounds the fake browser's.
const waitFor = fakebrowser.WaitFor
