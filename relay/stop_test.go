package relay

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestPanicEndsOneConnection checks that a panic in the code relaying one
// client's messages ends that client's connection alone: the relay goes
// on relaying another client's, and counts the panic.
func TestPanicEndsOneConnection(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	faultHook = func(hd *cdp.Header) {
		if string(hd.Method) == "Test.panic" {
			panic("a test's panic")
		}
	}
	t.Cleanup(func() { faultHook = nil })
	fb := fakebrowser.New(t, fakebrowser.Config{})
	tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off})
	bad := tp.dial(t, "/", nil)
	badBrowser := fb.Accept(t)
	good := tp.dial(t, "/", nil)
	goodBrowser := fb.Accept(t)

	holdtest.WriteClient(t, bad, websocket.TextMessage, []byte(`{"id":1,"method":"Test.panic"}`))
	bad.SetReadDeadline(time.Now().Add(waitFor))
	if _, _, err := bad.ReadMessage(); err == nil {
		t.Fatal("the client whose message panicked: its connection goes on, want it ended")
	}
	badBrowser.Ended(t) // fails the test unless the browser side ended too
	holdtest.WriteClient(t, good, websocket.TextMessage, []byte(`{"id":2,"method":"Browser.getVersion"}`))
	if got := goodBrowser.Next(t); got.Wire.Method != "Browser.getVersion" {
		t.Errorf("the other client's command reached the browser as %q, want Browser.getVersion", got.Wire.Method)
	}
	if err := goodBrowser.Send([]byte(`{"id":2,"result":{}}`)); err != nil {
		t.Fatal(err)
	}
	if _, data := holdtest.ReadClient(t, good); string(data) != `{"id":2,"result":{}}` {
		t.Errorf("the other client got %s, want the browser's answer", data)
	}
	rec := httptest.NewRecorder()
	tp.p.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "\ncdp_throttle_panics_total 1\n") {
		t.Errorf("/metrics has no cdp_throttle_panics_total 1:\n%s", rec.Body)
	}
	if lines := tp.logs.Lines("a panic in this connection's code"); len(lines) != 1 || !strings.Contains(lines[0], "stack") {
		t.Errorf("logged: %q, want the panic once, with its stack", lines)
	}
}

// TestStoppingRefusesClients checks what the relay answers while a stop
// drains (stop.go): an upgrade and /json/* get 503 with a Retry-After,
// /healthz says stopping.
func TestStoppingRefusesClients(t *testing.T) {
	tp, _ := relayNew(t, limiter.Config{Mode: limiter.Fixed, Interval: 500 * time.Millisecond, Burst: 1})
	tp.p.drainEnd.Store(time.Now().Add(5 * time.Second).UnixNano())
	base := "http://" + tp.addr
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("/healthz while stopping: %v", err)
	}
	var health struct{ Status string }
	json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || health.Status != "stopping" {
		t.Errorf("/healthz while stopping: %d %q, want 503 \"stopping\"", resp.StatusCode, health.Status)
	}
	for _, path := range []string{"/json/version", "/json/list"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("%s while stopping: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "5" {
			t.Errorf("%s while stopping: %d, Retry-After %q; want 503 with a Retry-After of 5 (the drain's end)", path, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	_, resp, err = websocket.DefaultDialer.Dial("ws://"+tp.addr+"/", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Errorf("an upgrade while stopping: %v, status %d; want 503 with a Retry-After", err, status)
	}
}

// TestStopEndsServe checks that a stop with nothing held ends at once:
// Serve returns, and a client's connections are ended.
func TestStopEndsServe(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	p, _, logs := newProxy(fb, limiter.Config{Mode: limiter.Fixed, Interval: 500 * time.Millisecond, Burst: 1})
	p.DrainTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(serveCtx, ln) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay log:\n%s", logs)
		}
	})
	c, _, err := websocket.DefaultDialer.Dial("ws://"+ln.Addr().String()+"/", nil)
	if err != nil {
		t.Fatalf("a client before the stop: %v", err)
	}
	defer c.Close()
	fc := fb.Accept(t)
	stopped := time.Now()
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after the stop")
	}
	// The client here never reads its close: Close waits closeGrace for it.
	if took := time.Since(stopped); took > closeGrace+time.Second {
		t.Errorf("a stop with nothing held took %v, want no drain (it ends when nothing is held), only the close's grace (%v)", took, closeGrace)
	}
	fc.Ended(t)
}
