package relay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// testProxy is a started Proxy served on an httptest.Server.
type testProxy struct {
	p    *Proxy
	srv  *httptest.Server
	lim  *limiter.Limiter
	logs *fakebrowser.Logs
	addr string // host:port the relay listens on
}

// withPolicy is lim behind the policy of the global flags cfg alone, as
// the relay command books without rules.
func withPolicy(lim *limiter.Limiter, cfg limiter.Config) hold.Limiter {
	return policy.New(policy.Config{Default: cfg}, lim)
}

// proxyAt returns a Proxy for the browser at upstream, not yet started,
// booking through a limiter for cfg (returned with it) behind the
// global flags' policy, logging at debug level to the Logs it returns,
// and waiting 5 s at most for the browser at start; it counts nothing
// (no Metrics).
func proxyAt(upstream string, cfg limiter.Config) (*Proxy, *limiter.Limiter, *fakebrowser.Logs) {
	logs := &fakebrowser.Logs{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	lim := limiter.New(cfg)
	return &Proxy{
		Upstream:     upstream,
		Limiter:      withPolicy(lim, cfg),
		Log:          &log,
		StartTimeout: 5 * time.Second,
	}, lim, logs
}

// newProxy returns a Proxy for fb, as proxyAt does, that counts what it
// does (Metrics).
func newProxy(fb *fakebrowser.Browser, cfg limiter.Config) (*Proxy, *limiter.Limiter, *fakebrowser.Logs) {
	p, lim, logs := proxyAt(fb.URL(), cfg)
	p.Metrics = NewMetrics(lim)
	return p, lim, logs
}

// startProxy starts p, adjusted by opts first, and serves it; it is
// closed when the test ends.
func startProxy(t *testing.T, p *Proxy, lim *limiter.Limiter, logs *fakebrowser.Logs, opts ...func(*Proxy)) *testProxy {
	t.Helper()
	for _, o := range opts {
		o(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	tp := &testProxy{p: p, lim: lim, logs: logs, srv: httptest.NewServer(p)}
	tp.addr = tp.srv.Listener.Addr().String()
	t.Cleanup(func() {
		tp.p.Close()
		tp.srv.Close()
		if t.Failed() {
			t.Logf("relay log:\n%s", logs)
		}
	})
	return tp
}

// relayTo starts a relay for fb with limiter cfg; opts adjust the Proxy
// before it starts. Its Fetch holding has the browser-level backup on
// (HoldBackup), which most tests of the Fetch strategy play against.
func relayTo(t *testing.T, fb *fakebrowser.Browser, cfg limiter.Config, opts ...func(*Proxy)) *testProxy {
	t.Helper()
	p, lim, logs := newProxy(fb, cfg)
	p.HoldBackup = true
	return startProxy(t, p, lim, logs, opts...)
}

// relayNew starts a relay, as relayTo does, for a new fake browser, and
// returns it with the browser. The test is checked for leaked goroutines.
func relayNew(t *testing.T, cfg limiter.Config, opts ...func(*Proxy)) (*testProxy, *fakebrowser.Browser) {
	t.Helper()
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	return relayTo(t, fb, cfg, opts...), fb
}

// relayClient starts a relay for a new fake browser, as relayNew does,
// and connects a client to its root; it returns the client with the
// browser's end of the connection the relay opened for it.
func relayClient(t *testing.T, cfg limiter.Config, opts ...func(*Proxy)) (*testProxy, *fakebrowser.Browser, *websocket.Conn, *fakebrowser.Conn) {
	t.Helper()
	tp, fb := relayNew(t, cfg, opts...)
	c := tp.dial(t, "/", nil)
	return tp, fb, c, fb.Accept(t)
}

// dial connects a client to the relay's path; it is closed when the test ends.
func (tp *testProxy) dial(t *testing.T, path string, hdr http.Header) *websocket.Conn {
	t.Helper()
	return holdtest.Dial(t, tp.addr, path, hdr)
}

// ask sends method target to the relay, the request changed by edit
// first (nil: none), and returns the answer, its body read and closed.
func (tp *testProxy) ask(t *testing.T, method, target string, edit func(*http.Request)) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+tp.addr+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// get asks the relay for path with a GET, as ask does, and returns the
// answer's status and body.
func (tp *testProxy) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, body := tp.ask(t, "GET", path, nil)
	return resp.StatusCode, string(body)
}

// dialWant dials the relay's path and fails the test unless the relay
// answers with status want (0: no answer at all); a connection it opens is
// closed when the test ends.
func (tp *testProxy) dialWant(t *testing.T, path string, hdr http.Header, want int) {
	t.Helper()
	c, resp, err := websocket.DefaultDialer.Dial("ws://"+tp.addr+path, hdr)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	got := 0
	if resp != nil {
		got = resp.StatusCode
	}
	if got != want {
		t.Fatalf("got status %d (%v), want %d", got, err, want)
	}
}

// drive makes page target the client's, as a real client does: the
// browser tells client c (relayed to it as fc) it is attached to the page
// in session, and c sends a command there (Runtime.evaluate, id), which
// the relay passes on once its Fetch holding covers the page; the browser
// answers it. The relay's Fetch holding holds only such pages. What fc
// got before the command is skipped.
func drive(t *testing.T, c *websocket.Conn, fc *fakebrowser.Conn, id int, session, target string) {
	t.Helper()
	fc.Send(fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":%q,"targetInfo":{"targetId":%q,"type":"page","title":"","url":"about:blank","attached":true},"waitingForDebugger":false}}`, session, target))
	holdtest.ReadClient(t, c)
	holdtest.WriteClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"sessionId":%q,"method":"Runtime.evaluate","params":{"expression":"1"}}`, id, session))
	for {
		if m := fc.Next(t); m.Wire.Method == "Runtime.evaluate" && m.Wire.SessionID == session {
			break
		}
	}
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{"result":{"type":"number","value":1}},"sessionId":%q}`, id, session))
	holdtest.ReadClient(t, c)
}

// driveRecorded has client c drive every page of the recording the fake
// plays on the relay's own connections (fb.FetchRec), as drive does, in
// a session each ("S-" and the page's id), with ids from 1001 on.
func driveRecorded(t *testing.T, c *websocket.Conn, fc *fakebrowser.Conn, fb *fakebrowser.Browser) {
	t.Helper()
	for i, page := range recordedPages(fb) {
		drive(t, c, fc, 1001+i, "S-"+page, page)
	}
}

// recordedPages returns the pages of the recording the fake plays on the
// relay's own connections, in the order they appear.
func recordedPages(fb *fakebrowser.Browser) []string {
	var pages []string
	for _, rm := range fb.FetchRec.Msgs {
		if info, _, ok := fakebrowser.ReadTargetInfo(rm.Msg); ok && rm.Wire.Method == "Target.targetCreated" && info.Type == "page" {
			pages = append(pages, info.TargetID)
		}
	}
	return pages
}

// replayChromium is fakebrowser.ReplayChromium for a relay whose client
// drives the recorded pages (driveRecorded): net's Fetch, off while no
// client has a page, goes on when one does; Fetch.disable is a pattern
// update as Fetch.enable is, which the replay sets aside.
func replayChromium(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn) {
	t.Helper()
	fakebrowser.ReplayTranscript(t, fb.FetchRec, fb.FetchRec.ReplyIndex(t, "Fetch.enable"), hc, func(m fakebrowser.Msg) bool {
		return m.Wire.Method == "Fetch.enable" || m.Wire.Method == "Fetch.disable"
	})
}

// TestStartChoosesInterception checks how Start decides between the
// relay's own Fetch connection and holding navigations in client streams.
func TestStartChoosesInterception(t *testing.T) {
	tests := []struct {
		name      string
		browser   fakebrowser.Config
		cfg       limiter.Config
		intercept hold.Intercept
		wantErr   string // Start fails with this
		want      string // how navigations are held: fetch, session, navigate or off
		wantWarn  string // the warning Start gives about it
		wantConns int    // websockets the browser saw from Start, at least
	}{
		{name: "chromium: fetch", cfg: limiter.Config{}, want: "fetch", wantConns: 1},
		{name: "lightpanda by name: session, no connection", browser: fakebrowser.Config{Lightpanda: true}, want: "session"},
		{name: "fetch refused: session", browser: fakebrowser.Config{RejectFetch: true}, want: "session", wantConns: 1,
			wantWarn: "holding navigations through each client session instead of the relay's own connection"},
		{name: "fetch refused, fetch required: error", browser: fakebrowser.Config{RejectFetch: true}, intercept: hold.InterceptFetch,
			wantErr: "browser refused browser-level Fetch", wantConns: 1},
		{name: "navigate requested", intercept: hold.InterceptNavigate, want: "navigate", wantWarn: "holding navigations in the client stream"},
		{name: "session requested", intercept: hold.InterceptSession, want: "session"},
		{name: "limiter off: nothing held", cfg: limiter.Config{Mode: limiter.Off}, want: "off"},
		{name: "fixed 0 acts as off", cfg: limiter.Config{Mode: limiter.Fixed}, want: "off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, tt.browser)
			p, lim, logs := newProxy(fb, tt.cfg)
			p.Intercept = tt.intercept
			if tt.wantErr != "" {
				err := p.Start(context.Background())
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Start: got %v, want an error with %q", err, tt.wantErr)
				}
				// Whatever Start opened is gone again.
				if n := fb.ConnCount(); n != tt.wantConns {
					t.Errorf("got %d websockets, want %d", n, tt.wantConns)
				}
				return
			}
			tp := startProxy(t, p, lim, logs)
			if got := fb.ConnCount(); got < tt.wantConns || tt.wantConns == 0 && got != 0 {
				t.Errorf("got %d websockets from Start, want %d", got, tt.wantConns)
			}
			if got := tp.p.ups[0].holding(); got != tt.want {
				t.Errorf("navigations held by %q, want %q", got, tt.want)
			}
			if tt.wantWarn != "" && len(logs.Lines(`"level":"warn"`, tt.wantWarn)) != 1 {
				t.Errorf("got no warning %q; log:\n%s", tt.wantWarn, logs)
			}
		})
	}
}

// TestStartWaitsForTheBrowser checks that Start polls a browser that is
// not up yet, and gives up at StartTimeout.
func TestStartWaitsForTheBrowser(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	addr := fb.Addr
	fb.Close()
	p, _, _ := newProxy(fb, limiter.Config{})
	p.Upstream = "http://" + addr
	p.StartTimeout = 300 * time.Millisecond
	start := time.Now()
	err := p.Start(context.Background())
	if err == nil {
		p.Close()
		t.Fatal("Start: got no error for a browser that is not there")
	}
	if !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("Start: got %v, want an error saying the upstream did not answer", err)
	}
	if waited := time.Since(start); waited < p.StartTimeout {
		t.Errorf("Start gave up after %v, want at least StartTimeout %v", waited, p.StartTimeout)
	}
}
