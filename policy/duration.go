package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// durationWanted is what every duration flag accepts, for its errors.
const durationWanted = "want a duration such as 100ms or 1.5s, or a number of milliseconds"

// ParseDuration reads a duration the way every duration flag and rule of
// cdp-throttle does: a Go duration ("100ms", "1.5s", "2m") or a bare
// number of milliseconds ("100", "4.5"), as Lightpanda's own
// --http-nav-delay reads it. Negative durations are refused.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty: %s", durationWanted)
	}
	var d time.Duration
	if ms, err := strconv.ParseFloat(s, 64); err == nil && isPlainNumber(s) {
		if ms > float64(maxDuration/time.Millisecond) {
			return 0, fmt.Errorf("%s ms is too long", s)
		}
		d = time.Duration(ms * float64(time.Millisecond))
	} else if d, err = time.ParseDuration(s); err != nil {
		return 0, errors.New(durationWanted)
	}
	if d < 0 {
		return 0, fmt.Errorf("want a duration ≥ 0, such as 100ms or 1.5s, or a number of milliseconds")
	}
	return d, nil
}

// maxDuration bounds every duration read, far above any sensible setting.
const maxDuration = 1000 * time.Hour

// isPlainNumber reports whether s is digits with at most one decimal point:
// ParseFloat also reads "1e3", "Inf" and "0x10", which no one means as
// milliseconds.
func isPlainNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	dot := false
	for i, c := range s {
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && !dot && i > 0:
			dot = true
		default:
			return false
		}
	}
	return s != ""
}

// FlagDuration reads the value of the duration flag name (without its
// dashes) with ParseDuration. Its error names the flag with two dashes, as
// the user typed it whatever the number of dashes, quotes the value and
// says what is accepted. positive refuses zero too.
func FlagDuration(name, value string, positive bool) (time.Duration, error) {
	d, err := ParseDuration(value)
	if err == nil && positive && d == 0 {
		err = fmt.Errorf("want a duration > 0, such as 100ms or 1.5s, or a number of milliseconds")
	}
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %w", name, value, err)
	}
	return d, nil
}
