package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// member is one member of a JSON object, its value as written.
type member struct {
	key string
	val json.RawMessage
}

// objects reads a JSON object, or an array of them, keeping member order
// and every value's bytes.
func objects(t *testing.T, body []byte) [][]member {
	t.Helper()
	var list []json.RawMessage
	if err := json.Unmarshal(body, &list); err != nil {
		list = []json.RawMessage{body}
	}
	var out [][]member
	for _, raw := range list {
		dec := json.NewDecoder(bytes.NewReader(raw))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("not a JSON object: %.80s", raw)
		}
		var obj []member
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatal(err)
			}
			var val json.RawMessage
			if err := dec.Decode(&val); err != nil {
				t.Fatal(err)
			}
			obj = append(obj, member{tok.(string), val})
		}
		out = append(out, obj)
	}
	return out
}

// checkRewritten checks that got is upstream with every
// webSocketDebuggerUrl and devtoolsFrontendUrl pointing at host instead of
// the browser's address, every other member byte-identical in value, and
// the members in the browser's order.
func checkRewritten(t *testing.T, got, upstream []byte, browserAddr, host string) {
	t.Helper()
	gotObjs, wantObjs := objects(t, got), objects(t, upstream)
	if len(gotObjs) != len(wantObjs) {
		t.Fatalf("got %d objects, want %d:\n%s", len(gotObjs), len(wantObjs), got)
	}
	rewritten := 0
	for i := range wantObjs {
		g, w := gotObjs[i], wantObjs[i]
		if len(g) != len(w) {
			t.Fatalf("object %d: got %d members, want %d", i, len(g), len(w))
		}
		for j := range w {
			if g[j].key != w[j].key {
				t.Fatalf("object %d member %d: got key %q, want %q", i, j, g[j].key, w[j].key)
			}
			want := w[j].val
			if k := w[j].key; k == "webSocketDebuggerUrl" || k == "devtoolsFrontendUrl" {
				var s string
				json.Unmarshal(w[j].val, &s)
				if !strings.Contains(s, browserAddr) {
					t.Fatalf("object %d: the browser's %s %q does not name its address %s", i, k, s, browserAddr)
				}
				var gs string
				json.Unmarshal(g[j].val, &gs)
				if ws := strings.Replace(s, browserAddr, host, 1); gs != ws {
					t.Errorf("object %d: got %s %q, want %q", i, k, gs, ws)
				}
				rewritten++
				continue
			}
			if !bytes.Equal(g[j].val, want) {
				t.Errorf("object %d: got %s %s, want %s as the browser wrote it", i, w[j].key, g[j].val, want)
			}
		}
	}
	if rewritten == 0 && len(wantObjs) > 0 {
		t.Errorf("no URL to rewrite in %s", upstream)
	}
}

func TestJSONEndpoints(t *testing.T) {
	// The target the recording created, listed, activated and closed.
	_, lines := fakebrowser.LoadHTTP(t)
	var created struct{ ID string }
	for _, l := range lines {
		if l.Method == "PUT" && l.Path == "/json/new" {
			json.Unmarshal([]byte(l.Body), &created)
		}
	}
	newQuery := "http://a.test:8080/page?new"
	tests := []struct {
		name      string
		browser   fakebrowser.Config
		method    string
		target    string // path and query asked of the relay
		wantUp    string // "METHOD path?query" the browser gets; "" for none
		wantCode  int
		rewritten bool // the body is the browser's with its URLs rewritten; else byte-identical
	}{
		{name: "version", method: "GET", target: "/json/version", wantUp: "GET /json/version", wantCode: 200, rewritten: true},
		{name: "version slash (Playwright)", method: "GET", target: "/json/version/", wantUp: "GET /json/version", wantCode: 200, rewritten: true},
		{name: "json", method: "GET", target: "/json", wantUp: "GET /json/list", wantCode: 200, rewritten: true},
		{name: "list", method: "GET", target: "/json/list", wantUp: "GET /json/list", wantCode: 200, rewritten: true},
		{name: "new PUT", method: "PUT", target: "/json/new?" + newQuery, wantUp: "PUT /json/new?" + newQuery, wantCode: 200, rewritten: true},
		{name: "new GET becomes PUT", method: "GET", target: "/json/new?" + newQuery, wantUp: "PUT /json/new?" + newQuery, wantCode: 200, rewritten: true},
		{name: "new POST refused", method: "POST", target: "/json/new", wantCode: 405},
		{name: "activate", method: "GET", target: "/json/activate/" + created.ID, wantUp: "GET /json/activate/" + created.ID, wantCode: 200},
		{name: "activate unknown", method: "GET", target: "/json/activate/NOPE", wantUp: "GET /json/activate/NOPE", wantCode: 404},
		{name: "close", method: "GET", target: "/json/close/" + created.ID, wantUp: "GET /json/close/" + created.ID, wantCode: 200},
		{name: "close unknown", method: "GET", target: "/json/close/NOPE", wantUp: "GET /json/close/NOPE", wantCode: 404},
		{name: "protocol", method: "GET", target: "/json/protocol", wantUp: "GET /json/protocol", wantCode: 200},
		{name: "unknown path", method: "GET", target: "/json/nothing", wantCode: 404},
		{name: "lightpanda version", browser: fakebrowser.Config{Lightpanda: true}, method: "GET", target: "/json/version", wantUp: "GET /json/version", wantCode: 200, rewritten: true},
		{name: "lightpanda list", browser: fakebrowser.Config{Lightpanda: true}, method: "GET", target: "/json/list", wantUp: "GET /json/list", wantCode: 200, rewritten: true},
		{name: "lightpanda has no new", browser: fakebrowser.Config{Lightpanda: true}, method: "PUT", target: "/json/new?" + newQuery, wantUp: "PUT /json/new?" + newQuery, wantCode: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, tt.browser)
			tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.AllowHosts = []string{"relay.example"} })
			_, port, _ := net.SplitHostPort(tp.addr)
			// The Host header the client reached the relay with, whatever it is;
			// an allowed name that Chromium itself would refuse must not reach it.
			for _, host := range []string{tp.addr, "localhost:" + port, "[::1]:" + port, "relay.example:9322"} {
				t.Run(host, func(t *testing.T) {
					before := len(fb.Hits())
					resp, body := tp.ask(t, tt.method, tt.target, func(r *http.Request) { r.Host = host })
					if resp.StatusCode != tt.wantCode {
						t.Fatalf("got status %d (%s), want %d", resp.StatusCode, body, tt.wantCode)
					}
					hits := fb.Hits()[before:]
					if tt.wantUp == "" {
						if len(hits) != 0 {
							t.Fatalf("got %d requests to the browser, want none", len(hits))
						}
						return
					}
					if len(hits) != 1 {
						t.Fatalf("got %d requests to the browser, want 1", len(hits))
					}
					h := hits[0]
					if up := h.String(); up != tt.wantUp {
						t.Errorf("browser got %q, want %q", up, tt.wantUp)
					}
					if h.Host != fb.Addr {
						t.Errorf("browser got Host %q, want its own address %q", h.Host, fb.Addr)
					}
					// What the browser answered the relay, as the fake serves it.
					upstream := fakebrowser.AskHTTP(t, fb.Addr, h.Method, h.Path, h.Query)
					if tt.rewritten {
						checkRewritten(t, body, []byte(upstream.Body), fb.Addr, host)
					} else if d := fakebrowser.EqualMsg(body, []byte(upstream.Body)); d != "" {
						t.Errorf("body: %s", d)
					}
					if got := resp.Header.Get("Content-Type"); got != upstream.ContentType {
						t.Errorf("got Content-Type %q, want the browser's %q", got, upstream.ContentType)
					}
				})
			}
		})
	}
}

// TestJSONRefusesForeignHost checks that a Host the relay does not answer
// to (DNS rebinding) never reaches the browser.
func TestJSONRefusesForeignHost(t *testing.T) {
	tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off})
	before := len(fb.Hits())
	for _, target := range []string{"/json/version", "/json/list", "/devtools/browser/x"} {
		resp, _ := tp.ask(t, "GET", target, func(r *http.Request) { r.Host = "rebound.example:9322" })
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: got status %d, want 403", target, resp.StatusCode)
		}
	}
	if hits := fb.Hits()[before:]; len(hits) != 0 {
		t.Errorf("got %d requests to the browser, want none", len(hits))
	}
}

// TestJSONToken checks that with a token the advertised websocket URLs
// carry it, and that the token a client authenticated with never reaches
// the browser (nor, through /json/new, the site it opens).
func TestJSONToken(t *testing.T) {
	const token = "s3cret"
	tests := []struct {
		name   string
		method string
		target string
		auth   bool   // send the token as a bearer header rather than in the query
		wantUp string // what the browser gets
	}{
		{name: "version, token in the query", method: "GET", target: "/json/version?token=" + token, wantUp: "GET /json/version"},
		{name: "version, bearer", method: "GET", target: "/json/version", auth: true, wantUp: "GET /json/version"},
		{name: "new, bearer", method: "PUT", target: "/json/new?http://a.test/?token=mine", auth: true, wantUp: "PUT /json/new?http://a.test/?token=mine"},
		{name: "new, token in the query", method: "PUT", target: "/json/new?http://a.test/x&token=" + token, wantUp: "PUT /json/new?http://a.test/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.Token = token })
			before := len(fb.Hits())
			resp, body := tp.ask(t, tt.method, tt.target, func(r *http.Request) {
				if tt.auth {
					r.Header.Set("Authorization", "Bearer "+token)
				}
			})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("got status %d (%s), want 200", resp.StatusCode, body)
			}
			hits := fb.Hits()[before:]
			if len(hits) != 1 {
				t.Fatalf("got %d requests to the browser, want 1", len(hits))
			}
			if up := hits[0].String(); up != tt.wantUp {
				t.Errorf("browser got %q, want %q", up, tt.wantUp)
			}
			var v struct{ WebSocketDebuggerURL string }
			json.Unmarshal(body, &v)
			if !strings.HasSuffix(v.WebSocketDebuggerURL, "?token="+token) {
				t.Errorf("got webSocketDebuggerUrl %q, want it to carry the token", v.WebSocketDebuggerURL)
			}
		})
	}
}

// escapedTokens are relay tokens that a query must escape, and one that
// it need not.
var escapedTokens = []struct{ name, token string }{
	{"plain", "s3cret"},
	{"plus slash equals space", "a+b/c=d e"},
	{"unicode", "jeton-é-令牌"},
	{"percent", "100%25%"}, // looks escaped once, is not
}

// tokenForms returns the ways a client may write the pair token=TOKEN in a
// query, each of which url.ParseQuery reads as TOKEN.
func tokenForms(token string) []struct{ name, pair string } {
	q := url.QueryEscape(token)
	lower := regexp.MustCompile(`%[0-9A-F]{2}`).ReplaceAllStringFunc(q, strings.ToLower)
	var every strings.Builder
	for _, b := range []byte(token) {
		fmt.Fprintf(&every, "%%%02X", b)
	}
	return []struct{ name, pair string }{
		{"url.Values", "token=" + q},
		{"encodeURIComponent", "token=" + strings.ReplaceAll(q, "+", "%20")},
		{"lowercase hex", "token=" + lower},
		{"every byte escaped, key too", "%74oken=" + every.String()},
	}
}

// advertisedRest checks that an advertised URL ends with the relay's token
// as url.Values escapes it and that the token reads back as itself, and
// returns the URL without it.
func advertisedRest(t *testing.T, advertised, token string) string {
	t.Helper()
	u, err := url.Parse(advertised)
	if err != nil {
		t.Fatalf("advertised URL %q: %v", advertised, err)
	}
	if got := u.Query()["token"]; len(got) != 1 || got[0] != token {
		t.Errorf("advertised URL %q reads back token %q, want [%q]", advertised, got, token)
	}
	suffix := "token=" + url.QueryEscape(token)
	rest, ok := strings.CutSuffix(advertised, suffix)
	if !ok || !(strings.HasSuffix(rest, "?") || strings.HasSuffix(rest, "&")) {
		t.Fatalf("got advertised URL %q, want it to end with ?%s", advertised, suffix)
	}
	return rest[:len(rest)-1]
}

// TestJSONTokenEscaped checks tokens that need escaping in a query: the
// URLs the relay advertises carry them escaped as url.Values escapes them,
// with the rest as the browser wrote it, and a client following them gets
// in; every escaping of the token a client may send is accepted, and
// dropped from /json/new's query, so that the page the browser opens never
// carries it.
func TestJSONTokenEscaped(t *testing.T) {
	const page = "http://a.test:8080/page?x=1&y=a+b"
	for _, tok := range escapedTokens {
		t.Run(tok.name, func(t *testing.T) {
			tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.Token = tok.token })
			// ask sends a request and returns the body and the query the browser got.
			ask := func(t *testing.T, method, target string, hdr http.Header, want int) ([]byte, string) {
				t.Helper()
				before := len(fb.Hits())
				resp, body := tp.ask(t, method, target, func(r *http.Request) { maps.Copy(r.Header, hdr) })
				if resp.StatusCode != want {
					t.Fatalf("%s %s: got status %d (%s), want %d", method, target, resp.StatusCode, body, want)
				}
				hits := fb.Hits()[before:]
				if want != http.StatusOK {
					if len(hits) != 0 {
						t.Errorf("browser got %d requests, want none", len(hits))
					}
					return body, ""
				}
				if len(hits) != 1 {
					t.Fatalf("got %d requests to the browser, want 1", len(hits))
				}
				return body, hits[0].Query
			}
			for _, form := range tokenForms(tok.token) {
				t.Run(form.name, func(t *testing.T) {
					body, query := ask(t, "GET", "/json/version?"+form.pair, nil, http.StatusOK)
					if query != "" {
						t.Errorf("browser got /json/version?%s, want no query", query)
					}
					var v struct{ WebSocketDebuggerURL string }
					json.Unmarshal(body, &v)
					if rest, want := advertisedRest(t, v.WebSocketDebuggerURL, tok.token), strings.Replace(fb.WSURL(), fb.Addr, tp.addr, 1); rest != want {
						t.Errorf("got advertised URL %q without its token, want the browser's %q", rest, want)
					}
					// A client following the advertised URL as it is gets in.
					c, resp, err := websocket.DefaultDialer.Dial(v.WebSocketDebuggerURL, nil)
					if err != nil {
						t.Fatalf("dialing the advertised %q: %v (%v)", v.WebSocketDebuggerURL, err, resp)
					}
					defer c.Close()
					fb.Accept(t)

					// The token, before or after the page's URL, never reaches the page.
					for _, target := range []string{page + "&" + form.pair, form.pair + "&" + page} {
						body, query := ask(t, "PUT", "/json/new?"+target, nil, http.StatusOK)
						if query != page {
							t.Errorf("/json/new?%s: browser got the page %q, want %q", target, query, page)
						}
						var created struct{ WebSocketDebuggerURL string }
						json.Unmarshal(body, &created)
						if rest := advertisedRest(t, created.WebSocketDebuggerURL, tok.token); !strings.HasPrefix(rest, "ws://"+tp.addr+"/devtools/page/") {
							t.Errorf("got /json/new's advertised URL %q, want a page of the relay", created.WebSocketDebuggerURL)
						}
					}
				})
			}
			t.Run("bearer", func(t *testing.T) {
				bearer := http.Header{"Authorization": {"Bearer " + tok.token}}
				body, _ := ask(t, "GET", "/json/list", bearer, http.StatusOK)
				var list []struct{ WebSocketDebuggerURL string }
				if err := json.Unmarshal(body, &list); err != nil || len(list) == 0 {
					t.Fatalf("got /json/list %s (%v), want targets", body, err)
				}
				for _, target := range list {
					if rest := advertisedRest(t, target.WebSocketDebuggerURL, tok.token); !strings.HasPrefix(rest, "ws://"+tp.addr+"/devtools/page/") {
						t.Errorf("got /json/list's advertised URL %q, want a page of the relay", target.WebSocketDebuggerURL)
					}
				}
				// A page URL's own token stays, when it is not the relay's.
				if _, query := ask(t, "PUT", "/json/new?"+page+"&token=site", bearer, http.StatusOK); query != page+"&token=site" {
					t.Errorf("browser got the page %q, want %q", query, page+"&token=site")
				}
			})
			if strings.ContainsAny(tok.token, "+ ") {
				// Unescaped, "+" reads as a space: not the token.
				t.Run("unescaped", func(t *testing.T) {
					ask(t, "GET", "/json/version?token="+strings.ReplaceAll(tok.token, " ", "%20"), nil, http.StatusUnauthorized)
				})
			}
		})
	}
}

// TestJSONBrowserGone checks that the relay answers 502 when the browser's
// HTTP side does not answer.
func TestJSONBrowserGone(t *testing.T) {
	tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off})
	fb.Close()
	resp, body := tp.ask(t, "GET", "/json/version", nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), "browser unreachable") {
		t.Errorf("got %d %q, want 502 saying the browser is unreachable", resp.StatusCode, body)
	}
}
