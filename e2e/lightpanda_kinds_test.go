//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Lightpanda resolves host names itself, so its test hosts are loopback
// addresses Linux serves, none of them exempt: the navigations' own host
// and a redirect's two.
const (
	lpHost = "127.0.0.2"
	lpRA   = "127.0.0.3"
	lpRB   = "127.0.0.4"
)

// lpSites serves the three hosts.
type lpSites struct{ main, ra, rb *site }

func newLPSites(t *testing.T) lpSites {
	return lpSites{main: newSiteAt(t, lpHost), ra: newSiteAt(t, lpRA), rb: newSiteAt(t, lpRB)}
}

// checkLPRedirects is checkRedirects for hosts served by sites of their own.
func checkLPRedirects(t *testing.T, r *relayed, s lpSites) {
	t.Helper()
	checkRedirectsAt(t, r, s.ra, lpRA, s.rb, lpRB)
}

// checkSubresourcesNotHeld checks that the script, fetch and XHR of the page
// with subresources reached the server soon after its document: not held
// for a slot.
func checkSubresourcesNotHeld(t *testing.T, s *site, host string) {
	t.Helper()
	docs := s.hitsOf(func(h hit) bool { return h.Host == host && h.Path == "/page" && strings.Contains(h.Query, "sub=1") })
	subs := s.hitsOf(func(h hit) bool {
		return h.Host == host && slices.Contains([]string{"/script", "/fetch", "/xhr"}, h.Path) && strings.Contains(h.Query, "sub=1")
	})
	if len(docs) != 1 || len(subs) != 3 {
		t.Errorf("%s: %d pages with subresources and %d of their script, fetch and XHR, want 1 and 3:%s", host, len(docs), len(subs), describe(s.hitsOf(nil)))
		return
	}
	for _, h := range subs {
		if d := h.At.Sub(docs[0].At); d > kindsInterval/2 {
			t.Errorf("%s %s came %v after its page: held for a slot, want it at once", host, h.Path, d)
		}
	}
}

// TestLightpandaNavKinds: through Puppeteer and Playwright connected to the
// relay in front of a real `lightpanda serve` (the session strategy), goto,
// link click, reload, location.href, form GET and POST, history back and
// forward (which Lightpanda loads from the network again), a page with a
// script, fetch and XHR, and Target.createTarget with a URL each take one
// slot of their own at 300 ms; the subresources are never held; a redirect
// to another host books that host, whose slot its hop waits for.
//
// What Lightpanda 1.0.2 cannot do at all, directly (Lightpanda's own
// behaviour, checked in TestLightpandaDirectly): a popup opens no target of
// its own (it is a frame of the opener, held as a top-level document, and
// invisible to the clients), iframes are not loaded unless started with
// --load-resources iframe, and there is no /json/new.
func TestLightpandaNavKinds(t *testing.T) {
	for _, client := range []string{"puppeteer", "playwright"} {
		t.Run(client, func(t *testing.T) {
			lp := startLightpanda(t)
			r := startRelayTo(t, lp, fixed(kindsInterval, 1))
			s := newLPSites(t)
			out := runNode(t, 2*time.Minute, "lp-kinds.mjs", "CLIENT="+client, "RELAY="+r.url, "RUN="+runID(),
				"BASE="+s.main.url(lpHost, ""), "RA="+s.ra.url(lpRA, ""), "RB="+s.rb.url(lpRB, ""))
			t.Logf("client steps: %s", out)

			// Target.createTarget with a URL, on a connection of its own.
			rc := dialRaw(t, browserWSVia(t, r))
			u := s.main.url(lpHost, "/page?s=11&run="+runID())
			rc.mustCall("", "Target.createTarget", map[string]any{"url": u})
			deadline := time.Now().Add(10 * time.Second)
			for len(s.main.hitsOf(func(h hit) bool { return h.Path == "/page" && strings.Contains(h.Query, "s=11") })) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}

			checkSlots(t, r, lpHost, navigations(s.main, lpHost), 13, kindsInterval)
			checkSubresourcesNotHeld(t, s.main, lpHost)
			checkLPRedirects(t, r, s)
			if t.Failed() {
				t.Logf("the servers saw:%s%s%s", describe(s.main.hitsOf(nil)), describe(s.ra.hitsOf(nil)), describe(s.rb.hitsOf(nil)))
			}
		})
	}
}

// TestLightpandaNavKindsChromedp: the same kinds through chromedp's remote
// allocator: goto, click, reload, location.href, form GET, back and
// forward, one slot each.
func TestLightpandaNavKindsChromedp(t *testing.T) {
	lp := startLightpanda(t)
	r := startRelayTo(t, lp, fixed(kindsInterval, 1))
	s := newSiteAt(t, lpHost)
	run := runID()
	page := kindsPage(s, lpHost, run)
	tab := openChromedpTab(t, r.url)
	tab.firstKinds(s, lpHost, run, page)
	step := tab.step
	step("goto", do(chromedp.Navigate(page(6))))
	step("back", do(chromedp.NavigateBack()))
	step("forward", do(chromedp.NavigateForward()))
	checkSlots(t, r, lpHost, navigations(s, lpHost), 8, kindsInterval)
}

// TestLightpandaClientInterception: a client's own interception through the
// relay sees exactly what it sees directly: every request of a page with a
// script, fetch and XHR, of a link click and of a form POST, each once, in
// the same order, with Puppeteer's setRequestInterception and Playwright's
// route, while the relay holds the documents in the same session.
func TestLightpandaClientInterception(t *testing.T) {
	for _, client := range []string{"puppeteer", "playwright"} {
		t.Run(client, func(t *testing.T) {
			lp := startLightpanda(t)
			r := startRelayTo(t, lp, fixed(100*time.Millisecond, 1))
			s := newSiteAt(t, lpHost)
			run := runID() // the same URLs both ways
			seen := func(cdpURL string) []string {
				out := runNode(t, time.Minute, "lp-intercept.mjs", "CLIENT="+client, "CDP_URL="+cdpURL, "BASE="+s.url(lpHost, ""), "RUN="+run)
				var v struct{ Seen []string }
				if err := json.Unmarshal(out, &v); err != nil {
					t.Fatalf("%v: %s", err, out)
				}
				return v.Seen
			}
			direct, relayed := seen(lp), seen(r.url)
			t.Logf("%s saw directly: %q", client, direct)
			if !slices.Equal(direct, relayed) {
				t.Errorf("%s saw through the relay:\n%q\nwant what it sees directly:\n%q", client, relayed, direct)
			}
			if len(heldBookings(r, lpHost)) == 0 && !strings.Contains(r.logs.String(), `"host":"127.0.0.2"`) {
				t.Errorf("the relay booked none of the documents: it must hold them beside the client's interception")
			}
		})
	}
}

// TestLightpandaFeedback: answers through Lightpanda reach the limiter as
// through Chromium: a 503 adds 50 units of pressure at once, a 429's
// Retry-After pushes the host's next slot.
func TestLightpandaFeedback(t *testing.T) {
	lp := startLightpanda(t)
	r := startRelayTo(t, lp, limiter.Config{})
	s := newSiteAt(t, lpHost)
	rc := dialRaw(t, browserWSVia(t, r))
	session := rc.openTarget(map[string]any{"url": "about:blank"})
	hostState := func() (pressure int, nextFree float64) {
		h := hostOf(t, r, lpHost)
		return h.Pressure, h.NextFreeMS
	}
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(lpHost, "/status?code=503&n=1")})
	time.Sleep(200 * time.Millisecond) // the answer on its way to the limiter
	if p, _ := hostState(); p < 45 {
		t.Errorf("pressure after a 503: %d, want about 50 (as on Chromium; one unit drains every 100 ms)", p)
	}
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(lpHost, "/status?code=429&ra=3&n=2")})
	time.Sleep(200 * time.Millisecond)
	if _, next := hostState(); next < 2500 {
		t.Errorf("next free slot %.0f ms away after a 429 with Retry-After: 3, want about 3000", next)
	}
}

// TestLightpandaDirectly records, without the relay, what Lightpanda 1.0.2
// cannot do at all, which the relay then cannot hold either: /json/new
// answers 404, and window.open makes no target of its own (a popup is a
// frame inside the opener's page).
func TestLightpandaDirectly(t *testing.T) {
	lp := startLightpanda(t)
	s := newSiteAt(t, lpHost)
	resp, err := httpPut(lp + "/json/new?" + s.url(lpHost, "/page"))
	if err != nil || resp != 404 {
		t.Errorf("PUT /json/new directly: %d %v, want 404 (Lightpanda has no /json/new)", resp, err)
	}
	body, _ := httpGet(lp + "/json/version")
	var v struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	json.Unmarshal(body, &v)
	rc := dialRaw(t, v.WS)
	session := rc.openTarget(map[string]any{"url": "about:blank"})
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(lpHost, "/page?opener=1")})
	rc.mustCall(session, "Runtime.evaluate", map[string]any{"expression": fmt.Sprintf("window.open(%q)", s.url(lpHost, "/page?popup=1"))})
	time.Sleep(500 * time.Millisecond)
	var targets struct {
		TargetInfos []json.RawMessage `json:"targetInfos"`
	}
	json.Unmarshal(rc.mustCall("", "Target.getTargets", map[string]any{}), &targets)
	t.Logf("directly: after window.open, %d target(s); the popup's document reached the server %d time(s)",
		len(targets.TargetInfos), len(s.hitsOf(func(h hit) bool { return strings.Contains(h.Query, "popup=1") })))
	if len(targets.TargetInfos) != 1 {
		t.Errorf("directly: %d targets after window.open, want 1 (Lightpanda 1.0.2 opens popups as frames of the page)", len(targets.TargetInfos))
	}
}

// httpPut PUTs to url and returns the status.
func httpPut(url string) (int, error) {
	req, err := http.NewRequest(http.MethodPut, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
