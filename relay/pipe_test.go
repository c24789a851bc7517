package relay

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestWebsocketPaths checks which browser websocket each client path reaches.
func TestWebsocketPaths(t *testing.T) {
	browserPath := func(fb *fakebrowser.Browser) string { return "/devtools/browser/" + fb.ID() }
	const page = "/devtools/page/4FB0C61DB07E344E3271886300C1F6F5"
	tests := []struct {
		name     string
		browser  fakebrowser.Config
		upstream func(fb *fakebrowser.Browser) string // nil: http://HOST:PORT
		path     func(fb *fakebrowser.Browser) string // asked of the relay
		want     func(fb *fakebrowser.Browser) string // reached at the browser
	}{
		{name: "bare / is the browser endpoint", path: func(*fakebrowser.Browser) string { return "/" }, want: browserPath},
		{name: "browser endpoint", path: browserPath, want: browserPath},
		{name: "page endpoint", path: func(*fakebrowser.Browser) string { return page }, want: func(*fakebrowser.Browser) string { return page }},
		{name: "ws upstream: any browser id is its browser endpoint",
			upstream: func(fb *fakebrowser.Browser) string { return fb.WSURL() },
			path:     func(*fakebrowser.Browser) string { return "/devtools/browser/other" }, want: browserPath},
		{name: "ws upstream: bare /",
			upstream: func(fb *fakebrowser.Browser) string { return fb.WSURL() },
			path:     func(*fakebrowser.Browser) string { return "/" }, want: browserPath},
		{name: "lightpanda: bare /", browser: fakebrowser.Config{Lightpanda: true},
			path: func(*fakebrowser.Browser) string { return "/" }, want: func(*fakebrowser.Browser) string { return "/" }},
		{name: "lightpanda as localhost (it takes an IP Host only)", browser: fakebrowser.Config{Lightpanda: true},
			upstream: func(fb *fakebrowser.Browser) string {
				return "http://localhost:" + fb.Addr[strings.LastIndexByte(fb.Addr, ':')+1:]
			},
			path: func(*fakebrowser.Browser) string { return "/" }, want: func(*fakebrowser.Browser) string { return "/" }},
		{name: "lightpanda as ws upstream", browser: fakebrowser.Config{Lightpanda: true},
			upstream: func(fb *fakebrowser.Browser) string { return "ws://" + fb.Addr },
			path:     func(*fakebrowser.Browser) string { return "/" }, want: func(*fakebrowser.Browser) string { return "/" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, tt.browser)
			tp := relayTo(t, fb, limiter.Config{}, func(p *Proxy) {
				if tt.upstream != nil {
					p.Upstream = tt.upstream(fb)
				}
			})
			c := tp.dial(t, tt.path(fb), nil)
			fc := fb.Accept(t)
			if got, want := fc.Path, tt.want(fb); got != want {
				t.Errorf("got browser path %q, want %q", got, want)
			}
			holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Browser.getVersion"}`))
			if got := fc.Next(t); string(got.Data) != `{"id":1,"method":"Browser.getVersion"}` {
				t.Errorf("browser got %q", got.Data)
			}
			fc.Send([]byte(`{"id":1,"result":{}}`))
			if _, got := holdtest.ReadClient(t, c); string(got) != `{"id":1,"result":{}}` {
				t.Errorf("client got %q", got)
			}
		})
	}
}

// payload returns n bytes of JSON text that vary, so a reordered or
// dropped piece shows.
func payload(n int, seed uint64) []byte {
	const head, tail = `{"id":7,"method":"Runtime.evaluate","params":{"expression":"`, `"}}`
	if n < len(head)+len(tail) {
		return []byte(strings.Repeat("x", n))
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	// A random block of prime length, tiled: no two of the relay's 64 KiB
	// pieces are alike, and big payloads stay cheap to make under -race.
	r := rand.New(rand.NewPCG(seed, 1))
	block := make([]byte, 65521)
	for i := range block {
		block[i] = alphabet[r.IntN(len(alphabet))]
	}
	b := make([]byte, n)
	copy(b, head)
	for i := len(head); i < n-len(tail); i += len(block) {
		copy(b[i:n-len(tail)], block)
	}
	copy(b[n-len(tail):], tail)
	return b
}

// TestMessagesPassUnchanged sends messages through the relay both ways and
// checks they arrive byte for byte, of the same type except that a binary
// client frame reaches the browser as text.
func TestMessagesPassUnchanged(t *testing.T) {
	const MiB = 1 << 20
	tests := []struct {
		name      string
		toBrowser bool
		typ       int
		data      []byte
		fragment  int // client writes the message in frames of this size; 0: one frame
		wantType  int
	}{
		{name: "command", toBrowser: true, typ: websocket.TextMessage, data: []byte(`{"id":1,"method":"Target.getTargets","sessionId":"S"}`), wantType: websocket.TextMessage},
		{name: "empty", toBrowser: true, typ: websocket.TextMessage, data: []byte{}, wantType: websocket.TextMessage},
		{name: "not JSON", toBrowser: true, typ: websocket.TextMessage, data: []byte("hello {"), wantType: websocket.TextMessage},
		{name: "invalid UTF-8", toBrowser: true, typ: websocket.TextMessage, data: []byte("{\"id\":2,\"method\":\"\xff\xfe\xed\xa0\x80\"}"), wantType: websocket.TextMessage},
		{name: "whitespace and escapes kept", toBrowser: true, typ: websocket.TextMessage, data: []byte("{ \"id\" : 3 ,\n\"method\":\"Page.navigate\",\"params\":{\"url\":\"http://a.test/\\u00e9\\/\"} }"), wantType: websocket.TextMessage},
		{name: "64 KiB", toBrowser: true, typ: websocket.TextMessage, data: payload(64<<10, 1), wantType: websocket.TextMessage},
		{name: "64 KiB + 1", toBrowser: true, typ: websocket.TextMessage, data: payload(64<<10+1, 2), wantType: websocket.TextMessage},
		{name: "20 MiB", toBrowser: true, typ: websocket.TextMessage, data: payload(20*MiB, 3), wantType: websocket.TextMessage},
		{name: "fragmented", toBrowser: true, typ: websocket.TextMessage, data: payload(100<<10, 4), fragment: 4 << 10, wantType: websocket.TextMessage},
		{name: "binary becomes text", toBrowser: true, typ: websocket.BinaryMessage, data: []byte(`{"id":4,"method":"Browser.getVersion"}`), wantType: websocket.TextMessage},
		{name: "big binary becomes text", toBrowser: true, typ: websocket.BinaryMessage, data: payload(3*MiB, 5), wantType: websocket.TextMessage},
		{name: "event", typ: websocket.TextMessage, data: []byte(`{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":"T","type":"page"}}}`), wantType: websocket.TextMessage},
		{name: "reply 64 KiB + 1", typ: websocket.TextMessage, data: payload(64<<10+1, 6), wantType: websocket.TextMessage},
		{name: "reply 20 MiB", typ: websocket.TextMessage, data: payload(20*MiB, 7), wantType: websocket.TextMessage},
	}
	tp, fb := relayNew(t, limiter.Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dialer := *websocket.DefaultDialer
			if tt.fragment > 0 {
				dialer.WriteBufferSize = tt.fragment
			}
			c, _, err := dialer.Dial("ws://"+tp.addr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fc := fb.Accept(t)
			if !tt.toBrowser {
				// The relay streams a big message to the client while the
				// browser is still writing it.
				werr := make(chan error, 1)
				go func() { werr <- fc.WriteFrame(tt.typ, tt.data) }()
				typ, got := holdtest.ReadClient(t, c)
				if err := <-werr; err != nil {
					t.Fatal(err)
				}
				if typ != tt.wantType {
					t.Errorf("client got type %d, want %d", typ, tt.wantType)
				}
				if d := fakebrowser.EqualMsg(got, tt.data); d != "" {
					t.Errorf("client got another message: %s", d)
				}
				return
			}
			c.SetWriteDeadline(time.Now().Add(waitFor))
			w, err := c.NextWriter(tt.typ)
			if err != nil {
				t.Fatal(err)
			}
			step := len(tt.data)
			if tt.fragment > 0 {
				step = tt.fragment / 2
			}
			for i := 0; i < len(tt.data); i += step {
				if _, err := w.Write(tt.data[i:min(i+step, len(tt.data))]); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got := fc.Next(t)
			if got.Type != tt.wantType {
				t.Errorf("browser got type %d, want %d", got.Type, tt.wantType)
			}
			if d := fakebrowser.EqualMsg(got.Data, tt.data); d != "" {
				t.Errorf("browser got another message: %s", d)
			}
		})
	}
}

// TestMessagesKeepOrder interleaves small and big messages in both
// directions at once and checks each side gets the other's in order.
func TestMessagesKeepOrder(t *testing.T) {
	_, _, c, fc := relayClient(t, limiter.Config{})
	var msgs [][]byte
	for i := range 200 {
		n := 40 + i
		if i%50 == 7 {
			n = 200 << 10 // streamed
		}
		msgs = append(msgs, payload(n, uint64(i)))
	}
	errc := make(chan error, 1)
	go func() {
		for _, m := range msgs {
			if err := fc.WriteFrame(websocket.TextMessage, m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for _, m := range msgs {
		holdtest.WriteClient(t, c, websocket.TextMessage, m)
	}
	for i, m := range msgs {
		if d := fakebrowser.EqualMsg(fc.Next(t).Data, m); d != "" {
			t.Fatalf("browser: message %d: %s", i, d)
		}
	}
	for i, m := range msgs {
		if _, got := holdtest.ReadClient(t, c); fakebrowser.EqualMsg(got, m) != "" {
			t.Fatalf("client: message %d: %s", i, fakebrowser.EqualMsg(got, m))
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// ended is what gorilla/websocket reports of a connection that ended
// without a close frame: the relay ends a side that way when the other
// side's connection ended, as the browser's exit ends a client's.
const ended = fakebrowser.Ended

// TestCloseIsPassedOn checks that a close frame on either side reaches
// the other with its code and reason, and its answer comes back; and
// that a connection lost on one side ends the other's, without a frame.
func TestCloseIsPassedOn(t *testing.T) {
	tests := []struct {
		name     string
		byClient bool
		code     int // 0: drop the TCP connection without a close frame
		text     string
		want     int // code the other side gets
		wantText string
	}{
		{name: "client normal", byClient: true, code: websocket.CloseNormalClosure, want: websocket.CloseNormalClosure},
		{name: "client going away", byClient: true, code: websocket.CloseGoingAway, text: "bye", want: websocket.CloseGoingAway, wantText: "bye"},
		{name: "client application code", byClient: true, code: 4000, text: "done here", want: 4000, wantText: "done here"},
		{name: "client without status", byClient: true, code: websocket.CloseNoStatusReceived, want: websocket.CloseNoStatusReceived},
		{name: "client lost", byClient: true, want: ended, wantText: "unexpected EOF"},
		{name: "browser normal", code: websocket.CloseNormalClosure, want: websocket.CloseNormalClosure},
		{name: "browser application code", code: 4001, text: "target closed", want: 4001, wantText: "target closed"},
		{name: "browser internal error", code: websocket.CloseInternalServerErr, text: "oops", want: websocket.CloseInternalServerErr, wantText: "oops"},
		{name: "browser lost", want: ended, wantText: "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, _, c, fc := relayClient(t, limiter.Config{})
			closeFrame := websocket.FormatCloseMessage(tt.code, tt.text)
			var got error
			if tt.byClient {
				if tt.code == 0 {
					c.UnderlyingConn().Close()
				} else if err := c.WriteControl(websocket.CloseMessage, closeFrame, time.Now().Add(time.Second)); err != nil {
					t.Fatal(err)
				}
				got = fc.Ended(t)
			} else {
				if tt.code == 0 {
					fc.Drop()
				} else if err := fc.WS.WriteControl(websocket.CloseMessage, closeFrame, time.Now().Add(time.Second)); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(waitFor))
				for got == nil {
					_, _, got = c.ReadMessage()
				}
			}
			var ce *websocket.CloseError
			if !errors.As(got, &ce) {
				t.Fatalf("other side ended with %v, want a close frame %d", got, tt.want)
			}
			if ce.Code != tt.want || ce.Text != tt.wantText {
				t.Errorf("other side got close %d %q, want %d %q", ce.Code, ce.Text, tt.want, tt.wantText)
			}
			if tt.byClient && tt.code != 0 {
				// The client's close is answered.
				c.SetReadDeadline(time.Now().Add(waitFor))
				_, _, err := c.ReadMessage()
				if !errors.As(err, &ce) || ce.Code != tt.code {
					t.Errorf("client got %v after its close, want the close %d answered", err, tt.code)
				}
			}
			waitConns(t, tp, 0)
		})
	}
}

// waitConns waits until the relay relays n connections.
func waitConns(t *testing.T, tp *testProxy, n int) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for tp.p.Conns() != n {
		if time.Now().After(deadline) {
			t.Fatalf("relay still has %d connections, want %d", tp.p.Conns(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRelayClose checks that closing the relay ends every client's
// connection as a browser's exit does, without a frame, and tells the
// browser 1001, as a client disconnecting does.
func TestRelayClose(t *testing.T) {
	tp, fb, c, fc := relayClient(t, limiter.Config{})
	waitConns(t, tp, 1)
	done := make(chan error, 1)
	go func() { done <- tp.p.Close() }()
	var ce *websocket.CloseError
	c.SetReadDeadline(time.Now().Add(waitFor))
	if _, _, err := c.ReadMessage(); !errors.As(err, &ce) || ce.Code != ended {
		t.Errorf("client got %v, want its connection ended", err)
	}
	if err := fc.Ended(t); !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Errorf("browser got %v, want close 1001", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Close: %v", err)
	}
	// A client that comes after Close is sent away at once.
	late, _, err := websocket.DefaultDialer.Dial("ws://"+tp.addr+"/", nil)
	if err != nil {
		return // refused outright: fine too
	}
	defer late.Close()
	late.SetReadDeadline(time.Now().Add(waitFor))
	if _, _, err := late.ReadMessage(); !errors.As(err, &ce) || ce.Code != ended {
		t.Errorf("client after Close got %v, want its connection ended", err)
	}
	if fb.ConnCount() > 2 { // the relay dialled the browser for it
		if err := fb.Accept(t).Ended(t); !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Errorf("browser connection of a client after Close got %v, want close 1001", err)
		}
	}
	if n := tp.p.Conns(); n != 0 {
		t.Errorf("relay has %d connections after Close, want 0", n)
	}
}

// TestOversizedMessage checks that a message over MaxMessageSize is
// answered with a close (1009) to the side that sent it, and ends the
// other side's connection.
func TestOversizedMessage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame int // the client's write buffer: its frames' size
	}{
		{"one frame", 64 << 10},
		{"in frames each under the limit", 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, fb := relayNew(t, limiter.Config{}, func(p *Proxy) { p.MaxMessageSize = 1 << 10 })
			d := websocket.Dialer{WriteBufferSize: tc.frame}
			c, _, err := d.Dial("ws://"+tp.addr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fc := fb.Accept(t)
			holdtest.WriteClient(t, c, websocket.TextMessage, payload(2<<10, 1))
			var ce *websocket.CloseError
			if err := fc.Ended(t); !errors.As(err, &ce) || ce.Code != ended {
				t.Errorf("browser got %v, want its connection ended", err)
			}
			c.SetReadDeadline(time.Now().Add(waitFor))
			if _, _, err := c.ReadMessage(); !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig {
				t.Errorf("client got %v, want close 1009", err)
			}
			if n := len(fc.Received()); n != 0 {
				t.Errorf("browser got %d messages, want none", n)
			}
		})
	}
}

// TestOrigin checks the Origin rule of websocket upgrades, and that the
// relay does not pass the Origin on (Chromium would refuse it).
func TestOrigin(t *testing.T) {
	tests := []struct {
		name   string
		allow  []string
		origin string // "" sends none
		want   int
	}{
		{name: "no Origin", want: http.StatusSwitchingProtocols},
		{name: "foreign Origin refused", origin: "http://evil.example", want: http.StatusForbidden},
		{name: "null Origin refused", origin: "null", want: http.StatusForbidden},
		{name: "allowed Origin", allow: []string{"http://app.example"}, origin: "http://app.example", want: http.StatusSwitchingProtocols},
		{name: "allowed Origin in another case", allow: []string{"http://App.Example"}, origin: "http://app.example", want: http.StatusSwitchingProtocols},
		{name: "other Origin than allowed", allow: []string{"http://app.example"}, origin: "http://evil.example", want: http.StatusForbidden},
		{name: "any Origin", allow: []string{"*"}, origin: "http://evil.example", want: http.StatusSwitchingProtocols},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, fb := relayNew(t, limiter.Config{}, func(p *Proxy) { p.AllowOrigins = tt.allow })
			hdr := http.Header{}
			if tt.origin != "" {
				hdr.Set("Origin", tt.origin)
			}
			before := fb.ConnCount()
			tp.dialWant(t, "/", hdr, tt.want)
			wantConns := before
			if tt.want == http.StatusSwitchingProtocols {
				wantConns++
				fb.Accept(t)
			}
			if n := fb.ConnCount(); n != wantConns {
				t.Errorf("browser has %d websockets, want %d", n, wantConns)
			}
		})
	}
}

// TestBrowserRefusal checks that a browser's refusal of the websocket is
// answered with its own status before the client is upgraded.
func TestBrowserRefusal(t *testing.T) {
	tp, _ := relayNew(t, limiter.Config{})
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+tp.addr+"/devtools/other/1", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("got %v, want the browser's 404", err)
	}
}

// TestPings checks that the relay pings no client (ChromeDriver answers
// no ping, and go-rod reads a ping as a message), passes a client's ping
// to the browser and its pong back, and pings its own browser
// connection, which is the relay's.
func TestPings(t *testing.T) {
	tp, fb := relayNew(t, limiter.Config{}, func(p *Proxy) { p.PingInterval = 20 * time.Millisecond })
	hc := fb.Holder(t)
	c := tp.dial(t, "/", nil)
	fb.Accept(t)
	pinged := make(chan struct{}, 1)
	c.SetPingHandler(func(string) error {
		select {
		case pinged <- struct{}{}:
		default:
		}
		return nil
	})
	pongs := make(chan string, 1)
	c.SetPongHandler(func(data string) error {
		pongs <- data
		return nil
	})
	readDone := make(chan error, 1)
	go func() {
		_, _, err := c.ReadMessage() // runs the handlers
		readDone <- err
	}()
	if err := c.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-pongs:
		if got != "are you there" {
			t.Errorf("pong %q, want the ping's payload", got)
		}
	case <-time.After(waitFor):
		t.Fatal("the client's ping was not answered")
	}
	deadline := time.Now().Add(waitFor)
	for hc.PingCount() < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("relay's browser connection got %d pings, want 10", hc.PingCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case <-pinged:
		t.Error("the relay pinged its client")
	default:
	}
	c.Close()
	<-readDone
}

// TestBrowserRestart checks that a client reaches a browser that came back
// on the same port under a new browser endpoint (Chromium answers the old
// one 404).
func TestBrowserRestart(t *testing.T) {
	for _, cfg := range []limiter.Config{{Mode: limiter.Off}, {}} {
		t.Run(cfg.Mode.String(), func(t *testing.T) {
			tp, fb, _, _ := relayClient(t, cfg)
			fb.Restart("0f0f0f0f-0000-4000-8000-000000000001")
			tp.dial(t, "/", nil)
			if got, want := fb.Accept(t).Path, "/devtools/browser/0f0f0f0f-0000-4000-8000-000000000001"; got != want {
				t.Errorf("got browser path %q, want %q", got, want)
			}
		})
	}
}

// TestSlowClient checks that a client that stops reading is dropped once
// a write to it has waited WriteTimeout, the browser's connection ended,
// and why is logged.
func TestSlowClient(t *testing.T) {
	tp, _, _, fc := relayClient(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.WriteTimeout = 200 * time.Millisecond }) // the client never reads
	go func() {
		big := payload(1<<20, 9)
		for range 64 {
			if fc.WriteFrame(websocket.TextMessage, big) != nil {
				return
			}
		}
	}()
	var ce *websocket.CloseError
	if err := fc.Ended(t); !errors.As(err, &ce) || ce.Code != ended {
		t.Errorf("browser got %v, want its connection ended", err)
	}
	if n := len(tp.logs.Lines(`"level":"warn"`, "client did not read in time")); n != 1 {
		t.Errorf("got %d warnings, want 1", n)
	}
	waitConns(t, tp, 0)
}
