package relay

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// clientsOf reads the clients section of the relay's /healthz.
func clientsOf(t *testing.T, tp *testProxy) (capacity, connected, queued, full, timeout int) {
	t.Helper()
	_, body := tp.get(t, "/healthz")
	var h struct {
		Clients struct {
			Capacity       int `json:"capacity"`
			Connected      int `json:"connected"`
			Queued         int `json:"queued"`
			RefusedFull    int `json:"refused_queue_full"`
			RefusedTimeout int `json:"refused_timeout"`
		} `json:"clients"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatalf("/healthz: %v: %s", err, body)
	}
	c := h.Clients
	return c.Capacity, c.Connected, c.Queued, c.RefusedFull, c.RefusedTimeout
}

// TestAdmission: with one client per browser and a queue of one, a third
// client's upgrade waits unanswered until a place frees, while
// /json/version and /healthz answer at once; a fourth is answered 429
// with Retry-After at once; a wait that sees no place in time is answered
// 503. Never an HTTP error after the upgrade.
func TestAdmission(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	tp, fb1, fb2 := twoBrowsers(t, func(p *Proxy) {
		p.Metrics = NewMetrics(nil)
		p.ClientsPerBrowser, p.Queue, p.QueueTimeout = 1, 1, time.Second
	})
	if capacity, _, _, _, _ := clientsOf(t, tp); capacity != 2 {
		t.Fatalf("capacity %d, want 2", capacity)
	}
	first := tp.dial(t, "/", nil)
	tp.dial(t, "/", nil)
	fakebrowser.Eventually(t, "a client on each browser", func() bool { return fb1.ConnCount() == 1 && fb2.ConnCount() == 1 })

	third := make(chan *websocket.Conn, 1)
	go func() {
		c, resp, err := websocketDial("ws://" + tp.addr + "/")
		if err != nil {
			t.Errorf("the waiting client: %v %v", err, resp)
		}
		third <- c
	}()
	fakebrowser.Eventually(t, "the third client queued", func() bool { _, _, q, _, _ := clientsOf(t, tp); return q == 1 })
	if status, _ := tp.get(t, "/json/version"); status != http.StatusOK {
		t.Errorf("/json/version while a client waits: %d", status)
	}

	began := time.Now()
	c, resp, err := websocketDial("ws://" + tp.addr + "/")
	if err == nil {
		c.Close()
		t.Fatal("a fourth client was let in, want 429")
	}
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || time.Since(began) > 500*time.Millisecond {
		t.Fatalf("a fourth client: %v, %v after %v; want 429 with Retry-After at once", resp, err, time.Since(began))
	}

	first.Close()
	var c3 *websocket.Conn
	select {
	case c3 = <-third:
	case <-time.After(waitFor):
		t.Fatal("the waiting client did not get the freed place")
	}
	if c3 == nil {
		t.FailNow()
	}
	defer c3.Close()
	fakebrowser.Eventually(t, "the third client on fb1", func() bool { return fb1.ConnCount() == 2 })
	if _, connected, queued, _, _ := clientsOf(t, tp); connected != 2 || queued != 0 {
		t.Errorf("/healthz: %d connected, %d queued; want 2 and 0", connected, queued)
	}

	began = time.Now()
	_, resp, err = websocketDial("ws://" + tp.addr + "/")
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable || time.Since(began) < time.Second {
		t.Fatalf("a client that waits longer than --queue-timeout: %v, %v after %v; want 503 after 1s", resp, err, time.Since(began))
	}
	_, _, _, full, timeout := clientsOf(t, tp)
	if full != 1 || timeout != 1 {
		t.Errorf("refusals: %d queue full, %d timed out; want 1 and 1", full, timeout)
	}
	_, metrics := tp.get(t, "/metrics")
	for _, want := range []string{
		`cdp_throttle_clients_refused_total{reason="queue_full"} 1`,
		`cdp_throttle_clients_refused_total{reason="timeout"} 1`,
		"cdp_throttle_clients_capacity 2",
		"cdp_throttle_clients_connected 2",
		"cdp_throttle_clients_connected_peak 2",
		"cdp_throttle_client_wait_seconds_count 1",
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestAdmissionUnbounded: with no bound anywhere nobody waits, and the
// gate still spreads clients over the browsers.
func TestAdmissionUnbounded(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	tp, fb1, fb2 := twoBrowsers(t)
	for range 4 {
		tp.dial(t, "/", nil)
	}
	fakebrowser.Eventually(t, "two clients on each browser", func() bool { return fb1.ConnCount() == 2 && fb2.ConnCount() == 2 })
	if capacity, connected, _, _, _ := clientsOf(t, tp); capacity != -1 || connected != 4 {
		t.Errorf("/healthz: capacity %d, %d connected; want -1 (no bound) and 4", capacity, connected)
	}
}

// fullBrowser is a browser endpoint that answers the first refusals
// websocket upgrades 503, as lightpanda serve does while it still counts
// a connection the relay closed, then accepts and echoes.
func fullBrowser(t *testing.T, refusals int) (url string, upgrades *atomic.Int64) {
	t.Helper()
	upgrades = &atomic.Int64{}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"Browser":"Lightpanda/1.0","webSocketDebuggerUrl":"ws://` + srv.Listener.Addr().String() + `/"}`))
			return
		}
		if upgrades.Add(1) <= int64(refusals) {
			http.Error(w, "too many connections", http.StatusServiceUnavailable)
			return
		}
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, m, err := c.ReadMessage()
			if err != nil || c.WriteMessage(mt, m) != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws://" + srv.Listener.Addr().String() + "/", upgrades
}

// TestBrowserStillFull: a browser with a capacity that answers 503 while
// the client has a place in it is asked again for a moment (it has not
// seen the last client's close yet); one with no capacity known passes
// its 503 on at once.
func TestBrowserStillFull(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	url, upgrades := fullBrowser(t, 3)
	tp := relayToURL(t, url, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.ClientsPerBrowser = 1 })
	c := tp.dial(t, "/", nil)
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"id":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, m := holdtest.ReadClient(t, c); string(m) != `{"id":1}` {
		t.Errorf("echo: %s", m)
	}
	if n := upgrades.Load(); n != 4 {
		t.Errorf("the browser was asked %d times, want 4 (three 503s, then in)", n)
	}

	url, upgrades = fullBrowser(t, 1)
	tp = relayToURL(t, url, limiter.Config{Mode: limiter.Off})
	if status, _, _ := dialStatus(tp, "/"); status != http.StatusServiceUnavailable || upgrades.Load() != 1 {
		t.Errorf("no capacity known: got %d after %d upgrades, want the browser's 503 after 1", status, upgrades.Load())
	}
}
