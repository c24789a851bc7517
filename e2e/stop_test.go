//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The relay's stop, as TestStopFailsClosed runs it: a 500 ms slot per
// navigation (burst 1), and a short drain so that the test is short.
const (
	stopSpacing  = 500 * time.Millisecond
	stopMinGap   = 490 * time.Millisecond // what the site may see between two documents
	stopDrain    = 4 * time.Second
	stopExitWait = stopDrain + 1500*time.Millisecond // the drain, and closing pages and connections
	stopSignalAt = 2 * time.Second                   // after the first document reached the site
	stopQuiet    = 3 * time.Second                   // after the exit, with nothing reaching the site
	stopProbeAt  = 500 * time.Millisecond            // after the signal: /healthz and /json/version
)

// stopCase is one browser behind a stopping relay.
type stopCase struct {
	host           string        // the site's host the pages go to
	clients, pages int           // Puppeteer connections, and pages each creates
	browser        []string      // --upstream URL, or -- and a browser command
	direct         string        // the browser's own CDP endpoint, to look for pages left open; "" for none
	launched       bool          // the relay started the browser, which must go with it
	hurry          time.Duration // a second SIGTERM this long after the first; 0 for none
}

// upstreamCase is one client's 20 pages to host, through a relay in front
// of a Chromium of the test's own.
func upstreamCase(t *testing.T, host string) stopCase {
	httpURL := ownChromium(t)
	return stopCase{host: host, clients: 1, pages: 20, browser: []string{"--upstream", httpURL}, direct: httpURL}
}

// launchCase is one client's 20 pages to host, through a relay that
// launched its Chromium.
func launchCase(t *testing.T, host string) stopCase {
	return stopCase{host: host, clients: 1, pages: 20, browser: launchChromium(t), launched: true}
}

// lightpandaCase is 16 clients' page each to lpHost, through a relay in
// front of a Lightpanda: 16 connections (Lightpanda's default most), and
// a few more for the relay's own.
func lightpandaCase(t *testing.T) stopCase {
	lp := startLightpanda(t, "--cdp-max-connections", "24")
	return stopCase{host: lpHost, clients: 16, pages: 1, browser: []string{"--upstream", lp}}
}

// TestStopFailsClosed stops the relay binary (SIGTERM) while it holds a
// crawl's navigations to one host (500 ms apart, burst 1, --drain-timeout
// 4s), about 2 s after the first reached the site. Before the relay had a
// stop of its own, Chromium let every held request go once the relay's
// connections went: the 16 still held reached the site within ~150 ms.
// Now the site sees no two documents less than 490 ms apart, before the
// signal or after (a); the relay exits 0 within the drain and 1.5 s (b);
// nothing reaches the site in the 3 s after it exited (c); each goto that
// did not reach the site got the relay's own 429 (X-Cdp-Throttle: ...
// reason=stopping, with a Retry-After) or an error (d); the pages the
// client created are closed in the Chromium that outlives the relay (e);
// and while it drains the relay answers /healthz 503 "stopping" and
// /json/version 503 with a Retry-After (f); the navigations whose slots
// lie past the drain's end get the relay's 429 at once, within a second
// of the signal (g). In front of a Chromium the
// relay launched, the browser goes with it; Lightpanda takes one page per
// connection, so there each client has one.
func TestStopFailsClosed(t *testing.T) {
	t.Run("chromium-upstream", func(t *testing.T) { runStop(t, upstreamCase(t, "stop.test")) })
	t.Run("chromium-launch", func(t *testing.T) { runStop(t, launchCase(t, "stop.test")) })
	t.Run("second-signal", func(t *testing.T) {
		c := upstreamCase(t, "stop.test")
		c.hurry = 1200 * time.Millisecond
		runStop(t, c)
	})
	t.Run("lightpanda", func(t *testing.T) { runStop(t, lightpandaCase(t)) })
}

// stopGoto is what one goto of stop-crawl.mjs got.
type stopGoto struct {
	I              int     `json:"i"`
	URL            string  `json:"url"`
	Start          int64   `json:"start"` // ms since the epoch
	Took           float64 `json:"took"`  // ms
	Status         int     `json:"status"`
	RetryAfter     string  `json:"retryAfter"`
	Throttle       string  `json:"throttle"`
	Error          string  `json:"error"`
	DisconnectedAt int64   `json:"disconnectedAt"` // ms since the epoch, 0 if not
}

// ended is when the goto returned or threw.
func (g stopGoto) ended() time.Time {
	return time.UnixMicro(g.Start*1000 + int64(g.Took*1000))
}

// refusedStopping reports whether g got the relay's own 429 for a stop.
func (g stopGoto) refusedStopping() bool {
	return g.Error == "" && g.Status == http.StatusTooManyRequests && strings.Contains(g.Throttle, "reason=stopping") && g.RetryAfter != ""
}

// watchRun marks one crawl's documents of host at s: the run's marker
// (in each document's query, run=), what tells its documents, and the
// first of them as it arrives.
func watchRun(s *site, host string) (run string, isDoc func(hit) bool, first <-chan hit) {
	run = runID()
	isDoc = func(h hit) bool {
		return h.Host == host && strings.HasPrefix(h.Path, "/page") && strings.Contains(h.Query, "run="+run)
	}
	ch := make(chan hit, 1)
	s.onHit(func(h hit) {
		if isDoc(h) {
			select {
			case ch <- h:
			default:
			}
		}
	})
	return run, isDoc, ch
}

func runStop(t *testing.T, c stopCase) {
	s := newSite(t)
	run, isDoc, first := watchRun(s, c.host)
	r := startStoppingRelay(t, c.browser...)
	var browserPID int
	if c.launched {
		browserPID = int(r.logs.waitFor(t, "browser started", time.Second)["pid"].(float64))
	}

	n := c.clients * c.pages
	crawl := startStopCrawl(t, r.url, s.url(c.host, ""), run, c.clients, c.pages)

	crawl.untilSignal(t, first)
	sigAt := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if c.hurry > 0 {
		go func() {
			time.Sleep(time.Until(sigAt.Add(c.hurry)))
			r.cmd.Process.Signal(syscall.SIGTERM)
		}()
	}
	probes := make(chan stopProbe, 1)
	go func() {
		time.Sleep(time.Until(sigAt.Add(stopProbeAt)))
		probes <- probeStopping(r.url)
	}()

	select {
	case <-r.exited:
	case <-time.After(stopExitWait + 10*time.Second):
		t.Fatalf("relay still running %v after SIGTERM", stopExitWait+10*time.Second)
	}
	exitAfter := r.exitAt.Sub(sigAt)

	// (e) The pages the client created, in the Chromium that outlives the
	// relay.
	var left []string
	if c.direct != "" {
		targets := crawl.targets()
		for deadline := r.exitAt.Add(2 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			left = pagesLeft(t, c.direct, c.host, targets)
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
	}
	if c.launched {
		for deadline := r.exitAt.Add(2 * time.Second); syscall.Kill(browserPID, 0) == nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("(c) the launched browser (pid %d) still runs 2 s after the relay exited", browserPID)
				break
			}
		}
	}
	time.Sleep(time.Until(r.exitAt.Add(stopQuiet)))
	docs := byArrival(t, c.host, s.hitsOf(isDoc))
	probe := <-probes

	var gotos []stopGoto
	select {
	case <-crawl.exited:
		gotos = crawl.gotos()
	case <-time.After(15 * time.Second):
		t.Errorf("stop-crawl.mjs still running 15 s after the relay exited\nstderr:\n%s", crawl.stderr.String())
	}

	rel := func(at time.Time) string { return fmt.Sprintf("%+8.1f ms", ms(at.Sub(sigAt))) }

	// The documents, as the site saw them.
	reachedBy := map[int]hit{}
	var table strings.Builder
	fmt.Fprintf(&table, "documents that reached the site (relative to SIGTERM; exit at %s):", rel(r.exitAt))
	minAfter := time.Duration(-1)
	var tooClose []string
	after, prevI := 0, 0
	for k, d := range docs {
		q, _ := url.ParseQuery(d.Query)
		i, err := strconv.Atoi(q.Get("i"))
		if err != nil {
			t.Errorf("a document without its goto's number: %s?%s", d.Path, d.Query)
		}
		if _, twice := reachedBy[i]; twice {
			t.Errorf("goto %d reached the site twice", i)
		}
		reachedBy[i] = d
		gap := ""
		if d.reached().After(sigAt) {
			after++
		}
		if k > 0 {
			g := d.reached().Sub(docs[k-1].reached())
			gap = fmt.Sprintf("  gap %7.1f ms", ms(g))
			if d.reached().After(sigAt) && (minAfter < 0 || g < minAfter) {
				minAfter = g
			}
			if g < stopMinGap {
				tooClose = append(tooClose, fmt.Sprintf("i=%d at %s, %.1f ms after i=%d", i, rel(d.reached()), ms(g), prevI))
			}
		}
		fmt.Fprintf(&table, "\n  i=%-3d %s%s", i, rel(d.reached()), gap)
		prevI = i
	}
	t.Logf("%s", table.String())

	// What each goto got.
	var got strings.Builder
	fmt.Fprintf(&got, "gotos (ended relative to SIGTERM):")
	refused, errored := 0, 0
	for _, g := range gotos {
		where := "not reached"
		if d, ok := reachedBy[g.I]; ok {
			where = "reached " + rel(d.reached())
		}
		fmt.Fprintf(&got, "\n  i=%-3d %-22s ended %s  status %d  x-cdp-throttle %q  retry-after %q  error %q",
			g.I, where, rel(g.ended()), g.Status, g.Throttle, g.RetryAfter, g.Error)
		_, reached := reachedBy[g.I]
		switch {
		case reached && g.refusedStopping():
			t.Errorf("(d) goto %d reached the site and got the relay's stopping 429 too", g.I)
		case reached:
		case g.refusedStopping():
			refused++
		case g.Error != "":
			errored++
		default:
			t.Errorf("(d) goto %d did not reach the site and got status %d, x-cdp-throttle %q, retry-after %q: want the relay's 429 with reason=stopping and a Retry-After, or an error",
				g.I, g.Status, g.Throttle, g.RetryAfter)
		}
	}
	t.Logf("%s", got.String())
	t.Logf("%d documents reached the site (%d after SIGTERM), %d gotos got the relay's stopping 429, %d an error; least gap after SIGTERM %.1f ms; exit %.1f ms after SIGTERM, status %v",
		len(docs), after, refused, errored, ms(minAfter), ms(exitAfter), r.exitErr)
	if c.direct != "" {
		t.Logf("pages of the client still open in the browser 2 s after the exit: %d %v", len(left), left)
	}
	t.Logf("%s after SIGTERM: /healthz %d %s; /json/version %d, Retry-After %q", stopProbeAt, probe.healthCode, probe.healthBody, probe.versionCode, probe.versionRetryAfter)

	// (a) Never two documents closer than a slot, least of all after the
	// signal, when the old relay let everything go at once.
	if len(tooClose) > 0 {
		t.Errorf("(a) documents closer than %v:\n  %s", stopMinGap, strings.Join(tooClose, "\n  "))
	}
	// The drain let go what it held at its slots: about 8 of them in 4 s
	// (2 in 1.2 s, cut short by a second signal).
	if want := min(4, int(c.hurry/stopSpacing)); c.hurry == 0 && after < 4 || c.hurry > 0 && after < want {
		t.Errorf("(a) %d documents reached the site after SIGTERM, want the held navigations whose slots fell in the %v drain (about 8)", after, stopDrain)
	}
	// (g) Those whose slots lay past the drain's end, about all held but
	// the 8 next, got the relay's 429 at once, not when the drain ended.
	before := len(docs) - after
	pastEnd := n - before - int(stopDrain/stopSpacing) - 1 // the one at the end's edge may go either way
	early := 0
	for _, g := range gotos {
		if g.refusedStopping() && g.ended().Before(sigAt.Add(time.Second)) {
			early++
		}
	}
	if gotos != nil && early < pastEnd {
		t.Errorf("(g) %d gotos got the relay's stopping 429 within 1 s of SIGTERM, want at least %d: of the %d navigations held at the signal, those whose slots lay past the %v drain's end are answered at once",
			early, pastEnd, n-before, stopDrain)
	}
	// (b)
	if r.exitErr != nil {
		t.Errorf("(b) the relay exited with %v, want status 0", r.exitErr)
	}
	if c.hurry > 0 && exitAfter > c.hurry+1500*time.Millisecond {
		t.Errorf("(b) the relay exited %v after the first SIGTERM, want within 1.5 s of the second (%v)", exitAfter.Round(time.Millisecond), c.hurry)
	}
	if exitAfter > stopExitWait {
		t.Errorf("(b) the relay exited %v after SIGTERM, want within %v (--drain-timeout %v and 1.5 s)", exitAfter.Round(time.Millisecond), stopExitWait, stopDrain)
	}
	// (c)
	if late := slices.DeleteFunc(slices.Clone(docs), func(d hit) bool { return !d.reached().After(r.exitAt) }); len(late) > 0 {
		t.Errorf("(c) %d documents reached the site after the relay exited:%s", len(late), describeDocs(late))
	}
	// (d)
	if gotos != nil && len(gotos) != n {
		t.Errorf("(d) stop-crawl.mjs reported %d gotos, want %d", len(gotos), n)
	}
	if len(docs)+refused+errored != n && gotos != nil {
		t.Errorf("(d) %d documents reached the site, %d gotos got the stopping 429 and %d an error: want %d in all", len(docs), refused, errored, n)
	}
	// (e)
	if len(left) > 0 {
		t.Errorf("(e) %d pages the client created still open in the browser 2 s after the relay exited: %v", len(left), left)
	}
	// (f)
	if probe.err != nil {
		t.Errorf("(f) asking the stopping relay: %v", probe.err)
	}
	if probe.healthCode != http.StatusServiceUnavailable || probe.healthStatus != "stopping" {
		t.Errorf("(f) /healthz while draining: %d %s, want 503 with \"status\":\"stopping\"", probe.healthCode, probe.healthBody)
	}
	if probe.versionCode != http.StatusServiceUnavailable || probe.versionRetryAfter == "" {
		t.Errorf("(f) /json/version while draining: %d, Retry-After %q; want 503 with a Retry-After", probe.versionCode, probe.versionRetryAfter)
	}
}

// stoppingRelay is the binary, stopped by the test.
type stoppingRelay struct {
	url string // http://127.0.0.1:PORT
	*loggedProc
}

// startStoppingRelay runs the binary with a 500 ms slot per navigation,
// burst 1 and a 4 s drain, in front of the browser of args (--upstream
// URL, or -- and a command), logging at debug level; its log is shown if
// the test fails.
func startStoppingRelay(t *testing.T, args ...string) *stoppingRelay {
	t.Helper()
	bin := buildBinary(t)
	listen := "127.0.0.1:" + freePort(t)
	argv := append([]string{"--listen", listen, "--log-format", "json", "--log-level", "debug",
		"--http-nav-delay", stopSpacing.String(), "--http-nav-burst", "1", "--drain-timeout", stopDrain.String()}, args...)
	cmd := exec.Command(bin, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &stoppingRelay{url: "http://" + listen, loggedProc: startWatched(t, cmd)}
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			cmd.Process.Kill()
			<-r.exited
		}
		time.Sleep(100 * time.Millisecond) // its last lines
		r.pr.Close()
		if t.Failed() || os.Getenv("E2E_RELAY_LOG") != "" {
			r.logs.mu.Lock()
			defer r.logs.mu.Unlock()
			t.Logf("relay %s\nstderr:\n%s", strings.Join(argv, " "), r.logs.raw.String())
		}
	})
	r.logs.waitFor(t, "relay ready", 60*time.Second)
	return r
}

// stopCrawl is stop-crawl.mjs running.
type stopCrawl struct {
	*nodeProc
	mu    sync.Mutex
	lines map[string]json.RawMessage // its stdout's JSON lines by their one key; guarded by mu
}

// untilSignal waits for the first document of the crawl's run to reach
// the site (first, from watchRun), then stopSignalAt more: when a test
// stops or kills the relay.
func (c *stopCrawl) untilSignal(t *testing.T, first <-chan hit) {
	t.Helper()
	var firstDoc hit
	select {
	case firstDoc = <-first:
	case <-c.exited:
		t.Fatalf("stop-crawl.mjs ended before any document reached the site: %v\nstdout:\n%s\nstderr:\n%s", c.err, c.stdout.String(), c.stderr.String())
	case <-time.After(45 * time.Second):
		t.Fatalf("no document reached the site within 45 s\nstderr:\n%s", c.stderr.String())
	}
	time.Sleep(time.Until(firstDoc.At.Add(stopSignalAt)))
}

func startStopCrawl(t *testing.T, relayURL, base, run string, clients, pages int) *stopCrawl {
	t.Helper()
	c := &stopCrawl{lines: map[string]json.RawMessage{}}
	c.nodeProc = startNode(t, "stop-crawl.mjs", func(line []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(line, &m) == nil {
			c.mu.Lock()
			for k, v := range m {
				c.lines[k] = v
			}
			c.mu.Unlock()
		}
	}, "RELAY="+relayURL, "BASE="+base, "RUN="+run, "CLIENTS="+strconv.Itoa(clients), "PAGES="+strconv.Itoa(pages), "TIMEOUT=20000")
	return c
}

// targets returns the target ids of the script's pages, once it said them.
func (c *stopCrawl) targets() []string { return said[[]string](c, "targets") }

// gotos returns what each goto got, once the script said it.
func (c *stopCrawl) gotos() []stopGoto { return said[[]stopGoto](c, "gotos") }

// said decodes the script's line with key, once it said it (the zero T
// before).
func said[T any](c *stopCrawl, key string) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	var v T
	json.Unmarshal(c.lines[key], &v)
	return v
}

// pagesLeft returns the pages of the browser at base (its /json/list) that
// are among targets or show a URL of host.
func pagesLeft(t *testing.T, base, host string, targets []string) []string {
	t.Helper()
	body, err := httpGet(base + "/json/list")
	if err != nil {
		t.Fatalf("%s/json/list: %v", base, err)
	}
	var list []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		URL  string `json:"url"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("%s/json/list: %v: %s", base, err, body)
	}
	var left []string
	for _, p := range list {
		u, _ := url.Parse(p.URL)
		if p.Type == "page" && (slices.Contains(targets, p.ID) || (u != nil && u.Hostname() == host)) {
			left = append(left, p.ID+" "+p.URL)
		}
	}
	return left
}

// stopProbe is what a stopping relay answered.
type stopProbe struct {
	healthCode        int
	healthBody        string
	healthStatus      string // its JSON's "status"
	versionCode       int
	versionRetryAfter string
	err               error
}

func probeStopping(base string) (p stopProbe) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(base + "/healthz")
	if err != nil {
		p.err = err
		return p
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.healthCode, p.healthBody = resp.StatusCode, string(bytes.TrimSpace(body))
	var h struct {
		Status string `json:"status"`
	}
	json.Unmarshal(body, &h)
	p.healthStatus = h.Status
	resp, err = client.Get(base + "/json/version")
	if err != nil {
		p.err = err
		return p
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	p.versionCode, p.versionRetryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
	return p
}
