//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/relay"
)

// Sharing one browser: what one client may do to the others (issue 22).

// askBrowser sends method to the browser at ws directly, on a connection
// of its own, and decodes its answer into out.
func askBrowser(t *testing.T, ws, method string, out any) {
	t.Helper()
	rc := dialRaw(t, ws)
	defer rc.close()
	json.Unmarshal(rc.mustCall("", method, nil), out)
}

// browserPID asks the browser at ws (directly) for its process id.
func browserPID(t *testing.T, ws string) int {
	t.Helper()
	var r struct {
		ProcessInfo []struct {
			Type string `json:"type"`
			ID   int    `json:"id"`
		} `json:"processInfo"`
	}
	askBrowser(t, ws, "SystemInfo.getProcessInfo", &r)
	for _, p := range r.ProcessInfo {
		if p.Type == "browser" {
			return p.ID
		}
	}
	t.Fatal("SystemInfo.getProcessInfo names no browser process")
	return 0
}

// directPage is a page as the browser itself lists it.
type directPage struct {
	ID      string `json:"targetId"`
	URL     string `json:"url"`
	Context string `json:"browserContextId"`
}

// pagesOf lists the pages of the browser at ws (directly) whose URL has
// every one of parts.
func pagesOf(t *testing.T, ws string, parts ...string) []directPage {
	t.Helper()
	var r struct {
		TargetInfos []struct {
			directPage
			Type string `json:"type"`
		} `json:"targetInfos"`
	}
	askBrowser(t, ws, "Target.getTargets", &r)
	var out []directPage
	for _, ti := range r.TargetInfos {
		keep := ti.Type == "page"
		for _, p := range parts {
			keep = keep && strings.Contains(ti.URL, p)
		}
		if keep {
			out = append(out, ti.directPage)
		}
	}
	return out
}

// contextsOf lists the browser contexts of the browser at ws (directly).
func contextsOf(t *testing.T, ws string) []string {
	t.Helper()
	var r struct {
		IDs []string `json:"browserContextIds"`
	}
	askBrowser(t, ws, "Target.getBrowserContexts", &r)
	return r.IDs
}

// gone reports whether process pid has exited (it may be a zombie until
// its parent waits for it).
func gone(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
}

// metricAt reads one sample of the /metrics at base (0 when absent).
func metricAt(t *testing.T, base, name string) float64 {
	t.Helper()
	body, err := httpGet(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+]+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// shareOut is what share-close.mjs prints.
type shareOut struct {
	AContext                     string
	AClose                       string
	ACloseMs                     int
	ADisconnected                bool
	B, C                         []string // what B's and C's navigations after A's close showed, or their errors
	BNewPage                     string
	BDisconnected, CDisconnected bool
}

// shareClose is a run of share-close.mjs through a relay in front of a
// Chromium of its own.
type shareClose struct {
	stop func() // stops the Chromium
	ws   string // the Chromium's browser websocket
	pid  int    // its pid before the run
	s    *site
	r    *relayed
	run  string
	took time.Duration // how long the script ran
	out  shareOut
}

// runShareClose starts a Chromium of the test's own (the caller stops it,
// or cleanup if the run fails first), a site and a relay (with opts) in
// front of it, and runs share-close.mjs in mode through them.
func runShareClose(t *testing.T, mode string, opts ...func(*relay.Proxy)) shareClose {
	t.Helper()
	httpURL, ws, stop, err := startChromium()
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(stop)
	t.Cleanup(stop) // should the run fail before the caller can defer it
	sc := shareClose{stop: stop, ws: ws, pid: browserPID(t, ws), s: newSite(t), run: runID()}
	sc.r = startRelayTo(t, httpURL, fixed(20*time.Millisecond, 10), opts...)
	began := time.Now()
	raw := runNode(t, 90*time.Second, "share-close.mjs", "RELAY="+sc.r.url, "SITE="+sc.s.url("share.test", ""), "MODE="+mode, "RUN="+sc.run)
	sc.took = time.Since(began)
	if err := json.Unmarshal(raw, &sc.out); err != nil {
		t.Fatalf("share-close.mjs printed %s: %v", raw, err)
	}
	return sc
}

// TestBrowserCloseIsTheClientsOwn: clients A and B (Puppeteer) and C
// (Playwright connectOverCDP) share a Chromium of their own through the
// relay; A ends with browser.close(). Without --allow-browser-close A's
// pages and context are closed and A disconnected, B and C go on
// navigating and opening pages, and Chromium is the same process; with
// it, the browser exits for all three and the relay then says so
// (/healthz 503, new clients 502), as README says. Browser.crash is
// refused with an error the client sees.
func TestBrowserCloseIsTheClientsOwn(t *testing.T) {
	t.Run("contained", func(t *testing.T) {
		sc := runShareClose(t, "contain")
		defer sc.stop()
		ws, pid, s, r, run, out := sc.ws, sc.pid, sc.s, sc.r, sc.run, sc.out
		t.Logf("A's browser.close() answered in %d ms (%s); the script ran %v", out.ACloseMs, out.AClose, sc.took.Round(time.Millisecond))
		if out.AClose != "ok" || !out.ADisconnected {
			t.Errorf("A: close %q, disconnected %v; want ok, true", out.AClose, out.ADisconnected)
		}
		if want := []string{"1", "2", "3"}; !slices.Equal(out.B, want) || !slices.Equal(out.C, want) || out.BNewPage != "new" {
			t.Errorf("after A closed its browser, B navigated to %q (and a new page: %q), C to %q; want %q each", out.B, out.BNewPage, out.C, want)
		}
		if got := pagesOf(t, ws, "run="+run, "who=a"); len(got) != 0 {
			t.Errorf("A's pages still open: %v", got)
		}
		if slices.Contains(contextsOf(t, ws), out.AContext) {
			t.Errorf("A's browser context %s is still there", out.AContext)
		}
		// B disconnected (its pages stay, for the orphan timeout); C's
		// context went with its connection (Playwright's disposeOnDetach).
		if got := pagesOf(t, ws, "run="+run, "who=b"); len(got) != 2 {
			t.Errorf("B's pages: %v, want its two", got)
		}
		if got := browserPID(t, ws); got != pid {
			t.Errorf("Chromium's pid is %d, was %d", got, pid)
		}
		for _, who := range []string{"b", "c"} {
			for n := 1; n <= 3; n++ {
				if hits := s.hitsOf(func(h hit) bool {
					return h.Path == "/page" && strings.Contains(h.Query, "run="+run) && strings.Contains(h.Query, fmt.Sprintf("who=%s&n=%d", who, n))
				}); len(hits) != 1 {
					t.Errorf("the site saw %s's navigation %d %d times, want once", who, n, len(hits))
				}
			}
		}
		for _, m := range []struct {
			name string
			want float64
		}{
			{`cdp_throttle_leftovers_total{outcome="closed",what="page",why="browser_close"}`, 3},
			{`cdp_throttle_leftovers_total{outcome="closed",what="context",why="browser_close"}`, 1},
			{`cdp_throttle_browser_commands_total{method="Browser.close",outcome="contained"}`, 1},
		} {
			if got := metricAt(t, r.url, m.name); got != m.want {
				t.Errorf("%s = %v, want %v", m.name, got, m.want)
			}
		}
		if n := len(r.logs.Lines("the client closed its browser", `"pages":3`, `"contexts":1`)); n != 1 {
			t.Errorf("logged %d times that the client closed its browser (3 pages, 1 context), want once", n)
		}

		// Browser.crash and Browser.crashGpuProcess: refused, the browser
		// alive.
		rc := dialRaw(t, browserWSVia(t, r))
		for _, m := range []string{"Browser.crash", "Browser.crashGpuProcess"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := rc.call(ctx, "", m, nil)
			cancel()
			if err == nil || !strings.Contains(err.Error(), "--allow-browser-close") || !strings.Contains(err.Error(), "(-32000)") {
				t.Errorf("%s: got %v, want a -32000 error naming --allow-browser-close", m, err)
			}
		}
		rc.mustCall("", "Browser.getVersion", nil)
		if got := browserPID(t, ws); got != pid {
			t.Errorf("after Browser.crash, Chromium's pid is %d, was %d", got, pid)
		}
	})

	t.Run("allowed", func(t *testing.T) {
		sc := runShareClose(t, "allow", func(p *relay.Proxy) { p.AllowBrowserClose = true })
		defer sc.stop()
		pid, r, out := sc.pid, sc.r, sc.out
		t.Logf("allowed: A %q; B got %q, C got %q", out.AClose, out.B, out.C)
		if !out.ADisconnected || !out.BDisconnected || !out.CDisconnected {
			t.Errorf("disconnected: A %v, B %v, C %v; want all three once the browser closed", out.ADisconnected, out.BDisconnected, out.CDisconnected)
		}
		for deadline := time.Now().Add(10 * time.Second); !gone(pid); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("Chromium (pid %d) still runs 10 s after A's Browser.close", pid)
			}
		}
		// README: with --upstream nothing brings it back; /healthz says
		// so and new clients are refused until it answers again.
		if status := healthzWithin(r.url, http.StatusServiceUnavailable, 10*time.Second); status != http.StatusServiceUnavailable {
			t.Errorf("/healthz: %d, want 503 once the browser is gone", status)
		}
		if c, resp, err := websocket.DefaultDialer.Dial("ws://"+r.host+"/", nil); err == nil {
			c.Close()
			t.Error("a new client got a connection to a browser that is gone")
		} else if resp == nil || resp.StatusCode != http.StatusBadGateway {
			t.Errorf("a new client: %v, want 502", err)
		}
		if got := metricAt(t, r.url, `cdp_throttle_browser_commands_total{method="Browser.close",outcome="passed"}`); got != 1 {
			t.Errorf("Browser.close passed: counted %v, want 1", got)
		}
	})

	t.Run("allowed, launched", func(t *testing.T) {
		// README: a browser the relay launched is started again.
		chromium, err := findChromium()
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--allow-browser-close", "--", chromium}, ChromiumFlags...)
		l, ready := launch(t, append(args, "--user-data-dir="+t.TempDir(), "--remote-debugging-port=0")...)
		if !ready {
			t.Fatalf("the relay did not start:\n%s", l.logs.raw.String())
		}
		// The pids of the browsers the relay started, from its log.
		pids := func() []float64 {
			var out []float64
			for _, m := range l.logs.withMessage("browser listening") {
				out = append(out, m["pid"].(float64))
			}
			return out
		}
		l.logs.waitFor(t, "browser listening", 30*time.Second)
		began := time.Now()
		for i := 1; i <= 2; i++ { // twice, quickly: a browser closed is no crash to give up on
			rc := dialRaw(t, "ws://"+l.listen+"/")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			rc.call(ctx, "", "Browser.close", nil)
			cancel()
			for deadline := time.Now().Add(30 * time.Second); len(pids()) < i+1; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no browser started again 30 s after Browser.close %d:\n%s", i, l.logs.raw.String())
				}
			}
			rc = dialRaw(t, "ws://"+l.listen+"/")
			rc.mustCall("", "Browser.getVersion", nil)
		}
		t.Logf("two Browser.close and restarts took %v; pids %v", time.Since(began).Round(time.Millisecond), pids())
		if got := pids(); len(got) != 3 || got[0] == got[1] || got[1] == got[2] {
			t.Errorf("browsers listening: pids %v, want three processes: the first and one after each Browser.close", got)
		}
		// /healthz follows within its 2 s check.
		if status := healthzWithin("http://"+l.listen, http.StatusOK, 10*time.Second); status != http.StatusOK {
			t.Errorf("/healthz after the restarts: %d, want 200", status)
		}
	})
}

// healthzWithin asks the relay at base for /healthz every 100 ms until it
// answers want or within has passed, and returns the last status it
// answered (0 if it never did).
func healthzWithin(base string, want int, within time.Duration) int {
	status := 0
	for deadline := time.Now().Add(within); status != want && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
	}
	return status
}

// startNodeSaying starts e2e/js/<script> as startNode does and returns
// once it has printed its first line, which it returns too.
func startNodeSaying(t *testing.T, script string, env ...string) (*nodeProc, string) {
	t.Helper()
	first := make(chan string, 1)
	p := startNode(t, script, func(line []byte) {
		select {
		case first <- string(line):
		default:
		}
	}, env...)
	select {
	case l := <-first:
		return p, l
	case <-p.exited:
		select {
		case l := <-first: // its only line, then it ended
			return p, l
		default:
		}
		t.Fatalf("node %s ended without a word:\n%s", script, p.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("node %s said nothing within 60 s:\n%s", script, p.stderr.String())
	}
	return nil, ""
}

// TestOrphansClosed: a Puppeteer client opens 5 pages and its process is
// killed; after the orphan timeout (3 s here) the relay closes those 5
// pages and nobody else's, while clients that connect meanwhile and look
// at every page (Puppeteer's pages(), Playwright's connectOverCDP) do not
// make them theirs. A client that disconnects and connects again within
// the timeout, and drives its pages, keeps them.
func TestOrphansClosed(t *testing.T) {
	const orphan = 3 * time.Second
	s := newSite(t)
	r := startRelay(t, fixed(20*time.Millisecond, 10), func(p *relay.Proxy) { p.OrphanTimeout = orphan })
	site := s.url("orphan.test", "")
	ws := browser.ws
	run := runID()
	t.Cleanup(func() { // what this test leaves in the shared Chromium
		rc := dialRaw(t, ws)
		for _, p := range pagesOf(t, ws, "run="+run) {
			rc.call(context.Background(), "", "Target.closeTarget", map[string]any{"targetId": p.ID})
		}
	})

	// A bystander with pages of its own, connected throughout.
	startNodeSaying(t, "orphan-pages.mjs", "RELAY="+r.url, "SITE="+site, "WHO=b", "PAGES=2", "RUN="+run)

	t.Run("killed", func(t *testing.T) {
		a, _ := startNodeSaying(t, "orphan-pages.mjs", "RELAY="+r.url, "SITE="+site, "WHO=a", "PAGES=5", "RUN="+run)
		if got := pagesOf(t, ws, "run="+run, "who=a"); len(got) != 5 {
			t.Fatalf("A opened %d pages, want 5", len(got))
		}
		// Others connect and look at every page, and stay: had that made
		// A's pages theirs too, nothing would be closed.
		_, saw := startNodeSaying(t, "orphan-bystand.mjs", "RELAY="+r.url, "STAY=1")
		t.Logf("bystanders that stay saw %s", saw)
		a.cmd.Process.Signal(syscall.SIGKILL)
		killed := time.Now()
		<-a.exited
		time.Sleep(orphan / 3)
		if got := pagesOf(t, ws, "run="+run, "who=a"); len(got) != 5 {
			t.Errorf("%v after A was killed, %d of its pages left, want all 5 until the orphan timeout (%v)", time.Since(killed).Round(time.Millisecond), len(got), orphan)
		}
		// And more look at them while they wait to be closed.
		look := runNode(t, 60*time.Second, "orphan-bystand.mjs", "RELAY="+r.url)
		t.Logf("bystanders %v after the kill saw %s", time.Since(killed).Round(time.Millisecond), bytes.TrimSpace(look))
		var closedAfter time.Duration
		for deadline := killed.Add(orphan + 15*time.Second); ; time.Sleep(50 * time.Millisecond) {
			if len(pagesOf(t, ws, "run="+run, "who=a")) == 0 {
				closedAfter = time.Since(killed)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("A's pages still open %v after it was killed (orphan timeout %v)", time.Since(killed).Round(time.Millisecond), orphan)
			}
		}
		t.Logf("A's 5 pages closed %v after its process was killed (orphan timeout %v)", closedAfter.Round(time.Millisecond), orphan)
		if closedAfter < orphan {
			t.Errorf("A's pages closed %v after it was killed, before the orphan timeout %v", closedAfter, orphan)
		}
		if got := pagesOf(t, ws, "run="+run, "who=b"); len(got) != 2 {
			t.Errorf("the bystander's pages: %d, want its 2", len(got))
		}
		if got := metricAt(t, r.url, `cdp_throttle_leftovers_total{outcome="closed",what="page",why="orphan"}`); got != 5 {
			t.Errorf("orphan pages closed: counted %v, want 5", got)
		}
		if n := len(r.logs.Lines("closed what a client left behind", `"pages":5`)); n != 1 {
			t.Errorf("logged %d times that the relay closed what a client left (5 pages), want once", n)
		}
	})

	t.Run("reconnects", func(t *testing.T) {
		before := metricAt(t, r.url, `cdp_throttle_leftovers_total{outcome="closed",what="page",why="orphan"}`)
		raw := runNode(t, 60*time.Second, "orphan-reconnect.mjs", "RELAY="+r.url, "SITE="+site, "PAGES=3", "RUN="+run,
			"WAIT_MS="+strconv.Itoa(int((orphan+2*time.Second).Milliseconds())))
		var out struct{ Found, After []string }
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("orphan-reconnect.mjs printed %s: %v", raw, err)
		}
		if want := []string{"0", "1", "2"}; !slices.Equal(out.Found, want) || !slices.Equal(out.After, want) {
			t.Errorf("the client found its pages %q when it came back and %q %v later, want %q both times", out.Found, out.After, orphan+2*time.Second, want)
		}
		if got := metricAt(t, r.url, `cdp_throttle_leftovers_total{outcome="closed",what="page",why="orphan"}`); got != before {
			t.Errorf("orphan pages closed: %v, want %v: none of the client's that came back", got, before)
		}
		// It has left for good now: they go after the timeout.
		for deadline := time.Now().Add(orphan + 15*time.Second); len(pagesOf(t, ws, "run="+run, "who=reconnect")) > 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the reconnected client's pages stay after it left for good")
			}
		}
	})
}

// TestLightpandaBrowserClose: on Lightpanda each connection is a browser
// of its own, so the relay passes Browser.close through; one client's
// browser.close() leaves another's session working.
func TestLightpandaBrowserClose(t *testing.T) {
	lp := startLightpanda(t)
	r := startRelayTo(t, lp, fixed(20*time.Millisecond, 10))
	s := newSiteAt(t, lpHost)
	run := runID()
	raw := runNode(t, 60*time.Second, "lp-close.mjs", "RELAY="+r.url, "SITE="+s.url(lpHost, ""), "RUN="+run)
	var out struct {
		AClose        string
		ADisconnected bool
		B             []string
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("lp-close.mjs printed %s: %v", raw, err)
	}
	t.Logf("A's browser.close(): %s", out.AClose)
	if !out.ADisconnected {
		t.Error("A is still connected after browser.close()")
	}
	if want := []string{"1", "2", "3"}; !slices.Equal(out.B, want) {
		t.Errorf("B navigated to %q after A's browser.close(), want %q", out.B, want)
	}
	if got := metricAt(t, r.url, `cdp_throttle_browser_commands_total{method="Browser.close",outcome="passed"}`); got != 1 {
		t.Errorf("Browser.close passed through: counted %v, want 1", got)
	}
}
