package limiter

import (
	"strings"
	"time"
)

// ParseRetryAfter reads a Retry-After header in its delay-seconds form (a
// non-negative whole number of seconds) and caps it at RetryAfterMax. The
// HTTP-date form, negative or fractional numbers and anything else that is
// not a plain number report ok false and are ignored.
func ParseRetryAfter(v string) (wait time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	const maxSeconds = int64(RetryAfterMax / time.Second)
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n <= maxSeconds {
			n = n*10 + int64(c-'0')
		}
	}
	return min(time.Duration(n)*time.Second, RetryAfterMax), true
}
