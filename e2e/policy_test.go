//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/simulate"
)

// withPolicy books the relay's navigations with the policy the flags f
// give, as the relay command does; robots.txt is fetched with a client
// that reaches *.test on siteIP, as Chromium does with its resolver rules.
func withPolicy(t testing.TB, f policy.Flags) func(*relay.Proxy) {
	cfg, err := policy.FromFlags(f)
	if err != nil {
		t.Fatal(err)
	}
	return func(p *relay.Proxy) {
		if cfg.Robots != nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, port, _ := net.SplitHostPort(addr)
				if strings.HasSuffix(host, ".test") {
					addr = net.JoinHostPort(siteIP, port)
				}
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}
			cfg.Robots.Client = &http.Client{Transport: tr, Timeout: 10 * time.Second}
			cfg.Log = p.Log
			t.Cleanup(tr.CloseIdleConnections)
		}
		pol := policy.New(cfg, limiter.New(cfg.Default))
		t.Cleanup(pol.Close)
		p.Limiter = pol
	}
}

// gapsOf returns the gaps between the arrivals at.
func gapsOf(at []time.Time) []time.Duration {
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i].Sub(at[i-1]))
	}
	return gaps
}

// TestPolicyRuleFixedAndAdaptive: --rule '*.slow.test=fixed:300ms' spaces
// a.slow.test at 300 ms once its burst of ten is spent, while fast.test
// runs the adaptive rule of the flags.
func TestPolicyRuleFixedAndAdaptive(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Rules: []string{"*.slow.test=fixed:300ms"}}))
	const n = 20
	slowAt := backToBack(t, r, s, "a.slow.test", n)
	slow := gapsOf(slowAt)
	// Adaptive holds the first navigation once the pressure built by a
	// back-to-back crawl needs it: at the 23rd with 20 ms page loads, the
	// 31st with 30 ms, the 49th with 45 ms, the 84th with 60 ms (simulate
	// --load): a CI run's loads took 43 ms on average, and 40 navigations
	// held none. 100 make sure on a busy machine.
	fast := gapsOf(backToBack(t, r, s, "fast.test", 5*n))
	t.Logf("a.slow.test gaps (ms): %v", msList(slow))
	t.Logf("fast.test gaps (ms):   %v", msList(fast))
	// Ten ride the burst; then the schedule is absolute: navigation k goes
	// no earlier than (k−10) × 300 ms after the first was let go (single
	// gaps jitter with the browser, never the schedule), and 20 span 3.0 s.
	// The schedule counts from the first navigation's release, as the
	// relay logged it, not from its arrival: a first request that leaves
	// the browser late would make every later one look early.
	b := bookings(r, "a.slow.test")
	if len(b) < n {
		t.Fatalf("a.slow.test: %d bookings logged, want at least %d", len(b), n)
	}
	origin := b[len(b)-n].release
	for k := 11; k <= n; k++ {
		if got, want := slowAt[k-1].Sub(origin), time.Duration(k-10)*300*time.Millisecond; got < want-5*time.Millisecond {
			t.Errorf("a.slow.test: navigation %d arrived %v after the first was let go, want at least %v", k, got, want)
		}
	}
	if span := slowAt[n-1].Sub(slowAt[0]); !within(span, 3*time.Second, 300*time.Millisecond) {
		t.Errorf("a.slow.test: %d navigations span %v, want 3.0s at 300ms after a burst of ten", n, span)
	}
	// Adaptive: steps of 20 ms up to 100 ms after the burst, nowhere near
	// the rule's 300 ms (a single gap may be a slow page load).
	if m := p50(fast); m > 150*time.Millisecond {
		t.Errorf("fast.test: gaps of %v at the median, want the adaptive rule's steps up to 100 ms", m)
	}
	if held := heldBookings(r, "fast.test"); len(held) == 0 {
		t.Errorf("fast.test: nothing held, want the adaptive rule's spacing after the burst")
	}
	for host, want := range map[string][]string{
		"a.slow.test": {`"level":"debug"`, `"source":"rule 1"`, `"rule":"*.slow.test=fixed:300ms"`, `"mode":"fixed"`},
		"fast.test":   {`"level":"warn"`, `"source":"flag"`, `"mode":"adaptive"`, "use --http-nav-delay 0 to disable"},
	} {
		lines := r.logs.Lines("spacing out navigations to this host", `"host":"`+host+`"`)
		if len(lines) != 1 {
			t.Errorf("%s: %d warnings, want one", host, len(lines))
			continue
		}
		for _, w := range want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("%s: warning %s lacks %s", host, lines[0], w)
			}
		}
	}
}

func msList(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%.0f", ms(d))
	}
	return out
}

// TestPolicySiteBucket: with --bucket site, www.site.test and site.test
// share one schedule: 200 navigations alternating between them span what
// simulate gives for 200 to one host, ± 0.5 s. (.test is not in the public
// suffix list; its default rule makes site.test the registrable domain of
// both, which policy's TestSite checks.)
func TestPolicySiteBucket(t *testing.T) {
	if got := policy.Site("www.site.test"); got != "site.test" {
		t.Fatalf("Site(www.site.test) = %q, want site.test", got)
	}
	s := newSite(t)
	r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Bucket: "site"}))
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	hosts := []string{"www.site.test", "site.test"}
	for _, h := range hosts {
		warm(t, rc, session, s, h)
	}
	time.Sleep(hostForgotten)
	const n = 200
	at, err := driveAlternating(s, hosts, n, 2*time.Minute, func(url string) {
		rc.send(session, "Page.navigate", map[string]any{"url": url})
	})
	if err != nil {
		t.Fatal(err)
	}
	navs := simulate.Replay(simulate.Options{Navigations: n, Load: 4500 * time.Microsecond, Phases: 1})
	want := navs[n-1].Start - navs[0].Start
	st := statsOf(at)
	t.Logf("200 alternating navigations span %.2fs (simulate for one host: %.2fs), gap p50 %.1fms", st.span.Seconds(), want.Seconds(), ms(st.p50))
	if !within(st.span, want, 500*time.Millisecond) {
		t.Errorf("span %v, want simulate's %v ± 0.5s: one schedule for both hosts", st.span, want)
	}
	for _, h := range hosts {
		if held := heldBookings(r, h); len(held) == 0 {
			t.Errorf("%s: nothing held", h)
		}
	}
	if !strings.Contains(r.logs.String(), `"bucket":"site.test"`) {
		t.Errorf("no booking logged in bucket site.test")
	}
}

// driveAlternating is drive for navigations to hosts in turn: each goes
// the moment the server saw the one before.
func driveAlternating(s *site, hosts []string, n int, timeout time.Duration, navigate func(url string)) ([]time.Time, error) {
	hits, err := chain(s, "alt", hosts, n, timeout, navigate)
	if err != nil {
		return nil, err
	}
	at := make([]time.Time, len(hits))
	for i, h := range hits {
		at[i] = h.At
	}
	return at, nil
}

// TestPolicyRobotsCrawlDelay: with --robots crawl-delay, a site whose
// robots.txt says Crawl-delay: 0.5 gets its navigations 500 ms apart from
// the first (no burst), and robots.txt is fetched once. The relay releases
// them 500 ms apart; the server sees each in its slot, less the harness's
// usual slack for a request that leaves its browser late.
func TestPolicyRobotsCrawlDelay(t *testing.T) {
	s := newSite(t)
	s.handle("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "User-agent: *\nCrawl-delay: 0.5\n")
	})
	r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "crawl-delay"}))
	const n = 8
	at := backToBack(t, r, s, "polite.test", n)
	t.Logf("polite.test gaps at the server (ms): %v", msList(gapsOf(at)))
	releases := heldReleases(r, "polite.test")
	t.Logf("polite.test gaps between releases (ms): %v", msList(gapsOf(releases)))
	if len(releases) < n-1 {
		t.Fatalf("the relay held %d navigations, want the %d after the first", len(releases), n-1)
	}
	for i, g := range gapsOf(releases) {
		if g < 495*time.Millisecond {
			t.Errorf("releases %d and %d %v apart, want at least 495ms", i+1, i+2, g)
		}
	}
	hits := s.hitsOf(func(h hit) bool { return h.Host == "polite.test" && strings.HasPrefix(h.Path, "/page/b2b-") })
	checkSlots(t, r, "polite.test", hits, n, 500*time.Millisecond)
	if n := len(s.hitsOf(func(h hit) bool { return h.Path == "/robots.txt" })); n != 1 {
		t.Errorf("robots.txt fetched %d times, want once", n)
	}
}

// TestPolicyRobotsNeverAnswers: a robots.txt that never answers delays a
// site's first navigation by at most the documented bound (2 s), and the
// relay says so once.
func TestPolicyRobotsNeverAnswers(t *testing.T) {
	s := newSite(t)
	stuck := make(chan struct{})
	s.handle("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stuck:
		}
	})
	defer close(stuck)
	r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "crawl-delay"}))
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	warm(t, rc, session, s, "warm.test") // the page's first request is slow, whatever the relay does
	arrived := make(chan time.Time, 1)
	s.onHit(func(h hit) {
		if h.Host == "hang.test" && strings.HasPrefix(h.Path, "/page") {
			arrived <- h.At
		}
	})
	defer s.onHit(nil)
	sent := time.Now()
	rc.send(session, "Page.navigate", map[string]any{"url": s.url("hang.test", "/page?first")})
	var delay time.Duration
	select {
	case at := <-arrived:
		delay = at.Sub(sent)
	case <-time.After(30 * time.Second):
		t.Fatal("the navigation never reached the server")
	}
	t.Logf("first navigation to hang.test reached the server %v after it was sent (bound %v)", delay, policy.DefaultRobotsWait)
	if delay < policy.DefaultRobotsWait-100*time.Millisecond || delay > policy.DefaultRobotsWait+time.Second {
		t.Errorf("delay %v, want the robots.txt bound of %v (and not much more)", delay, policy.DefaultRobotsWait)
	}
	if logged := len(r.logs.Lines("robots.txt did not answer in time", "hang.test")); logged != 1 {
		t.Errorf("logged hang.test's silent robots.txt %d times, want once", logged)
	}
}

// TestPolicyExemptHost: an --exempt-host is never spaced, even under a
// fixed 300 ms spacing with no burst.
func TestPolicyExemptHost(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Delay: "300ms", Burst: "1", ExemptHosts: []string{"*.internal.test"}}))
	at := backToBack(t, r, s, "db.internal.test", 30)
	st := statsOf(at)
	t.Logf("db.internal.test: span %.2fs, gap p50 %.1fms max %.1fms", st.span.Seconds(), ms(st.p50), ms(st.max))
	if held := heldBookings(r, "db.internal.test"); len(held) > 0 {
		t.Errorf("the relay held %d navigations to an exempt host, want none", len(held))
	}
	if st.max >= 300*time.Millisecond {
		t.Errorf("a gap of %v: spaced, want load speed", st.max)
	}
	// The same relay spaces any other host.
	other := gapsOf(backToBack(t, r, s, "other.test", 3))
	if other[0] < 295*time.Millisecond {
		t.Errorf("other.test: gap %v, want 300ms: the exemption is for *.internal.test only", other[0])
	}
}
