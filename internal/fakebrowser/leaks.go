package fakebrowser

import (
	"testing"

	"go.uber.org/goleak"
)

// CheckLeaks fails t if goroutines started during the test (the fake's,
// and those of the code under test) outlive it and its cleanups. Call it
// first, so its check runs last.
func CheckLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}
