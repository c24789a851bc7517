//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// robotsSite is a site whose robots.txt is robots (served by serve when
// set) and whose /public/redir redirects to /private/z.
func robotsSite(t *testing.T, serve http.HandlerFunc) *site {
	s := newSite(t)
	s.handle("/robots.txt", serve)
	s.handle("/public/redir", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/private/z", http.StatusFound)
	})
	s.handle("/public/withsub", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><title>sub</title><img src="/private/img"><iframe src="/private/frame"></iframe>
<script>fetch("/private/fetch").then(() => { window.fetched = true; });</script>`)
	})
	return s
}

const robotsPrivate = "User-agent: *\nDisallow: /private/\n"

// disallowPrivate serves robotsPrivate as a site's robots.txt.
func disallowPrivate(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, robotsPrivate) }

// privatePaths are the paths under /private/ that js/pptr-robots.mjs's
// goto-private, click and redirect steps load.
var privatePaths = []string{"/private/x", "/private/y", "/private/z"}

// robotsSteps runs js/pptr-robots.mjs through r against host of s and
// returns what each step ended with.
func robotsSteps(t *testing.T, r *relayed, s *site, host string, steps ...string) map[string]string {
	t.Helper()
	out := runNode(t, 2*time.Minute, "pptr-robots.mjs", "RELAY="+r.url, "BASE="+s.url(host, ""), "STEPS="+strings.Join(steps, ","))
	got := map[string]string{}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("script printed %s: %v", out, err)
	}
	t.Logf("steps: %v", got)
	return got
}

// seen reports whether s received a request for path.
func seen(s *site, path string) bool {
	return len(s.hitsOf(func(h hit) bool { return h.Path == path })) > 0
}

// TestRobotsObey: with --robots obey, through real Chromium and Puppeteer,
// a site whose robots.txt disallows /private/ never sees a request there:
// goto throws net::ERR_BLOCKED_BY_CLIENT, a link click and a server
// redirect into /private/ are refused too, and /public/ loads; the
// refusals are counted and said once. With --robots crawl-delay all of
// them load.
func TestRobotsObey(t *testing.T) {
	all := []string{"goto-private", "goto-public", "click", "redirect", "subresources"}
	t.Run("obey", func(t *testing.T) {
		s := robotsSite(t, disallowPrivate)
		r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "obey"}))
		got := robotsSteps(t, r, s, "robots.test", all...)
		privateRefused(t, s, got)
		if got["goto-public"] != "ok" {
			t.Errorf("goto-public: got %q, want ok", got["goto-public"])
		}
		// Subresources are never held, so never refused.
		for _, path := range []string{"/public/x", "/public/redir", "/page", "/private/img", "/private/frame", "/private/fetch"} {
			if !seen(s, path) {
				t.Errorf("the site never saw %s", path)
			}
		}
		if n := len(s.hitsOf(func(h hit) bool { return h.Path == "/robots.txt" })); n != 1 {
			t.Errorf("robots.txt fetched %d times, want once", n)
		}
		body, _ := httpGet(r.url + "/metrics")
		if m := grepMetric(body, `outcome="disallowed"`); !strings.HasSuffix(m, " 3") {
			t.Errorf("/metrics: got %q, want 3 disallowed navigations", m)
		}
		if w := r.logs.Lines("navigation refused: robots.txt disallows it", `"host":"robots.test"`); len(w) != 1 || !strings.Contains(w[0], `"level":"warn"`) {
			t.Errorf("warnings: got %q, want one", w)
		}
		hosts, _ := httpGet(r.url + "/hosts")
		if !strings.Contains(string(hosts), `"host":"robots.test"`) || !strings.Contains(string(hosts), `"refused":3`) {
			t.Errorf("/hosts: got %s, want robots.test with 3 refused", hosts)
		}
		status, _ := httpGet(r.url + "/status")
		if !strings.Contains(string(status), `"disallowed":3`) || !strings.Contains(string(status), `"refused":3`) {
			t.Errorf("/status (the page's): got %s, want 3 disallowed, 3 refused for robots.test", status)
		}
		robotsOnPage(t, r)
	})
	t.Run("crawl-delay", func(t *testing.T) {
		s := robotsSite(t, disallowPrivate)
		r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "crawl-delay"}))
		allLoaded(t, s, robotsSteps(t, r, s, "robots.test", all...), all)
	})
	t.Run("in the stream", func(t *testing.T) {
		// --intercept navigate: Page.navigate answered by the relay with
		// Chromium's errorText, never sent.
		s := robotsSite(t, disallowPrivate)
		r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "obey"}), func(p *relay.Proxy) { p.Intercept = hold.InterceptNavigate })
		got := robotsSteps(t, r, s, "robots.test", "goto-private", "goto-public")
		if !strings.Contains(got["goto-private"], "net::ERR_BLOCKED_BY_CLIENT") || got["goto-public"] != "ok" {
			t.Errorf("got %v, want goto-private net::ERR_BLOCKED_BY_CLIENT, goto-public ok", got)
		}
		if seen(s, "/private/x") || !seen(s, "/public/x") {
			t.Errorf("the site saw /private/x: %v, /public/x: %v; want false, true", seen(s, "/private/x"), seen(s, "/public/x"))
		}
	})
	t.Run("404 allows all", func(t *testing.T) {
		s := robotsSite(t, http.NotFound)
		r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "obey"}))
		if got := robotsSteps(t, r, s, "robots.test", "goto-private"); got["goto-private"] != "ok" || !seen(s, "/private/x") {
			t.Errorf("got %v, want /private/x loaded", got)
		}
	})
	t.Run("hang past the bound", func(t *testing.T) {
		stuck := make(chan struct{})
		defer close(stuck)
		s := robotsSite(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-stuck:
			}
		})
		r := startRelay(t, limiter.Config{}, withPolicy(t, policy.Flags{Robots: "obey"}))
		start := time.Now()
		got := robotsSteps(t, r, s, "robots.test", "goto-private", "goto-private-again")
		t.Logf("both navigations took %v (bound %v)", time.Since(start), policy.DefaultRobotsWait)
		if got["goto-private"] != "ok" || got["goto-private-again"] != "ok" || !seen(s, "/private/x") || !seen(s, "/private/x2") {
			t.Errorf("got %v, want both loaded", got)
		}
		if n := len(r.logs.Lines("robots.txt did not answer in time", "robots.test")); n != 1 {
			t.Errorf("logged the hanging robots.txt %d times, want once", n)
		}
	})
}

// TestRobotsObeyLightpanda: the core case through real `lightpanda serve`
// (held in the client's page session) and Puppeteer: /private/x is refused
// before it leaves Lightpanda and the site never sees it, /public/x loads.
// Goto and the redirect throw net::ERR_BLOCKED_BY_CLIENT (Lightpanda takes
// Fetch.failRequest's BlockedByClient), a link click is refused too; with
// --robots crawl-delay all of them load. Lightpanda's own --obey-robots, without the relay, is recorded beside it
// for docs/politeness.md: it refuses the same three, and goto throws
// RobotsBlocked.
func TestRobotsObeyLightpanda(t *testing.T) {
	steps := []string{"goto-private", "goto-public", "click", "redirect"}
	t.Run("relay", func(t *testing.T) {
		r, s, got := robotsOnLightpanda(t, "obey", steps)
		if got["goto-public"] != "ok" || !seen(s, "/public/x") {
			t.Errorf("goto-public: got %q, want ok", got["goto-public"])
		}
		privateRefused(t, s, got)
		body, _ := httpGet(r.url + "/metrics")
		t.Logf("%s", grepMetric(body, `outcome="disallowed"`))
		if m := grepMetric(body, `outcome="disallowed"`); !strings.HasSuffix(m, " 3") {
			t.Errorf("/metrics: got %q, want 3 disallowed navigations", m)
		}
	})
	t.Run("crawl-delay", func(t *testing.T) {
		_, s, got := robotsOnLightpanda(t, "crawl-delay", steps)
		allLoaded(t, s, got, steps)
	})
	t.Run("lightpanda --obey-robots directly", func(t *testing.T) {
		lp := startLightpanda(t, "--obey-robots")
		s := robotsSite(t, disallowPrivate)
		out := runNode(t, 2*time.Minute, "pptr-robots.mjs", "LP=1", "RELAY="+lp, "BASE="+s.url(lpHost, ""), "STEPS="+strings.Join(steps, ","))
		t.Logf("steps: %s", out)
		for _, path := range privatePaths {
			t.Logf("the site saw %s: %v", path, seen(s, path))
		}
	})
}

// robotsOnLightpanda serves a site whose robots.txt disallows /private/
// and runs js/pptr-robots.mjs's steps on Lightpanda through a relay with
// --robots mode; it returns the relay, the site and what each step ended
// with.
func robotsOnLightpanda(t *testing.T, mode string, steps []string) (*relayed, *site, map[string]string) {
	t.Helper()
	lp := startLightpanda(t)
	s := robotsSite(t, disallowPrivate)
	r := startRelayTo(t, lp, limiter.Config{}, withPolicy(t, policy.Flags{Robots: mode}))
	out := runNode(t, 2*time.Minute, "pptr-robots.mjs", "LP=1", "RELAY="+r.url, "BASE="+s.url(lpHost, ""), "STEPS="+strings.Join(steps, ","))
	t.Logf("steps: %s", out)
	got := map[string]string{}
	json.Unmarshal(out, &got)
	return r, s, got
}

// robotsOnPage opens the relay's page in a browser of its own, as a user
// would, and checks what it shows of TestRobotsObey's refusals: the
// navigations' "disallowed 3" and robots.test's "refused 3". Its
// screenshot goes to the test's log directory (CDP_E2E_SHOTS, when set).
func robotsOnPage(t *testing.T, r *relayed) {
	t.Helper()
	w := openWatcher(t)
	w.open(t, r.url+"/")
	var shown struct{ Navs, Row string }
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		w.eval(t, `({navs: document.getElementById("navs").innerText,
			row: (document.querySelector('#rows .bucket[data-bucket="robots.test"]') || {innerText: ""}).innerText})`, &shown)
		if strings.Contains(shown.Navs, "disallowed 3") && strings.Contains(shown.Row, "refused 3") {
			break
		}
	}
	if !strings.Contains(shown.Navs, "disallowed 3") {
		t.Errorf("the page's navigations: %q, want disallowed 3", shown.Navs)
	}
	if !strings.Contains(shown.Row, "refused 3") {
		t.Errorf("the page's robots.test row: %q, want refused 3", shown.Row)
	}
	if dir := os.Getenv("CDP_E2E_SHOTS"); dir != "" {
		raw, err := w.rc.screenshot(w.session)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "robots-dashboard.png"), raw, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot: %v", err)
		}
	}
}

// privateRefused checks that, robots.txt obeyed, goto and the server
// redirect into /private/ threw net::ERR_BLOCKED_BY_CLIENT, the link click
// into it was refused, and the site saw none of its paths.
func privateRefused(t *testing.T, s *site, got map[string]string) {
	t.Helper()
	for _, step := range []string{"goto-private", "redirect"} {
		if !strings.Contains(got[step], "net::ERR_BLOCKED_BY_CLIENT") {
			t.Errorf("%s: got %q, want net::ERR_BLOCKED_BY_CLIENT", step, got[step])
		}
	}
	if got["click"] == "ok" {
		t.Errorf("click into /private/: loaded, want refused")
	}
	for _, path := range privatePaths {
		if seen(s, path) {
			t.Errorf("the site saw %s, which its robots.txt disallows", path)
		}
	}
}

// allLoaded checks that, robots.txt read for its Crawl-delay only, every
// step loaded and the site saw each /private/ path.
func allLoaded(t *testing.T, s *site, got map[string]string, steps []string) {
	t.Helper()
	for _, step := range steps {
		if got[step] != "ok" {
			t.Errorf("%s: got %q, want ok", step, got[step])
		}
	}
	for _, path := range privatePaths {
		if !seen(s, path) {
			t.Errorf("the site never saw %s", path)
		}
	}
}
