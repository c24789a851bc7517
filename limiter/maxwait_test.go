package limiter_test

import (
	"testing"

	"github.com/cdp-throttle/cdp-throttle/limiter/limitertest"
)

// TestMaxWait: the tables of --max-wait (limitertest.MaxWaitCases), which
// the Redis store runs too.
func TestMaxWait(t *testing.T) { limitertest.MaxWait(t, newSubject) }
