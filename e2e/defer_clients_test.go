//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// What each real client sees of a navigation the relay defers (issue
// 40's --max-wait): Puppeteer and Playwright for Node
// (js/defer-clients.mjs), Playwright for Python (py/pw_defer.py) and
// chromedp, through Chromium (the fetch way and --intercept navigate) and
// Lightpanda (the session way). Each client's goto of a deferred
// navigation is timed beside its goto of a 429 the site itself answers,
// on a host the relay never holds, in the same run on the same browser.

// clientGoto is one goto of a client: deferGoto's fields, and which of
// the script's gotos it was: "first" (the site's 429, Retry-After: 10),
// "deferred" (the relay answers it) or "baseline" (the site's 429 on a
// host the relay never holds).
type clientGoto struct {
	Kind string
	deferGoto
}

// clientDeferN is how many deferred gotos, and as many baseline ones,
// each client makes, one after the other, well within the 8 s in which
// the host's slot lies more than --max-wait ahead.
const clientDeferN = 4

// deferClients are the clients that run the gotos: each is given the
// relay's URL, the base URLs of the host to defer and of the baseline
// host, and a run id.
var deferClients = []struct {
	name string
	run  func(t *testing.T, lp bool, relay, deferred, baseline, run string) []clientGoto
}{
	{"puppeteer", nodeDefer("puppeteer")},
	{"playwright", nodeDefer("playwright")},
	{"playwright-python", func(t *testing.T, lp bool, relay, deferred, baseline, run string) []clientGoto {
		out := runPython(t, 2*time.Minute, "pw_defer.py", deferEnv(lp, relay, deferred, baseline, run)...)
		return parseClientGotos(t, "pw_defer.py", out)
	}},
	{"chromedp", chromedpDefer},
}

func deferEnv(lp bool, relay, deferred, baseline, run string) []string {
	env := []string{"RELAY=" + relay, "DEFERRED=" + deferred, "BASELINE=" + baseline, "RUN=" + run, fmt.Sprint("N=", clientDeferN)}
	if lp {
		env = append(env, "LP=1")
	}
	return env
}

func nodeDefer(client string) func(t *testing.T, lp bool, relay, deferred, baseline, run string) []clientGoto {
	return func(t *testing.T, lp bool, relay, deferred, baseline, run string) []clientGoto {
		out := runNode(t, 2*time.Minute, "defer-clients.mjs", append(deferEnv(lp, relay, deferred, baseline, run), "CLIENT="+client)...)
		return parseClientGotos(t, "defer-clients.mjs", out)
	}
}

func parseClientGotos(t *testing.T, script string, out []byte) []clientGoto {
	t.Helper()
	var gotos []clientGoto
	if err := json.Unmarshal(out, &gotos); err != nil {
		t.Fatalf("%s printed %s: %v", script, out, err)
	}
	return gotos
}

// chromedpDefer makes defer-clients.mjs's gotos with chromedp, each a
// NavigateResponse: Page.navigate, then the document's response
// (Network.responseReceived) once the page has loaded.
func chromedpDefer(t *testing.T, lp bool, relay, deferred, baseline, run string) []clientGoto {
	t.Helper()
	allocCtx, cancel := remote.NewAllocator(context.Background(), relay)
	defer cancel()
	var opts []chromedp.ContextOption
	if !lp { // Lightpanda has one page per connection, no browser contexts
		opts = append(opts, chromedp.WithNewBrowserContext())
	}
	ctx, cancel := chromedp.NewContext(allocCtx, opts...)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil { // connects and opens the tab
		t.Fatalf("chromedp through the relay: %v", err)
	}
	var gotos []clientGoto
	visit := func(kind string, i int, url string) {
		g := clientGoto{Kind: kind, deferGoto: deferGoto{I: i, Start: time.Now().UnixMilli()}}
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		began := time.Now()
		res, err := chromedp.Run(gctx, chromedp.NavigateResponse(url))
		g.Took = ms(time.Since(began))
		switch {
		case err != nil:
			g.Error = strings.SplitN(err.Error(), "\n", 2)[0]
		case res != nil:
			g.Status = int(res.Status)
			for name, v := range res.Headers {
				switch strings.ToLower(name) {
				case "retry-after":
					g.RetryAfter = fmt.Sprint(v)
				case "x-cdp-throttle":
					g.Throttle = fmt.Sprint(v)
				}
			}
		}
		gotos = append(gotos, g)
	}
	visit("first", 0, deferred+"/status?code=429&ra=10&run="+run)
	for i := 1; i <= clientDeferN; i++ {
		visit("deferred", i, fmt.Sprintf("%s/page?run=%s&i=%d", deferred, run, i))
		visit("baseline", i, fmt.Sprintf("%s/status?code=429&ra=10&run=%s&i=%d", baseline, run, i))
	}
	return gotos
}

// TestMaxWaitClients: --max-wait 2s; each client in turn goes to a host
// of its own that answers 429 with Retry-After: 10, then, four times, to
// that host again (deferred: its slot is 10 s ahead) and to a host the
// relay never holds (127.0.0.1, loopback, exempt) whose site answers 429
// itself. Each deferred goto returns at once what the client's retry code
// keys on: through Chromium's fetch way and Lightpanda's session way, the
// relay's 429 with its Retry-After and X-Cdp-Throttle (Puppeteer's and
// Playwright's goto return it as the response, chromedp's
// NavigateResponse as the document's); with --intercept navigate, an
// error carrying the relay's errorText. The relay answered each within
// 100 ms of the goto (its log line), the goto returned within a second,
// and nothing of them reached the site. How long the deferred gotos and
// the baseline ones took is logged side by side, never asserted: a
// browser's commit of a 429 page takes what it takes on a loaded machine.
// The ways and the clients one after the other, about 20 s: the clients
// time their gotos alone (side by side, on this 2-core machine, the relay
// answered a deferred goto 222 ms after Playwright asked for it, Chromium
// busy with another way's client), and no other relay's client drives
// a page of the shared Chromium meanwhile (Playwright's connectOverCDP
// attaches to every page of the browser: with --intercept navigate the
// relay counted another relay's client's navigations, in pages its
// Playwright client was attached to, as unheld).
func TestMaxWaitClients(t *testing.T) {
	for _, b := range append(slices.Clone(deferBrowsers), deferNavigate) {
		t.Run(b.name, func(t *testing.T) {
			upstream := browser.http
			if b.lp {
				upstream = startLightpanda(t)
			}
			r := startRelayTo(t, upstream, limiter.Config{}, withPolicy(t, policy.Flags{MaxWait: "2s"}), b.holding())
			exempt := newSiteAt(t, "127.0.0.1")
			deferredAll := 0
			for k, c := range deferClients {
				t.Run(c.name, func(t *testing.T) {
					// A host of its own: the slot the site's 429 moves
					// is this client's.
					host := c.name + "." + b.name + ".test"
					s := newSite(t)
					if b.lp {
						host = fmt.Sprintf("127.0.0.%d", 40+k) // Lightpanda resolves no *.test
						s = newSiteAt(t, host)
					}
					run := runID()
					gotos := c.run(t, b.lp, r.url, s.url(host, ""), exempt.url("127.0.0.1", ""), run)
					deferredAll += checkClientDeferred(t, b, r, c.name, s, host, exempt, run, gotos)
				})
			}
			deferMetrics(t, r, deferredAll)
		})
	}
}

// checkClientDeferred checks one client's gotos against what the sites
// saw and the relay logged, logs how long they took, and returns how
// many the relay deferred.
func checkClientDeferred(t *testing.T, b deferBrowser, r *relayed, client string, s *site, host string, exempt *site, run string, gotos []clientGoto) int {
	t.Helper()
	if len(gotos) != 1+2*clientDeferN || gotos[0].Kind != "first" {
		t.Fatalf("%d gotos, want the first and %d of each kind: %+v", len(gotos), clientDeferN, gotos)
	}
	docs, by := reachedBy(t, s, host, run)
	first, ok := by[0]
	if g := gotos[0]; !ok || first.Path != "/status" || g.Status != 429 || g.Throttle != "" || g.RetryAfter != "10" {
		t.Fatalf("%v: want the site's 429 with Retry-After: 10; the site saw:%s", g.deferGoto, describeDocs(docs))
	}
	if len(docs) != 1 {
		t.Errorf("the site saw%s\nwant only the first: the others were deferred", describeDocs(docs))
	}
	_, baseBy := reachedBy(t, exempt, "127.0.0.1", run)
	over := first.At.Add(10 * time.Second)
	var deferred []deferGoto
	var deferredTook, baselineTook []time.Duration
	for _, g := range gotos[1:] {
		switch g.Kind {
		case "deferred":
			deferred = append(deferred, g.deferGoto)
			deferredTook = append(deferredTook, g.took())
			// As in TestMaxWaitDefers: the relay's slot is 10 s after it
			// read the site's 429.
			if end := g.retryEnd(t); end.Before(over.Add(-200*time.Millisecond)) || end.After(over.Add(1500*time.Millisecond)) {
				t.Errorf("%v: its retry after says %s, want the end of the site's 10 s (%s), from 0.2 s before to 1.5 s after",
					g.deferGoto, end.Format("15:04:05.000"), over.Format("15:04:05.000"))
			}
		case "baseline":
			baselineTook = append(baselineTook, g.took())
			if _, went := baseBy[g.I]; !went || g.Status != 429 || g.Throttle != "" || g.RetryAfter != "10" || g.Error != "" {
				t.Errorf("%v (baseline): want the exempt site's own 429 with Retry-After: 10 (reached it: %v)", g.deferGoto, went)
			}
		}
	}
	answers := checkDeferred(t, r, host, deferred, "max-wait", b.seen())
	t.Logf("%s through %s: deferred %s; the first deferred: %v", client, b.name, answers, deferred[0])
	t.Logf("%s through %s: goto deferred %s, baseline (the site's own 429, not held) %s",
		client, b.name, medianMost(deferredTook), medianMost(baselineTook))
	return len(deferred)
}

// TestScrapyDeferred: Scrapy with scrapy-playwright (README.md's settings,
// Chromium) and its default retries, through a relay with --max-wait 2s,
// to a site that answers its first document 429 with Retry-After: 10.
// Scrapy's RetryMiddleware retries a 429, but at once, never after its
// Retry-After: both retries are deferred by the relay, answered at once
// with its own 429, and never reach the site; Scrapy then gives up on the
// relay's 429 (an HttpError its errback gets, status and X-Cdp-Throttle
// telling it from the site's own), within a second rather than at a 30 s
// navigation timeout. What docs/politeness.md tells Scrapy users rests on
// this.
func TestScrapyDeferred(t *testing.T) {
	r := startRelayTo(t, browser.http, limiter.Config{}, withPolicy(t, policy.Flags{MaxWait: "2s"}))
	s := newSiteAt(t, lpHost)
	run := runID()
	start := time.Now()
	res := crawlScrapy(t, r, documentedBlock(t, isReadmeScrapySettings), s.url(lpHost, "/status?code=429&ra=10&run="+run), "RETRY=1")
	took := time.Since(start)
	reached := s.hitsOf(func(h hit) bool { return strings.Contains(h.Query, "run="+run) })
	if len(reached) != 1 {
		t.Errorf("the site saw %d requests of the crawl, want 1: its 429's retries deferred", len(reached))
	}
	if len(res.Pages) != 0 || len(res.Failed) != 1 {
		t.Fatalf("the spider got %+v and failed %+v; want one failure, on the relay's 429", res.Pages, res.Failed)
	}
	f := res.Failed[0]
	if f.Status != http.StatusTooManyRequests || f.Throttle != "deferred; reason=max-wait" || f.Retries != 2 {
		t.Errorf("Scrapy gave up on %d %q after %d retries (%s), want the relay's 429 (deferred; reason=max-wait) after its 2 retries", f.Status, f.Throttle, f.Retries, f.Error)
	}
	deferMetrics(t, r, 2)
	t.Logf("Scrapy retried the site's 429 twice at once, both deferred, and gave up on the relay's 429: %s; the crawl took %v", f.Error, took.Round(time.Millisecond))
}
