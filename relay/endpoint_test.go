package relay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// movingBrowser is an Endpoint as the launcher gives one: an address that
// changes when the browser restarts, and a wait while it is restarting.
type movingBrowser struct {
	mu    sync.Mutex
	at    string        // guarded by mu; "" while restarting
	moved chan struct{} // guarded by mu; closed when at is set
	asked int           // guarded by mu
}

func newMovingBrowser(at string) *movingBrowser {
	m := &movingBrowser{moved: make(chan struct{})}
	m.move(at)
	return m
}

// move sets the browser's address; "" means it is restarting.
func (m *movingBrowser) move(at string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.at = at
	if at != "" {
		close(m.moved)
	} else {
		m.moved = make(chan struct{})
	}
}

func (m *movingBrowser) Endpoint(ctx context.Context) (string, error) {
	m.mu.Lock()
	at, moved := m.at, m.moved
	m.asked++
	m.mu.Unlock()
	if at != "" {
		return at, nil
	}
	select {
	case <-moved:
		return m.Endpoint(ctx)
	case <-ctx.Done():
		return "", errors.New("moving browser restarting: " + ctx.Err().Error())
	}
}

func (m *movingBrowser) String() string { return "moving browser" }

// TestBrowserEndpointMoves fronts a browser through an Endpoint: when it
// comes back on another port with another id (a launched browser on port
// 0, restarted), /json/version and new clients follow it, the way an
// Upstream string never could; while it is away, a new client waits for
// it instead of reaching the old address.
func TestBrowserEndpointMoves(t *testing.T) {
	for _, form := range []string{"http", "ws"} {
		t.Run(form, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb1 := fakebrowser.New(t, fakebrowser.Config{})
			fb2 := fakebrowser.New(t, fakebrowser.Config{})
			fb2.Restart("second-process-id")
			at := func(fb *fakebrowser.Browser) string {
				if form == "ws" {
					return fb.WSURL() // as Chromium announces it
				}
				return fb.URL()
			}
			m := newMovingBrowser(at(fb1))
			tp := relayTo(t, fb1, limiter.Config{Mode: limiter.Off}, func(p *Proxy) {
				p.Upstream, p.Browsers = "", []Endpoint{m}
			})
			if _, body := tp.get(t, "/json/version"); !strings.Contains(body, "/devtools/browser/"+fb1.ID()) {
				t.Fatalf("/json/version: got %s, want the first process's id", body)
			}
			tp.dial(t, "/", nil)
			fb1.Accept(t)

			m.move("") // it died; the launcher restarts it
			fb1.Close()
			dialled := make(chan error, 1)
			go func() {
				c, _, err := websocketDial("ws://" + tp.addr + "/")
				if err == nil {
					t.Cleanup(func() { c.Close() })
				}
				dialled <- err
			}()
			time.Sleep(100 * time.Millisecond)
			select {
			case err := <-dialled:
				t.Fatalf("a client connecting while the browser restarts got %v, want it to wait for the browser", err)
			default:
			}
			m.move(at(fb2))
			if err := <-dialled; err != nil {
				t.Fatalf("client after the restart: %v", err)
			}
			fb2.Accept(t)
			if _, body := tp.get(t, "/json/version"); !strings.Contains(body, "/devtools/browser/second-process-id") || !strings.Contains(body, tp.addr) {
				t.Errorf("/json/version after the restart: got %s, want the new process's id at the relay's address", body)
			}
		})
	}
}

// TestStartSaysWhatItWaitsFor: a browser that never answers is waited for
// out loud, every waitNotice, naming the browser and the flag that bounds
// the wait, and the error at the end says the same on one line, with
// the package's prefix once.
func TestStartSaysWhatItWaitsFor(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	old := waitNotice
	waitNotice = 200 * time.Millisecond
	t.Cleanup(func() { waitNotice = old })
	addr := fakebrowser.ClosedAddr(t)
	logs := &fakebrowser.Logs{}
	log := zerolog.New(logs)
	p := &Proxy{Upstream: "http://" + addr, Log: &log, StartTimeout: time.Second}
	err := p.Start(t.Context())
	if err == nil {
		p.Close()
		t.Fatal("Start: no error for a browser that never answers")
	}
	msg := err.Error()
	if strings.Count(msg, "relay:") != 1 || !strings.Contains(msg, "did not answer within 1s (--start-timeout)") ||
		!strings.Contains(msg, addr) || !strings.Contains(msg, "connection refused") || strings.Contains(msg, "\n") {
		t.Errorf("Start: got %q, want one line with relay: once, the browser, the bound and the cause", msg)
	}
	notices := logs.Lines("no answer from the browser yet; --start-timeout bounds the wait")
	if len(notices) < 3 {
		t.Errorf("said %d times that it still waits within 1s at a notice every 200ms, want 3 or more; log:\n%s", len(notices), logs)
	}
	for _, n := range notices {
		if !strings.Contains(n, addr) || !strings.Contains(n, `"start_timeout":"1s"`) || !strings.Contains(n, "connection refused") {
			t.Errorf("notice %s: want the browser, the bound and the last error", n)
		}
	}
}

// TestHealthLogNamesNoElsewhere: when the only browser stops answering,
// the log does not promise that new clients go elsewhere; with two it
// does.
func TestHealthLogNamesNoElsewhere(t *testing.T) {
	old := healthEvery
	healthEvery = 100 * time.Millisecond
	t.Cleanup(func() { healthEvery = old })
	for _, tt := range []struct {
		name     string
		browsers int
		want     string
	}{
		{"one browser", 1, `"message":"browser not answering"`},
		{"two browsers", 2, `"message":"browser not answering: new clients go elsewhere"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) {
				if tt.browsers == 2 {
					p.Upstreams = []string{fakebrowser.New(t, fakebrowser.Config{}).URL()}
				}
			})
			fb.Close()
			fakebrowser.Eventually(t, "a warning that the browser is not answering", func() bool {
				return len(tp.logs.Lines(`"level":"warn"`, "browser not answering")) > 0
			})
			got := tp.logs.Lines(`"level":"warn"`, "browser not answering")[0]
			if !strings.Contains(got, tt.want) {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
