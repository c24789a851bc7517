//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// statusOf GETs url and returns the status it answered; an error fails
// the test.
func statusOf(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// backToBack navigates n times to host through the relay, back to back.
func backToBack(t testing.TB, r *relayed, s *site, host string, n int) []time.Time {
	t.Helper()
	rc, session := warmedPage(t, r, s, host)
	at, err := drive(s, host, n, time.Duration(n)*1300*time.Millisecond+10*time.Second, func(url string) {
		rc.send(session, "Page.navigate", map[string]any{"url": url})
	})
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// warm spends the first request of a fresh page to host, which leaves
// the browser later than any after it (a new connection in a new browser
// context). After hostForgotten the limiter has forgotten it, and the run
// that follows starts from an idle host whose first slot the server sees on
// time.
func warm(t testing.TB, rc *rawClient, session string, s *site, host string) {
	t.Helper()
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?warm=1")})
}

// warmedPage opens a page from a new client through r, warms it on host
// and waits until host is idle again; it returns the client and the
// page's session.
func warmedPage(t testing.TB, r *relayed, s *site, host string) (*rawClient, string) {
	t.Helper()
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	warm(t, rc, session, s, host)
	time.Sleep(hostForgotten)
	return rc, session
}

// hostForgotten is how long after one navigation its host is idle again.
const hostForgotten = 1500 * time.Millisecond

// drive issues n navigations to host, each the moment the server sees the
// one before: the seed's "back to back" with the shortest load a real
// browser allows. navigate sends navigation i to url (without waiting for
// it). It returns when each request reached the site (hit.reached), in
// order, or an error after
// timeout; it fails no test, so that it can run on any goroutine.
func drive(s *site, host string, n int, timeout time.Duration, navigate func(url string)) ([]time.Time, error) {
	hits, err := chain(s, "b2b", []string{host}, n, timeout, navigate)
	if err != nil {
		return nil, err
	}
	at := make([]time.Time, len(hits))
	for i, h := range hits {
		at[i] = h.reached()
	}
	return slices.SortedFunc(slices.Values(at), time.Time.Compare), nil
}

// chain issues n navigations to hosts in turn, under a fresh path prefix
// /page/KIND-…, each the moment the server sees the one before (navigate
// sends one without waiting for it). It returns the hits in the order the
// server saw them, or an error after timeout; it fails no test, so that
// it can run on any goroutine.
func chain(s *site, kind string, hosts []string, n int, timeout time.Duration, navigate func(url string)) ([]hit, error) {
	prefix := fmt.Sprintf("/page/%s-%x", kind, time.Now().UnixNano())
	var mu sync.Mutex
	hits := make([]hit, 0, n)
	next := make(chan int, n)
	s.onHit(func(h hit) {
		if !slices.Contains(hosts, h.Host) || !strings.HasPrefix(h.Path, prefix) {
			return
		}
		mu.Lock()
		hits = append(hits, h)
		k := len(hits)
		mu.Unlock()
		if k < n {
			next <- k
		} else if k == n {
			close(next)
		}
	})
	defer s.onHit(nil)
	url := func(i int) string { return s.url(hosts[i%len(hosts)], fmt.Sprintf("%s/%d", prefix, i)) }
	navigate(url(0))
	deadline := time.After(timeout)
	for {
		select {
		case i, ok := <-next:
			if !ok {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(hits), nil
			}
			navigate(url(i))
		case <-deadline:
			mu.Lock()
			defer mu.Unlock()
			return nil, fmt.Errorf("%s: only %d of %d navigations reached the server", strings.Join(hosts, ", "), len(hits), n)
		}
	}
}

type curveStats struct {
	span          time.Duration
	p50, p95, max time.Duration
	gaps          []time.Duration
}

func statsOf(at []time.Time) curveStats {
	var s curveStats
	for i := 1; i < len(at); i++ {
		s.gaps = append(s.gaps, at[i].Sub(at[i-1]))
	}
	sorted := slices.Sorted(slices.Values(s.gaps))
	pct := func(p float64) time.Duration {
		return sorted[min(len(sorted)-1, max(0, int(math.Ceil(p*float64(len(sorted))))-1))]
	}
	s.span = at[len(at)-1].Sub(at[0])
	s.p50, s.p95, s.max = pct(0.5), pct(0.95), sorted[len(sorted)-1]
	return s
}

// firstAt returns the navigation (1-based) at which the gap first reaches level.
func firstAt(gaps []time.Duration, level time.Duration) int {
	for i, g := range gaps {
		if g >= level-level/10 {
			return i + 2
		}
	}
	return -1
}

func within(got, want, tol time.Duration) bool { return got >= want-tol && got <= want+tol }

// TestSeedCurveAdaptive reproduces the seed's measurement through real
// Chromium: 400 navigations back to back to one host span 36.06 s with a
// 100 ms plateau, and after 8 s idle a second phase repeats the first.
func TestSeedCurveAdaptive(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, limiter.Config{})
	const host = "curve.test"
	var phases [][]time.Time
	for phase := 1; phase <= 2; phase++ {
		if phase == 2 {
			time.Sleep(8 * time.Second)
		}
		at := backToBack(t, r, s, host, 400)
		st := statsOf(at)
		t.Logf("phase %d: span %.2fs, gap p50 %.1fms p95 %.1fms max %.1fms; first 20ms gap at %d, 40 at %d, 60 at %d, 80 at %d, 100 at %d",
			phase, st.span.Seconds(), ms(st.p50), ms(st.p95), ms(st.max),
			firstAt(st.gaps, 20*time.Millisecond), firstAt(st.gaps, 40*time.Millisecond), firstAt(st.gaps, 60*time.Millisecond),
			firstAt(st.gaps, 80*time.Millisecond), firstAt(st.gaps, 100*time.Millisecond))
		if !within(st.span, 36060*time.Millisecond, 600*time.Millisecond) {
			t.Errorf("phase %d: 400 navigations span %v, want 36.06s ± 0.6s", phase, st.span)
		}
		if !within(st.p50, 100*time.Millisecond, 2*time.Millisecond) {
			t.Errorf("phase %d: gap p50 %v, want 100ms ± 2ms", phase, st.p50)
		}
		// The burst: the relay held none of the first ten, whatever the
		// machine's speed.
		for _, b := range heldBookings(r, host) {
			if b.at.After(at[0].Add(-time.Second)) && b.at.Before(at[9]) {
				t.Errorf("phase %d: a navigation booked %v after the first was held, before the tenth arrived: want the first ten at load speed (the burst)", phase, b.at.Sub(at[0]))
			}
		}
		phases = append(phases, at)
	}
	warnings := strings.Count(r.logs.String(), `"level":"warn","host":"curve.test"`)
	if warnings != 1 {
		t.Errorf("warnings naming curve.test: got %d, want exactly 1\n%s", warnings, r.logs.String())
	}
}

// burstLate is how much later than its slot a navigation the burst let go
// may reach the site with the schedule after it unchanged: the relay
// moves the schedule for a late departure only past the slack the burst
// gave it (pace), so the first of a burst that left late, and the first
// after the burst on time, may come closer together than the rule by the
// difference of their lags. Seen: 5.6 ms in a CI run, 9.8 ms with two
// more processes keeping both CPUs busy.
const burstLate = 15 * time.Millisecond

// TestFixedSpacing: fixed 100 ms with the default burst spans 19.0 s for 200.
func TestFixedSpacing(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, fixed(100*time.Millisecond, 10))
	at := backToBack(t, r, s, "fixed.test", 200)
	st := statsOf(at)
	t.Logf("span %.2fs, gap p50 %.1fms p95 %.1fms max %.1fms", st.span.Seconds(), ms(st.p50), ms(st.p95), ms(st.max))
	if !within(st.span, 19*time.Second, 300*time.Millisecond) {
		t.Errorf("200 navigations at fixed 100ms span %v, want 19.0s", st.span)
	}
	// The schedule is absolute: navigation k goes no earlier than
	// (k-10)×100 ms after the first (ten ride the burst). Single gaps jitter
	// around 100 ms with the timers, never the schedule. Measured from the
	// first one's arrival, which may be later than its slot by more than
	// the browser's usual lag with nothing moved (burstLate): on a
	// saturated machine the rest came up to 9.8 ms closer to it than the
	// schedule.
	closest := time.Hour
	for k := 11; k <= len(at); k++ {
		got, want := at[k-1].Sub(at[0]), time.Duration(k-10)*100*time.Millisecond
		closest = min(closest, got-want)
		if got < want-burstLate {
			t.Errorf("navigation %d arrived %v after the first, want at least %v", k, got, want)
		}
	}
	t.Logf("closest to the schedule: %+.1f ms", ms(closest))
}

// TestOffAndExemptNeverSpaced: with the limiter off, or to an exempt host,
// navigations go at load speed.
func TestOffAndExemptNeverSpaced(t *testing.T) {
	check := func(t *testing.T, r *relayed, s *site, host string) {
		at := backToBack(t, r, s, host, 60)
		st := statsOf(at)
		t.Logf("%s: span %.2fs, gap p50 %.1fms max %.1fms", host, st.span.Seconds(), ms(st.p50), ms(st.max))
		if held := heldBookings(r, host); len(held) > 0 {
			t.Errorf("%s: the relay held %d navigations, want none", host, len(held))
		}
		// Spaced 300 ms apart they would span 17.7 s; at load speed, a few.
		if st.span > 59*300*time.Millisecond/3 {
			t.Errorf("%s: 60 navigations span %v: spaced out, want load speed", host, st.span)
		}
	}
	t.Run("off", func(t *testing.T) {
		s := newSite(t)
		// Off: nothing is booked, so spaced navigations would show in the
		// span only; use the same 300 ms yardstick.
		check(t, startRelay(t, limiter.Config{Mode: limiter.Off}), s, "off.test")
	})
	t.Run("exempt", func(t *testing.T) {
		ex := newSiteAt(t, "127.0.0.1")
		check(t, startRelay(t, fixed(300*time.Millisecond, 1)), ex, "127.0.0.1")
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
