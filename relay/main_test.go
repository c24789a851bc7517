package relay

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"

	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(lockorder.Checked(m))
}

// waitFor bounds every wait of the tests, as it bounds the fake browser's.
const waitFor = fakebrowser.WaitFor
