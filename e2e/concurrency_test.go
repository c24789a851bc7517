//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/store"
)

// The cap on navigations in flight (--http-nav-concurrency, concurrency:N)
// through real Chromium with Puppeteer and real `lightpanda serve`: what a
// web server sees in flight at once, and that every way a navigation ends
// gives its place back.

// capSite is a site whose /slow documents answer after a delay, counting
// how many the server has in flight at once; /hang holds a request until
// its client goes (or a minute passes), /reset closes the connection
// without an answer, and /seen says whether a request marked leak=X has
// arrived (for scripts, which reach it without the browser).
type capSite struct {
	*site
	ip    string
	delay time.Duration

	mu       sync.Mutex
	in, most int // guarded by mu; /slow documents being answered, and the most at once
}

func newCapSite(t *testing.T, ip string, delay time.Duration) *capSite {
	cs := &capSite{site: newSiteAt(t, ip), ip: ip, delay: delay}
	cs.handle("/slow", func(w http.ResponseWriter, r *http.Request) {
		cs.mu.Lock()
		cs.in++
		cs.most = max(cs.most, cs.in)
		cs.mu.Unlock()
		time.Sleep(cs.delay)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><title>slow</title>%s", r.URL.RawQuery)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		cs.mu.Lock()
		cs.in--
		cs.mu.Unlock()
	})
	cs.handle("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
	})
	cs.handle("/reset", func(w http.ResponseWriter, r *http.Request) {
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // a reset, not an orderly close
		}
		c.Close()
	})
	cs.handle("/seen", func(w http.ResponseWriter, r *http.Request) {
		marker := "leak=" + r.URL.Query().Get("leak")
		n := len(cs.hitsOf(func(h hit) bool { return h.Path != "/seen" && strings.Contains(h.Query, marker) }))
		fmt.Fprint(w, n)
	})
	return cs
}

// mostInFlight returns the most /slow documents the server had in flight
// at once since the last call, and starts counting anew.
func (cs *capSite) mostInFlight() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	m := cs.most
	cs.most = cs.in
	return m
}

// seenURL is /seen as a process on this machine reaches it.
func (cs *capSite) seenURL() string {
	return "http://" + net.JoinHostPort(cs.ip, cs.port) + "/seen"
}

// arrived waits until the server has the request marked leak=marker.
func (cs *capSite) arrived(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(cs.hitsOf(func(h hit) bool { return strings.Contains(h.Query, "leak="+marker) })) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the server never saw %s", marker)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// hostState is a bucket's line of /hosts.
type hostState struct {
	Host              string  `json:"host"`
	InFlight          *int    `json:"in_flight"`
	Waiting           *int    `json:"waiting"`
	Concurrency       int     `json:"concurrency"`
	ConcurrencySource string  `json:"concurrency_source"`
	BaselineMS        float64 `json:"answer_baseline_ms"`
	LastAnswerMS      float64 `json:"last_answer_ms"`
}

// hostsLine reads host's line of the relay's /hosts; ok is false when the
// host is not listed (nothing in flight or waiting, nothing booked).
func hostsLine(t *testing.T, relayURL, host string) (hostState, bool) {
	t.Helper()
	body, err := httpGet(relayURL + "/hosts?n=1000")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []hostState
	if err := json.Unmarshal(body, &hosts); err != nil {
		t.Fatalf("/hosts: %v: %s", err, body)
	}
	for _, h := range hosts {
		if h.Host == host {
			return h, true
		}
	}
	return hostState{}, false
}

// inFlightOf reads a host's navigations in flight and waiting from /hosts.
func inFlightOf(t *testing.T, relayURL, host string) (inFlight, waiting int) {
	t.Helper()
	h, ok := hostsLine(t, relayURL, host)
	if !ok || h.InFlight == nil {
		return 0, 0
	}
	return *h.InFlight, *h.Waiting
}

// settles waits until /hosts shows host with want in flight and none
// waiting, and fails the test after within.
func settles(t *testing.T, relayURL, host string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, w := inFlightOf(t, relayURL, host)
		if n == want && w == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /hosts shows %d in flight and %d waiting, want %d and none", host, n, w, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const capWaits = "cdp_throttle_concurrency_wait_seconds_count"

// slowDocs returns the /slow documents of a run the server saw.
func (cs *capSite) slowDocs(run string) []hit {
	return cs.hitsOf(func(h hit) bool { return h.Path == "/slow" && strings.Contains(h.Query, "run="+run+"&") })
}

// capCases are the runs of TestConcurrencyCap and its Lightpanda twin:
// the relay without a cap, then with a cap of 2.
var capCases = []struct {
	name  string
	flags policy.Flags
}{
	{"no cap", policy.Flags{}},
	{"--http-nav-concurrency 2", policy.Flags{Concurrency: "2"}},
}

// TestConcurrencyCap: a host that answers after 800 ms, eight Puppeteer
// pages making three navigations each at once (each page the next when
// the last is answered). With --http-nav-concurrency 2 the server never
// has more than two documents in flight and all 24 arrive; without it, in
// the same test, it has more.
func TestConcurrencyCap(t *testing.T) {
	const (
		delay = 800 * time.Millisecond
		pages = 8
		n     = 24
	)
	cs := newCapSite(t, siteIP, delay)
	for _, tc := range capCases {
		r := startRelay(t, limiter.Config{}, withPolicy(t, tc.flags))
		run := runID()
		cs.mostInFlight()
		start := time.Now()
		loopPuppeteer(t, r.url, cs.url("cap.test", "/slow?run="+run+"&x=1"), n, pages, false)
		took := time.Since(start)
		most := cs.mostInFlight()
		docs := cs.slowDocs(run)
		waits := metricAt(t, r.url, capWaits)
		t.Logf("%s: %d documents, at most %d in flight at the server, %d navigations waited for a place, %.1fs", tc.name, len(docs), most, int(waits), took.Seconds())
		if !checkInFlight(t, tc.name, tc.flags.Concurrency != "", len(docs), n, most) {
			continue
		}
		if waits == 0 {
			t.Errorf("--http-nav-concurrency 2: /metrics counts no navigation that waited for a place")
		}
		settles(t, r.url, "cap.test", 0, 5*time.Second)
		if h, _ := hostsLine(t, r.url, "cap.test"); h.InFlight != nil && (h.Concurrency != 2 || h.ConcurrencySource != "flag") {
			t.Errorf("/hosts: %+v, want the cap 2 from the flag", h)
		}
		if !strings.Contains(r.logs.String(), "holding navigations to this host until one in flight is answered") {
			t.Errorf("no warning that the cap held cap.test")
		}
	}
}

// checkInFlight checks a run of eight pages at once against a server
// with slow answers: all want documents arrived, more than two of them in
// flight at once without a cap, and at most two with
// --http-nav-concurrency 2 (capped). It returns capped.
func checkInFlight(t *testing.T, name string, capped bool, docs, want, most int) bool {
	t.Helper()
	if docs != want {
		t.Errorf("%s: the server saw %d documents, want %d", name, docs, want)
	}
	if !capped {
		if most <= 2 {
			t.Errorf("no cap: at most %d documents in flight at the server, want more than 2 (eight pages at once)", most)
		}
		return false
	}
	if most > 2 {
		t.Errorf("--http-nav-concurrency 2: the server had %d documents in flight at once", most)
	}
	return true
}

// openPage creates a page in a browser context of its own, disposed when
// the client's connection ends (as Playwright's contexts are), and
// attaches to it.
func openPage(t *testing.T, rc *rawClient) (session string) {
	t.Helper()
	var bc struct{ BrowserContextID string }
	json.Unmarshal(rc.mustCall("", "Target.createBrowserContext", map[string]any{"disposeOnDetach": true}), &bc)
	return rc.openTarget(map[string]any{"url": "about:blank", "browserContextId": bc.BrowserContextID})
}

// TestConcurrencyCapLightpanda: the same through `lightpanda serve`, held
// in each client's page session: eight clients (a browser each), three
// navigations each, 800 ms answers. With --http-nav-concurrency 2 the
// server never has more than two in flight; without, more.
func TestConcurrencyCapLightpanda(t *testing.T) {
	const (
		delay = 800 * time.Millisecond
		pages = 8
		each  = 3
	)
	lp := startLightpanda(t)
	cs := newCapSite(t, lpHost, delay)
	for _, tc := range capCases {
		r := startRelayTo(t, lp, limiter.Config{}, withPolicy(t, tc.flags))
		run := runID()
		var clients []pageClient
		for range pages {
			rc := dialRaw(t, browserWSVia(t, r))
			clients = append(clients, pageClient{rc, openPage(t, rc)})
		}
		cs.mostInFlight()
		start := time.Now()
		var wg sync.WaitGroup
		for p, c := range clients {
			wg.Go(func() {
				for i := range each {
					if err := c.navigate(context.Background(), time.Minute, cs.url(lpHost, fmt.Sprintf("/slow?run=%s&p=%d&i=%d", run, p, i))); err != nil {
						t.Errorf("page %d, navigation %d: %v", p, i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		most := cs.mostInFlight()
		docs := cs.slowDocs(run)
		t.Logf("Lightpanda, %s: %d documents, at most %d in flight at the server, %d navigations waited for a place, %.1fs",
			tc.name, len(docs), most, int(metricAt(t, r.url, capWaits)), took.Seconds())
		if !checkInFlight(t, tc.name, tc.flags.Concurrency != "", len(docs), pages*each, most) {
			continue
		}
		settles(t, r.url, lpHost, 0, 5*time.Second)
		// A client that leaves with its navigations in flight gives
		// their places back: Lightpanda's browser of that connection goes.
		for k, c := range clients[:2] {
			c.rc.send(c.session, "Page.navigate", map[string]any{"url": cs.url(lpHost, fmt.Sprintf("/hang?leak=%s-gone-%d", run, k))})
		}
		for k := range 2 {
			cs.arrived(t, fmt.Sprintf("%s-gone-%d", run, k))
		}
		settles(t, r.url, lpHost, 2, 5*time.Second)
		clients[0].rc.close()
		clients[1].rc.close()
		settles(t, r.url, lpHost, 0, 5*time.Second)
	}
}

// redisPolicy makes a relay book, and count its places in flight, in
// Redis at url, with the policy of the flags f, and with --host-errors
// keep its breakers there, as the relay command does with --store. Each
// call to Redis may take a second, not the default 50 ms: on a busy
// machine a slower answer made a store fall back to counting places
// alone (--store-fallback local), and two relays let two each go. *made
// gets the store, whose Outages say whether that happened anyway.
func redisPolicy(t *testing.T, url string, f policy.Flags, made **store.Redis) func(*relay.Proxy) {
	cfg, err := policy.FromFlags(f)
	if err != nil {
		t.Fatal(err)
	}
	return func(p *relay.Proxy) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := store.NewRedis(ctx, url, cfg.Default, store.Options{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		*made = s
		c := cfg
		if c.HostErrors.On() {
			c.Breakers = s.Breaker(c.HostErrors, nil)
		}
		pol := policy.New(c, s)
		t.Cleanup(pol.Close)
		p.Limiter = pol
	}
}

// TestConcurrencyTwoRelaysOneRedis: two relays sharing one Redis, each
// with --http-nav-concurrency 2, four Puppeteer pages each making three
// navigations at once to a host answering after 800 ms: the server never
// has more than two in flight across both.
func TestConcurrencyTwoRelaysOneRedis(t *testing.T) {
	const (
		delay = 800 * time.Millisecond
		pages = 4
		n     = 12 // per relay
	)
	rs := startRedisServer(t)
	cs := newCapSite(t, siteIP, delay)
	flags := policy.Flags{Concurrency: "2"}
	var sa, sb *store.Redis
	a := startRelay(t, limiter.Config{}, redisPolicy(t, rs.url(), flags, &sa))
	b := startRelay(t, limiter.Config{}, redisPolicy(t, rs.url(), flags, &sb))
	run := runID()
	cs.mostInFlight()
	start := time.Now()
	var wg sync.WaitGroup
	for k, r := range []*relayed{a, b} {
		wg.Go(func() {
			loopPuppeteer(t, r.url, cs.url("fleet.test", fmt.Sprintf("/slow?run=%s&relay=%d", run, k)), n, pages, false)
		})
	}
	wg.Wait()
	most := cs.mostInFlight()
	docs := cs.slowDocs(run)
	t.Logf("two relays on one Redis, cap 2: %d documents, at most %d in flight at the server, waits %d + %d, %.1fs",
		len(docs), most, int(metricAt(t, a.url, capWaits)), int(metricAt(t, b.url, capWaits)), time.Since(start).Seconds())
	if len(docs) != 2*n {
		t.Errorf("the server saw %d documents, want %d", len(docs), 2*n)
	}
	if lost := sa.Outages() + sb.Outages(); lost > 0 {
		t.Errorf("Redis did not answer a call within a second %d times: the relays counted places alone meanwhile", lost)
	}
	if most > 2 {
		t.Errorf("two relays with --http-nav-concurrency 2 on one Redis: the server had %d documents in flight at once", most)
	}
	settles(t, a.url, "fleet.test", 0, 5*time.Second)
}

// probe navigates to host once on a page of its own and checks that it
// went at once: no wait for a place counted, and the server saw it soon.
func probe(t *testing.T, r *relayed, cs *capSite, host string) {
	t.Helper()
	before := metricAt(t, r.url, capWaits)
	rc := dialRaw(t, browserWSVia(t, r))
	session := openPage(t, rc)
	marker := "probe-" + runID()
	sent := time.Now()
	rc.mustCall(session, "Page.navigate", map[string]any{"url": cs.url(host, "/page?leak="+marker)})
	cs.arrived(t, marker)
	if after := metricAt(t, r.url, capWaits); after != before {
		t.Errorf("the next navigation of %s waited for a place (waits counted %v → %v)", host, before, after)
	}
	t.Logf("the next navigation of %s went at once: answered %.0fms after it was sent", host, ms(time.Since(sent)))
	rc.close()
}

// TestConcurrencyNoLeak: with --http-nav-concurrency 2 (and no spacing),
// 50 navigations end each way: answered, answered 500, the connection
// reset by the server, page.close() while the server has the request, the
// client leaving with it at the server (its browser context goes with its
// connection, as Playwright's do). After each way, /hosts shows nothing
// in flight or waiting, and the next navigation goes at once.
func TestConcurrencyNoLeak(t *testing.T) {
	const n = 50
	cs := newCapSite(t, siteIP, 0)
	flags := policy.Flags{Delay: "0", Concurrency: "2"}
	r := startRelay(t, limiter.Config{Mode: limiter.Off}, withPolicy(t, flags))
	type row struct {
		way    string
		waited int
		took   time.Duration
	}
	var rows []row
	// Two navigations at a time under a cap of 2: one that did not give
	// its place back would make a later one wait.
	check := func(way, host string, start time.Time, before float64) {
		t.Helper()
		settles(t, r.url, host, 0, 5*time.Second)
		waited := int(metricAt(t, r.url, capWaits) - before)
		rows = append(rows, row{way: way, waited: waited, took: time.Since(start)})
		if waited != 0 {
			t.Errorf("%s: %d of %d navigations, two at a time under a cap of 2, waited for a place: one was not given back", way, waited, n)
		}
		probe(t, r, cs, host)
	}
	for _, way := range []string{"answer", "5xx", "reset", "close"} {
		host := "leak-" + way + ".test"
		before, start := metricAt(t, r.url, capWaits), time.Now()
		runNode(t, 2*time.Minute, "pptr-leak.mjs", "CDP_URL="+r.url, "BASE="+cs.url(host, ""), "SEEN="+cs.seenURL(),
			"WAY="+way, "N="+strconv.Itoa(n), "RUN="+runID())
		check(way, host, start, before)
	}
	// The client leaves while the server has its navigation: two at a
	// time, 25 times.
	host := "leak-gone.test"
	before, start := metricAt(t, r.url, capWaits), time.Now()
	run := runID()
	for round := range n / 2 {
		var clients []*rawClient
		for k := range 2 {
			rc := dialRaw(t, browserWSVia(t, r))
			session := openPage(t, rc)
			rc.send(session, "Page.navigate", map[string]any{"url": cs.url(host, fmt.Sprintf("/hang?leak=%s-%d-%d", run, round, k))})
			clients = append(clients, rc)
		}
		for k := range 2 {
			cs.arrived(t, fmt.Sprintf("%s-%d-%d", run, round, k))
		}
		for _, rc := range clients {
			rc.close()
		}
	}
	check("client gone", host, start, before)
	t.Log("way          navigations  waited for a place (a leak shows here)  in flight after  took")
	for _, r := range rows {
		t.Logf("%-12s %11d  %37d  %15d  %.1fs", r.way, n, r.waited, 0, r.took.Seconds())
	}
}

// TestConcurrencyNoLeakBrowserKilled: the browser killed with navigations
// in flight and waiting, ten times, five navigations each (two in flight
// at the server, three waiting for a place): each time /hosts shows
// nothing in flight or waiting once the relay lost the browser, and once
// the browser is back the next navigation goes at once.
func TestConcurrencyNoLeakBrowserKilled(t *testing.T) {
	const rounds, each = 10, 5
	cs := newCapSite(t, siteIP, 0)
	httpURL, _, stop, err := startChromium()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(httpURL, "http://"))
	defer func() { stop() }()
	r := startRelayTo(t, httpURL, limiter.Config{Mode: limiter.Off}, withPolicy(t, policy.Flags{Delay: "0", Concurrency: "2"}))
	const host = "killed.test"
	start := time.Now()
	for round := range rounds {
		rc := dialRaw(t, browserWSVia(t, r))
		var sessions []string
		for range each {
			sessions = append(sessions, openPage(t, rc))
		}
		run := runID()
		for k, session := range sessions {
			rc.send(session, "Page.navigate", map[string]any{"url": cs.url(host, fmt.Sprintf("/hang?leak=%s-%d", run, k))})
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if n, w := inFlightOf(t, r.url, host); n == 2 && w == each-2 {
				break
			}
			if time.Now().After(deadline) {
				n, w := inFlightOf(t, r.url, host)
				t.Fatalf("round %d: %d in flight and %d waiting, want 2 and %d", round, n, w, each-2)
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		settles(t, r.url, host, 0, 10*time.Second)
		_, _, stop, err = startChromiumOn(port)
		if err != nil {
			t.Fatal(err)
		}
		waitHolding(t, r)
	}
	t.Logf("browser killed %d times with %d navigations each (2 in flight, %d waiting): nothing left in flight or waiting each time, %.1fs",
		rounds, each, each-2, time.Since(start).Seconds())
	probe(t, r, cs, host)
}

// waitHolding waits until the relay holds navigations again: its own
// connections to the browser are up.
func waitHolding(t *testing.T, r *relayed) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, _ := httpGet(r.url + "/healthz")
		if strings.Contains(string(body), `"holding":"fetch"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay does not hold navigations again: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
