// Package redact makes what the relay logs safe to log: a URL without its
// credentials and query, a browser's command line without the credentials
// in its URLs. It owns that one rule, so every log line agrees on it; it
// knows nothing of CDP, the relay or the limiter.
package redact

import (
	"net/url"
	"strings"
)

// URL returns rawURL fit for a log: without its userinfo, and with its
// query (which may hold a token, or for /json/new a page's URL) and
// fragment elided.
func URL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "redacted", false
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// Args returns argv fit for a log: a URL in it, alone or as a flag's value
// (--proxy-server=http://user:pass@host), loses its userinfo and query.
func Args(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = a
		if !strings.Contains(a, "://") {
			continue
		}
		if name, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			out[i] = name + "=" + URL(val)
		} else {
			out[i] = URL(a)
		}
	}
	return out
}
