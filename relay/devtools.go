package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cdp-throttle/cdp-throttle/redact"
)

// rewriter turns the browser's JSON into the relay's, given the relay's
// host as the client reached it and a function that adds the token.
type rewriter func(body []byte, host string, token func(string) string) ([]byte, error)

func (p *Proxy) serveJSON(w http.ResponseWriter, r *http.Request, up *upstream, method, path string, rw rewriter) {
	// A page a client opens with /json/new is that client's: its first
	// request may pause before the answer names it.
	created := ""
	if path == "/json/new" && up.holds != nil {
		u, _ := url.QueryUnescape(p.withoutToken(r.URL.RawQuery))
		done := up.holds.NewPage(u)
		defer func() { done(created) }()
	}
	body, resp, err := up.get(r.Context(), method, path, p.withoutToken(r.URL.RawQuery))
	if path == "/json/new" && err == nil {
		var t struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(body, &t) == nil {
			created = t.ID
		}
		if up.owners != nil && created != "" {
			// Nobody's yet: closed after the orphan timeout unless a
			// client opens its socket, drives it or attaches to it.
			up.owners.Opened(created)
		}
	}
	if err != nil && resp == nil {
		p.log.Warn().Err(err).Str("upstream", up.name).Str("path", path).Msg("browser HTTP endpoint unreachable")
		http.Error(w, "cdp-throttle: browser unreachable: "+err.Error(), http.StatusBadGateway)
		return
	}
	if rw != nil && resp.StatusCode == http.StatusOK {
		p.rememberTargets(body, up)
		if out, err := rw(body, r.Host, p.withToken); err == nil {
			body = out
		} else {
			p.log.Warn().Err(err).Str("path", path).Msg("browser answer not rewritten")
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// serveList answers /json/list: every live browser's targets together.
func (p *Proxy) serveList(w http.ResponseWriter, r *http.Request) {
	if len(p.ups) == 1 {
		p.serveJSON(w, r, p.ups[0], http.MethodGet, "/json/list", rewriteList)
		return
	}
	var all []json.RawMessage
	for _, up := range p.ups {
		if !up.alive.Load() {
			continue
		}
		body, _, err := up.get(r.Context(), http.MethodGet, "/json/list", "")
		var list []json.RawMessage
		if err != nil || json.Unmarshal(body, &list) != nil {
			continue
		}
		p.rememberTargets(body, up)
		all = append(all, list...)
	}
	merged, _ := json.Marshal(all)
	out, err := rewriteList(merged, r.Host, p.withToken)
	if err != nil {
		http.Error(w, "cdp-throttle: "+err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.Write(out)
}

// rememberTargets notes which browser the targets of a /json answer (one
// target or a list) belong to.
func (p *Proxy) rememberTargets(body []byte, up *upstream) {
	if len(p.ups) == 1 {
		return
	}
	var one struct {
		ID string `json:"id"`
	}
	var list []struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(body, &list) == nil {
		for _, t := range list {
			p.remember(t.ID, up)
		}
	} else if json.Unmarshal(body, &one) == nil {
		p.remember(one.ID, up)
	}
}

// get asks the browser's HTTP side. It returns the response with an error
// only when the status is not 200.
func (up *upstream) get(ctx context.Context, method, path, rawQuery string) ([]byte, *http.Response, error) {
	base, _, err := up.addr(ctx)
	if err != nil {
		return nil, nil, err
	}
	u := *base
	u.Path, u.RawQuery = path, rawQuery
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	resp, err := up.client.Do(req)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			ue.URL = redact.URL(ue.URL) // the query of /json/new is a page's URL
		}
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("relay: reading %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, resp, fmt.Errorf("relay: %s %s: %s", method, path, resp.Status)
	}
	return body, resp, nil
}

// rewriteList rewrites each target of /json/list.
func rewriteList(body []byte, host string, token func(string) string) ([]byte, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.WriteString("[ ")
	for i, item := range list {
		if i > 0 {
			out.WriteString(", ")
		}
		obj, err := rewriteObject(item, host, token)
		if err != nil {
			return nil, err
		}
		out.Write(obj)
	}
	out.WriteString(" ]\n")
	return out.Bytes(), nil
}

// rewriteObject points webSocketDebuggerUrl and devtoolsFrontendUrl of one
// JSON object at host (the websocket URL with the token), keeping every other member as the browser wrote it
// and in its order.
func rewriteObject(body []byte, host string, token func(string) string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("relay: want a JSON object")
	}
	var out bytes.Buffer
	out.WriteString("{\n")
	for first := true; dec.More(); first = false {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, err
		}
		switch key {
		case "webSocketDebuggerUrl":
			val = rewriteString(val, func(s string) string { return token(rewriteWSURL(s, host)) })
		case "devtoolsFrontendUrl":
			val = rewriteString(val, func(s string) string { return rewriteFrontendURL(s, host) })
		}
		if !first {
			out.WriteString(",\n")
		}
		k, _ := json.Marshal(key)
		out.WriteString("   ")
		out.Write(k)
		out.WriteString(": ")
		out.Write(val)
	}
	out.WriteString("\n}\n")
	return out.Bytes(), nil
}

func rewriteString(val json.RawMessage, f func(string) string) json.RawMessage {
	var s string
	if json.Unmarshal(val, &s) != nil {
		return val
	}
	out, err := json.Marshal(f(s))
	if err != nil {
		return val
	}
	return out
}

// rewriteWSURL points a ws:// URL at host, keeping its path and query.
func rewriteWSURL(s, host string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return s
	}
	u.Host = host
	return u.String()
}

// rewriteFrontendURL points the ws= (or wss=) parameter of a DevTools
// frontend URL at host, leaving the rest of the URL as the browser wrote it.
func rewriteFrontendURL(s, host string) string {
	for _, key := range []string{"?ws=", "&ws=", "?wss=", "&wss="} {
		i := strings.Index(s, key)
		if i < 0 {
			continue
		}
		start := i + len(key)
		end := strings.IndexAny(s[start:], "/&#")
		if end < 0 || s[start+end] != '/' {
			continue
		}
		return s[:start] + host + s[start+end:]
	}
	return s
}
