//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// crowd is what many clients at once saw: how many got in, were refused
// and with what, and how many were connected at once at most.
type crowd struct {
	finished, refused int             // clients that did their loads; that got no websocket
	statuses          map[int]int     // HTTP status of each refusal, counted
	refusedIn         []time.Duration // how long each refusal took
	peak              int             // clients connected at once, at most, counted at the clients
	retryAfter        bool            // every 429 carried Retry-After
	errs              []string
}

// statusList says the refusals' statuses, "429×26".
func (c crowd) statusList() string {
	var out []string
	for _, st := range slices.Sorted(maps.Keys(c.statuses)) {
		out = append(out, fmt.Sprintf("%d×%d", st, c.statuses[st]))
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " ")
}

// crowdOptions say how the clients of rush behave.
type crowdOptions struct {
	// hold, when set, keeps every admitted client connected, before its
	// loads, until it returns true (or 30 s pass).
	hold func(connected, refused int) bool
}

// rush has n clients dial one of endpoints each (in turn) at once, each
// open a page and load it loads times, then leave; a client that cannot
// dial, or whose loads fail, counts as refused or in errs.
func rush(t *testing.T, endpoints []string, n, loads int, s *site, o crowdOptions) crowd {
	t.Helper()
	var (
		mu        sync.Mutex
		c         = crowd{statuses: map[int]int{}, retryAfter: true}
		connected atomic.Int64
		start     = make(chan struct{})
		wg        sync.WaitGroup
	)
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	for i := range n {
		wg.Go(func() {
			<-start
			began := time.Now()
			d := websocket.Dialer{HandshakeTimeout: 3 * time.Minute}
			ws, resp, err := d.Dial(endpoints[i%len(endpoints)], nil)
			if err != nil {
				mu.Lock()
				defer mu.Unlock()
				c.refused++
				c.refusedIn = append(c.refusedIn, time.Since(began))
				if resp != nil {
					c.statuses[resp.StatusCode]++
					if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
						c.retryAfter = false
					}
				} else {
					c.statuses[0]++
				}
				return
			}
			now := int(connected.Add(1))
			mu.Lock()
			c.peak = max(c.peak, now)
			mu.Unlock()
			rc := &rawClient{t: t, c: ws, waiting: map[int64]chan rawMessage{}, done: make(chan struct{})}
			go rc.read()
			defer func() {
				connected.Add(-1)
				rc.close()
			}()
			if o.hold != nil {
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					mu.Lock()
					done := o.hold(int(connected.Load()), c.refused)
					mu.Unlock()
					if done {
						break
					}
				}
			}
			if err := loadPages(rc, s, run, i, loads); err != nil {
				mu.Lock()
				c.errs = append(c.errs, err.Error())
				mu.Unlock()
				return
			}
			mu.Lock()
			c.finished++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return c
}

// loadPages opens a page on rc (a browser context of its own, as
// Lightpanda wants) and loads it loads times.
func loadPages(rc *rawClient, s *site, run string, i, loads int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	call := func(session, method string, params any, v any) error {
		res, err := rc.call(ctx, session, method, params)
		if err == nil && v != nil {
			err = json.Unmarshal(res, v)
		}
		return err
	}
	var bc struct{ BrowserContextID string }
	var tg struct{ TargetID string }
	var at struct{ SessionID string }
	if err := call("", "Target.createBrowserContext", map[string]any{}, &bc); err != nil {
		return err
	}
	if err := call("", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": bc.BrowserContextID}, &tg); err != nil {
		return err
	}
	if err := call("", "Target.attachToTarget", map[string]any{"targetId": tg.TargetID, "flatten": true}, &at); err != nil {
		return err
	}
	for k := range loads {
		if err := call(at.SessionID, "Page.navigate", map[string]any{"url": s.url(siteIP, fmt.Sprintf("/page/%s/%d/%d", run, i, k))}, nil); err != nil {
			return err
		}
	}
	return nil
}

// TestAdmissionLightpanda: 100 clients at once, five loads each, through
// one relay in front of four lightpanda serve processes (16 connections
// each) with --queue 100: every client finishes, none is refused, and
// never more than 64 are connected at once, at the clients and in
// /metrics. The same 100 straight at the four processes lose some. With
// --queue 10, the clients over capacity and queue are answered 429 at
// once, and the ten queued get in as places free.
func TestAdmissionLightpanda(t *testing.T) {
	const n, loads, procs, capacity = 100, 5, 4, 64
	lp := lightpandaBin(t)
	s := newSite(t)
	relayed := func(queue int, o crowdOptions) (crowd, string) {
		l, ready := launch(t, "--http-nav-delay", "0", "--browsers", fmt.Sprint(procs), "--queue", fmt.Sprint(queue),
			"--", lp, "serve", "--host", "127.0.0.1", "--port", "{port}")
		if !ready {
			t.Fatalf("relay not ready:\n%s", l.logs.raw.String())
		}
		base := "http://" + l.listen
		if got := metricAt(t, base, "cdp_throttle_clients_capacity"); got != capacity {
			t.Fatalf("capacity in /metrics: %v, want %d (four Lightpandas of 16)", got, capacity)
		}
		var peakSeen atomic.Int64
		stop := make(chan struct{})
		polled := make(chan struct{})
		go func() { // /metrics while the crowd runs
			defer close(polled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if body, err := httpGet(base + "/metrics"); err == nil {
					var v float64
					for _, line := range strings.Split(string(body), "\n") {
						if _, err := fmt.Sscanf(line, "cdp_throttle_clients_connected %g", &v); err == nil && int64(v) > peakSeen.Load() {
							peakSeen.Store(int64(v))
						}
					}
				}
			}
		}()
		began := time.Now()
		endpoints := []string{"ws://" + l.listen + "/"}
		c := rush(t, endpoints, n, loads, s, o)
		took := time.Since(began)
		close(stop)
		<-polled
		peak := metricAt(t, base, "cdp_throttle_clients_connected_peak")
		waited := metricAt(t, base, "cdp_throttle_client_wait_seconds_count")
		if c.peak > capacity || peak > capacity || peakSeen.Load() > capacity {
			t.Errorf("--queue %d: %d clients connected at once at the clients, %v in /metrics (peak), %d polled; want at most %d",
				queue, c.peak, peak, peakSeen.Load(), capacity)
		}
		l.cmd.Process.Signal(syscall.SIGTERM)
		l.wait()
		return c, fmt.Sprintf("%-32s %9d %8d %7d %11.0f %10d %10s %7.1fs", fmt.Sprintf("relay --browsers 4 --queue %d", queue),
			c.finished, c.refused, c.peak, peak, int(waited), c.statusList(), took.Seconds())
	}

	queued, rowQueued := relayed(100, crowdOptions{})
	if queued.finished != n || queued.refused != 0 || len(queued.errs) > 0 {
		t.Errorf("--queue 100: %d of %d clients finished, %d refused (%v); want all, none refused; errors: %.5q",
			queued.finished, n, queued.refused, queued.statuses, queued.errs)
	}

	// The same crowd straight at four processes: the 17th client of each
	// is answered 503 by Lightpanda.
	var direct []string
	for range procs {
		direct = append(direct, strings.Replace(startLightpanda(t), "http://", "ws://", 1)+"/")
	}
	began := time.Now()
	straight := rush(t, direct, n, loads, s, crowdOptions{})
	rowDirect := fmt.Sprintf("%-32s %9d %8d %7d %11s %10s %10s %7.1fs", "straight at four lightpanda serve",
		straight.finished, straight.refused, straight.peak, "", "", straight.statusList(), time.Since(began).Seconds())
	if straight.refused == 0 {
		t.Errorf("straight at the four processes no client was refused: the test cannot tell admission from none")
	}

	// --queue 10: 64 in, held until the rest have been answered or queued,
	// 10 queued, 26 refused at once.
	small, rowSmall := relayed(10, crowdOptions{hold: func(connected, refused int) bool { return refused >= n-capacity-10 }})
	t.Logf("%d clients at once, %d loads each, on four lightpanda serve (16 connections each)\n"+
		"%-32s %9s %8s %7s %11s %10s %10s %8s\n%s\n%s\n%s", n, loads,
		"", "finished", "refused", "peak", "peak /metrics", "waited", "statuses", "took", rowQueued, rowDirect, rowSmall)
	if small.refused != n-capacity-10 || small.statuses[http.StatusTooManyRequests] != n-capacity-10 || !small.retryAfter {
		t.Errorf("--queue 10: %d refused (%v, Retry-After on each 429: %v), want %d answered 429 with Retry-After",
			small.refused, small.statuses, small.retryAfter, n-capacity-10)
	}
	for _, d := range small.refusedIn {
		if d > 10*time.Second {
			t.Errorf("--queue 10: a refusal took %v, want it at once (not a hang until --queue-timeout)", d)
			break
		}
	}
	if small.finished != capacity+10 {
		t.Errorf("--queue 10: %d clients finished, want %d (the queued ones too); errors: %.5q", small.finished, capacity+10, small.errs)
	}
}
