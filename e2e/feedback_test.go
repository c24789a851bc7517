//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// The feedback tests run the adaptive limiter with no burst, so that what
// an answer does to a host's schedule shows in single navigations.
var adaptive1 = limiter.Config{Mode: limiter.Adaptive, Burst: 1}

// togetherTo sends Page.navigate to url(i) on every session at once and
// waits until the server has seen each; it returns their arrivals in order.
func togetherTo(t *testing.T, rc *rawClient, s *site, sessions []string, host string, url func(i int) string) []hit {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []hit
		all  = make(chan struct{})
	)
	marker := fmt.Sprintf("together=%x", time.Now().UnixNano())
	s.onHit(func(h hit) {
		if h.Host != host || !strings.Contains(h.Query, marker) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if seen = append(seen, h); len(seen) == len(sessions) {
			close(all)
		}
	})
	defer s.onHit(nil)
	for i, session := range sessions {
		rc.send(session, "Page.navigate", map[string]any{"url": url(i) + "&" + marker})
	}
	select {
	case <-all:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: not every navigation reached the server", host)
	}
	mu.Lock()
	defer mu.Unlock()
	return append([]hit(nil), seen...)
}

// TestFeedback503 shows a 503 spacing a host out at once: the navigations
// that follow it are about 120 ms apart (pressure over 50: 20 ms × (1 +
// 5)), where a host that answered 200 lets them go 20 ms apart.
func TestFeedback503(t *testing.T) {
	const together = 5
	s := newSite(t)
	r := startRelay(t, adaptive1)
	rc := dialRaw(t, browserWSVia(t, r))
	tabs := newTabs(t, rc, together)
	run := runID()
	// after has host answer code, then asks for five navigations at once,
	// and returns the bookings the relay held among them and how long the
	// three gaps between the second and the fifth to reach the server took.
	after := func(host string, code int) ([]booking, time.Duration) {
		t.Helper()
		warmTabs(rc, s, tabs, host, run)
		// Page.navigate replies once the answer is in: the relay has seen
		// it at the Response stage, before the browser went on.
		rc.mustCall(tabs[0], "Page.navigate", map[string]any{"url": s.url(host, fmt.Sprintf("/status?code=%d&run=%s", code, run))})
		answered := time.Now()
		// Five at once: the first goes at once, the others wait for the
		// slots the spacing sets. They are answered 204, so no page
		// loads and the browser stays free to send each held one on when
		// it is released. The first, not held, may reach the server much
		// later than it went; the gaps are read from the second on.
		hits := togetherTo(t, rc, s, tabs, host, func(i int) string {
			return s.url(host, fmt.Sprintf("/status?code=204&run=%s&i=%d", run, i))
		})
		t.Logf("%s after a %d:%s", host, code, describe(hits))
		return heldAfter(r, host, answered), hits[together-1].At.Sub(hits[1].At)
	}
	const n = together - 2

	held, busy := after("busy.test", 503)
	if len(held) == 0 {
		t.Fatalf("after a 503 the relay held none of five navigations asked for at once")
	}
	// The relay's side: the 503 counted at once. Each booking after it
	// spaced the host by 120 ms (pressure 50 to 59); 100 or 140 when the
	// pressure has drained a little or grown past 60 by then.
	least := held[0].spacing
	for _, b := range held {
		least = min(least, b.spacing)
		if b.spacing < 100*time.Millisecond || b.spacing > 140*time.Millisecond {
			t.Errorf("after a 503, a navigation spaced the host by %v (pressure %d), want about 120ms (pressure over 50)", b.spacing, b.pressure)
		}
	}
	// The server's side, which adds how long each took from its release
	// to the server: a few milliseconds, ~50 when the browser is busy,
	// now and then 100 on a machine running others' work as well.
	if want := n * least; busy < want-2*heldJitter || busy > n*140*time.Millisecond+150*time.Millisecond {
		t.Errorf("after a 503, %d gaps took %v, want %d × %v (pressure over 50)", n, busy, n, least)
	}

	pushedBefore := metricAt(t, r.url, "cdp_throttle_schedule_pushed_seconds_total")
	held, calm := after("calm.test", 200)
	// A navigation that left the busy browser late moved the ones after
	// it by as much (the site sees the spacing): that is the relay's to
	// add, not a pressure.
	pushed := time.Duration((metricAt(t, r.url, "cdp_throttle_schedule_pushed_seconds_total") - pushedBefore) * float64(time.Second))
	for _, b := range held {
		if b.spacing != 20*time.Millisecond {
			t.Errorf("after a 200, a navigation spaced the host by %v (pressure %d), want 20ms (pressure under 10)", b.spacing, b.pressure)
		}
	}
	// Spaced by 20 ms, this is mostly how closely together the browser
	// started them.
	if calm >= n*20*time.Millisecond+100*time.Millisecond+pushed {
		t.Errorf("after a 200, %d gaps took %v, want about %d × 20ms (pressure under 10), plus the %v late departures pushed", n, calm, n, pushed)
	}
}

// TestFeedbackRetryAfter: a 429 with Retry-After: 3 keeps the host's next
// navigation back until 3 s after the answer, though it was asked for at once.
func TestFeedbackRetryAfter(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, adaptive1)
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	const host = "retry.test"
	run := runID()
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/status?code=429&ra=3&run="+run)})
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?run="+run)})
	hits := navigations(s, host)
	if len(hits) != 2 {
		t.Fatalf("the server saw %d navigations, want 2:%s", len(hits), describe(hits))
	}
	// The 429 was answered after the server saw its request, so this is
	// the least the wait can be.
	d := hits[1].At.Sub(hits[0].At)
	t.Logf("the navigation after the 429 arrived %v after it", d)
	// Not much more either: Retry-After sets the slot, the spacing does
	// not add to it. (A second, for a browser slow to send it on.)
	if d < 3*time.Second || d > 4*time.Second {
		t.Errorf("the navigation after a 429 with Retry-After: 3 arrived %v after it, want 3s and a little", d)
	}
}

// pressured is how many 503s each host of TestHostsIndependent answers,
// all at once from as many tabs, before its run: 150 units of pressure
// space its navigations 320 ms apart at first and 220 ms at the end. Five
// hosts at once then ask the browser for no more than 23 navigations a
// second, within what it does on two cores with five busy pages (30-40 a
// second, measured with the limiter off). Back to back from zero, five
// hosts would ask for 150 a second, and the browser, not the limiter,
// would set the pace: 30 navigations then span 5-8 s on every host, relay
// or no relay.
const pressured = 3

// simulatedSpan is what `cdp-throttle simulate` computes, on the real
// limiter with a simulated clock, for the run of TestHostsIndependent:
// `pressured` navigations asked for at once (at 0) and answered 503, the
// first of n navigations asked for at ask1 and seen by the server at
// arrive1, and each of the others asked for load after the one before
// went. It returns the span from the second to the last, which are held:
// the first, asked for long after its slot, reaches the server whenever
// the browser gets to it (2-160 ms), and the second is asked for then.
func simulatedSpan(cfg limiter.Config, n int, ask1, arrive1, load time.Duration) time.Duration {
	l := limiter.New(cfg)
	t0 := time.Now()
	var starts []time.Time
	for range pressured {
		starts = append(starts, l.Reserve("example.com", t0).Start)
	}
	for _, start := range starts {
		l.Observe("example.com", limiter.Outcome{Status: 503}, start.Add(load))
	}
	l.Reserve("example.com", t0.Add(ask1))
	now := t0.Add(arrive1 + load)
	var second, start time.Time
	for i := 2; i <= n; i++ {
		start = l.Reserve("example.com", now).Start
		if i == 2 {
			second = start
		}
		now = start.Add(load)
	}
	return start.Sub(second)
}

// warmTabs has each of tabs load a page of host first, so that the
// navigations measured next are same-site ones, which the browser starts
// quickly.
func warmTabs(rc *rawClient, s *site, tabs []string, host, run string) {
	for k, tab := range tabs {
		rc.mustCall(tab, "Page.navigate", map[string]any{"url": s.url(host, fmt.Sprintf("/page?warm=1&run=%s&k=%d", run, k))})
	}
}

// newTabs opens n pages as tabs of one window in a fresh browser context,
// and returns their sessions. (A window of its own per page would start
// the browser's UI renderers for each.)
func newTabs(t *testing.T, rc *rawClient, n int) []string {
	t.Helper()
	bc := rc.newContext()
	sessions := make([]string, n)
	for i := range sessions {
		sessions[i] = rc.openTarget(map[string]any{"url": "about:blank", "browserContextId": bc, "newWindow": i == 0})
	}
	return sessions
}

// TestHostsIndependent: five pages, each driving a host of its own with 30
// navigations back to back, after that host answered three 503s, go as the
// limiter's arithmetic says one host alone goes: neither a host's holds nor
// its answers slow another host down.
func TestHostsIndependent(t *testing.T) {
	const n = 30
	r := startRelay(t, adaptive1)
	hosts := []string{"a.test", "b.test", "c.test", "d.test", "e.test"}
	rc := dialRaw(t, browserWSVia(t, r))
	tabs := newTabs(t, rc, len(hosts)*pressured)
	sites := make([]*site, len(hosts))
	for i := range sites {
		sites[i] = newSite(t) // one each: a site has one onHit
	}

	var wg sync.WaitGroup
	spans, wants := make([]time.Duration, len(hosts)), make([]time.Duration, len(hosts))
	errs := make([]error, len(hosts))
	for i, host := range hosts {
		mine := tabs[i*pressured : (i+1)*pressured]
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			t0 := time.Now()
			replies := make([]<-chan rawMessage, len(mine))
			for k, tab := range mine {
				_, replies[k] = rc.send(tab, "Page.navigate", map[string]any{
					"url": sites[i].url(host, fmt.Sprintf("/status?code=503&k=%d&t=%x", k, t0.UnixNano())),
				})
			}
			for _, reply := range replies {
				select {
				case <-reply:
				case <-ctx.Done():
					errs[i] = fmt.Errorf("%s: no answer to the 503s: %w", host, ctx.Err())
					return
				}
			}
			ask1 := time.Since(t0)
			at, err := drive(sites[i], host, n, 30*time.Second, func(url string) {
				rc.send(mine[0], "Page.navigate", map[string]any{"url": url})
			})
			if err != nil {
				errs[i] = err
				return
			}
			spans[i] = at[n-1].Sub(at[1])
			// The seed's "back to back": each asked for a few milliseconds
			// after the one before went. Within the limiter's spacing the
			// load barely matters (20 ms more shortens the run by 40 ms).
			wants[i] = simulatedSpan(adaptive1, n, ask1, at[0].Sub(t0), 10*time.Millisecond)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, host := range hosts {
		t.Logf("%s, with four other hosts at once: navigations 2 to %d after %d 503s span %.0fms, simulated %.0fms",
			host, n, pressured, ms(spans[i]), ms(wants[i]))
		// Within 10%: a client or browser slower than the simulation's
		// (a neighbour's burst of CPU) asks later, which drains the
		// pressure sooner and shortens the run a little, or misses a slot
		// and lengthens it. Navigations let go at once would take a
		// fraction of the time; a schedule shared between hosts or a
		// relay stalled by another host's holds several times as long.
		if lo, hi := wants[i]-wants[i]/10, wants[i]+wants[i]/10; spans[i] < lo || spans[i] > hi {
			t.Errorf("%s: navigations 2 to %d with four other hosts at once span %v, want %v to %v (the limiter's arithmetic for one host alone: %v)",
				host, n, spans[i], lo, hi, wants[i])
		}
	}
}
