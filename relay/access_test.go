package relay

// Access: who may use the relay (a token, allowed hosts and origins) on
// every endpoint, and what its logs never show.

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestAccessWebsocket checks the Host and token rules on websocket
// upgrades, and that a refused upgrade never reaches the browser.
func TestAccessWebsocket(t *testing.T) {
	const token = "tok-3f9a"
	tests := []struct {
		name  string
		token string // the relay's; "" for none
		host  string // Host header; "" for the relay's address
		path  string // with its query
		hdr   http.Header
		want  int
	}{
		{name: "IP literal", path: "/", want: http.StatusSwitchingProtocols},
		{name: "DNS rebinding: foreign name", host: "rebound.example:9322", path: "/", want: http.StatusForbidden},
		{name: "foreign name with a trailing dot", host: "rebound.example.:9322", path: "/", want: http.StatusForbidden},
		{name: "foreign name that contains localhost", host: "localhost.rebound.example", path: "/", want: http.StatusForbidden},
		{name: "name given with --allow-host", host: "relay.internal:9322", path: "/", want: http.StatusSwitchingProtocols},
		{name: "allowed name in another case", host: "RELAY.Internal", path: "/", want: http.StatusSwitchingProtocols},
		{name: "allowed name with a trailing dot", host: "relay.internal.:9322", path: "/", want: http.StatusSwitchingProtocols},
		{name: "localhost", host: "localhost:9322", path: "/", want: http.StatusSwitchingProtocols},
		{name: "a .localhost name", host: "cdp.localhost:9322", path: "/", want: http.StatusSwitchingProtocols},
		{name: "IPv6 literal", host: "[::1]:9322", path: "/", want: http.StatusSwitchingProtocols},
		{name: "token missing", token: token, path: "/", want: http.StatusUnauthorized},
		{name: "token wrong", token: token, path: "/?token=nope", want: http.StatusUnauthorized},
		{name: "token as a prefix", token: token, path: "/?token=" + token[:4], want: http.StatusUnauthorized},
		{name: "token in the query", token: token, path: "/?token=" + token, want: http.StatusSwitchingProtocols},
		{name: "token as bearer", token: token, path: "/", hdr: http.Header{"Authorization": {"Bearer " + token}}, want: http.StatusSwitchingProtocols},
		{name: "token on a page endpoint", token: token, path: "/devtools/page/ABC?token=" + token, want: http.StatusSwitchingProtocols},
		{name: "token right, Host foreign", token: token, host: "rebound.example", path: "/?token=" + token, want: http.StatusForbidden},
		{name: "token right, Origin foreign", token: token, path: "/?token=" + token, hdr: http.Header{"Origin": {"http://evil.example"}}, want: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) {
				p.Token = tt.token
				p.AllowHosts = []string{"relay.internal"}
			})
			hdr := http.Header{}
			for k, v := range tt.hdr {
				hdr[k] = v
			}
			if tt.host != "" {
				hdr.Set("Host", tt.host)
			}
			before := len(fb.Hits())
			tp.dialWant(t, tt.path, hdr, tt.want)
			hits := fb.Hits()[before:]
			if tt.want != http.StatusSwitchingProtocols {
				if len(hits) != 0 {
					t.Errorf("browser got %d requests for a refused upgrade, want none", len(hits))
				}
				return
			}
			fb.Accept(t)
			for _, h := range hits {
				if strings.Contains(h.Query, "token") || h.Host != fb.Addr {
					t.Errorf("browser got %s?%s with Host %q, want no token and its own address", h.Path, h.Query, h.Host)
				}
			}
		})
	}
}

// TestAccessEveryEndpoint checks that with a token no endpoint answers
// without it, and that a client following the advertised URLs gets in.
func TestAccessEveryEndpoint(t *testing.T) {
	const token = "tok-77c1"
	tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.Token = token })
	before := len(fb.Hits())
	for _, target := range []string{"/json/version", "/json/version/", "/json", "/json/list", "/json/new?about:blank",
		"/json/activate/X", "/json/close/X", "/json/protocol", "/no/such/path", "/devtools/browser/x",
		"/", "/status", "/status?since=1", "/hosts", "/healthz", "/metrics"} {
		for _, method := range []string{"GET", "PUT"} {
			resp, _ := tp.ask(t, method, target, nil)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s without a token: got %d, want 401 with WWW-Authenticate", method, target, resp.StatusCode)
			}
		}
	}
	if hits := fb.Hits()[before:]; len(hits) != 0 {
		t.Errorf("browser got %d requests without a token, want none", len(hits))
	}
	// A client given the relay's /json/version URL with the token gets a
	// websocket URL that works as it is.
	_, body := tp.get(t, "/json/version?token="+token)
	var v struct{ WebSocketDebuggerURL string }
	json.Unmarshal([]byte(body), &v)
	c, _, err := websocket.DefaultDialer.Dial(v.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatalf("dialing the advertised %q: %v", v.WebSocketDebuggerURL, err)
	}
	defer c.Close()
	fb.Accept(t)
}

// TestLogHygiene runs a session full of secrets through a relay logging
// at debug level: URLs with userinfo, the relay's token, a token in the
// upstream URL and message bodies, in both interception modes and with the
// browser failing, and checks that none of them reaches the log.
func TestLogHygiene(t *testing.T) {
	const (
		token    = "relay-token-5ecret"
		password = "pa55w0rd-5ecret"
		body     = "body-5ecret"
	)
	secrets := []string{token, password, body, "upstream-5ecret", "upstreampw-5ecret"}
	for _, mode := range []string{"fetch", "navigate"} {
		t.Run(mode, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{})
			opts := []func(*Proxy){func(p *Proxy) { p.Token = token }}
			if mode == "navigate" {
				opts = append(opts, navigateInStream)
			}
			tp := relayTo(t, fb, holdtest.Fixed(time.Hour), opts...)
			c := tp.dial(t, "/?token="+token, nil)
			fc := fb.Accept(t)
			for i, url := range []string{
				"http://user:" + password + "@a.test/?q=" + body,
				"http://user:" + password + "@a.test/again", // held
				"http://" + password + "@b.test/",
				"javascript:'" + body + "'",
			} {
				// A session each: navigations on one session keep their order.
				msg, _ := json.Marshal(map[string]any{"id": i + 1, "method": "Page.navigate", "params": map[string]any{"url": url}, "sessionId": body + strconv.Itoa(i)})
				holdtest.WriteClient(t, c, websocket.TextMessage, msg)
			}
			holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":9,"method":"Runtime.evaluate","params":{"expression":"'`+body+`'"}}`))
			for range 4 { // all but the held one
				fc.Next(t)
			}
			fc.Send([]byte(`{"method":"Network.requestWillBeSent","params":{"requestId":"1","frameId":"F","type":"Document","request":{"url":"http://user:` + password + `@c.test/` + body + `"}}}`))
			fc.Send([]byte(`{"id":9,"result":{"result":{"type":"string","value":"` + body + `"}}}`))
			fc.Send([]byte(`not JSON ` + body))
			for range 3 {
				holdtest.ReadClient(t, c)
			}
			if mode == "fetch" {
				hc := fb.Holder(t)
				fakebrowser.AnnouncePages(t, fb, hc, false)
				page, _ := fb.FetchRec.TargetInfo(t, func(info fakebrowser.TargetInfo) bool { return info.Type == "page" })
				drive(t, c, fc, 10, "S-PAGE", page.TargetID) // the client's page: its request is held
				ev, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "params": map[string]any{
					"requestId": "interception-job-1.0", "frameId": page.TargetID, "resourceType": "Document",
					"request": map[string]any{"url": "http://user:" + password + "@d.test/" + body, "method": "GET", "headers": map[string]string{}},
				}})
				hc.MustPlay(t, [][]byte{ev})
				hc.WriteFrame(websocket.TextMessage, []byte(`{"method":"Fetch.requestPaused","params":{"requestId":"`+body+`"`))
			}
			// The relay's token in every form a client sends it.
			for _, target := range []string{"/json/version?token=" + token, "/json/list?token=wrong-" + token, "/json/new?http://user:" + password + "@e.test/&token=" + token} {
				req, _ := http.NewRequest("PUT", "http://"+tp.addr+target, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			// The browser gone: its errors name no secret either.
			fb.Close()
			for _, target := range []string{"/json/new?http://user:" + password + "@f.test/&token=" + token, "/json/version?token=" + token} {
				req, _ := http.NewRequest("PUT", "http://"+tp.addr+target, nil)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}
			websocket.DefaultDialer.Dial("ws://"+tp.addr+"/devtools/page/X?token="+token, nil)
			c.Close()
			waitConns(t, tp, 0)
			tp.p.Close()
			checkNoSecrets(t, tp.logs.String(), secrets)
		})
	}
	t.Run("upstream with credentials", func(t *testing.T) {
		fakebrowser.CheckLeaks(t)
		addr := fakebrowser.ClosedAddr(t)
		// A browser that is up, given with credentials it ignores.
		fb := fakebrowser.New(t, fakebrowser.Config{})
		tp := relayTo(t, fb, limiter.Config{}, func(p *Proxy) { p.Upstream = "http://user:upstreampw-5ecret@" + fb.Addr })
		c := tp.dial(t, "/", nil)
		roundTrip(t, c, fb.Accept(t), websocket.TextMessage, []byte(sentinel))
		c.Close()
		waitConns(t, tp, 0)
		tp.p.Close()
		checkNoSecrets(t, tp.logs.String(), secrets)
		// Browsers that are not up, given with a token or credentials.
		for _, up := range []string{
			"ws://" + addr + "/devtools/browser/x?token=upstream-5ecret",
			"http://user:upstreampw-5ecret@" + addr,
		} {
			p, _, logs := proxyAt(up, limiter.Config{})
			p.StartTimeout = 300 * time.Millisecond
			err := p.Start(t.Context())
			if err == nil {
				p.Close()
				t.Fatal("Start: no error for a browser that is not there")
			}
			checkNoSecrets(t, logs.String()+"\n"+err.Error(), secrets)
		}
	})
}

func checkNoSecrets(t *testing.T, log string, secrets []string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		for _, s := range secrets {
			if strings.Contains(line, s) {
				t.Errorf("log line names a secret (%s): %s", s, line)
			}
		}
	}
}
