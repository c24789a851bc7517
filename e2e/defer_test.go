//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/store"
)

// Hosts that push back (issue 40): a host whose documents keep failing is
// paused by its breaker (--host-errors), and a navigation that would wait
// longer than --max-wait is not held at all; either way the relay answers
// it at once with a 429 of its own and it never reaches the site. Through
// real Chromium and real Lightpanda with Puppeteer (js/pptr-defer.mjs),
// the site's kernel stamping arrivals.

// deferredFast is how soon the relay answers the gotos it defers, their
// median: the figure, from when the client asked for one (its
// Date.now()) to the relay's log line "navigation deferred" (at_ns),
// which it sends its 429 right after. Each one must be answered within
// deferredReturn: what lies between the client's ask and the relay's
// answer is mostly the browser's, starting the navigation, and under the
// whole suite one of Chromium's took 529.8 ms in a clean-clone run (the
// others of its relay 28.4 ms, median). The goto itself, in the client,
// takes longer: the browser loads the 429 as a page, which on this 2-core
// machine took Chromium 40 to 85 ms alone, 108 ms beside a Lightpanda
// test and up to 361 ms with two relays' pages at once; Lightpanda 9 to
// 28 ms (BenchmarkDeferredGoto measures it).
const deferredFast = 100 * time.Millisecond

// deferredReturn bounds the goto of a deferred navigation in the client:
// it was not held (its slot was seconds away).
const deferredReturn = time.Second

// deferBrowser is a browser these tests go through: it names the relay's
// upstream, a site the browser reaches, and the host it reaches it at.
type deferBrowser struct {
	name string
	lp   bool
	// navigate: the relay holds the clients' navigation commands in their
	// stream (--intercept navigate), and answers a deferred Page.navigate
	// with an errorText, where it answers the others' documents with its
	// 429.
	navigate bool
	open     func(t *testing.T) (upstream string, s *site, host string)
}

// holding is the relay option of b's way of holding.
func (b deferBrowser) holding() func(*relay.Proxy) {
	return func(p *relay.Proxy) {
		if b.navigate {
			p.Intercept = hold.InterceptNavigate
		}
	}
}

// seen is how b's clients see a navigation the relay deferred.
func (b deferBrowser) seen() seenDeferred {
	if b.navigate {
		return failedErrorText
	}
	return answered429
}

// deferBrowsers are Chromium (the fetch way) and Lightpanda (the session
// way); deferNavigate is Chromium with --intercept navigate, on a
// Chromium of its own, so that it leaves the fetch way's test the shared
// one as it had it: side by side on the shared one, at a load average of
// 5 to 6 on this 2-core machine, the relay answered a deferred goto of
// the fetch way 117.4 and 185.7 ms after it was asked for, in two runs
// of six (at most 24.6 ms in four runs without the navigate way, at the
// same load; at a load of 3 to 4, five runs side by side passed, as did
// five on a Chromium of its own).
var (
	deferBrowsers = []deferBrowser{
		{"chromium", false, false, func(t *testing.T) (string, *site, string) { return browser.http, newSite(t), "defer.test" }},
		{"lightpanda", true, false, func(t *testing.T) (string, *site, string) { return startLightpanda(t), newSiteAt(t, lpHost), lpHost }},
	}
	deferNavigate = deferBrowser{"chromium-navigate", false, true, func(t *testing.T) (string, *site, string) {
		return ownChromium(t), newSite(t), "defer-navigate.test"
	}}
)

// The deferring tests run in a Chromium of their own (ownChromium). The
// long tests share theirs (E2E_LONG), and under their full-page
// screenshots it took about 4 s to pause each of the breaker tests'
// documents, in a run beside the whole suite (their relay answered the
// pause at once): a deferred goto then took as long, where it takes tens
// of milliseconds in a Chromium of its own.

// deferGoto is one goto of js/pptr-defer.mjs.
type deferGoto struct {
	I, Relay   int
	Start      int64   // ms since the epoch, when it was asked for
	Took       float64 // ms until goto returned
	Status     int
	RetryAfter string
	Throttle   string // X-Cdp-Throttle
	Error      string
}

func (g deferGoto) at() time.Time { return time.UnixMilli(g.Start) }

func (g deferGoto) took() time.Duration { return time.Duration(g.Took * float64(time.Millisecond)) }

// retryEnd is when the goto's Retry-After (or its error's "retry after
// N s") says to come back.
func (g deferGoto) retryEnd(t *testing.T) time.Time {
	t.Helper()
	after := g.RetryAfter
	if m := deferredErrorText.FindStringSubmatch(g.Error); m != nil {
		after = m[2]
	}
	ra, err := strconv.Atoi(after)
	if err != nil {
		t.Errorf("goto %d: Retry-After %q, want whole seconds", g.I, after)
	}
	return g.at().Add(time.Duration(ra) * time.Second)
}

func (g deferGoto) String() string {
	s := fmt.Sprintf("goto %d (relay %d) %s: %.1f ms, ", g.I, g.Relay, g.at().Format("15:04:05.000"), g.Took)
	if g.Error != "" {
		return s + g.Error
	}
	return s + fmt.Sprintf("%d Retry-After %q X-Cdp-Throttle %q", g.Status, g.RetryAfter, g.Throttle)
}

// runDefer runs js/pptr-defer.mjs through relays to base with env, and
// returns its gotos.
func runDefer(t *testing.T, timeout time.Duration, lp bool, relays []*relayed, base string, env ...string) []deferGoto {
	t.Helper()
	var urls []string
	for _, r := range relays {
		urls = append(urls, r.url)
	}
	env = append(env, "RELAYS="+strings.Join(urls, ","), "BASE="+base)
	if lp {
		env = append(env, "LP=1")
	}
	out := runNode(t, timeout, "pptr-defer.mjs", env...)
	var gotos []deferGoto
	if err := json.Unmarshal(out, &gotos); err != nil {
		t.Fatalf("pptr-defer.mjs printed %s: %v", out, err)
	}
	return gotos
}

// flakySite serves /flaky on s: 503 to its first fails requests, the page
// after them; the request numbered slowNth (from 1; 0 none) is answered
// slowBy late.
func flakySite(s *site, fails, slowNth int, slowBy time.Duration) {
	var n atomic.Int64
	s.handle("/flaky", func(w http.ResponseWriter, r *http.Request) {
		k := int(n.Add(1))
		if k == slowNth {
			time.Sleep(slowBy)
		}
		w.Header().Set("Content-Type", "text/html")
		if k <= fails {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "<!doctype html><title>503</title>down")
			return
		}
		fmt.Fprintf(w, "<!doctype html><title>%s</title>up", r.URL.RawQuery)
	})
}

// reachedBy returns the documents of run that reached s on host, in the
// order they arrived (the site's kernel's times in At), and the one of
// each goto by its number (i in the query; 0 for a document without one,
// FIRST's). A goto that reached the site twice fails the test.
func reachedBy(t *testing.T, s *site, host, run string) ([]hit, map[int]hit) {
	t.Helper()
	docs := byArrival(t, host, s.hitsOf(func(h hit) bool {
		return h.Host == host && (isDocumentPath(h.Path) || h.Path == "/flaky") && strings.Contains(h.Query, "run="+run)
	}))
	by := map[int]hit{}
	for _, h := range docs {
		q, _ := url.ParseQuery(h.Query)
		i, _ := strconv.Atoi(q.Get("i"))
		if _, twice := by[i]; twice {
			t.Errorf("goto %d reached the site twice", i)
		}
		by[i] = h
	}
	return docs, by
}

// describeDocs lists docs with their arrival after the first, for logs.
func describeDocs(docs []hit) string {
	if len(docs) == 0 {
		return " none"
	}
	var b strings.Builder
	for _, h := range docs {
		fmt.Fprintf(&b, "\n  +%8.1f ms  %s?%s", ms(h.At.Sub(docs[0].At)), h.Path, h.Query)
	}
	return b.String()
}

// seenDeferred reports whether a client saw g as the relay's answer to a
// navigation it deferred for reason, and what it wants when it did not.
type seenDeferred func(g deferGoto, reason string) (ok bool, want string)

// answered429: the goto returned the relay's 429 (the fetch and the
// session ways: Fetch.fulfillRequest).
func answered429(g deferGoto, reason string) (bool, string) {
	return g.Error == "" && g.Status == relayDeferredStatus && g.Throttle == "deferred; reason="+reason && g.RetryAfter != "",
		"the relay's 429 with X-Cdp-Throttle: deferred; reason=" + reason + " and a Retry-After"
}

// deferredErrorText is refusal.Reason's ErrorText of a deferred navigation,
// as a client's error carries it: its reason and its retry after.
var deferredErrorText = regexp.MustCompile(`net::ERR_HTTP_RESPONSE_CODE_FAILURE \(cdp-throttle: 429 deferred, reason=([a-z-]+), retry after (\d+) s\)`)

// failedErrorText: the goto failed with the relay's errorText (the
// navigate way: Page.navigate answered with it).
func failedErrorText(g deferGoto, reason string) (bool, string) {
	m := deferredErrorText.FindStringSubmatch(g.Error)
	return m != nil && m[1] == reason && g.Status == 0,
		"an error carrying net::ERR_HTTP_RESPONSE_CODE_FAILURE (cdp-throttle: 429 deferred, reason=" + reason + ", retry after N s)"
}

// checkDeferred checks that the gotos deferred through r, in the order
// they were asked for, were answered at once by the relay, with its 429
// (or its errorText, as seen says) and reason: each paired with r's log
// line of its deferral, in order. It returns how soon the relay answered
// them and how long the gotos took, for the log.
func checkDeferred(t *testing.T, r *relayed, host string, gotos []deferGoto, reason string, seen seenDeferred) string {
	t.Helper()
	var lines []time.Time
	for _, line := range strings.Split(r.logs.String(), "\n") {
		var l struct {
			Message, Host, Reason string
			AtNs                  int64 `json:"at_ns"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "navigation deferred" && l.Host == host {
			lines = append(lines, time.Unix(0, l.AtNs))
			if l.Reason != reason {
				t.Errorf("the relay deferred a navigation for %q, want %q", l.Reason, reason)
			}
		}
	}
	if len(lines) != len(gotos) {
		t.Errorf("the relay logged %d navigations deferred, the client had %d gotos answered without reaching the site", len(lines), len(gotos))
		lines = nil
	}
	var answered, took []time.Duration
	for k, g := range gotos {
		if ok, want := seen(g, reason); !ok {
			t.Errorf("%v: never reached the site, want %s", g, want)
		}
		if g.took() >= deferredReturn {
			t.Errorf("%v: a deferred goto took %.1f ms, want under %v: it was held", g, g.Took, deferredReturn)
		}
		took = append(took, g.took())
		if lines == nil {
			continue
		}
		a := lines[k].Sub(g.at())
		answered = append(answered, a)
		if a >= deferredReturn {
			t.Errorf("%v: the relay answered it %.1f ms after it was asked for, want under %v: it was held", g, ms(a), deferredReturn)
		}
	}
	if len(answered) > 0 {
		if m := slices.Sorted(slices.Values(answered))[len(answered)/2]; m >= deferredFast {
			t.Errorf("the relay answered the deferred gotos %.1f ms after they were asked for (median), want under %v", ms(m), deferredFast)
		}
	}
	return fmt.Sprintf("%d; the relay answered them %s after the goto, which took %s", len(gotos), medianMost(answered), medianMost(took))
}

// medianMost writes the median and the most of ds.
func medianMost(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Sorted(slices.Values(ds))
	return fmt.Sprintf("%.1f ms (median, most %.1f ms)", ms(ds[len(ds)/2]), ms(ds[len(ds)-1]))
}

// relayDeferredStatus is refusal.Status, as the client sees it.
const relayDeferredStatus = 429

// deferMetrics checks r's /metrics: deferred navigations as many as want,
// none unheld; it returns the deferred count.
func deferMetrics(t *testing.T, r *relayed, want int) int {
	t.Helper()
	deferred := int(metricAt(t, r.url, `cdp_throttle_navigations_total{outcome="deferred"}`))
	unheld := metricAt(t, r.url, `cdp_throttle_navigations_total{outcome="unheld"}`)
	if want >= 0 && deferred != want {
		t.Errorf("/metrics: %d navigations deferred, want %d (the gotos the relay answered)", deferred, want)
	}
	if unheld != 0 {
		t.Errorf(`/metrics: outcome="unheld" %v, want 0`, unheld)
	}
	return deferred
}

// breakerCounts reads what the breakers of r's policy counted.
func breakerCounts(r *relayed) breaker.Counts {
	if p, ok := r.p.Limiter.(*policy.Policy); ok && p.Breakers() != nil {
		return p.Breakers().Counts()
	}
	return breaker.Counts{}
}

// TestBreakerPausesHost: with --host-errors 5/1m, a site that answers
// 503 sees five documents, then none for 30 s (36 at most, the jitter),
// then one probe, which fails: none for 60 s (72 at most); the site is
// healthy by then, so the second probe closes the breaker and the
// client's navigations reach it again. Meanwhile each goto, one every
// 3 s, returns at once with the relay's 429 and a Retry-After that says
// when the probe went, within a second and the client's interval.
// Chromium and Lightpanda side by side: about 2.5 min (E2E_LONG).
func TestBreakerPausesHost(t *testing.T) {
	t.Parallel()
	const interval = 3 * time.Second
	for _, b := range deferBrowsers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			upstream, s, host := b.open(t)
			if !b.lp {
				upstream = ownChromium(t)
			}
			flakySite(s, 6, 0, 0) // five failures, then the first probe
			// A fixed spacing: a 503 moves nothing but the breaker.
			r := startRelayTo(t, upstream, limiter.Config{}, withPolicy(t, policy.Flags{Delay: "1s", Burst: "1", HostErrors: "5/1m"}))
			run := runID()
			gotos := runDefer(t, 4*time.Minute, b.lp, []*relayed{r}, s.url(host, ""),
				"PATH_QUERY=/flaky?run="+run, fmt.Sprint("INTERVAL=", interval.Milliseconds()), "DURATION=200000", "OKS=3")
			docs, by := reachedBy(t, s, host, run)
			t.Logf("the site saw:%s", describeDocs(docs))
			if len(docs) != 9 {
				for _, g := range gotos {
					t.Log(g)
				}
				t.Fatalf("the site saw %d documents, want 9: five failures, a probe that fails, one that closes the breaker, two more", len(docs))
			}
			var deferred []deferGoto
			for _, g := range gotos {
				h, went := by[g.I]
				switch {
				case g.Error != "":
					t.Errorf("%v", g)
				case went && g.Throttle != "":
					t.Errorf("%v: reached the site, yet answered as deferred", g)
				case went && (slices.Index(docs, h) < 6) != (g.Status == 503):
					t.Errorf("%v: document %d at the site, want 503 for the first six, 200 after", g, slices.Index(docs, h)+1)
				case !went:
					deferred = append(deferred, g)
					// The probe is the first document after it: it went
					// at the first goto past the breaker's end.
					i, _ := slices.BinarySearchFunc(docs, g.at(), func(h hit, at time.Time) int { return h.At.Compare(at) })
					if i == len(docs) {
						t.Errorf("%v: nothing reached the site after it", g)
						continue
					}
					probe, end := docs[i].At, g.retryEnd(t)
					if end.After(probe.Add(time.Second)) || end.Before(probe.Add(-interval-time.Second)) {
						t.Errorf("%v: Retry-After says %s, the probe reached the site at %s: want it at most a second sooner, at most %v later",
							g, end.Format("15:04:05.000"), probe.Format("15:04:05.000"), interval+time.Second)
					}
				}
			}
			answers := checkDeferred(t, r, host, deferred, "breaker", answered429)
			open1, open2, resumed := docs[5].At.Sub(docs[4].At), docs[6].At.Sub(docs[5].At), docs[7].At.Sub(docs[6].At)
			t.Logf("%s: gaps at the site: %.1f s after the fifth failure, %.1f s after the failed probe, %.1f s after the probe that closed; deferred gotos: %s; breakers: %+v",
				b.name, open1.Seconds(), open2.Seconds(), resumed.Seconds(), answers, breakerCounts(r))
			if open1 < breaker.DefaultFirst || open1 > breaker.DefaultFirst*6/5+interval+time.Second {
				t.Errorf("the probe reached the site %.1f s after the fifth failure, want 30 to 40 s (30 s, its jitter, the client's interval)", open1.Seconds())
			}
			if open2 < 2*breaker.DefaultFirst || open2 > 2*breaker.DefaultFirst*6/5+interval+time.Second {
				t.Errorf("the second probe reached the site %.1f s after the first failed, want 60 to 76 s (twice the pause)", open2.Seconds())
			}
			if resumed > interval+time.Second {
				t.Errorf("after the probe that closed the breaker, the next document came %.1f s later, want the client's next goto (%v)", resumed.Seconds(), interval)
			}
			if c := breakerCounts(r); c.Opened != 2 || c.Probes != 2 {
				t.Errorf("breakers: %+v, want opened twice, two probes", c)
			}
			deferMetrics(t, r, len(deferred))
		})
	}
}

// checkPageShowsDeferred opens the relay's live page in a Chromium of its
// own and reads what it draws: the deferred navigations among the
// relay's counts, and in host's row.
func checkPageShowsDeferred(t *testing.T, r *relayed, host string, n int) {
	t.Helper()
	w := openWatcher(t)
	if status, _ := w.open(t, r.url+"/"); status != 200 {
		t.Fatalf("the relay's page answered %d", status)
	}
	want := fmt.Sprintf("deferred %d", n)
	var got struct{ Navs, Row string }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		w.eval(t, fmt.Sprintf(`({navs: document.getElementById("navs").innerText.replace(/\s+/g, " "),
			row: ([...document.querySelectorAll("#rows .bucket")].find(r => r.dataset.bucket === %q) || {innerText: ""}).innerText.replace(/\s+/g, " ")})`, host), &got)
		if strings.Contains(got.Navs, want) && strings.Contains(got.Row, want) || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(got.Navs, want) {
		t.Errorf("the page's counts read %q, want %q", got.Navs, want)
	}
	if !strings.Contains(got.Row, want) {
		t.Errorf("the page's row of %s reads %q, want %q", host, got.Row, want)
	}
	t.Logf("the relay's page: counts %q; %s's row %q", got.Navs, host, got.Row)
	if out := os.Getenv("DEFER_PNG"); out != "" { // to look at it
		png, _ := w.rc.screenshot(w.session)
		os.WriteFile(out, png, 0o644)
	}
}

// TestBreakerFleet: two relays on one Redis, --host-errors 5/1m. Five
// 503s through relay A open the breaker for both: relay B's gotos are
// answered at once with the relay's 429 too. The probe (whichever relay's
// navigation it is) is answered 5 s late, and meanwhile nothing else
// reaches the site from either relay: each goto of theirs is deferred.
// Its 200 closes the breaker for both, and both relays' navigations reach
// the site again. About a minute (E2E_LONG).
func TestBreakerFleet(t *testing.T) {
	t.Parallel()
	const interval, slow = 2 * time.Second, 5 * time.Second
	rs := startRedisServer(t)
	s := newSite(t)
	host := "fleet-breaker.test"
	flakySite(s, 5, 6, slow)
	flags := policy.Flags{Delay: "1s", Burst: "1", HostErrors: "5/1m"}
	var sa, sb *store.Redis
	chromium := ownChromium(t)
	a := startRelayTo(t, chromium, limiter.Config{}, redisPolicy(t, rs.url(), flags, &sa))
	b := startRelayTo(t, chromium, limiter.Config{}, redisPolicy(t, rs.url(), flags, &sb))
	run := runID()
	gotos := runDefer(t, 3*time.Minute, false, []*relayed{a, b}, s.url(host, ""),
		"PATH_QUERY=/flaky?run="+run, fmt.Sprint("INTERVAL=", interval.Milliseconds()), "DURATION=120000", "ALONE=5", "OKS=6")
	docs, by := reachedBy(t, s, host, run)
	t.Logf("the site saw:%s", describeDocs(docs))
	if len(docs) < 7 {
		for _, g := range gotos {
			t.Log(g)
		}
		t.Fatalf("the site saw %d documents, want five failures, the probe, and more once it closed the breaker", len(docs))
	}
	probe := docs[5]
	var deferred, deferredA, deferredB, duringProbe []deferGoto
	reachedAfter := map[int]int{} // documents after the probe, by relay
	for _, g := range gotos {
		h, went := by[g.I]
		switch {
		case g.Error != "":
			t.Errorf("%v", g)
		case g.I < 5 && (!went || g.Relay != 0 || g.Status != 503):
			t.Errorf("%v: want one of relay A's five failures, answered 503 by the site", g)
		case went && g.Throttle != "":
			t.Errorf("%v: reached the site, yet answered as deferred", g)
		case went && h.At.After(probe.At):
			reachedAfter[g.Relay]++
		case !went:
			deferred = append(deferred, g)
			if g.Relay == 1 {
				deferredB = append(deferredB, g)
			} else {
				deferredA = append(deferredA, g)
			}
			if g.at().After(probe.At) && g.at().Before(probe.At.Add(slow)) {
				duringProbe = append(duringProbe, g)
			}
		}
	}
	answersA := checkDeferred(t, a, host, deferredA, "breaker", answered429)
	answersB := checkDeferred(t, b, host, deferredB, "breaker", answered429)
	ca, cb := breakerCounts(a), breakerCounts(b)
	t.Logf("the probe reached the site %.1f s after the fifth failure, the next document %.1f s after it; deferred gotos: relay A %s; relay B %s; during the probe: %d; documents after the probe by relay: %v; breakers: A %+v, B %+v",
		probe.At.Sub(docs[4].At).Seconds(), docs[6].At.Sub(probe.At).Seconds(), answersA, answersB, len(duringProbe), reachedAfter, ca, cb)
	if gap := probe.At.Sub(docs[4].At); gap < breaker.DefaultFirst || gap > breaker.DefaultFirst*6/5+interval+time.Second {
		t.Errorf("the probe reached the site %.1f s after the fifth failure, want 30 to 39 s", gap.Seconds())
	}
	if len(deferredB) == 0 {
		t.Errorf("relay B deferred none of its navigations: the breaker relay A opened was not the fleet's")
	}
	if docs[6].At.Sub(probe.At) < slow {
		t.Errorf("a document reached the site %.1f s after the probe, while the probe's answer was still %v away: two probes", docs[6].At.Sub(probe.At).Seconds(), slow)
	}
	if len(duringProbe) == 0 {
		t.Errorf("no goto was tried while the probe was out: the test shows nothing of a single probe")
	}
	if reachedAfter[0] == 0 || reachedAfter[1] == 0 {
		t.Errorf("documents after the probe closed the breaker, by relay: %v; want both relays'", reachedAfter)
	}
	if ca.Probes+cb.Probes != 1 || ca.Opened+cb.Opened != 1 {
		t.Errorf("breakers: A %+v, B %+v; want one opening, one probe across both", ca, cb)
	}
	if n := sa.Outages() + sb.Outages(); n > 0 {
		t.Errorf("Redis did not answer a call within a second %d times: the relays kept breakers of their own meanwhile", n)
	}
	da := deferMetrics(t, a, -1)
	db := deferMetrics(t, b, -1)
	if da+db != len(deferred) || db != len(deferredB) {
		t.Errorf("/metrics: %d deferred by A, %d by B; want %d in all, %d by B", da, db, len(deferred), len(deferredB))
	}
}

// TestMaxWaitDefers: --max-wait 2s, a site answering 429 with
// Retry-After: 10. The gotos after it, one a second, return at once with
// the relay's 429 (reason=max-wait) and a Retry-After that ends when the
// site's 10 s do, and nothing reaches the site before those 10 s are
// over; then navigations go again, none of the relay's 429s having
// pushed the host's schedule further nor added to its pressure. /metrics
// counts each deferred one, none unheld. With --intercept navigate
// (chromium-navigate), Page.navigate is answered at once with the
// relay's errorText instead, which Puppeteer's goto throws.
func TestMaxWaitDefers(t *testing.T) {
	const interval, retryAfter = time.Second, 10 * time.Second
	for _, b := range append(slices.Clone(deferBrowsers), deferNavigate) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			upstream, s, host := b.open(t)
			// The default, adaptive, setting: the one that obeys a
			// Retry-After.
			r := startRelayTo(t, upstream, limiter.Config{}, withPolicy(t, policy.Flags{MaxWait: "2s"}), b.holding())
			run := runID()
			gotos := runDefer(t, 2*time.Minute, b.lp, []*relayed{r}, s.url(host, ""),
				"FIRST=/status?code=429&ra=10&run="+run, "PATH_QUERY=/page?run="+run,
				fmt.Sprint("INTERVAL=", interval.Milliseconds()), "DURATION=60000", "OKS=3")
			docs, by := reachedBy(t, s, host, run)
			t.Logf("the site saw:%s", describeDocs(docs))
			first, ok := by[0]
			if !ok || first.Path != "/status" || len(gotos) == 0 || gotos[0].Status != 429 || gotos[0].Throttle != "" {
				for _, g := range gotos {
					t.Log(g)
				}
				t.Fatalf("the first goto did not get the site's 429")
			}
			over := first.At.Add(retryAfter)
			var deferred []deferGoto
			for _, g := range gotos[1:] {
				h, went := by[g.I]
				switch {
				case went && g.Error != "":
					t.Errorf("%v: reached the site, yet failed", g)
				case went && g.Throttle != "":
					t.Errorf("%v: reached the site, yet answered as deferred", g)
				case went && h.At.Before(over.Add(-exactSlack)):
					t.Errorf("%v: reached the site %.1f ms before the Retry-After's 10 s were over", g, ms(over.Sub(h.At)))
				case went && g.Status != 200:
					t.Errorf("%v: reached the site, want its 200", g)
				case !went: // checkDeferred checks what the client saw
					deferred = append(deferred, g)
					// The relay's slot is when it read the 429, 10 s
					// on: a little after the site sent it. The goto
					// was asked for a little before the relay saw it.
					if end := g.retryEnd(t); end.Before(over.Add(-200*time.Millisecond)) || end.After(over.Add(1500*time.Millisecond)) {
						t.Errorf("%v: Retry-After says %s, want the end of the site's 10 s (%s), from 0.2 s before to 1.5 s after",
							g, end.Format("15:04:05.000"), over.Format("15:04:05.000"))
					}
				}
			}
			if len(docs) < 2 {
				t.Fatalf("nothing reached the site after its 429")
			}
			answers := checkDeferred(t, r, host, deferred, "max-wait", b.seen())
			if len(deferred) > 0 {
				t.Logf("the first deferred: %v", deferred[0])
			}
			next := docs[1].At.Sub(first.At)
			// The site's 429 left 50 units, drained since; each of the
			// relay's 429s fed back would have added as many.
			pressure := hostPressure(t, r, host)
			t.Logf("%s: the first navigation after the 429 reached the site %.3f s after it; deferred gotos: %s; the host's pressure at the end %d",
				b.name, next.Seconds(), answers, pressure)
			if pressure >= 100 {
				t.Errorf("the host's pressure is %d at the end, want under 100 (the site's one 429): the relay's own 429s were fed back", pressure)
			}
			if len(deferred) < 6 {
				t.Errorf("%d gotos deferred, want about 8 (one a second, until 2 s before the 10 s end)", len(deferred))
			}
			if next > retryAfter+interval+time.Second {
				t.Errorf("the first navigation after the 429 reached the site %.1f s after it, want soon after the 10 s: the relay's own 429s pushed the schedule", next.Seconds())
			}
			deferMetrics(t, r, len(deferred))
			checkPageShowsDeferred(t, r, host, len(deferred))
		})
	}
}
