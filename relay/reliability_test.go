package relay

// The reliability and security cases of issue 4: bad input from either
// side, faults, and access. RELIABILITY.md at the repository root tables
// each case with the test that proves it, here or elsewhere.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// recorder wraps the relay's limiter and remembers every booking, so a
// test can tell what was booked and for when without timing the browser.
type recorder struct {
	hold.Limiter
	mu     sync.Mutex
	booked []booking // guarded by mu
}

// booking is one Reserve call and the slot it got.
type booking struct {
	host      string
	at, start time.Time
}

func (r *recorder) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	res := r.Limiter.Reserve(ctx, host, rawURL, now)
	r.mu.Lock()
	r.booked = append(r.booked, booking{host: host, at: now, start: res.Start})
	r.mu.Unlock()
	return res
}

// bookings returns the bookings made so far.
func (r *recorder) bookings() []booking {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.booked)
}

// hostsSince returns the hosts booked after the first n bookings, in order.
func (r *recorder) hostsSince(n int) []string {
	var out []string
	for _, b := range r.bookings()[n:] {
		out = append(out, b.host)
	}
	return out
}

// recordBookings makes a relay book through a recorder, stored in *rec.
func recordBookings(rec **recorder) func(*Proxy) {
	return func(p *Proxy) {
		*rec = &recorder{Limiter: p.Limiter}
		p.Limiter = *rec
	}
}

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
	logs := &syncBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	lim := limiter.New(cfg)
	p := &Proxy{Upstream: upstream, Limiter: withPolicy(lim, cfg), Log: &log, StartTimeout: 5 * time.Second, HoldBackup: true}
	for _, o := range opts {
		o(p)
	}
	return startProxy(t, p, lim, logs)
}

// roundTrip sends a command from a client, checks the browser gets it as it
// was sent, answers it as Chromium would, and checks the client gets that
// answer.
func roundTrip(t *testing.T, c *websocket.Conn, fc *fakeConn, typ int, msg []byte) {
	t.Helper()
	writeClient(t, c, typ, msg)
	got := fc.next(t)
	if got.typ != websocket.TextMessage {
		t.Errorf("browser got a message of type %d, want text", got.typ)
	}
	if d := equalMsg(got.data, msg); d != "" {
		t.Fatalf("browser got another message than %.60q: %s", msg, d)
	}
	answer := chromiumAnswer(msg)
	if err := fc.send(answer); err != nil {
		t.Fatal(err)
	}
	if _, data := readClient(t, c); !bytes.Equal(data, answer) {
		t.Fatalf("client got %.200q, want the browser's answer %q", data, answer)
	}
}

// bystander is a well-behaved client on the same relay as a misbehaving
// one: every command it sends gets its own reply, and nothing else arrives.
type bystander struct {
	c  *websocket.Conn
	fc *fakeConn
	n  int
}

func newBystander(t *testing.T, tp *testProxy, fb *fakeBrowser) *bystander {
	t.Helper()
	b := &bystander{c: tp.dial(t, "/", nil)}
	b.fc = fb.accept(t)
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
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			var rec *recorder
			// Every host is new, so each first navigation goes at once; a
			// second one would wait an hour.
			tp := relayTo(t, fb, fixed(time.Hour), mode.opt, recordBookings(&rec))
			c := tp.dial(t, "/", nil)
			fc := fb.accept(t)
			by := newBystander(t, tp, fb)
			for _, row := range rows {
				t.Run(row.name, func(t *testing.T) {
					typ := row.typ
					if typ == 0 {
						typ = websocket.TextMessage
					}
					before := len(rec.bookings())
					for _, f := range row.frames {
						roundTrip(t, c, fc, typ, f)
					}
					roundTrip(t, c, fc, websocket.TextMessage, []byte(sentinel))
					by.check(t)
					var want []string
					if mode.name == "navigate" {
						want = row.books
					}
					if got := rec.hostsSince(before); !slices.Equal(got, want) {
						t.Errorf("booked %q, want %q", got, want)
					}
					if n := tp.p.Conns(); n != 2 {
						t.Errorf("relay has %d connections, want 2", n)
					}
				})
			}
			if lines := tp.logs.lines(`"level":"error"`); len(lines) > 0 {
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
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			tp := relayTo(t, fb, fixed(time.Hour), mode.opt)
			c := tp.dial(t, "/", nil)
			fc := fb.accept(t)
			by := newBystander(t, tp, fb)
			for _, m := range msgs {
				if err := fc.write(m.typ, m.data); err != nil {
					t.Fatal(err)
				}
				typ, got := readClient(t, c)
				if typ != m.typ || !bytes.Equal(got, m.data) {
					t.Errorf("%s: client got type %d %.60q, want type %d %.60q", m.name, typ, got, m.typ, m.data)
				}
			}
			roundTrip(t, c, fc, websocket.TextMessage, []byte(sentinel))
			by.check(t)
			if lines := tp.logs.lines(`"level":"error"`); len(lines) > 0 {
				t.Errorf("relay logged errors: %q", lines)
			}
		})
	}
}

// TestBadBrowserInputOwnConnection sends garbage, and document requests
// with odd URLs, on the relay's own browser connection (Fetch) and checks
// that the relay logs what it cannot read by size only, keys each request
// as the browser would, and keeps holding navigations.
func TestBadBrowserInputOwnConnection(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	var rec *recorder
	tp := relayTo(t, fb, fixed(300*time.Millisecond), recordBookings(&rec))
	hc := fb.holder(t)
	announcePages(t, fb, hc, false)
	page, _ := fb.fetch.targetInfo(t, func(info targetInfo) bool { return info.Type == "page" })
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
		if err := hc.write(g.typ, []byte(g.data)); err != nil {
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
	before := len(rec.bookings())
	var want []string
	for i, p := range pauses {
		ev, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "params": map[string]any{
			"requestId": fmt.Sprintf("interception-job-%d.0", 5000+i), "frameId": page.TargetID, "resourceType": "Document",
			"request": map[string]any{"url": p.url, "method": "GET", "headers": map[string]string{}},
		}})
		hops, err := hc.play([][]byte{ev})
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
	if got := rec.hostsSince(before); !slices.Equal(got, want) {
		t.Errorf("booked %q, want %q", got, want)
	}
	// Navigations are still held.
	chain := fb.fetch.chain(t, "/page?first")
	first := hc.mustPlay(t, chain)
	second := hc.mustPlay(t, chain)
	if waited := second[0].continued.Sub(first[0].paused); waited < 300*time.Millisecond {
		t.Errorf("second navigation released %v after the first paused, want at least 300ms", waited)
	}
	if n := len(tp.logs.lines(`"level":"warn"`, "unreadable")); n == 0 {
		t.Errorf("no warning about unreadable messages")
	}
	if strings.Contains(tp.logs.String(), marker) {
		t.Errorf("a message body reached the log:\n%s", tp.logs)
	}
	if lines := tp.logs.lines(`"level":"error"`); len(lines) > 0 {
		t.Errorf("relay logged errors: %q", lines)
	}
}

// scriptedBrowser is a Chromium-like endpoint whose websockets the test
// scripts by hand: /json/version names its browser endpoint, and each
// websocket is handed to the script with its number (0 for the first),
// which owns it until done is closed.
type scriptedBrowser struct {
	srv   *httptest.Server
	done  chan struct{}
	n     atomic.Int32
	mu    sync.Mutex
	conns []*websocket.Conn // guarded by mu
	wg    sync.WaitGroup
}

func newScriptedBrowser(t *testing.T, script func(i int, c *websocket.Conn, done <-chan struct{})) *scriptedBrowser {
	t.Helper()
	sb := &scriptedBrowser{done: make(chan struct{})}
	up := websocket.Upgrader{}
	sb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			fmt.Fprintf(w, `{"Browser":"Chrome/156.0.0.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/scripted"}`, r.Host)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		sb.mu.Lock()
		sb.conns = append(sb.conns, c)
		sb.wg.Add(1)
		sb.mu.Unlock()
		defer sb.wg.Done()
		defer c.Close()
		script(int(sb.n.Add(1)-1), c, sb.done)
	}))
	t.Cleanup(func() {
		close(sb.done)
		sb.mu.Lock()
		for _, c := range sb.conns {
			c.Close()
		}
		sb.mu.Unlock()
		sb.wg.Wait()
		sb.srv.Close()
	})
	return sb
}

// echo answers every command on c with an empty result until c ends.
func echo(c *websocket.Conn) {
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		var m struct{ ID int64 }
		json.Unmarshal(msg, &m)
		if c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{}}`, m.ID)) != nil {
			return
		}
	}
}

// drain reads c until it ends.
func drain(c *websocket.Conn) {
	for {
		if _, _, err := c.NextReader(); err != nil {
			return
		}
	}
}

// closeOf reads c until it ends and returns the close it got, if any.
func closeOf(t *testing.T, c *websocket.Conn) *websocket.CloseError {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitFor))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce
		}
		t.Fatalf("client connection ended with %v, want a close frame", err)
		return nil
	}
}

// TestBrowserMisbehaves runs a client's browser connection into a browser
// that breaks the protocol or stops, and checks the client is closed with
// a code and reason, the relay lets go of the connection, and a client
// beside it carries on.
func TestBrowserMisbehaves(t *testing.T) {
	tests := []struct {
		name     string
		script   func(c *websocket.Conn, done <-chan struct{})
		client   func(c *websocket.Conn) // what the client does; nil: nothing
		opt      func(*Proxy)
		want     int
		wantText string
		warn     string // logged as a warning, when set
	}{
		{
			name: "half-closed socket (FIN, no close frame)",
			script: func(c *websocket.Conn, done <-chan struct{}) {
				c.UnderlyingConn().(*net.TCPConn).CloseWrite()
				drain(c)
			},
			want: websocket.CloseInternalServerErr, wantText: "browser connection lost",
		},
		{
			name: "close frame, then never answers nor reads",
			script: func(c *websocket.Conn, done <-chan struct{}) {
				c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4002, "going"), time.Now().Add(time.Second))
				<-done
			},
			want: 4002, wantText: "going",
		},
		{
			name: "garbage instead of websocket frames",
			script: func(c *websocket.Conn, done <-chan struct{}) {
				c.UnderlyingConn().Write([]byte("\xff\xff\xff\xffHTTP/1.1 200 OK\r\n\r\n"))
				drain(c)
			},
			want: websocket.CloseInternalServerErr, wantText: "browser connection lost",
		},
		{
			name: "message over the read limit",
			script: func(c *websocket.Conn, done <-chan struct{}) {
				c.WriteMessage(websocket.TextMessage, payload(4<<10, 3))
				drain(c)
			},
			opt:  func(p *Proxy) { p.MaxMessageSize = 1 << 10 },
			want: websocket.CloseMessageTooBig, wantText: "message over the read limit", warn: "message over the read limit",
		},
		{
			name:   "never reads",
			script: func(c *websocket.Conn, done <-chan struct{}) { <-done },
			client: func(c *websocket.Conn) {
				big := payload(1<<20, 5)
				for range 256 {
					c.SetWriteDeadline(time.Now().Add(waitFor))
					if c.WriteMessage(websocket.TextMessage, big) != nil {
						return
					}
				}
			},
			opt:  func(p *Proxy) { p.WriteTimeout = 200 * time.Millisecond },
			want: websocket.ClosePolicyViolation, wantText: "browser did not read in time", warn: "browser did not read in time",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			sb := newScriptedBrowser(t, func(i int, c *websocket.Conn, done <-chan struct{}) {
				if i == 0 {
					tt.script(c, done)
					return
				}
				echo(c)
			})
			var opts []func(*Proxy)
			if tt.opt != nil {
				opts = append(opts, tt.opt)
			}
			tp := relayToURL(t, sb.srv.URL, limiter.Config{Mode: limiter.Off}, opts...)
			c := tp.dial(t, "/", nil)
			var wg sync.WaitGroup
			if tt.client != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tt.client(c)
				}()
			}
			ce := closeOf(t, c)
			c.Close() // a client writing still is done
			wg.Wait()
			if ce.Code != tt.want || ce.Text != tt.wantText {
				t.Errorf("client got close %d %q, want %d %q", ce.Code, ce.Text, tt.want, tt.wantText)
			}
			waitConns(t, tp, 0)
			if tt.warn != "" && len(tp.logs.lines(`"level":"warn"`, tt.warn)) != 1 {
				t.Errorf("no warning %q logged", tt.warn)
			}
			// A client beside it is served.
			b := tp.dial(t, "/", nil)
			writeClient(t, b, websocket.TextMessage, []byte(`{"id":5,"method":"Browser.getVersion"}`))
			if _, got := readClient(t, b); string(got) != `{"id":5,"result":{}}` {
				t.Errorf("next client got %q", got)
			}
		})
	}
}

// TestBrowserNeverAnswersStart checks that a browser that never answers
// the commands the relay sends on its own connection at start holds Start
// up no longer than StartTimeout: the relay falls back to holding
// navigations in the client streams, or, when Fetch was required, fails
// with a clear error.
func TestBrowserNeverAnswersStart(t *testing.T) {
	for _, tt := range []struct {
		method    string
		intercept hold.Intercept
		wantErr   string
	}{
		{method: "Target.setDiscoverTargets"},
		{method: "Fetch.enable"},
		{method: "Fetch.enable", intercept: hold.InterceptFetch, wantErr: "browser refused browser-level Fetch: relay: Fetch.enable: context deadline exceeded"},
	} {
		t.Run(tt.method+"/"+tt.intercept.String(), func(t *testing.T) {
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{silent: map[string]bool{tt.method: true}})
			p, lim, logs := newProxy(fb, limiter.Config{})
			p.Intercept = tt.intercept
			p.StartTimeout = 300 * time.Millisecond
			if tt.wantErr != "" {
				err := p.Start(t.Context())
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Start: got %v, want %q", err, tt.wantErr)
				}
				return
			}
			// Navigations wait while the relay keeps trying; a browser that
			// stays silent gets the session strategy after a few tries.
			tp := startProxy(t, p, lim, logs)
			if got := tp.p.ups[0].holding(); got != "waiting" {
				t.Errorf("navigations held by %q after Start, want waiting", got)
			}
			if n := len(logs.lines(`"level":"warn"`, "navigations wait until it is", "context deadline exceeded")); n != 1 {
				t.Errorf("got %d warnings that navigations wait and why, want 1", n)
			}
			deadline := time.Now().Add(waitFor)
			for tp.p.ups[0].holding() != "session" && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := len(logs.lines(`"level":"warn"`, "holding navigations through each client session", "context deadline exceeded")); n != 1 {
				t.Errorf("got %d warnings about falling over to the session strategy and why, want 1", n)
			}
		})
	}
}

// TestBrowserNeverAnswersTargetInfo checks that a document request of a
// frame the relay asks the browser about is released when the browser does
// not answer within the relay's bound, and that the relay asks again about
// that frame next time rather than remembering a guess.
func TestBrowserNeverAnswersTargetInfo(t *testing.T) {
	t.Parallel() // waits out the relay's 5 s bound twice
	fb := newFakeBrowser(t, fakeConfig{silent: map[string]bool{"Target.getTargetInfo": true}})
	tp := relayTo(t, fb, fixed(time.Hour))
	hc := fb.holder(t)
	announcePages(t, fb, hc, true) // the fake knows the pages; the relay was not told
	chain := fb.fetch.chain(t, "/page?first")
	for range 2 {
		hc.mustPlay(t, chain)
	}
	if got := len(commands(hc, "Target.getTargetInfo")); got != 2 {
		t.Errorf("relay asked Target.getTargetInfo %d times, want 2 (once per unanswered pause)", got)
	}
	if n := tp.lim.Len(); n != 0 {
		t.Errorf("limiter knows %d hosts, want none: a frame of unknown kind is not held", n)
	}
}

// TestBrowserNeverAnswersReleases checks that the relay keeps nothing for
// Fetch.continueRequest commands the browser never answers.
func TestBrowserNeverAnswersReleases(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{silent: map[string]bool{"Fetch.continueRequest": true}})
	tp := relayTo(t, fb, limiter.Config{})
	_, pc := relayConns(t, fb, false)
	chain := fb.fetch.chain(t, "/r") // a.test → b.test: two hops
	for range 25 {
		fb.navigate(t, chain)
	}
	// What the browser answers (net's pattern updates) may still be on its
	// way; what it never answers must not be kept.
	eventually(t, "the relay's own connections keeping no command", func() bool { return hold.StateOf(tp.p.ups[0].holds).Commands == 0 })
	if n := len(commands(pc, "Fetch.continueRequest")); n != 25*2 {
		t.Errorf("relay let %d requests go on its pages connection, want %d", n, 25*2)
	}
}

// TestBrowserDiesMidNavigation kills the browser while a navigation is
// held, in both interception modes, and checks that the client is closed
// with 1011 and a reason, that the held navigation is let go (never
// written, nothing left waiting), that the relay reconnects to the
// restarted browser and serves new clients there, and that the hosts'
// schedules outlive the browser.
func TestBrowserDiesMidNavigation(t *testing.T) {
	for _, mode := range []string{"fetch", "navigate"} {
		t.Run(mode, func(t *testing.T) {
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			var rec *recorder
			opts := []func(*Proxy){recordBookings(&rec)}
			if mode == "navigate" {
				opts = append(opts, navigateInStream)
			}
			tp := relayTo(t, fb, fixed(time.Hour), opts...)
			c := tp.dial(t, "/", nil)
			fc := fb.accept(t)
			var hc *fakeConn
			held := make(chan error, 1)
			if mode == "fetch" {
				hc = fb.holder(t)
				announcePages(t, fb, hc, false)
				chain := fb.fetch.chain(t, "/page?first")
				hc.mustPlay(t, chain)
				go func() {
					_, err := hc.play(chain)
					held <- err
				}()
			} else {
				writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/1"}}`))
				fc.next(t)
				writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"}}`))
			}
			deadline := time.Now().Add(waitFor)
			for len(tp.logs.lines(`"message":"navigation held"`)) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("navigation not held")
				}
				time.Sleep(time.Millisecond)
			}
			fb.restart("0f0f0f0f-0000-4000-8000-00000000dead")
			if ce := closeOf(t, c); ce.Code != websocket.CloseInternalServerErr || ce.Text != "browser connection lost" {
				t.Errorf("client got close %d %q, want 1011 \"browser connection lost\"", ce.Code, ce.Text)
			}
			waitConns(t, tp, 0)
			if mode == "fetch" {
				if err := <-held; err == nil {
					t.Error("held request was continued on a dead connection")
				}
			} else if n := len(fc.received()); n != 1 {
				t.Errorf("dead browser connection got %d messages, want only the first navigation", n)
			}
			// The relay serves the restarted browser, and a.test keeps its schedule.
			before := len(rec.bookings())
			c2 := tp.dial(t, "/", nil)
			fc2 := fb.accept(t)
			if want := "/devtools/browser/0f0f0f0f-0000-4000-8000-00000000dead"; fc2.path != want {
				t.Errorf("new client reached %q, want %q", fc2.path, want)
			}
			if mode == "fetch" {
				hc2 := fb.holder(t)
				announcePages(t, fb, hc2, false)
				go hc2.play(fb.fetch.chain(t, "/page?first")) // ends when the relay closes
			} else {
				writeClient(t, c2, websocket.TextMessage, []byte(`{"id":3,"method":"Page.navigate","params":{"url":"http://a.test/3"}}`))
			}
			deadline = time.Now().Add(waitFor)
			for len(rec.bookings()) == before {
				if time.Now().After(deadline) {
					t.Fatal("navigation to the restarted browser not booked")
				}
				time.Sleep(time.Millisecond)
			}
			b := rec.bookings()
			if got, first := b[len(b)-1].start, b[0].start; got.Sub(first) < 2*time.Hour-time.Minute {
				t.Errorf("navigation after the restart booked %v after the first, want the third hourly slot", got.Sub(first))
			}
			if mode == "fetch" {
				if n := len(tp.logs.lines("browser connection is back")); n != 1 {
					t.Errorf("got %d notes that the relay's browser connection is back, want 1", n)
				}
			}
		})
	}
}

// TestClientVanishesWhileHeld drops a client whose navigation is held and
// checks that nothing is written for it afterwards, nothing is left
// waiting, and its booked slot is not given to another navigation.
func TestClientVanishesWhileHeld(t *testing.T) {
	t.Run("navigate", func(t *testing.T) {
		checkLeaks(t)
		fb := newFakeBrowser(t, fakeConfig{})
		var rec *recorder
		tp := relayTo(t, fb, fixed(time.Hour), navigateInStream, recordBookings(&rec))
		c := tp.dial(t, "/", nil)
		fc := fb.accept(t)
		writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/1"}}`))
		fc.next(t)
		writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"}}`))
		for len(rec.bookings()) < 2 {
			time.Sleep(time.Millisecond)
		}
		c.UnderlyingConn().Close() // gone without a close frame
		var ce *websocket.CloseError
		if err := fc.ended(t); !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway || ce.Text != "client connection lost" {
			t.Errorf("browser got %v, want close 1001 \"client connection lost\"", err)
		}
		waitConns(t, tp, 0)
		if n := len(fc.received()); n != 1 {
			t.Errorf("browser got %d messages, want only the first navigation", n)
		}
		if n := len(tp.logs.lines("held navigation not delivered")); n != 0 {
			t.Errorf("relay tried to deliver the vanished client's navigation")
		}
		// Another client's navigation books the next slot, not the vanished one's.
		c2 := tp.dial(t, "/", nil)
		fb.accept(t)
		writeClient(t, c2, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/3"}}`))
		for len(rec.bookings()) < 3 {
			time.Sleep(time.Millisecond)
		}
		b := rec.bookings()
		if b[2].start.Sub(b[1].start) < time.Hour-time.Minute {
			t.Errorf("third navigation booked %v after the vanished one, want a slot of its own an hour later", b[2].start.Sub(b[1].start))
		}
	})
	t.Run("fetch", func(t *testing.T) {
		checkLeaks(t)
		fb := newFakeBrowser(t, fakeConfig{})
		var rec *recorder
		tp := relayTo(t, fb, fixed(300*time.Millisecond), recordBookings(&rec))
		hc := fb.holder(t)
		announcePages(t, fb, hc, false)
		c := tp.dial(t, "/", nil)
		fb.accept(t)
		chain := fb.fetch.chain(t, "/page?first")
		hc.mustPlay(t, chain)
		held := make(chan []hopTimes, 1)
		go func() { held <- hc.mustPlay(t, chain) }()
		for len(rec.bookings()) < 2 {
			time.Sleep(time.Millisecond)
		}
		c.UnderlyingConn().Close()
		waitConns(t, tp, 0)
		hops := <-held // the browser still has the request: it goes at its slot
		if len(hops) != len(chain) {
			t.Fatalf("got %d hops, want %d", len(hops), len(chain))
		}
		if n, want := len(commands(hc, "Fetch.continueRequest")), 2*len(chain); n != want {
			t.Errorf("relay continued %d pauses, want %d: each once", n, want)
		}
		if n := len(rec.bookings()); n != 2 {
			t.Errorf("got %d bookings, want 2", n)
		}
		if lines := tp.logs.lines(`"level":"warn"`); len(lines) > 0 {
			t.Errorf("relay warned: %q", lines)
		}
	})
}

// flood makes the browser side of a client's connection write big
// messages until writing fails, and returns a function that waits for it.
func flood(fc *fakeConn, n int) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		big := payload(1<<20, 11)
		for range n {
			if fc.write(websocket.TextMessage, big) != nil {
				return
			}
		}
	}()
	return func() { <-done }
}

// TestSlowClientBounded checks that a client that stops reading costs the
// relay a bounded amount of memory however much the browser sends it (the
// relay queues nothing: the browser is slowed down instead), is closed with
// 1008 and a logged reason, and that a client beside it is served
// meanwhile.
func TestSlowClientBounded(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.WriteTimeout = 300 * time.Millisecond })
	by := newBystander(t, tp, fb)
	tp.dial(t, "/", nil) // never reads
	fc := fb.accept(t)
	peak := heapPeak()
	wait := flood(fc, 256) // 256 MiB
	by.check(t)
	var ce *websocket.CloseError
	if err := fc.ended(t); !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || ce.Text != "client did not read in time" {
		t.Errorf("browser got %v, want close 1008 \"client did not read in time\"", err)
	}
	wait()
	grew := peak()
	const bound = 32 << 20
	t.Logf("heap grew by at most %.1f MiB while 256 MiB were sent to a client that did not read", float64(grew)/(1<<20))
	if grew > bound {
		t.Errorf("heap grew by %d MiB, want at most %d MiB", grew>>20, bound>>20)
	}
	if n := len(tp.logs.lines(`"level":"warn"`, "client did not read in time")); n != 1 {
		t.Errorf("got %d warnings, want 1", n)
	}
	by.check(t)
	waitConns(t, tp, 1)
}

// TestStalledClientsDoNotStopPings checks that clients stalled in the
// middle of a write keep neither pings from the others (a healthy client
// that is not pinged is closed for not answering them) nor Close from
// finishing.
func TestStalledClientsDoNotStopPings(t *testing.T) {
	t.Parallel() // outlives the relay's pong wait of 2 intervals + 10 s
	fb := newFakeBrowser(t, fakeConfig{})
	const pingInterval = 50 * time.Millisecond
	// WriteTimeout longer than the pong wait: a ping stuck behind a stalled
	// write for that long would cost every client queued behind it.
	tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, func(p *Proxy) {
		p.PingInterval = pingInterval
		p.WriteTimeout = 2*pingInterval + 12*time.Second
	})
	healthy := tp.dial(t, "/", nil)
	hfc := fb.accept(t)
	var waits []func()
	for range 20 {
		tp.dial(t, "/", nil) // never reads
		waits = append(waits, flood(fb.accept(t), 64))
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, _, err := healthy.NextReader(); err != nil { // answers pings
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		t.Fatalf("healthy client closed while others stalled: %v", err)
	case <-time.After(2*pingInterval + 11*time.Second):
	}
	// The stalled clients, which answer no pings, are closed for that.
	if len(tp.logs.lines(`"level":"warn"`, "client stopped answering pings")) == 0 {
		t.Errorf("no stalled client closed for not answering pings")
	}
	// The healthy client is still served.
	healthy.SetWriteDeadline(time.Now().Add(waitFor))
	if err := healthy.WriteMessage(websocket.TextMessage, []byte(sentinel)); err != nil {
		t.Fatal(err)
	}
	if got := hfc.next(t); string(got.data) != sentinel {
		t.Errorf("browser got %q", got.data)
	}
	// Close does not wait out the stalled writes one after another.
	start := time.Now()
	tp.p.Close()
	for _, w := range waits {
		w()
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Close took %v with 20 stalled clients, want it bounded by the close grace (2 s), not their write timeouts", took)
	}
	<-ended
}

// TestCloseWithStalledClients checks that closing the relay with clients
// that do not read is bounded, and that the others get 1001.
func TestCloseWithStalledClients(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}) // default WriteTimeout: 30 s
	healthy := tp.dial(t, "/", nil)
	fb.accept(t)
	var waits []func()
	for range 10 {
		tp.dial(t, "/", nil)
		waits = append(waits, flood(fb.accept(t), 64))
	}
	time.Sleep(200 * time.Millisecond) // let the floods fill the sockets
	start := time.Now()
	tp.p.Close()
	took := time.Since(start)
	for _, w := range waits {
		w()
	}
	// Ten stalled clients one after another cost 10 × 2 s of close grace,
	// and their writes 30 s; the bound is well under either.
	if took > 10*time.Second {
		t.Errorf("Close took %v, want it bounded by the close grace (2 s)", took)
	}
	if ce := closeOf(t, healthy); ce.Code != websocket.CloseGoingAway {
		t.Errorf("healthy client got close %d, want 1001", ce.Code)
	}
}

// TestStartWaitsForLateBrowser starts the relay before its browser and
// checks that it waits, saying so once, and starts when the browser comes
// up, for an http:// and a ws:// upstream.
func TestStartWaitsForLateBrowser(t *testing.T) {
	for _, tt := range []struct {
		name     string
		upstream func(addr string) string
		cfg      fakeConfig
	}{
		{"http", func(addr string) string { return "http://" + addr }, fakeConfig{}},
		{"ws", func(addr string) string { return "ws://" + addr + "/" }, fakeConfig{lightpanda: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			ln.Close() // nothing listens there yet
			logs := &syncBuffer{}
			log := zerolog.New(logs).Level(zerolog.DebugLevel)
			lim := limiter.New(limiter.Config{})
			p := &Proxy{Upstream: tt.upstream(addr), Limiter: withPolicy(lim, limiter.Config{}), Log: &log, StartTimeout: waitFor}
			if tt.name == "ws" {
				p.Intercept = hold.InterceptNavigate // no Fetch attempt: one websocket to the browser before the client's
			}
			started := make(chan error, 1)
			go func() { started <- p.Start(t.Context()) }()
			deadline := time.Now().Add(waitFor)
			for len(logs.lines("waiting for the browser")) == 0 {
				if time.Now().After(deadline) {
					t.Fatal("relay did not say it waits for the browser")
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // a few attempts fail
			if ln, err = net.Listen("tcp", addr); err != nil {
				t.Skipf("port taken meanwhile: %v", err)
			}
			cfg := tt.cfg
			cfg.listener = ln
			fb := newFakeBrowser(t, cfg)
			if err := <-started; err != nil {
				t.Fatalf("Start: %v", err)
			}
			tp := &testProxy{p: p, lim: lim, logs: logs, srv: httptest.NewServer(p)}
			tp.addr = tp.srv.Listener.Addr().String()
			t.Cleanup(func() { p.Close(); tp.srv.Close() })
			if n := len(logs.lines("waiting for the browser")); n != 1 {
				t.Errorf("said %d times that it waits for the browser, want once", n)
			}
			if tt.name == "ws" {
				fb.accept(t) // the websocket Start dialled to see the browser up
			}
			c := tp.dial(t, "/", nil)
			roundTrip(t, c, fb.accept(t), websocket.TextMessage, []byte(sentinel))
		})
	}
}

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
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, func(p *Proxy) {
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
			before := len(fb.httpHits())
			c, resp, err := websocket.DefaultDialer.Dial("ws://"+tp.addr+tt.path, hdr)
			if c != nil {
				defer c.Close()
			}
			got := 0
			if resp != nil {
				got = resp.StatusCode
			}
			if got != tt.want {
				t.Fatalf("got status %d (%v), want %d", got, err, tt.want)
			}
			hits := fb.httpHits()[before:]
			if tt.want != http.StatusSwitchingProtocols {
				if len(hits) != 0 {
					t.Errorf("browser got %d requests for a refused upgrade, want none", len(hits))
				}
				return
			}
			fb.accept(t)
			for _, h := range hits {
				if strings.Contains(h.Query, "token") || h.Host != fb.addr {
					t.Errorf("browser got %s?%s with Host %q, want no token and its own address", h.Path, h.Query, h.Host)
				}
			}
		})
	}
}

// TestAccessEveryEndpoint checks that with a token no endpoint answers
// without it, and that a client following the advertised URLs gets in.
func TestAccessEveryEndpoint(t *testing.T) {
	checkLeaks(t)
	const token = "tok-77c1"
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.Token = token })
	before := len(fb.httpHits())
	for _, target := range []string{"/json/version", "/json/version/", "/json", "/json/list", "/json/new?about:blank",
		"/json/activate/X", "/json/close/X", "/json/protocol", "/no/such/path", "/devtools/browser/x",
		"/", "/status", "/status?since=1", "/hosts", "/healthz", "/metrics"} {
		for _, method := range []string{"GET", "PUT"} {
			req, _ := http.NewRequest(method, "http://"+tp.addr+target, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s without a token: got %d, want 401 with WWW-Authenticate", method, target, resp.StatusCode)
			}
		}
	}
	if hits := fb.httpHits()[before:]; len(hits) != 0 {
		t.Errorf("browser got %d requests without a token, want none", len(hits))
	}
	// A client given the relay's /json/version URL with the token gets a
	// websocket URL that works as it is.
	resp, err := http.Get("http://" + tp.addr + "/json/version?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ WebSocketDebuggerURL string }
	json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	c, _, err := websocket.DefaultDialer.Dial(v.WebSocketDebuggerURL, nil)
	if err != nil {
		t.Fatalf("dialing the advertised %q: %v", v.WebSocketDebuggerURL, err)
	}
	defer c.Close()
	fb.accept(t)
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
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			opts := []func(*Proxy){func(p *Proxy) { p.Token = token }}
			if mode == "navigate" {
				opts = append(opts, navigateInStream)
			}
			tp := relayTo(t, fb, fixed(time.Hour), opts...)
			c := tp.dial(t, "/?token="+token, nil)
			fc := fb.accept(t)
			for i, url := range []string{
				"http://user:" + password + "@a.test/?q=" + body,
				"http://user:" + password + "@a.test/again", // held
				"http://" + password + "@b.test/",
				"javascript:'" + body + "'",
			} {
				// A session each: navigations on one session keep their order.
				msg, _ := json.Marshal(map[string]any{"id": i + 1, "method": "Page.navigate", "params": map[string]any{"url": url}, "sessionId": body + strconv.Itoa(i)})
				writeClient(t, c, websocket.TextMessage, msg)
			}
			writeClient(t, c, websocket.TextMessage, []byte(`{"id":9,"method":"Runtime.evaluate","params":{"expression":"'`+body+`'"}}`))
			for range 4 { // all but the held one
				fc.next(t)
			}
			fc.send([]byte(`{"method":"Network.requestWillBeSent","params":{"requestId":"1","frameId":"F","type":"Document","request":{"url":"http://user:` + password + `@c.test/` + body + `"}}}`))
			fc.send([]byte(`{"id":9,"result":{"result":{"type":"string","value":"` + body + `"}}}`))
			fc.send([]byte(`not JSON ` + body))
			for range 3 {
				readClient(t, c)
			}
			if mode == "fetch" {
				hc := fb.holder(t)
				announcePages(t, fb, hc, false)
				page, _ := fb.fetch.targetInfo(t, func(info targetInfo) bool { return info.Type == "page" })
				ev, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "params": map[string]any{
					"requestId": "interception-job-1.0", "frameId": page.TargetID, "resourceType": "Document",
					"request": map[string]any{"url": "http://user:" + password + "@d.test/" + body, "method": "GET", "headers": map[string]string{}},
				}})
				hc.mustPlay(t, [][]byte{ev})
				hc.write(websocket.TextMessage, []byte(`{"method":"Fetch.requestPaused","params":{"requestId":"`+body+`"`))
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
			fb.close()
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
		checkLeaks(t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		// A browser that is up, given with credentials it ignores.
		fb := newFakeBrowser(t, fakeConfig{})
		tp := relayTo(t, fb, limiter.Config{}, func(p *Proxy) { p.Upstream = "http://user:upstreampw-5ecret@" + fb.addr })
		c := tp.dial(t, "/", nil)
		roundTrip(t, c, fb.accept(t), websocket.TextMessage, []byte(sentinel))
		c.Close()
		waitConns(t, tp, 0)
		tp.p.Close()
		checkNoSecrets(t, tp.logs.String(), secrets)
		// Browsers that are not up, given with a token or credentials.
		for _, up := range []string{
			"ws://" + addr + "/devtools/browser/x?token=upstream-5ecret",
			"http://user:upstreampw-5ecret@" + addr,
		} {
			logs := &syncBuffer{}
			log := zerolog.New(logs).Level(zerolog.DebugLevel)
			p := &Proxy{Upstream: up, Limiter: withPolicy(limiter.New(limiter.Config{}), limiter.Config{}), Log: &log, StartTimeout: 300 * time.Millisecond}
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
