//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/simulate"
)

// hammered is what a host saw from clients navigating to it at once.
type hammered struct {
	at   []time.Time     // when the server saw each navigation, in order
	load []time.Duration // from the server seeing a navigation to its Page.navigate answer
}

// hammer has one client on each of endpoints (ws:// URLs) navigate to
// host back to back, each sending the next Page.navigate as soon as the
// last is answered, all at once, until the server has seen n.
func hammer(t *testing.T, s *site, host string, n int, endpoints []string) hammered {
	t.Helper()
	var clients []pageClient
	for _, ep := range endpoints {
		c := newPageClient(t, ep)
		// A fresh page's first request; the host is idle again after it.
		c.rc.mustCall(c.session, "Page.navigate", map[string]any{"url": s.url(host, "/page?warm=1")})
		clients = append(clients, c)
	}
	time.Sleep(hostForgotten)

	prefix := fmt.Sprintf("/page/hammer-%x/", time.Now().UnixNano())
	var (
		mu      sync.Mutex
		arrived = map[string]time.Time{}
		at      []time.Time
		done    = make(chan struct{})
	)
	s.onHit(func(h hit) {
		if h.Host != host || !strings.HasPrefix(h.Path, prefix) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		arrived[h.Path] = h.At
		if at = append(at, h.At); len(at) == n {
			close(done)
		}
	})
	defer s.onHit(nil)
	var next atomic.Int64
	answered := map[string]time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				path := fmt.Sprintf("%s%d", prefix, next.Add(1))
				if err := c.navigate(ctx, 2*time.Minute, s.url(host, path)); err != nil {
					return // the run is over, or the failure shows as a navigation missing
				}
				mu.Lock()
				answered[path] = time.Now()
				mu.Unlock()
			}
		})
	}
	select {
	case <-done:
	case <-time.After(time.Duration(n)*150*time.Millisecond + 30*time.Second):
		mu.Lock()
		t.Errorf("the server saw %d of %d navigations", len(at), n)
		mu.Unlock()
	}
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var h hammered
	// Hits are recorded as they are served, two at once in either order.
	h.at = slices.SortedFunc(slices.Values(at), func(a, b time.Time) int { return a.Compare(b) })[:min(n, len(at))]
	for path, a := range answered {
		if got, ok := arrived[path]; ok {
			h.load = append(h.load, a.Sub(got))
		}
	}
	return h
}

func medianOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(d))
	return s[len(s)/2]
}

// TestLightpandaManyOneSchedule: four `lightpanda serve` processes that
// one relay launched (--browsers 4, a port of its own each), four clients
// navigating to one host at once, one per process: the host sees one
// schedule, the one simulate computes. Beside it, in the same run, the
// same with no relay and each Lightpanda's own limiter at the same
// setting: the host sees four schedules.
func TestLightpandaManyOneSchedule(t *testing.T) {
	const (
		n        = 400
		procs    = 4
		interval = 100 * time.Millisecond
	)
	lp := lightpandaBin(t)
	s := newSite(t)
	host := siteIP // Lightpanda resolves names itself: no *.test here

	// One relay in front of four Lightpandas it starts.
	l, ready := launch(t, "--http-nav-delay", "100", "--http-nav-burst", "1", "--browsers", "4",
		"--", lp, "serve", "--host", "127.0.0.1", "--port", "{port}")
	if !ready {
		t.Fatalf("relay not ready:\n%s", l.logs.raw.String())
	}
	endpoints := make([]string, procs)
	for i := range endpoints {
		endpoints[i] = "ws://" + l.listen + "/"
	}
	// What late departures moved the schedule by: the relay follows each
	// held document's departure from Lightpanda's answer to the
	// Fetch.continueRequest, and one that left later than usual moves the
	// rest of the schedule (simulate does not model that).
	var pushed time.Duration
	viaRelay := func() hammered {
		h := hammer(t, s, host, n, endpoints)
		pushed = time.Duration(metricAt(t, "http://"+l.listen, "cdp_throttle_schedule_pushed_seconds_total") * float64(time.Second))
		// Each client had a Lightpanda of its own.
		body, _ := httpGet("http://" + l.listen + "/healthz")
		var health struct {
			Upstreams []struct {
				Upstream string
				Clients  int
			}
		}
		json.Unmarshal(body, &health)
		if len(health.Upstreams) != procs {
			t.Errorf("/healthz: %s, want %d browsers", body, procs)
		}
		for _, u := range health.Upstreams {
			if u.Clients != 1 {
				t.Errorf("/healthz: %s, want one client on each browser", body)
				break
			}
		}
		return h
	}()
	l.cmd.Process.Signal(syscall.SIGTERM) // its Lightpandas too: the next run has the CPU
	l.wait()

	// The same four processes' worth with no relay, each Lightpanda
	// spacing its own navigations by the same 100 ms.
	for i := range endpoints {
		endpoints[i] = strings.Replace(startLightpanda(t, "--http-nav-delay", "100", "--http-nav-burst", "1"), "http://", "ws://", 1) + "/"
	}
	direct := hammer(t, s, host, n, endpoints)

	load := medianOf(viaRelay.load)
	sim := simulate.Replay(simulate.Options{Policy: policy.Config{Default: fixed(interval, 1)}, Navigations: n, Load: load, Phases: 1})
	want := sim[n-1].Start - sim[0].Start
	row := func(name string, h hammered, simulated string) string {
		if len(h.at) < 2 {
			return name + ": too few navigations"
		}
		st := statsOf(h.at)
		return fmt.Sprintf("%-52s %4d %9.2f %6.1f %8.1f %8.1f %8.1f %9s", name, len(h.at), st.span.Seconds(),
			float64(len(h.at)-1)/st.span.Seconds(), ms(st.p50), ms(st.p95), ms(slices.Min(st.gaps)), simulated)
	}
	t.Logf("what %s saw: %d navigations from %d clients at once, one per lightpanda serve, each sending the next when the last is answered\n"+
		"%-52s %4s %9s %6s %8s %8s %8s %9s\n%s\n%s\nLightpanda's page load (request at the server to Page.navigate's answer): median %.1fms relayed, %.1fms direct",
		host, n, procs, "", "reqs", "span (s)", "req/s", "gap p50", "gap p95", "gap min", "simulate",
		row("one relay: --http-nav-delay 100 --http-nav-burst 1", viaRelay, fmt.Sprintf("%.2f", want.Seconds())),
		row("no relay: each lightpanda --http-nav-delay 100", direct, ""),
		ms(load), ms(medianOf(direct.load)))

	if len(viaRelay.at) != n {
		t.Fatalf("through the relay the server saw %d navigations, want %d", len(viaRelay.at), n)
	}
	t.Logf("late departures pushed the schedule by %v in all", pushed)
	if span := viaRelay.at[n-1].Sub(viaRelay.at[0]); span < want-500*time.Millisecond || span > want+pushed+500*time.Millisecond {
		t.Errorf("through one relay, %d navigations span %v, want simulate's %v, plus the %v late departures pushed it, ± 0.5s", n, span, want, pushed)
	}
	// No two closer than the rule allows: against the absolute schedule
	// from the first, each held navigation reaches the server no sooner
	// than its slot, less the few milliseconds between a release and the
	// request leaving Lightpanda.
	for k := 1; k < n; k++ {
		if got, slot := viaRelay.at[k].Sub(viaRelay.at[0]), time.Duration(k)*interval; got < slot-slack {
			t.Errorf("navigation %d reached the server %v after the first, want no sooner than its slot %v (less %v)", k+1, got, slot, slack)
			break
		}
	}
	if g := slices.Min(statsOf(viaRelay.at).gaps); g < interval-heldJitter {
		t.Errorf("through one relay two navigations reached the server %v apart, want at least %v less %v", g, interval, heldJitter)
	}
}
