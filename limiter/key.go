package limiter

import (
	"net/netip"
	"net/url"
	"strings"

	"golang.org/x/net/idna"
)

// Key returns the bucket a navigation to rawURL is booked in: the URL's
// hostname, lower-cased, without scheme, userinfo, port or trailing dot, an
// IPv6 address in canonical form inside its brackets. Only http and https
// URLs reach a host; for anything else (about:, data:, blob:, file:,
// javascript:, chrome:, a URL that does not parse) ok is false and the
// navigation is never throttled. A host no browser would send a request to
// (a space, a percent sign) is not ok either; an internationalised name
// becomes punycode, as browsers send it. Exempt hosts still get their key: Reserve
// is what lets them through.
func Key(rawURL string) (hostname string, ok bool) {
	scheme, rest, found := strings.Cut(rawURL, ":")
	if !found || !(strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")) {
		return "", false
	}
	if !strings.HasPrefix(rest, "//") {
		return "", false
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", false
	}
	hostname = strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if hostname == "" || hostname[0] == '.' || hostname[len(hostname)-1] == '.' || strings.Contains(hostname, "..") {
		return "", false
	}
	if strings.Contains(hostname, ":") {
		addr, err := netip.ParseAddr(hostname)
		if err != nil {
			return "", false
		}
		return "[" + addr.WithZone("").String() + "]", true
	}
	for i := 0; i < len(hostname); i++ {
		switch c := hostname[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.', c == '_':
		case c >= 0x80:
			// An internationalised name: browsers send it as punycode.
			ascii, err := idna.Lookup.ToASCII(hostname)
			if err != nil || ascii == "" {
				return "", false
			}
			return strings.TrimSuffix(ascii, "."), true
		default:
			return "", false // no browser would send a request to it
		}
	}
	return hostname, true
}

// Exempt reports whether navigations to hostname are never throttled: the
// loopback names a local test or a local service answers on.
func Exempt(hostname string) bool {
	switch hostname {
	case "127.0.0.1", "[::1]":
		return true
	}
	return len(hostname) == len("localhost") && strings.EqualFold(hostname, "localhost")
}
