package relay

// The reliability and security cases of issue 4: bad input from either
// side, faults, and access. RELIABILITY.md at the repository root tables
// each case with the test that proves it, here or elsewhere.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// recordBookings makes a relay book through a holdtest.Recorder, stored
// in *rec.
func recordBookings(rec **holdtest.Recorder) func(*Proxy) {
	return func(p *Proxy) {
		*rec = &holdtest.Recorder{Limiter: p.Limiter}
		p.Limiter = *rec
	}
}

// navigateInStream makes a relay hold navigations in the client streams.
func navigateInStream(p *Proxy) { p.Intercept = hold.InterceptNavigate }

// chromiumAnswer is what Chromium 156 answers a message on a page's
// websocket, as observed (e2e's TestBadInputAsChromium checks the relay
// passes the real browser's answers on the same way): a parse error has no
// id; a message without a usable id is refused without one.
func chromiumAnswer(msg []byte) []byte {
	if len(bytes.TrimSpace(msg)) == 0 {
		return []byte(`{"error":{"code":-32700,"message":"JSON: no input at position 0"}}`)
	}
	if !utf8.Valid(msg) || !json.Valid(msg) {
		return []byte(`{"error":{"code":-32700,"message":"JSON: invalid token at position 0"}}`)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(msg, &obj) != nil || obj == nil {
		return []byte(`{"error":{"code":-32600,"message":"Message must be an object"}}`)
	}
	var id int32
	if json.Unmarshal(obj["id"], &id) != nil {
		return []byte(`{"error":{"code":-32600,"message":"Message must have integer 'id' property"}}`)
	}
	var method, session string
	if json.Unmarshal(obj["method"], &method) != nil {
		return fmt.Appendf(nil, `{"id":%d,"error":{"code":-32600,"message":"Message must have string 'method' property"}}`, id)
	}
	if json.Unmarshal(obj["sessionId"], &session) == nil && session != "" {
		return fmt.Appendf(nil, `{"id":%d,"error":{"code":-32001,"message":"Session with given id not found."}}`, id)
	}
	if method == "Page.navigate" {
		var p struct{ URL *string }
		if json.Unmarshal(obj["params"], &p) != nil || p.URL == nil {
			return fmt.Appendf(nil, `{"id":%d,"error":{"code":-32602,"message":"Invalid parameters","data":"Failed to deserialize params.url - BINDINGS: mandatory field missing at position 2"}}`, id)
		}
		if !strings.Contains(*p.URL, ":") {
			return fmt.Appendf(nil, `{"id":%d,"error":{"code":-32000,"message":"Cannot navigate to invalid URL"}}`, id)
		}
		return fmt.Appendf(nil, `{"id":%d,"result":{"frameId":"F00D","loaderId":"L%d"}}`, id, id)
	}
	return fmt.Appendf(nil, `{"id":%d,"result":{}}`, id)
}

// relayToURL starts a relay for the browser at upstream, as relayTo does
// for the fake browser.
func relayToURL(t *testing.T, upstream string, cfg limiter.Config, opts ...func(*Proxy)) *testProxy {
	t.Helper()
	p, lim, logs := proxyAt(upstream, cfg)
	p.HoldBackup = true
	return startProxy(t, p, lim, logs, opts...)
}

// roundTrip sends a command from a client, checks the browser gets it as it
// was sent, answers it as Chromium would, and checks the client gets that
// answer.
func roundTrip(t *testing.T, c *websocket.Conn, fc *fakebrowser.Conn, typ int, msg []byte) {
	t.Helper()
	holdtest.WriteClient(t, c, typ, msg)
	got := fc.Next(t)
	if got.Type != websocket.TextMessage {
		t.Errorf("browser got a message of type %d, want text", got.Type)
	}
	if d := fakebrowser.EqualMsg(got.Data, msg); d != "" {
		t.Fatalf("browser got another message than %.60q: %s", msg, d)
	}
	answer := chromiumAnswer(msg)
	if err := fc.Send(answer); err != nil {
		t.Fatal(err)
	}
	if _, data := holdtest.ReadClient(t, c); !bytes.Equal(data, answer) {
		t.Fatalf("client got %.200q, want the browser's answer %q", data, answer)
	}
}

// bystander is a well-behaved client on the same relay as a misbehaving
// one: every command it sends gets its own reply, and nothing else arrives.
type bystander struct {
	c  *websocket.Conn
	fc *fakebrowser.Conn
	n  int
}

func newBystander(t *testing.T, tp *testProxy, fb *fakebrowser.Browser) *bystander {
	t.Helper()
	b := &bystander{c: tp.dial(t, "/", nil)}
	b.fc = fb.Accept(t)
	return b
}

func (b *bystander) check(t *testing.T) {
	t.Helper()
	b.n++
	roundTrip(t, b.c, b.fc, websocket.TextMessage,
		fmt.Appendf(nil, `{"id":%d,"method":"Runtime.evaluate","params":{"expression":"'bystander %d'"}}`, b.n, b.n))
}

const sentinel = `{"id":424242,"method":"Browser.getVersion"}`

// TestBadClientInput sends what a buggy or hostile client might to a
// relay, in both interception modes, and checks that each message reaches
// the browser as it was sent (a binary frame as text), that the client
// gets what the browser answers, that its connection keeps working, and
// that a client beside it sees only its own replies. In the navigate mode,
// where the relay reads the client's commands, it also checks which host
// each odd navigation URL books.
func TestBadClientInput(t *testing.T) {
	huge := "http://huge.test/" + strings.Repeat("p", 100<<10)
	nav := func(id int, url string) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "method": "Page.navigate", "params": map[string]any{"url": url}})
		return b
	}
	text := func(s string) []byte { return []byte(s) }
	rows := []struct {
		name   string
		typ    int // websocket.TextMessage unless set
		frames [][]byte
		books  []string // hosts booked in the navigate mode, in order
	}{
		{name: "malformed JSON", frames: [][]byte{text(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.te`)}},
		{name: "empty message", frames: [][]byte{{}}},
		{name: "JSON array", frames: [][]byte{text(`[{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/"}}]`)}},
		{name: "JSON string", frames: [][]byte{text(`"Page.navigate"`)}},
		{name: "JSON number", frames: [][]byte{text(`42`)}},
		{name: "JSON null", frames: [][]byte{text(`null`)}},
		{name: "missing id", frames: [][]byte{text(`{"method":"Page.navigate","params":{"url":"http://noid.test/"}}`)}},
		{name: "string id", frames: [][]byte{text(`{"id":"3","method":"Browser.getVersion"}`)}},
		{name: "fractional id", frames: [][]byte{text(`{"id":1.5,"method":"Browser.getVersion"}`)}},
		{name: "id out of range", frames: [][]byte{text(`{"id":99999999999,"method":"Browser.getVersion"}`)}},
		{name: "negative id", frames: [][]byte{text(`{"id":-3,"method":"Browser.getVersion"}`)}},
		{name: "missing method", frames: [][]byte{text(`{"id":5}`)}},
		{name: "duplicate ids", frames: [][]byte{text(`{"id":9,"method":"Browser.getVersion"}`), text(`{"id":9,"method":"Browser.getVersion"}`)}},
		{name: "duplicate id of a navigation", frames: [][]byte{nav(10, "http://dup1.test/"), nav(10, "http://dup2.test/")}, books: []string{"dup1.test", "dup2.test"}},
		{name: "unknown sessionId", frames: [][]byte{text(`{"id":8,"method":"Page.navigate","params":{"url":"http://session.test/"},"sessionId":"NO-SUCH-SESSION"}`)}, books: []string{"session.test"}},
		{name: "invalid UTF-8", frames: [][]byte{text("{\"id\":10,\"method\":\"Browser.getVersion\",\"x\":\"\xff\xfe\"}")}},
		{name: "invalid UTF-8 in a navigation URL", frames: [][]byte{text("{\"id\":11,\"method\":\"Page.navigate\",\"params\":{\"url\":\"http://utf.test/\xff\"}}")}},
		{name: "binary frame", typ: websocket.BinaryMessage, frames: [][]byte{text(`{"id":12,"method":"Browser.getVersion"}`)}},
		{name: "binary garbage", typ: websocket.BinaryMessage, frames: [][]byte{{0, 1, 2, 0xff, 0xfe}}},
		{name: "deep nesting", frames: [][]byte{text(strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000))}},
		{name: "1 MiB command", frames: [][]byte{payload(1<<20, 42)}},
		{name: "5 MiB command (streamed)", frames: [][]byte{payload(5<<20, 43)}},
		{name: "navigate: no params", frames: [][]byte{text(`{"id":20,"method":"Page.navigate"}`)}},
		{name: "navigate: missing url", frames: [][]byte{text(`{"id":21,"method":"Page.navigate","params":{}}`)}},
		{name: "navigate: url not a string", frames: [][]byte{text(`{"id":22,"method":"Page.navigate","params":{"url":42}}`)}},
		{name: "navigate: empty url", frames: [][]byte{nav(23, "")}},
		{name: "navigate: relative url", frames: [][]byte{nav(24, "/relative/path?q=1")}},
		{name: "navigate: scheme-relative url", frames: [][]byte{nav(25, "//protorel.test/")}},
		{name: "navigate: no host", frames: [][]byte{nav(26, "http:///path")}},
		{name: "navigate: huge url", frames: [][]byte{nav(27, huge)}, books: []string{"huge.test"}},
		{name: "navigate: IDN", frames: [][]byte{nav(28, "http://Bücher.test/straße")}, books: []string{"xn--bcher-kva.test"}},
		{name: "navigate: IPv6", frames: [][]byte{nav(29, "http://[2001:DB8:0::1]:8080/")}, books: []string{"[2001:db8::1]"}},
		{name: "navigate: IPv6 loopback", frames: [][]byte{nav(30, "http://[::1]:9/")}},
		{name: "navigate: userinfo", frames: [][]byte{nav(31, "http://user:pa55@userinfo.test/")}, books: []string{"userinfo.test"}},
		{name: "navigate: mixed case, port, trailing dot", frames: [][]byte{nav(32, "HTTPS://MiXeD.Test.:8443/")}, books: []string{"mixed.test"}},
		{name: "navigate: javascript:", frames: [][]byte{nav(33, "javascript:location='http://js.test/'")}},
		{name: "navigate: data:", frames: [][]byte{nav(34, "data:text/html,<a href=http://data.test/>x</a>")}},
		{name: "navigate: about:, file:, chrome:", frames: [][]byte{nav(35, "about:blank"), nav(36, "file:///etc/passwd"), nav(37, "chrome://version")}},
		{name: "navigate: space in host", frames: [][]byte{nav(38, "http://exa mple.test/")}},
		{name: "navigate: unknown scheme", frames: [][]byte{nav(39, "gopher://gopher.test/")}},
	}
	modes := []struct {
		name string
		opt  func(*Proxy)
	}{
		{"fetch", func(*Proxy) {}},
		{"navigate", navigateInStream},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{})
			var rec *holdtest.Recorder
			// Every host is new, so each first navigation goes at once; a
			// second one would wait an hour.
			tp := relayTo(t, fb, holdtest.Fixed(time.Hour), mode.opt, recordBookings(&rec))
			c := tp.dial(t, "/", nil)
			fc := fb.Accept(t)
			by := newBystander(t, tp, fb)
			for _, row := range rows {
				t.Run(row.name, func(t *testing.T) {
					typ := row.typ
					if typ == 0 {
						typ = websocket.TextMessage
					}
					before := len(rec.Bookings())
					for _, f := range row.frames {
						roundTrip(t, c, fc, typ, f)
					}
					roundTrip(t, c, fc, websocket.TextMessage, []byte(sentinel))
					by.check(t)
					var want []string
					if mode.name == "navigate" {
						want = row.books
					}
					if got := rec.HostsSince(before); !slices.Equal(got, want) {
						t.Errorf("booked %q, want %q", got, want)
					}
					if n := tp.p.Conns(); n != 2 {
						t.Errorf("relay has %d connections, want 2", n)
					}
				})
			}
			if lines := tp.logs.Lines(`"level":"error"`); len(lines) > 0 {
				t.Errorf("relay logged errors: %q", lines)
			}
		})
	}
}

// TestBadBrowserInputRelayed sends what a broken browser might on a
// client's connection and checks the client gets each message as it was
// sent, in both interception modes, and that the relay and a client beside
// it carry on.
func TestBadBrowserInputRelayed(t *testing.T) {
	msgs := []struct {
		name string
		typ  int
		data []byte
	}{
		{"malformed JSON", websocket.TextMessage, []byte(`{"id":1,"result":`)},
		{"not an object", websocket.TextMessage, []byte(`[1,2,3]`)},
		{"reply to no command", websocket.TextMessage, []byte(`{"id":777,"result":{}}`)},
		{"event of an unknown session", websocket.TextMessage, []byte(`{"method":"Target.attachedToTarget","params":{"sessionId":42,"targetInfo":null},"sessionId":"NOPE"}`)},
		{"Network event with wrong types", websocket.TextMessage, []byte(`{"method":"Network.requestWillBeSent","params":{"requestId":1,"type":"Document","request":{"url":7}}}`)},
		{"invalid UTF-8", websocket.TextMessage, []byte("{\"method\":\"Page.frameNavigated\",\"params\":{\"url\":\"\xff\"}}")},
		{"binary frame", websocket.BinaryMessage, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"empty", websocket.TextMessage, []byte{}},
		{"1 MiB event", websocket.TextMessage, payload(1<<20, 7)},
	}
	for _, mode := range []struct {
		name string
		opt  func(*Proxy)
	}{{"fetch", func(*Proxy) {}}, {"navigate", navigateInStream}} {
		t.Run(mode.name, func(t *testing.T) {
			tp, fb, c, fc := relayClient(t, holdtest.Fixed(time.Hour), mode.opt)
			by := newBystander(t, tp, fb)
			for _, m := range msgs {
				if err := fc.WriteFrame(m.typ, m.data); err != nil {
					t.Fatal(err)
				}
				typ, got := holdtest.ReadClient(t, c)
				if typ != m.typ || !bytes.Equal(got, m.data) {
					t.Errorf("%s: client got type %d %.60q, want type %d %.60q", m.name, typ, got, m.typ, m.data)
				}
			}
			roundTrip(t, c, fc, websocket.TextMessage, []byte(sentinel))
			by.check(t)
			if lines := tp.logs.Lines(`"level":"error"`); len(lines) > 0 {
				t.Errorf("relay logged errors: %q", lines)
			}
		})
	}
}

// fetchRelay starts a relay in front of a new fake browser that holds
// navigations on its own connection, one a host every 300ms, and records
// what it books (rec); the browser announces its recorded pages there
// (hc), and a client (c) drives them. The test is checked for leaked
// goroutines.
func fetchRelay(t *testing.T) (tp *testProxy, fb *fakebrowser.Browser, rec *holdtest.Recorder, hc *fakebrowser.Conn, c *websocket.Conn) {
	t.Helper()
	tp, fb = relayNew(t, holdtest.Fixed(300*time.Millisecond), recordBookings(&rec))
	hc = fb.Holder(t)
	fakebrowser.AnnouncePages(t, fb, hc, false)
	c = tp.dial(t, "/", nil)
	driveRecorded(t, c, fb.Accept(t), fb)
	return tp, fb, rec, hc, c
}

// TestBadBrowserInputOwnConnection sends garbage, and document requests
// with odd URLs, on the relay's own browser connection (Fetch) and checks
// that the relay logs what it cannot read by size only, keys each request
// of its client's pages as the browser would, and keeps holding
// navigations.
func TestBadBrowserInputOwnConnection(t *testing.T) {
	tp, fb, rec, hc, _ := fetchRelay(t)
	page, _ := fb.FetchRec.TargetInfo(t, func(info fakebrowser.TargetInfo) bool { return info.Type == "page" })
	const marker = "BODY-MARKER-d41d8cd9"
	garbage := []struct {
		typ  int
		data string
	}{
		{websocket.TextMessage, `{"method":"Fetch.requestPaused","params":{"requestId":"` + marker + `","request":{"url":42}}`},
		{websocket.TextMessage, `not JSON ` + marker},
		{websocket.TextMessage, `["` + marker + `"]`},
		{websocket.TextMessage, `{"method":"Fetch.requestPaused","params":"` + marker + `"}`},
		{websocket.TextMessage, `{"method":"Fetch.requestPaused","params":{"requestId":"x"}}`}, // no request
		{websocket.TextMessage, `{"method":"Target.targetCreated","params":{"targetInfo":"` + marker + `"}}`},
		{websocket.TextMessage, `{"method":"Target.targetDestroyed","params":[]}`},
		{websocket.TextMessage, `{"id":987654,"result":{"secret":"` + marker + `"}}`}, // a reply to no command
		{websocket.TextMessage, `{"id":-1,"error":{"code":1,"message":"` + marker + `"}}`},
		{websocket.BinaryMessage, `{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":"` + marker + `","type":"page"}}}`},
		{websocket.TextMessage, "{\"method\":\"Fetch.requestPaused\",\"params\":{\"x\":\"\xff" + marker + "\"}}"},
	}
	for _, g := range garbage {
		if err := hc.WriteFrame(g.typ, []byte(g.data)); err != nil {
			t.Fatal(err)
		}
	}
	// Document requests of the page with odd URLs, as the browser would
	// send them: each is continued, and books the host the browser asks.
	pauses := []struct {
		url  string
		book string // "" books nothing
	}{
		{"http://user:pa55@userinfo.test/", "userinfo.test"},
		{"http://xn--bcher-kva.test/", "xn--bcher-kva.test"},
		{"http://[2001:db8::1]:8080/", "[2001:db8::1]"},
		{"http://huge.test/" + strings.Repeat("p", 1<<20), "huge.test"},
		{"javascript:void(0)", ""},
		{"data:text/html,hi", ""},
		{"about:blank", ""},
		{"http://[::1]:9/", ""},
		{"", ""},
	}
	before := len(rec.Bookings())
	var want []string
	for i, p := range pauses {
		ev, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "params": map[string]any{
			"requestId": fmt.Sprintf("interception-job-%d.0", 5000+i), "frameId": page.TargetID, "resourceType": "Document",
			"request": map[string]any{"url": p.url, "method": "GET", "headers": map[string]string{}},
		}})
		hops, err := hc.Play([][]byte{ev})
		if err != nil {
			t.Fatalf("%.60s: %v", p.url, err)
		}
		if len(hops) != 1 {
			t.Fatalf("%.60s: not continued", p.url)
		}
		if p.book != "" {
			want = append(want, p.book)
		}
	}
	if got := rec.HostsSince(before); !slices.Equal(got, want) {
		t.Errorf("booked %q, want %q", got, want)
	}
	// Navigations are still held.
	chain := fb.FetchRec.Chain(t, "/page?first")
	first := hc.MustPlay(t, chain)
	second := hc.MustPlay(t, chain)
	if waited := second[0].Continued.Sub(first[0].Paused); waited < 300*time.Millisecond {
		t.Errorf("second navigation released %v after the first paused, want at least 300ms", waited)
	}
	if n := len(tp.logs.Lines(`"level":"warn"`, "unreadable")); n == 0 {
		t.Errorf("no warning about unreadable messages")
	}
	if strings.Contains(tp.logs.String(), marker) {
		t.Errorf("a message body reached the log:\n%s", tp.logs)
	}
	if lines := tp.logs.Lines(`"level":"error"`); len(lines) > 0 {
		t.Errorf("relay logged errors: %q", lines)
	}
}
