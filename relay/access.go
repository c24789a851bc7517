package relay

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// authorize checks who may use the relay, before anything else runs: the
// Host header must name the relay by an IP literal, localhost or a name in
// AllowHosts, so that a web page cannot reach it through DNS rebinding (as
// Chrome itself checks); and when Token is set the request must carry it,
// as "Authorization: Bearer TOKEN" or "?token=TOKEN". It answers refused
// requests itself and reports whether the request may go on.
func (p *Proxy) authorize(w http.ResponseWriter, r *http.Request) bool {
	if !p.hostAllowed(r.Host) {
		p.log.Warn().Str("remote", r.RemoteAddr).Str("host", r.Host).Str("path", r.URL.Path).
			Msg("request refused: Host header is not an IP address, localhost or an --allow-host name")
		http.Error(w, "cdp-throttle: Host header is not an IP address, localhost or a name allowed with --allow-host", http.StatusForbidden)
		return false
	}
	if p.Token == "" {
		return true
	}
	got := r.URL.Query().Get("token")
	if auth := r.Header.Get("Authorization"); auth != "" {
		if scheme, tok, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = strings.TrimSpace(tok)
		}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(p.Token)) == 1 {
		return true
	}
	p.log.Warn().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Bool("token_given", got != "").
		Msg("request refused: missing or wrong token")
	w.Header().Set("WWW-Authenticate", `Bearer realm="cdp-throttle"`)
	http.Error(w, "cdp-throttle: a token is required: send Authorization: Bearer TOKEN or ?token=TOKEN, query-escaped", http.StatusUnauthorized)
	return false
}

func (p *Proxy) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ".")
	if host == "" {
		return true // HTTP/1.0 without Host: nothing for a rebinding page to forge
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	for _, h := range p.AllowHosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// withToken adds the relay's token to a URL the relay advertises, so a
// client that follows it gets in. The token is escaped as url.Values
// escapes it ("+" as %2B, a space as "+"), which is how authorize reads it
// back; the rest of the URL stays as the browser wrote it.
func (p *Proxy) withToken(u string) string {
	if p.Token == "" {
		return u
	}
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + url.Values{"token": {p.Token}}.Encode()
}

// withoutToken drops the relay's own token from a query before it goes on
// to the browser: /json/new would open it as part of the page's URL and
// send it to the site. The pair is dropped however the client escaped it
// (%20 or "+" for a space, %2B or %2b, the key too); pairs that are
// anything else stay byte for byte, since /json/new's query is a URL.
func (p *Proxy) withoutToken(rawQuery string) string {
	if p.Token == "" || rawQuery == "" {
		return rawQuery
	}
	parts := strings.Split(rawQuery, "&")
	kept := parts[:0]
	for _, part := range parts {
		if !p.isTokenPair(part) {
			kept = append(kept, part)
		}
	}
	return strings.Join(kept, "&")
}

// isTokenPair reports whether one key=value pair of a query is the relay's
// token: read as url.ParseQuery reads it (and so authorize), or with "+"
// left as it is, or not unescaped at all, so that no spelling of it a
// page could read as the token passes.
func (p *Proxy) isTokenPair(pair string) bool {
	k, v, ok := strings.Cut(pair, "=")
	if !ok {
		return false
	}
	if k, err := url.QueryUnescape(k); err != nil || k != "token" {
		return false
	}
	if v == p.Token {
		return true
	}
	if u, err := url.QueryUnescape(v); err == nil && u == p.Token {
		return true
	}
	u, err := url.PathUnescape(v)
	return err == nil && u == p.Token
}

// Loopback reports whether a listen address is reachable only from this
// machine.
func Loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
