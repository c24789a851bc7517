package stream

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(lockorder.Checked(m))
}
