package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// call has client c send a command and the fake browser fc answer it
// with result; it returns what the client got.
func call(t *testing.T, c *websocket.Conn, fc *fakebrowser.Conn, id int, method, params, result string) []byte {
	t.Helper()
	holdtest.WriteClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"method":%q,"params":%s}`, id, method, params))
	if got := fc.Next(t); got.Wire.Method != method {
		t.Fatalf("browser got %s, want %s", got.Data, method)
	}
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":%s}`, id, result))
	_, got := holdtest.ReadClient(t, c)
	return got
}

// metricsBody returns what /metrics serves.
func metricsBody(t *testing.T, tp *testProxy) string {
	t.Helper()
	w := httptest.NewRecorder()
	tp.p.Metrics.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

// cleanup returns the commands of the next connection the relay opens to
// close what a client left, once it has sent n.
func cleanup(t *testing.T, fb *fakebrowser.Browser, n int) []string {
	t.Helper()
	fc := fb.Accept(t)
	var got []string
	for range n {
		m := fc.Next(t)
		var p struct{ TargetID, BrowserContextID string }
		json.Unmarshal(m.Wire.Params, &p)
		got = append(got, m.Wire.Method+" "+p.TargetID+p.BrowserContextID)
	}
	return got
}

// closedWith waits for the relay to close the client's connection and
// returns the code.
func closedWith(t *testing.T, c *websocket.Conn) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(waitFor))
	for {
		_, msg, err := c.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		if err != nil {
			t.Fatalf("client: connection ended with %v, want a close frame", err)
		}
		t.Logf("client got %s", msg)
	}
}

func TestBrowserCloseEndsOnlyItsOwn(t *testing.T) {
	for _, mode := range []struct {
		name string
		cfg  limiter.Config
	}{{"limiter off", limiter.Config{Mode: limiter.Off}}, {"fetch", holdtest.Fixed(time.Millisecond)}} {
		t.Run(mode.name, func(t *testing.T) {
			tp, fb := relayNew(t, mode.cfg)
			if mode.cfg.Mode != limiter.Off {
				fb.Holder(t)
				fb.Pages(t)
			}
			a := tp.dial(t, "/", nil)
			fa := fb.Accept(t)
			b := tp.dial(t, "/", nil)
			fbb := fb.Accept(t)
			call(t, a, fa, 1, "Target.createTarget", `{"url":"about:blank"}`, `{"targetId":"PA1"}`)
			call(t, a, fa, 2, "Target.createBrowserContext", `{}`, `{"browserContextId":"CA"}`)
			call(t, a, fa, 3, "Target.createTarget", `{"url":"about:blank","browserContextId":"CA"}`, `{"targetId":"PA2"}`)
			call(t, a, fa, 4, "Target.createTarget", `{"url":"about:blank"}`, `{"targetId":"GONE-A3"}`)
			call(t, b, fbb, 1, "Target.createTarget", `{"url":"about:blank"}`, `{"targetId":"PB1"}`)

			holdtest.WriteClient(t, a, websocket.TextMessage, []byte(`{"id":5,"method":"Browser.close"}`))
			got := cleanup(t, fb, 4)
			slices.Sort(got[:3])
			want := []string{"Target.closeTarget GONE-A3", "Target.closeTarget PA1", "Target.closeTarget PA2", "Target.disposeBrowserContext CA"}
			if !slices.Equal(got, want) {
				t.Errorf("the relay closed %q, want %q", got, want)
			}
			if _, msg := holdtest.ReadClient(t, a); string(msg) != `{"id":5,"result":{}}` {
				t.Errorf("client got %s, want the browser's empty result", msg)
			}
			if code := closedWith(t, a); code != ended {
				t.Errorf("client's connection closed with %d, want it ended, as Chromium's exit ends it", code)
			}
			if err := fa.Ended(t); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				t.Errorf("the client's browser connection ended with %v, want 1000", err)
			}
			for _, m := range fa.Received() {
				if m.Wire.Method == "Browser.close" {
					t.Error("Browser.close reached the browser")
				}
			}
			// b goes on.
			if got := call(t, b, fbb, 2, "Page.getFrameTree", `{}`, `{"frameTree":{}}`); string(got) != `{"id":2,"result":{"frameTree":{}}}` {
				t.Errorf("the other client got %s", got)
			}
			m := metricsBody(t, tp)
			for _, line := range []string{
				`cdp_throttle_leftovers_total{outcome="closed",what="page",why="browser_close"} 2`,
				`cdp_throttle_leftovers_total{outcome="gone",what="page",why="browser_close"} 1`,
				`cdp_throttle_leftovers_total{outcome="closed",what="context",why="browser_close"} 1`,
				`cdp_throttle_browser_commands_total{method="Browser.close",outcome="contained"} 1`,
			} {
				if !strings.Contains(m, line) {
					t.Errorf("metrics lack %s", line)
				}
			}
			if n := len(tp.logs.Lines("the client closed its browser", `"pages":2`, `"contexts":1`, `"gone_already":1`)); n != 1 {
				t.Errorf("logged %d times that the client closed its browser, want once", n)
			}
		})
	}
}

func TestCrashRefused(t *testing.T) {
	for _, lightpanda := range []bool{false, true} {
		t.Run(fmt.Sprint("lightpanda=", lightpanda), func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: lightpanda})
			tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off})
			c := tp.dial(t, "/", nil)
			fc := fb.Accept(t)
			for i, m := range []string{"Browser.crash", "Browser.crashGpuProcess"} {
				holdtest.WriteClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"method":%q,"sessionId":"S"}`, i+1, m))
				_, got := holdtest.ReadClient(t, c)
				var r struct {
					ID    int
					Error struct {
						Code    int
						Message string
					}
					SessionID string
				}
				if json.Unmarshal(got, &r) != nil || r.ID != i+1 || r.Error.Code != -32000 || r.SessionID != "S" ||
					!strings.Contains(r.Error.Message, "--allow-browser-close") {
					t.Errorf("%s: client got %s, want a -32000 error naming --allow-browser-close", m, got)
				}
			}
			// Still up, and the browser saw none of it.
			if got := call(t, c, fc, 9, "Browser.getVersion", `{}`, `{}`); string(got) != `{"id":9,"result":{}}` {
				t.Errorf("client got %s", got)
			}
			if n := len(fc.Received()); n != 1 {
				t.Errorf("the browser got %d messages, want only Browser.getVersion", n)
			}
			if m := metricsBody(t, tp); !strings.Contains(m, `cdp_throttle_browser_commands_total{method="Browser.crash",outcome="refused"} 1`) {
				t.Error("the refusal is not counted")
			}
		})
	}
}

func TestBrowserClosePasses(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   fakebrowser.Config
		allow bool
	}{
		{name: "allowed", allow: true},
		{name: "lightpanda", cfg: fakebrowser.Config{Lightpanda: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, tt.cfg)
			tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.AllowBrowserClose = tt.allow })
			c := tp.dial(t, "/", nil)
			fc := fb.Accept(t)
			holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Browser.close"}`))
			if got := fc.Next(t); got.Wire.Method != "Browser.close" {
				t.Errorf("browser got %s, want Browser.close", got.Data)
			}
			if tt.allow {
				holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Browser.crash"}`))
				if got := fc.Next(t); got.Wire.Method != "Browser.crash" {
					t.Errorf("browser got %s, want Browser.crash", got.Data)
				}
			}
		})
	}
}

// orphaning starts a relay in front of a new fake browser that closes
// what a client left behind after orphan, and connects a client that
// creates page P1 (a, with the browser's end fa); the test is checked for
// leaked goroutines.
func orphaning(t *testing.T, orphan time.Duration) (*testProxy, *fakebrowser.Browser, *websocket.Conn, *fakebrowser.Conn) {
	t.Helper()
	tp, fb, a, fa := relayClient(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.OrphanTimeout = orphan })
	call(t, a, fa, 1, "Target.createTarget", `{"url":"about:blank"}`, `{"targetId":"P1"}`)
	return tp, fb, a, fa
}

func TestOrphansClosed(t *testing.T) {
	const orphan = 300 * time.Millisecond
	tp, fb, a, fa := orphaning(t, orphan)
	call(t, a, fa, 2, "Target.createTarget", `{"url":"about:blank"}`, `{"targetId":"P2"}`)
	a.Close()
	left := time.Now()
	got := cleanup(t, fb, 2)
	if after := time.Since(left); after < orphan {
		t.Errorf("closed %v after the client left, want no sooner than the orphan timeout %v", after, orphan)
	}
	slices.Sort(got)
	if want := []string{"Target.closeTarget P1", "Target.closeTarget P2"}; !slices.Equal(got, want) {
		t.Errorf("the relay closed %q, want %q", got, want)
	}
	deadline := time.Now().Add(waitFor)
	for len(tp.logs.Lines("closed what a client left behind", `"pages":2`)) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if m := metricsBody(t, tp); !strings.Contains(m, `cdp_throttle_leftovers_total{outcome="closed",what="page",why="orphan"} 2`) {
		t.Errorf("metrics lack the two pages closed:\n%s", m)
	}
}

// TestOrphanTakenOver checks a client that comes back and drives a page
// it left keeps it: the relay closes nothing.
func TestOrphanTakenOver(t *testing.T) {
	const orphan = 300 * time.Millisecond
	tp, fb, a, _ := orphaning(t, orphan)
	a.Close()
	b := tp.dial(t, "/", nil)
	fbb := fb.Accept(t)
	fbb.Send([]byte(`{"method":"Target.attachedToTarget","params":{"sessionId":"S1","targetInfo":{"targetId":"P1","type":"page"},"waitingForDebugger":false}}`))
	holdtest.ReadClient(t, b)
	holdtest.WriteClient(t, b, websocket.TextMessage, []byte(`{"id":1,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"S1"}`))
	fbb.Next(t)
	time.Sleep(3 * orphan)
	if n := fb.ConnCount(); n != 2 {
		t.Errorf("the browser got %d connections, want the two clients' only: the relay closed what b took over", n)
	}
}
