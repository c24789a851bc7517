//go:build e2e

package e2e

// Issue 28: the Python crawlers and the other Chromes. Selenium (through
// ChromeDriver's debuggerAddress), Playwright for Python (connect_over_cdp)
// and Scrapy with scrapy-playwright, on Chromium and on Lightpanda, each
// through a relay with a fixed spacing and a burst of 1; and the holding
// tests that matter most (every kind of navigation once, exact at the site)
// against chromium-headless-shell. Each checks the spacing where it counts,
// at the site (its kernel's arrival times), every request answered, and
// /metrics counting no navigation unheld.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clientSpacing is the spacing of the clients' tests: short runs, each
// navigation waiting for its slot.
const clientSpacing = 200 * time.Millisecond

// seleniumEnv keeps Selenium Manager off the network: it uses the
// chromedriver on PATH (Debian's chromium-driver), and sends no usage
// statistics.
var seleniumEnv = []string{"SE_OFFLINE=true", "SE_AVOID_STATS=true"}

// unheldMetric is the /metrics sample of navigations that reached the
// network without a booking.
const unheldMetric = `cdp_throttle_navigations_total{outcome="unheld"}`

// checkAtSite checks the navigations docs of one host: none reached the
// site closer to the one before it than spacing less slack; the relay held
// some of them; /metrics counts none unheld. It returns the lowest gap.
func checkAtSite(t *testing.T, r *relayed, name string, docs []hit, spacing, slack time.Duration) time.Duration {
	t.Helper()
	lowest, held := checkSpacedAtSite(t, r, name, docs, spacing, slack)
	if held == 0 {
		t.Errorf("%s: the relay held none of the %d navigations: the test shows nothing", name, len(docs))
	}
	return lowest
}

// checkSpacedAtSite is checkAtSite but for the guard: it returns the
// lowest gap and how many of the navigations the relay held, for a test
// that guards itself otherwise.
func checkSpacedAtSite(t *testing.T, r *relayed, name string, docs []hit, spacing, slack time.Duration) (lowestGap time.Duration, held int) {
	t.Helper()
	if len(docs) < 2 {
		t.Fatalf("%s: the site saw %d navigations, want more", name, len(docs))
	}
	gaps := gapsAfter(byArrival(t, name, docs), 1)
	checkGaps(t, name, gaps, spacing, slack)
	held = len(heldBookings(r, docs[0].Host))
	if n := metricAt(t, r.url, unheldMetric); n != 0 {
		t.Errorf("%s: /metrics counts %v navigations unheld, want 0", name, n)
	}
	low := slices.Sorted(slices.Values(gaps))
	var lowest []string
	for _, g := range low[:min(3, len(low))] {
		lowest = append(lowest, fmt.Sprintf("%.1f", ms(g)))
	}
	t.Logf("%s: %d navigations, %d held; gaps as they reached the site lowest %s ms, p50 %.1f ms; unheld 0",
		name, len(docs), held, strings.Join(lowest, ", "), ms(p50(gaps)))
	return low[0], held
}

// checkTitles checks that a client script loaded want pages of run, each
// answered by the site (its title is the page's query).
func checkTitles(t *testing.T, out []byte, run string, want int) {
	t.Helper()
	var got struct{ Titles []string }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the script printed %q: %v", out, err)
	}
	if len(got.Titles) != want {
		t.Errorf("the script loaded %d pages, want %d: %q", len(got.Titles), want, got.Titles)
	}
	for _, title := range got.Titles {
		if !strings.Contains(title, "run="+run) {
			t.Errorf("a page's title is %q, want the site's page of run %s", title, run)
		}
	}
}

// hostDocuments returns every document the site served host, warm-ups too.
func hostDocuments(s *site, host string) []hit {
	return s.hitsOf(func(h hit) bool { return h.Host == host && isDocumentPath(h.Path) })
}

// checkClientAtSite checks that the site saw n navigations of host, and
// checkAtSite for every document of host, the script's warm-ups
// (e2elib.warm) included: a fresh tab's first navigation, slow to leave,
// is not taken as the browser's usual lag until eight departures are in
// (pace.DefaultWarm), so the one after it is not let go early. Before
// that, the gap from the last warm-up to the first navigation was 190.9
// ms at 200 ms once with Selenium.
func checkClientAtSite(t *testing.T, r *relayed, s *site, host string, n int, spacing time.Duration) {
	t.Helper()
	if got := navigations(s, host); len(got) != n {
		t.Errorf("the site saw %d navigations, want %d:%s", len(got), n, describe(got))
	}
	checkAtSite(t, r, host, hostDocuments(s, host), spacing, exactSlack)
}

// TestSelenium: Selenium's ChromeDriver attached by debuggerAddress to the
// relay: gets, a link click and a refresh of one host, each in its slot at
// the site.
func TestSelenium(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, fixed(clientSpacing, 1))
	const host = "selenium.test"
	run := runID()
	out := runPython(t, time.Minute, "selenium_nav.py",
		append([]string{"RELAY_ADDR=" + r.host, "BASE=" + s.url(host, ""), "RUN=" + run}, seleniumEnv...)...)
	checkTitles(t, out, run, 5)
	checkClientAtSite(t, r, s, host, 5, clientSpacing)
}

// TestPlaywrightPython: Playwright for Python's connect_over_cdp to the
// relay, a context and a page of its own: gotos and a link click of one
// host, each in its slot at the site.
func TestPlaywrightPython(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, fixed(clientSpacing, 1))
	const host = "pwpy.test"
	run := runID()
	out := runPython(t, time.Minute, "pw_nav.py", "RELAY="+r.url, "BASE="+s.url(host, ""), "RUN="+run)
	checkTitles(t, out, run, 5)
	checkClientAtSite(t, r, s, host, 5, clientSpacing)
}

// crawlPages is the size of the site the Scrapy tests crawl.
const crawlPages = 30

// crawlSite serves /crawl?n=N for N in 1..pages: page N links to pages 2N
// and 2N+1 (a tree of them all) and back to page 1.
func crawlSite(s *site, pages int) {
	s.handle("/crawl", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 1 || n > pages {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>page %d</title><body><a href="/crawl?n=1">home</a>`, n)
		for _, c := range []int{2 * n, 2*n + 1} {
			if c <= pages {
				fmt.Fprintf(w, ` <a href="/crawl?n=%d">page %d</a>`, c, c)
			}
		}
		fmt.Fprint(w, "</body>")
	})
}

// scrapyResult is what scrapy_crawl.py prints.
type scrapyResult struct {
	Pages []struct {
		URL    string
		Status int
	}
	Failed []struct {
		URL, Error string
		Retries    int    // how often Scrapy retried it
		Status     int    // of the answer it failed on, 0 when none
		Throttle   string // that answer's X-Cdp-Throttle
	}
}

// runScrapy crawls start with scrapy_crawl.py, its scrapy-playwright
// settings being block pointed at r, with env added to its environment.
func runScrapy(t *testing.T, r *relayed, block pyBlock, start string, env ...string) scrapyResult {
	t.Helper()
	res := crawlScrapy(t, r, block, start, env...)
	for _, f := range res.Failed {
		t.Errorf("%s failed: %s", f.URL, f.Error)
	}
	for _, p := range res.Pages {
		if p.Status != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.URL, p.Status)
		}
	}
	return res
}

// crawlScrapy is runScrapy, with what the spider got and what failed
// left to the caller.
func crawlScrapy(t *testing.T, r *relayed, block pyBlock, start string, env ...string) scrapyResult {
	t.Helper()
	settings := filepath.Join(t.TempDir(), "settings.py")
	if err := os.WriteFile(settings, []byte(block.pointedAt(r, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runPython(t, 2*time.Minute, "scrapy_crawl.py", append([]string{"SETTINGS=" + settings, "START=" + start}, env...)...)
	var res scrapyResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("scrapy_crawl.py printed %q: %v", out, err)
	}
	return res
}

// TestScrapyPlaywright: Scrapy with scrapy-playwright, configured by the
// settings block of README.md (Chromium) and of docs/clients.md
// (Lightpanda: one page per context), crawls a site of 30 pages by
// following its links through the relay: every page once, answered, each
// in its slot at the site from the first. (scrapy-playwright loads each
// request in a new page; before pace's warm-up, a page's request that left
// 11 ms after its release was taken as the usual lag, and the next one
// was let go 6 ms early: 194.1 ms at 200, once in three runs. On
// Lightpanda, which times no send, the departure is the answer to
// scrapy-playwright's own Fetch.continueRequest: before the relay read it,
// the lowest gaps of nine crawls were 172.2 to 195.8 ms.)
func TestScrapyPlaywright(t *testing.T) {
	for _, b := range []struct {
		name     string
		upstream func(t *testing.T) string
		block    func(pyBlock) bool
	}{
		{"chromium", func(*testing.T) string { return browser.http }, isReadmeScrapySettings},
		{"lightpanda", func(t *testing.T) string { return startLightpanda(t) }, isLightpandaScrapySettings},
	} {
		t.Run(b.name, func(t *testing.T) {
			r := startRelayTo(t, b.upstream(t), fixed(clientSpacing, 1))
			// Lightpanda resolves names itself: the site is an address.
			s := newSiteAt(t, lpHost)
			crawlSite(s, crawlPages)
			start := time.Now()
			res := runScrapy(t, r, documentedBlock(t, b.block), s.url(lpHost, "/crawl?n=1"))
			if len(res.Pages) != crawlPages {
				t.Errorf("the spider got %d pages, want %d", len(res.Pages), crawlPages)
			}
			docs := s.hitsOf(func(h hit) bool { return h.Path == "/crawl" })
			for n := 1; n <= crawlPages; n++ {
				if got := len(slices.DeleteFunc(slices.Clone(docs), func(h hit) bool { return h.Query != fmt.Sprintf("n=%d", n) })); got != 1 {
					t.Errorf("the site served page %d %d times, want once", n, got)
				}
			}
			t.Logf("%d pages crawled in %v", len(res.Pages), time.Since(start).Round(time.Millisecond))
			checkAtSite(t, r, b.name+" crawl", docs, clientSpacing, exactSlack)
		})
	}
}

// TestHeadlessShell: the holding tests that matter most, against Debian's
// chromium-headless-shell (the old headless mode, a browser of its own):
// every kind of navigation once, through Puppeteer at 300 ms, each in a
// slot of its own and none closer than the spacing less exactSlack at the
// site; and 40 navigations over eight busy pages at 200 ms, exact at the
// site.
//
// The shell lets a page created with a URL (Target.createTarget with a
// url, /json/new?url) navigate only once the relay's session on it runs
// it, so the relay's pages connection holds its first request, which
// pauses with no networkId (no session had the page's Network events on
// as it started; Chromium starts it before that session can pause it, and
// net holds it). Followed by its frame, such a page loads in its slot;
// before, the relay never saw it leave and held the next navigation for
// pace's bound, 2 s.
func TestHeadlessShell(t *testing.T) {
	bin, err := exec.LookPath("chromium-headless-shell")
	if err != nil {
		t.Fatalf("no chromium-headless-shell: make deps installs Debian's package (%v)", err)
	}
	shell, _, stop, err := startChromiumBin(bin, "0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Run("kinds", func(t *testing.T) {
		s := newSite(t)
		r := startRelayTo(t, shell, fixed(kindsInterval, 1))
		const host, ra, rb = "shell.test", "shell-a.test", "shell-b.test"
		env := []string{"RELAY=" + r.url, "RUN=" + runID(), "BASE=" + s.url(host, ""), "RA=" + s.url(ra, ""), "RB=" + s.url(rb, "")}
		out := runNode(t, 90*time.Second, "pptr-kinds.mjs", env...)
		t.Logf("client steps: %s", out)
		checkSlots(t, r, host, navigations(s, host), 15, kindsInterval)
		checkRedirects(t, r, s, ra, rb)
		checkAtSite(t, r, host, hostDocuments(s, host), kindsInterval, exactSlack)
	})
	t.Run("exact", func(t *testing.T) {
		const n = 40
		r := startRelayTo(t, shell, fixed(clientSpacing, 1))
		gaps := exactRun(t, r, startSiteProcess(t, robotsOf()), "shell-exact.test", "/six", n, 8)
		checkGaps(t, "shell-exact.test", gaps, clientSpacing, exactSlack)
		if got := metricAt(t, r.url, unheldMetric); got != 0 {
			t.Errorf("/metrics counts %v navigations unheld, want 0", got)
		}
	})
}
