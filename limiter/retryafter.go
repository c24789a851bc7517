package limiter

import (
	"strings"
	"time"
)

// httpDates are the forms of an HTTP-date a Retry-After may take, as
// net/http.ParseTime reads them: RFC 9110's IMF-fixdate, and the obsolete
// RFC 850 and asctime forms a recipient must still accept.
var httpDates = [...]string{
	"Mon, 02 Jan 2006 15:04:05 GMT",  // IMF-fixdate
	"Monday, 02-Jan-06 15:04:05 MST", // RFC 850
	"Mon Jan _2 15:04:05 2006",       // asctime
}

// ParseRetryAfter reads a Retry-After header of an answer received at now:
// delay-seconds (a non-negative whole number of seconds) or an HTTP-date,
// whose wait is the date less now (0 for a date already past). The wait
// is capped at most: DefaultRetryAfterMax when most ≤ 0, RetryAfterMaxLimit
// at the very most. Anything else (negative or fractional numbers, a date
// in no form above, an empty header) reports ok false and is ignored.
//
// now is the relay's clock when it read the answer, the clock the
// schedule runs on: the date is an instant, and the next slot lands on
// it whatever the answer's way back took.
func ParseRetryAfter(v string, now time.Time, most time.Duration) (wait time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	most = Config{RetryAfterMax: most}.retryAfterMax()
	if v[0] < '0' || v[0] > '9' {
		return retryAt(v, now, most)
	}
	maxSeconds := int64(most / time.Second)
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
	return min(time.Duration(n)*time.Second, most), true
}

// retryAt reads v as an HTTP-date and returns the wait until it from now,
// capped at most.
func retryAt(v string, now time.Time, most time.Duration) (time.Duration, bool) {
	for _, layout := range httpDates {
		if at, err := time.Parse(layout, v); err == nil {
			return min(max(at.Sub(now), 0), most), true
		}
	}
	return 0, false
}

// retryAfterMax is c.RetryAfterMax as the rule reads it.
func (c Config) retryAfterMax() time.Duration {
	switch {
	case c.RetryAfterMax <= 0:
		return DefaultRetryAfterMax
	case c.RetryAfterMax > RetryAfterMaxLimit:
		return RetryAfterMaxLimit
	}
	return c.RetryAfterMax
}

// RetryAfter is the wait the answer o, received at now, asks for under c:
// its Retry-After read by ParseRetryAfter and capped at c's RetryAfterMax,
// ok false when it has none that reads. Only an overload answer's wait is
// honoured (Config.Effect); a shared store reads it here too.
func (c Config) RetryAfter(o Outcome, now time.Time) (wait time.Duration, ok bool) {
	return ParseRetryAfter(o.RetryAfter, now, c.retryAfterMax())
}
