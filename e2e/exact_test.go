//go:build e2e

package e2e

// Issue 21: what a site sees is the schedule, however busy the browser.
// Eight pages load at once through one relay, each page with six images
// and scripts, so that Chromium is busy when a held request is let go; no
// two navigations of the site may reach it closer than the spacing, less
// a few milliseconds.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// exactSlack is how much closer than the spacing two navigations may reach
// the site: what happens after the browser's send, which the relay cannot
// see (the browser's network stack, and the kernel's). The relay keeps the
// departures, as the browser times them, within about 2 ms of the spacing.
// Arrivals are the site's kernel's times: its web server reads a request
// later, on a saturated machine a few ms later (494.7 ms at 500 once, in a
// CI run of the whole suite, when the site's server shared its process
// with the relay), which says nothing of when the request came.
const exactSlack = 5 * time.Millisecond

// navigateSlack is exactSlack for --intercept navigate, which sees when a
// navigation's request started, not when it was sent.
const navigateSlack = 50 * time.Millisecond

// exactSite is where the exact tests navigate: a site in a process of its
// own (startSiteProcess).
type exactSite interface {
	url(host, path string) string
	hitsOf(keep func(hit) bool) []hit
}

// sixSubresources serves pages with three images and three scripts each,
// all of the page's own host.
func sixSubresources(s *site) {
	s.handle("/six", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><title>%s</title><body>", r.URL.RawQuery)
		for i := range 3 {
			fmt.Fprintf(w, `<img src="/img?%[1]s&i=%[2]d"><script src="/script?%[1]s&i=%[2]d"></script>`, r.URL.RawQuery, i)
		}
		fmt.Fprint(w, "</body>")
	})
}

// exactRun makes n navigations to host over pages pages at once (eight:
// a busy browser) with Puppeteer, through r, each to path (/six: a page
// with six images and scripts; /page/…: a page alone), and returns the gaps
// between them as they reached the site (its kernel's arrival times), in
// the order they arrived.
func exactRun(t *testing.T, r *relayed, s exactSite, host, path string, n, pages int) []time.Duration {
	t.Helper()
	start := time.Now()
	loopPuppeteer(t, r.url, s.url(host, path+"?x=1"), n, pages, false)
	docs := s.hitsOf(func(h hit) bool { return h.Host == host && h.Path == path })
	if len(docs) != n {
		t.Fatalf("%s: the site saw %d navigations, want %d", host, len(docs), n)
	}
	subs := len(s.hitsOf(func(h hit) bool { return h.Host == host && (h.Path == "/img" || h.Path == "/script") }))
	gaps := gapsAfter(byArrival(t, host, docs), 1)
	sorted := slices.Sorted(slices.Values(gaps))
	read := slices.Sorted(slices.Values(gapsAfter(docs, 1)))
	t.Logf("%s: %d navigations over %d pages in %v (%d images and scripts): gaps as they reached the site lowest %.1f, %.1f, %.1f ms, p50 %.1f ms (as its server read them: lowest %.1f, %.1f, %.1f ms); the relay pushed its schedule %s",
		host, n, pages, time.Since(start).Round(time.Millisecond), subs, ms(sorted[0]), ms(sorted[1]), ms(sorted[2]), ms(p50(gaps)), ms(read[0]), ms(read[1]), ms(read[2]), pushedOf(t, r))
	return gaps
}

// byArrival returns hits in the order they reached the site, each At being
// when the site's kernel received it (its host's kernel stamped it).
func byArrival(t testing.TB, name string, hits []hit) []hit {
	t.Helper()
	arrived := slices.Clone(hits)
	for i := range arrived {
		if arrived[i].Arrived.IsZero() {
			t.Fatalf("%s: the site has no arrival time for %s?%s", name, arrived[i].Path, arrived[i].Query)
		}
		arrived[i].At = arrived[i].Arrived
	}
	slices.SortFunc(arrived, func(a, b hit) int { return a.At.Compare(b.At) })
	return arrived
}

// checkGaps checks that no two of the navigations whose gaps are given
// reached the site closer than spacing less slack.
func checkGaps(t *testing.T, name string, gaps []time.Duration, spacing, slack time.Duration) {
	t.Helper()
	for i, g := range gaps {
		if g < spacing-slack {
			t.Errorf("%s: navigations %d and %d reached the site %.1f ms apart, want at least %v", name, i+1, i+2, ms(g), spacing-slack)
		}
	}
}

// pushedOf says what the relay's metrics count of late departures.
func pushedOf(t *testing.T, r *relayed) string {
	body, err := httpGet(r.url + "/metrics")
	if err != nil {
		return "?"
	}
	var late, by string
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, "cdp_throttle_late_departures_total "); ok {
			late = v
		}
		if v, ok := strings.CutPrefix(l, "cdp_throttle_schedule_pushed_seconds_total "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				by = fmt.Sprintf("%.1f ms", f*1000)
			}
		}
	}
	return late + " times, by " + by + " in all"
}

// TestExactAtTheSite: fixed 200 ms, burst 1, 200 navigations over eight
// busy pages at once: no two reach the site closer than 195 ms.
func TestExactAtTheSite(t *testing.T) {
	const spacing, n = 200 * time.Millisecond, 200
	s := startSiteProcess(t, robotsOf())
	gaps := exactRun(t, startRelay(t, fixed(spacing, 1)), s, "exact.test", "/six", n, 8)
	checkGaps(t, "exact.test", gaps, spacing, exactSlack)
}

// TestExactAtTheSiteCrawlDelay: the same for a site whose robots.txt asks
// for Crawl-delay: 0.5, through --robots crawl-delay: 100 navigations
// (50 s; 200 measured the same, lowest 499.1 ms), none closer than the
// spacing less exactSlack.
func TestExactAtTheSiteCrawlDelay(t *testing.T) {
	const spacing, n = 500 * time.Millisecond, 100
	s := startSiteProcess(t, robotsOf("User-agent: *", "Crawl-delay: 0.5"))
	r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "crawl-delay"}))
	gaps := exactRun(t, r, s, "delay.test", "/six", n, 8)
	checkGaps(t, "delay.test", gaps, spacing, exactSlack)
}

// TestExactWhileAClientSitsOnItsRequest: a client that intercepts its own
// documents (as Puppeteer's setRequestInterception and Playwright's
// page.route do) sits on one for 3 s, as a crawler that looks each URL up
// before it continues may, while other clients navigate to the same host,
// one every 200 ms. The site sees every navigation, the one sat on among
// them, the spacing apart.
//
//   - fetch: Chromium hands a request to the client's interception before
//     the relay's (the client's session attached to the page after the
//     relay's), so the relay books the navigation once the client let it
//     go; the others do not wait for it.
//   - navigate: the relay let the command go at its slot, and the request
//     leaves when the client lets it go: the others wait for it, and go
//     the spacing after it. Taking the start of the request for its
//     departure, as before, two reached the site 88.9 and 213.8 ms apart
//     at 300.
//   - lightpanda (the session way): the relay pauses the document in the
//     client's own session and hands it to the client's interception at
//     its slot; it leaves when the client continues it (Lightpanda answers
//     that once it sent it), and the others go the spacing after it.
func TestExactWhileAClientSitsOnItsRequest(t *testing.T) {
	s := startSiteProcess(t, robotsOf())
	for _, mode := range []hold.Intercept{hold.InterceptFetch, hold.InterceptNavigate} {
		t.Run(mode.String(), func(t *testing.T) {
			sitOnARequest(t, s, mode, browser.http, mode.String()+".sits.test", chromedp.WithNewBrowserContext())
		})
	}
	t.Run("lightpanda", func(t *testing.T) {
		sitOnARequest(t, s, hold.InterceptAuto, startLightpanda(t), lpHost)
	})
}

func sitOnARequest(t *testing.T, s *remoteSite, mode hold.Intercept, upstream, host string, opts ...chromedp.ContextOption) {
	const spacing, sit, others = 300 * time.Millisecond, 3 * time.Second, 12
	r := startRelayTo(t, upstream, fixed(spacing, 1), func(p *relay.Proxy) { p.Intercept = mode })
	run := runID()

	connect := func(name string) context.Context {
		alloc, cancel := remote.NewAllocator(context.Background(), r.url)
		t.Cleanup(cancel)
		ctx, cancel := chromedp.NewContext(alloc, opts...)
		t.Cleanup(cancel)
		if err := chromedp.Do(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return ctx
	}
	// The client that sits: Fetch on in its own session, for documents.
	sitter := connect("the client that sits")
	paused := make(chan time.Time, 1)
	if err := chromedp.Listen(sitter, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		if e.ResourceType != network.ResourceTypeDocument {
			// Lightpanda pauses every request of a page with Fetch on.
			go chromedp.Call(sitter, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
			return
		}
		select {
		case paused <- time.Now():
		default:
		}
		go func() {
			time.Sleep(sit)
			if _, err := chromedp.Call(sitter, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID}); err != nil {
				t.Errorf("continuing the paused document: %v", err)
			}
		}()
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(sitter, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*", ResourceType: network.ResourceTypeDocument}}}); err != nil {
		t.Fatalf("Fetch.enable in the client's session: %v", err)
	}
	var clients []context.Context
	for i := range others {
		clients = append(clients, connect(fmt.Sprint("client ", i)))
	}

	navigate := func(ctx context.Context, who string) <-chan error {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			done <- chromedp.Do(ctx, chromedp.Navigate(s.url(host, "/six?run="+run+"&who="+who)))
		}()
		return done
	}
	start := time.Now()
	dones := []<-chan error{navigate(sitter, "sitter")}
	select {
	case <-paused:
	case <-time.After(20 * time.Second):
		t.Fatal("the client's own interception never paused its document")
	}
	for i, ctx := range clients {
		dones = append(dones, navigate(ctx, fmt.Sprint(i)))
		time.Sleep(200 * time.Millisecond)
	}
	for _, done := range dones {
		if err := <-done; err != nil {
			t.Fatalf("a navigation: %v", err)
		}
	}

	docs := s.hitsOf(func(h hit) bool { return h.Host == host && h.Path == "/six" && strings.Contains(h.Query, run) })
	if len(docs) != others+1 {
		t.Fatalf("the site saw %d navigations, want %d", len(docs), others+1)
	}
	arrived := byArrival(t, host, docs)
	var order []string
	place := 0
	for i, h := range arrived {
		_, who, _ := strings.Cut(h.Query, "who=")
		order = append(order, fmt.Sprintf("%s %.0f ms", who, ms(h.At.Sub(start))))
		if who == "sitter" {
			place = i
			if h.At.Sub(start) < sit {
				t.Errorf("the navigation sat on reached the site %v after it started, before the client let it go (%v)", h.At.Sub(start), sit)
			}
		}
	}
	t.Logf("as they reached the site: %s", strings.Join(order, ", "))
	switch {
	case mode == hold.InterceptFetch && place == 0:
		t.Errorf("the others waited for the navigation the client sat on: it reached the site first")
	case mode != hold.InterceptFetch && place != 0:
		t.Errorf("the navigation the client sat on reached the site %d-th, want first: the relay let it go first", place+1)
	}
	slack := exactSlack
	if mode == hold.InterceptNavigate {
		// What the navigate way sees of a departure is the request's start
		// (or the client's continue), not its send: a fresh browser
		// context's first request here left up to 33 ms after it started,
		// and the next reached the site 289.0 ms after it at 300. The
		// fault this catches is bigger: 88.9 ms.
		slack = navigateSlack
	}
	checkGaps(t, host, gapsAfter(arrived, 1), spacing, slack)
	t.Logf("waits for a departure let go past pace's bound: %v; late departures: %s",
		metricAt(t, r.url, "cdp_throttle_departure_waits_expired_total"), pushedOf(t, r))
}
