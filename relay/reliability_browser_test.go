package relay

// Reliability cases of a browser that misbehaves: it answers badly, late
// or never, dies mid-navigation, or comes up after the relay.

import (
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// drain reads c until it ends.
func drain(c *websocket.Conn) {
	for {
		if _, _, err := c.NextReader(); err != nil {
			return
		}
	}
}

// TestBrowserMisbehaves runs a client's browser connection into a browser
// that breaks the protocol or stops, and checks the client's connection
// ends as it would have directly (without a frame, or with the browser's
// close), the relay lets go of the connection, and a client beside it
// carries on.
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
			want: ended,
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
			want: ended,
		},
		{
			name: "message over the read limit",
			script: func(c *websocket.Conn, done <-chan struct{}) {
				c.WriteMessage(websocket.TextMessage, payload(4<<10, 3))
				drain(c)
			},
			opt:  func(p *Proxy) { p.MaxMessageSize = 1 << 10 },
			want: ended, warn: "message over the read limit",
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
			want: ended, warn: "browser did not read in time",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			sb := fakebrowser.NewScripted(t, func(i int, c *websocket.Conn, done <-chan struct{}) {
				if i == 0 {
					tt.script(c, done)
					return
				}
				fakebrowser.Echo(c)
			})
			var opts []func(*Proxy)
			if tt.opt != nil {
				opts = append(opts, tt.opt)
			}
			tp := relayToURL(t, sb.URL, limiter.Config{Mode: limiter.Off}, opts...)
			c := tp.dial(t, "/", nil)
			var wg sync.WaitGroup
			if tt.client != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tt.client(c)
				}()
			}
			ce := fakebrowser.CloseOf(t, c)
			c.Close() // a client writing still is done
			wg.Wait()
			if ce.Code != tt.want || tt.wantText != "" && ce.Text != tt.wantText {
				t.Errorf("client got close %d %q, want %d %q", ce.Code, ce.Text, tt.want, tt.wantText)
			}
			waitConns(t, tp, 0)
			if tt.warn != "" && len(tp.logs.Lines(`"level":"warn"`, tt.warn)) != 1 {
				t.Errorf("no warning %q logged", tt.warn)
			}
			// A client beside it is served.
			b := tp.dial(t, "/", nil)
			holdtest.WriteClient(t, b, websocket.TextMessage, []byte(`{"id":5,"method":"Browser.getVersion"}`))
			if _, got := holdtest.ReadClient(t, b); string(got) != `{"id":5,"result":{}}` {
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
		{method: "Fetch.enable", intercept: hold.InterceptFetch, wantErr: "browser refused browser-level Fetch: hold: Fetch.enable: context deadline exceeded"},
	} {
		t.Run(tt.method+"/"+tt.intercept.String(), func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{Silent: map[string]bool{tt.method: true}})
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
			if n := len(logs.Lines(`"level":"warn"`, "navigations wait until it is", "context deadline exceeded")); n != 1 {
				t.Errorf("got %d warnings that navigations wait and why, want 1", n)
			}
			deadline := time.Now().Add(waitFor)
			for tp.p.ups[0].holding() != "session" && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if n := len(logs.Lines(`"level":"warn"`, "holding navigations through each client session", "context deadline exceeded")); n != 1 {
				t.Errorf("got %d warnings about falling over to the session strategy and why, want 1", n)
			}
		})
	}
}

// TestBrowserNeverAnswersTargetInfo checks that a document request of a
// frame the relay asks the browser about is released when the browser does
// not answer within the relay's bound, and that the relay asks again about
// that frame next time rather than remembering a guess: its client drives
// the page, which the relay would hold had it guessed it a page.
func TestBrowserNeverAnswersTargetInfo(t *testing.T) {
	t.Parallel() // waits out the relay's 5 s bound twice
	fb := fakebrowser.New(t, fakebrowser.Config{Silent: map[string]bool{"Target.getTargetInfo": true}})
	tp := relayTo(t, fb, holdtest.Fixed(time.Hour))
	hc := fb.Holder(t)
	fakebrowser.AnnouncePages(t, fb, hc, true) // the fake knows the pages; the relay was not told
	driveRecorded(t, tp.dial(t, "/", nil), fb.Accept(t), fb)
	chain := fb.FetchRec.Chain(t, "/page?first")
	for range 2 {
		hc.MustPlay(t, chain)
	}
	if got := len(fakebrowser.Commands(hc, "Target.getTargetInfo")); got != 2 {
		t.Errorf("relay asked Target.getTargetInfo %d times, want 2 (once per unanswered pause)", got)
	}
	if n := tp.lim.Len(); n != 0 {
		t.Errorf("limiter knows %d hosts, want none: a frame of unknown kind is not held", n)
	}
}

// TestStartWaitsForLateBrowser starts the relay before its browser and
// checks that it waits, saying so once, and starts when the browser comes
// up, for an http:// and a ws:// upstream.
func TestStartWaitsForLateBrowser(t *testing.T) {
	for _, tt := range []struct {
		name     string
		upstream func(addr string) string
		cfg      fakebrowser.Config
	}{
		{"http", func(addr string) string { return "http://" + addr }, fakebrowser.Config{}},
		{"ws", func(addr string) string { return "ws://" + addr + "/" }, fakebrowser.Config{Lightpanda: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			addr := fakebrowser.ClosedAddr(t) // nothing listens there yet
			p, lim, logs := proxyAt(tt.upstream(addr), limiter.Config{})
			p.StartTimeout = waitFor
			if tt.name == "ws" {
				p.Intercept = hold.InterceptNavigate // no Fetch attempt: one websocket to the browser before the client's
			}
			started := make(chan error, 1)
			go func() { started <- p.Start(t.Context()) }()
			if !logs.Wait("waiting for the browser") {
				t.Fatal("relay did not say it waits for the browser")
			}
			time.Sleep(300 * time.Millisecond) // a few attempts fail
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skipf("port taken meanwhile: %v", err)
			}
			cfg := tt.cfg
			cfg.Listener = ln
			fb := fakebrowser.New(t, cfg)
			if err := <-started; err != nil {
				t.Fatalf("Start: %v", err)
			}
			tp := &testProxy{p: p, lim: lim, logs: logs, srv: httptest.NewServer(p)}
			tp.addr = tp.srv.Listener.Addr().String()
			t.Cleanup(func() { p.Close(); tp.srv.Close() })
			if n := len(logs.Lines("waiting for the browser")); n != 1 {
				t.Errorf("said %d times that it waits for the browser, want once", n)
			}
			if tt.name == "ws" {
				fb.Accept(t) // the websocket Start dialled to see the browser up
			}
			c := tp.dial(t, "/", nil)
			roundTrip(t, c, fb.Accept(t), websocket.TextMessage, []byte(sentinel))
		})
	}
}
