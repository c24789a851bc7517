package hold_test

import (
	"os"
	"testing"

	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

// TestMain fails the tests, in a build with the tag lockorder, when they
// took holding's mutexes out of hold.go's lock order.
func TestMain(m *testing.M) { os.Exit(lockorder.Checked(m).Run()) }
