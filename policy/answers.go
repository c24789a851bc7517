package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// retryAfterMaxWanted is what --retry-after-max and a rule's
// retry-after-max: accept, for their errors.
const retryAfterMaxWanted = "want a duration from 1s to 1h, such as 5m (a bare number is milliseconds)"

// ParseRetryAfterMax reads the longest Retry-After honoured, as
// --retry-after-max and a rule's retry-after-max: take it: a duration
// from a second (Retry-After counts whole seconds; a bare number would be
// milliseconds) to limiter.RetryAfterMaxLimit.
func ParseRetryAfterMax(s string) (time.Duration, error) {
	d, err := ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%v: %s", err, retryAfterMaxWanted)
	case d < time.Second:
		return 0, fmt.Errorf("%v is under a second: %s", d, retryAfterMaxWanted)
	case d > limiter.RetryAfterMaxLimit:
		return 0, fmt.Errorf("%v is over an hour, the longest a Retry-After is honoured: %s", d, retryAfterMaxWanted)
	}
	return d, nil
}

// overloadHeaderWanted is what --overload-header and a rule's
// overload-header: accept, for their errors.
const overloadHeaderWanted = "want a header NAME, or NAME=VALUE, such as cf-mitigated=challenge"

// ParseOverloadHeader reads one header an answer that carries it is
// overload by, as --overload-header and a rule's overload-header: take
// it: NAME (whatever its value) or NAME=VALUE, NAME a header name
// (RFC 9110's token), VALUE a value without control characters; both
// matched whatever their case.
func ParseOverloadHeader(s string) (limiter.Header, error) {
	name, value, hasValue := strings.Cut(strings.TrimSpace(s), "=")
	h := limiter.Header{Name: strings.TrimSpace(name), Value: strings.TrimSpace(value)}
	switch {
	case h.Name == "":
		return h, errors.New("no header name: " + overloadHeaderWanted)
	case !isHeaderName(h.Name):
		return h, fmt.Errorf("%q is no header name (letters, digits and !#$%%&'*+-.^_`|~): %s", h.Name, overloadHeaderWanted)
	case hasValue && h.Value == "":
		return h, errors.New("an empty VALUE: " + overloadHeaderWanted + " (NAME alone matches any value)")
	case strings.ContainsFunc(h.Value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
		return h, errors.New("a VALUE with control characters: " + overloadHeaderWanted)
	}
	return h, nil
}

// isHeaderName reports whether s is a token (RFC 9110, 5.6.2), as a
// header's name is.
func isHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// overloadHeaders reads --overload-header's values into a set; none
// gives the zero Headers.
func overloadHeaders(values []string) (limiter.Headers, error) {
	var hs []limiter.Header
	for _, v := range values {
		h, err := ParseOverloadHeader(v)
		if err != nil {
			return limiter.Headers{}, fmt.Errorf("--overload-header %q: %w", v, err)
		}
		hs = append(hs, h)
	}
	return limiter.NewHeaders(hs...), nil
}

// rateLimitHeadersWanted is what --ratelimit-headers and a rule's
// ratelimit-headers: accept, for their errors.
const rateLimitHeadersWanted = "want obey (a document answer's RateLimit-Policy, RateLimit and X-RateLimit headers space its host) or ignore"

// ParseRateLimitHeaders reads what the server's own RateLimit headers are
// for, as --ratelimit-headers and a rule's ratelimit-headers: take it:
// obey or ignore. ignore is limiter.Config.IgnoreServer.
func ParseRateLimitHeaders(s string) (ignore bool, err error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "obey":
		return false, nil
	case "ignore":
		return true, nil
	}
	return false, errors.New(rateLimitHeadersWanted)
}
