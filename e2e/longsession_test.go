//go:build e2e

package e2e

// Issue 38: long sessions with real clients, each through the relay for
// over three minutes with idle gaps of 80 s and big messages, side by
// side: the clients whose websocket libraries were written against
// Chromium alone (ChromeDriver answers no ping, go-rod reads every frame
// as a message) beside those with complete ones.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/cdp"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"
)

// longPlan is one long session's script, the same for every client: a
// load, a big message, an idle gap, two loads back to back (the second
// waits for its slot), a gap, two loads, a big message, a tail, the
// client's own close.
type longPlan struct {
	Relay string // the relay's http:// address
	Base  string // the site's origin
	Run   string
	Idle  time.Duration
	Tail  time.Duration
	Shot  bool // a full-page screenshot (Chromium), else a 1.5 MB string (Lightpanda)
}

// longResult is what a session did: the title of each page it loaded
// and the size of each big message.
type longResult struct {
	Titles []string
	Big    []int
	Steps  []struct {
		Name       string
		Start, End int64 // ms since the session began
	}
}

// stepsTaken lists how long each of the steps that load took, in ms: a
// load that takes longer than the spacing leaves the next one nothing to
// wait for.
func (res longResult) stepsTaken() string {
	var b strings.Builder
	for _, s := range res.Steps {
		if !strings.HasPrefix(s.Name, "idle") && s.Name != "tail" {
			fmt.Fprintf(&b, " %s %d", s.Name, s.End-s.Start)
		}
	}
	return strings.TrimSpace(b.String())
}

// steps runs the plan's steps with load, big and sleep of one client.
func (pl longPlan) steps(res *longResult, load func(n int) (string, error), big func() (int, error)) error {
	t0 := time.Now()
	step := func(name string, f func() error) error {
		start := time.Since(t0).Milliseconds()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		res.Steps = append(res.Steps, struct {
			Name       string
			Start, End int64
		}{name, start, time.Since(t0).Milliseconds()})
		return nil
	}
	loadStep := func(n int) func() error {
		return func() error {
			title, err := load(n)
			res.Titles = append(res.Titles, title)
			return err
		}
	}
	bigStep := func() error {
		n, err := big()
		res.Big = append(res.Big, n)
		return err
	}
	sleep := func(d time.Duration) func() error { return func() error { time.Sleep(d); return nil } }
	for _, s := range []struct {
		name string
		f    func() error
	}{
		{"load 1", loadStep(1)}, {"big 1", bigStep}, {"idle 1", sleep(pl.Idle)},
		{"load 2", loadStep(2)}, {"load 3", loadStep(3)}, {"idle 2", sleep(pl.Idle)},
		{"load 4", loadStep(4)}, {"load 5", loadStep(5)}, {"big 2", bigStep}, {"tail", sleep(pl.Tail)},
	} {
		if err := step(s.name, s.f); err != nil {
			return err
		}
	}
	return nil
}

func (pl longPlan) page(n int) string {
	return fmt.Sprintf("%s/page?run=%s&s=%d", pl.Base, pl.Run, n)
}

func (pl longPlan) noise() string { return pl.Base + "/noise?run=" + pl.Run }

// bigString is what a session asks of Lightpanda, which takes no
// screenshot: a message over 1 MB.
const bigString = "'x'.repeat(1.5e6).length"

// chromedpSession runs the plan with chromedp, whose remote allocator
// takes the relay's http:// address, ending with the cancel that closes
// its tab.
func chromedpSession(pl longPlan) (longResult, error) {
	var res longResult
	allocCtx, cancelAlloc := remote.NewAllocator(context.Background(), pl.Relay)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	// Connects and opens the tab on ctx: the first action's context is
	// the tab's, closed when it ends.
	if err := chromedp.Do(ctx); err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	within := func(f func(ctx context.Context) error) error {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return f(sctx)
	}
	err := pl.steps(&res, func(n int) (title string, err error) {
		err = within(func(ctx context.Context) error {
			if err := chromedp.Do(ctx, chromedp.Navigate(pl.page(n))); err != nil {
				return err
			}
			title, err = chromedp.Run(ctx, chromedp.Title())
			return err
		})
		return title, err
	}, func() (size int, err error) {
		err = within(func(ctx context.Context) error {
			if !pl.Shot {
				size, err = chromedp.Run(ctx, chromedp.Evaluate[int](bigString))
				return err
			}
			if err := chromedp.Do(ctx, chromedp.Navigate(pl.noise())); err != nil {
				return err
			}
			png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
			size = len(png)
			return err
		})
		return size, err
	})
	if err != nil {
		return res, err
	}
	return res, chromedp.Cancel(ctx)
}

// rodSessionEnv, when set, makes the test binary a go-rod client that
// runs the plan it holds (JSON) and prints its result: go-rod panics on
// a frame it cannot read, and a panic there must not end the suite.
const rodSessionEnv = "CDP_THROTTLE_E2E_ROD_SESSION"

// rodSessionMain runs a go-rod session as go-rod's README writes it:
// its own websocket, its default handshake (Sec-WebSocket-Key: nil),
// connected to the browser endpoint launcher.ResolveURL finds, and
// browser.Close() at the end.
func rodSessionMain(plan string) {
	var pl longPlan
	if err := json.Unmarshal([]byte(plan), &pl); err != nil {
		fmt.Fprintln(os.Stderr, "rod session:", err)
		os.Exit(2)
	}
	res, err := rodSession(pl)
	json.NewEncoder(os.Stdout).Encode(res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rod session:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func rodSession(pl longPlan) (longResult, error) {
	var res longResult
	u, err := launcher.ResolveURL(pl.Relay) // as docs/clients.md says
	if err != nil {
		return res, err
	}
	browser := rod.New().ControlURL(u).Timeout(time.Hour)
	if err := browser.Connect(); err != nil {
		return res, fmt.Errorf("connect: %w", err)
	}
	page, err := browser.Page(proto.TargetCreateTarget{URL: "about:blank"})
	if err != nil {
		return res, fmt.Errorf("a page: %w", err)
	}
	timed := func() *rod.Page { return page.Timeout(time.Minute) }
	goTo := func(url string) error {
		if err := timed().Navigate(url); err != nil {
			return err
		}
		return timed().WaitLoad()
	}
	err = pl.steps(&res, func(n int) (string, error) {
		if err := goTo(pl.page(n)); err != nil {
			return "", err
		}
		info, err := timed().Info()
		if err != nil {
			return "", err
		}
		return info.Title, nil
	}, func() (int, error) {
		if !pl.Shot {
			r, err := timed().Eval("() => " + bigString)
			if err != nil {
				return 0, err
			}
			return r.Value.Int(), nil
		}
		if err := goTo(pl.noise()); err != nil {
			return 0, err
		}
		png, err := timed().Screenshot(true, nil)
		return len(png), err
	})
	if err != nil {
		return res, err
	}
	err = browser.Close()
	var ce *cdp.Error
	if !pl.Shot && errors.As(err, &ce) && ce.Code == -32601 {
		err = nil // Lightpanda has no Browser.close: it answers so directly too
	}
	return res, err
}

// runRodSession runs the plan in a go-rod process of its own.
func runRodSession(t *testing.T, pl longPlan, timeout time.Duration) (longResult, error) {
	plan, _ := json.Marshal(pl)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, testBinary(), "-test.run", "^$")
	cmd.Env = append(os.Environ(), rodSessionEnv+"="+string(plan))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var res longResult
	json.Unmarshal(out, &res)
	if err != nil {
		return res, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return res, nil
}

// noisePage serves /noise: a page of 900 × 900 pixels of noise, whose
// full-page screenshot is a PNG of over 2 MB (3 MB as the message).
func noisePage(s *site) {
	s.handle("/noise", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><title>noise</title><body style="margin:0"><canvas id="c" width="900" height="900"></canvas><script>
const c = document.getElementById('c').getContext('2d');
const img = c.createImageData(900, 900);
let x = 2463534242;
for (let i = 0; i < img.data.length; i++) {
  x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
  img.data[i] = (i % 4 === 3) ? 255 : x & 255;
}
c.putImageData(img, 0, 0);
</script></body>`)
	})
}

// longClient is one client of the long sessions.
type longClient struct {
	name string
	run  func(t *testing.T, pl longPlan) (longResult, error)
}

// longClients are the clients a long session runs with, on Chromium
// (shots: screenshots) or on Lightpanda.
func longClients(shots bool, timeout time.Duration) []longClient {
	node := func(client string) func(t *testing.T, pl longPlan) (longResult, error) {
		return func(t *testing.T, pl longPlan) (longResult, error) {
			out := runNode(t, timeout, "long-session.mjs", "CLIENT="+client, "RELAY="+pl.Relay, "BASE="+pl.Base, "RUN="+pl.Run,
				fmt.Sprintf("IDLE_MS=%d", pl.Idle.Milliseconds()), fmt.Sprintf("TAIL_MS=%d", pl.Tail.Milliseconds()), "SHOT="+shotEnv(pl.Shot))
			var res longResult
			return res, json.Unmarshal(out, &res)
		}
	}
	python := func(client string) func(t *testing.T, pl longPlan) (longResult, error) {
		return func(t *testing.T, pl longPlan) (longResult, error) {
			out := runPython(t, timeout, "long_session.py", append([]string{"CLIENT=" + client, "RELAY=" + pl.Relay, "BASE=" + pl.Base, "RUN=" + pl.Run,
				fmt.Sprintf("IDLE_S=%g", pl.Idle.Seconds()), fmt.Sprintf("TAIL_S=%g", pl.Tail.Seconds()), "SHOT=" + shotEnv(pl.Shot)}, seleniumEnv...)...)
			var res longResult
			return res, json.Unmarshal(out, &res)
		}
	}
	clients := []longClient{
		{"go-rod", func(t *testing.T, pl longPlan) (longResult, error) { return runRodSession(t, pl, timeout) }},
		{"chromedp", func(t *testing.T, pl longPlan) (longResult, error) { return chromedpSession(pl) }},
		{"puppeteer", node("puppeteer")},
		{"playwright", node("playwright")},
		{"playwright-python", python("playwright")},
	}
	if shots {
		// ChromeDriver drives Chromium only.
		clients = append(clients, longClient{"selenium", python("selenium")})
	}
	return clients
}

func shotEnv(shot bool) string {
	if shot {
		return "1"
	}
	return "0"
}

// longSpacing is the long sessions' spacing: the second of two loads
// back to back waits for it, however long the client takes over a load
// (ChromeDriver, under the load of the whole suite, over a second: with
// a spacing of 1 s, its second load's slot had passed).
const longSpacing = 2 * time.Second

// TestLongSessions runs every client through the relay for over three
// minutes each, side by side, in front of Chromium (Selenium by
// ChromeDriver's debuggerAddress, go-rod with its default handshake,
// chromedp, Puppeteer, Playwright for Node and Python) and of Lightpanda
// (all but Selenium): idle 80 s twice, big messages (a full-page
// screenshot over 1 MB; on Lightpanda, which has no screenshot, a
// string of 1.5 MB), loads back to back after each gap, and the
// client's own close at the end (go-rod's browser.Close()). Every step
// works, every load of every client reaches the site, none closer to
// the one before it than the spacing, and /metrics counts none unheld.
func TestLongSessions(t *testing.T) {
	t.Parallel()
	idle, tail := 80*time.Second, 20*time.Second
	if d, err := time.ParseDuration(os.Getenv("LONG_IDLE")); err == nil {
		idle, tail = d, d/4 // a shorter run while working on the test
	}
	timeout := 2*idle + tail + 3*time.Minute
	for _, b := range []struct {
		name     string
		upstream func(t *testing.T) string
		shots    bool
		// slack is how much closer than the spacing two navigations may
		// reach the site. Lightpanda says a request left when it answers
		// Fetch.continueRequest, before its HTTP client has opened a
		// connection for it: the first load after an idle gap, on a new
		// connection, reaches the site later than it left by the
		// connection's opening, which the relay cannot see (1,993.1 ms
		// after the one before, at 2 s, in a run beside the whole suite;
		// every departure was on time by Lightpanda's answers).
		slack time.Duration
	}{
		{"chromium", func(*testing.T) string { return browser.http }, true, exactSlack},
		{"lightpanda", func(t *testing.T) string { return startLightpanda(t) }, false, 15 * time.Millisecond},
	} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := startRelayTo(t, b.upstream(t), fixed(longSpacing, 1))
			// Whether a client's second load back to back is held depends
			// on how long its first took: under the whole suite, a load in
			// Chromium took over the spacing often enough that a client
			// could see none of its 7 held (ChromeDriver, at 2 s and at 4
			// s). Each client checks that every navigation asked for
			// before its slot was held for it; the clients together guard
			// the test from showing nothing.
			var held atomic.Int64
			t.Cleanup(func() {
				if held.Load() == 0 {
					t.Errorf("the relay held none of the clients' navigations: the test shows nothing")
				}
			})
			for i, c := range longClients(b.shots, timeout) {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					// A site of its own, one host: its spacing is this client's.
					ip := siteIP
					if !b.shots {
						ip = fmt.Sprintf("127.0.0.%d", 30+i) // Lightpanda resolves no *.test
					}
					s := newSiteAt(t, ip)
					noisePage(s)
					host := ip
					if b.shots {
						host = "long-" + c.name + ".test"
					}
					pl := longPlan{Relay: r.url, Base: s.url(host, ""), Run: runID(), Idle: idle, Tail: tail, Shot: b.shots}
					began := time.Now()
					res, err := c.run(t, pl)
					took := time.Since(began)
					if err != nil {
						t.Fatalf("%s after %v: %v (steps done: %+v)", c.name, took.Round(time.Second), err, res.Steps)
					}
					if len(res.Titles) != 5 {
						t.Errorf("loaded %d pages, want 5: %q", len(res.Titles), res.Titles)
					}
					for i, title := range res.Titles {
						if !strings.Contains(title, fmt.Sprintf("s=%d", i+1)) {
							t.Errorf("page %d's title is %q, want the site's page %d", i+1, title, i+1)
						}
					}
					for _, n := range res.Big {
						if n < 1<<20 {
							t.Errorf("a big message of %d bytes, want over 1 MiB", n)
						}
					}
					if len(res.Big) != 2 {
						t.Errorf("%d big messages, want 2", len(res.Big))
					}
					docs := s.hitsOf(func(h hit) bool { return h.Host == host && (isDocumentPath(h.Path) || h.Path == "/noise") })
					want := 5
					if b.shots {
						want += 2 // the noise pages
					}
					if len(docs) != want {
						t.Errorf("the site saw %d documents, want %d", len(docs), want)
					}
					if len(docs) > 1 {
						_, n := checkSpacedAtSite(t, r, host, docs, longSpacing, b.slack)
						held.Add(int64(n))
					}
					checkHeldWhenDue(t, r, host, longSpacing)
					t.Logf("%s: %v through the relay, big messages %v bytes, steps %s", c.name, took.Round(time.Second), res.Big, res.stepsTaken())
				})
			}
		})
	}
}

// checkHeldWhenDue checks host's bookings one by one: a navigation asked
// for before the slot after the one before it (its release and the
// spacing) was held, not let go at once. It fails whatever the clients'
// timing, where a count of those held depends on it.
func checkHeldWhenDue(t *testing.T, r *relayed, host string, spacing time.Duration) {
	t.Helper()
	const logged = 2 * time.Millisecond // a booking is logged a moment after it is made
	b := bookings(r, host)
	for i := 1; i < len(b); i++ {
		if due := b[i-1].release.Add(spacing); b[i].atOnce && b[i].at.Before(due.Add(-logged)) {
			t.Errorf("%s: navigation %d was asked for %.1f ms before its slot and let go at once",
				host, i+1, ms(due.Sub(b[i].at)))
		}
	}
}

// TestSeleniumLongSessions: Selenium through the relay, ChromeDriver
// attached by debuggerAddress, side by side: an active session of 5
// minutes (two gets back to back, again and again, each held for its
// slot) and an idle one (a get, 3 minutes of nothing, a get). Before the
// relay stopped pinging its clients, both died at 70 s: ChromeDriver
// answers no ping ("invalid session id: session deleted as the browser
// has closed the connection").
func TestSeleniumLongSessions(t *testing.T) {
	t.Parallel()
	active, idle := 5*time.Minute, 3*time.Minute
	if d, err := time.ParseDuration(os.Getenv("LONG_IDLE")); err == nil {
		active, idle = d, d // a shorter run while working on the test
	}
	r := startRelay(t, fixed(longSpacing, 1))
	for _, tc := range []struct {
		mode  string
		d     time.Duration
		loads func(seconds float64) int // how many pages, at least
	}{
		{"active", active, func(s float64) int { return int(s / longSpacing.Seconds() / 2) }}, // a load every spacing at best
		{"idle", idle, func(float64) int { return 2 }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			s := newSite(t)
			host := "selenium-" + tc.mode + ".test"
			run := runID()
			began := time.Now()
			out := runPython(t, tc.d+3*time.Minute, "selenium_session.py", append([]string{"RELAY_ADDR=" + r.host, "BASE=" + s.url(host, ""), "RUN=" + run,
				"MODE=" + tc.mode, fmt.Sprintf("DURATION_S=%g", tc.d.Seconds()), "INTERVAL_S=2"}, seleniumEnv...)...)
			took := time.Since(began)
			var res struct{ Titles []string }
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("selenium_session.py printed %q: %v", out, err)
			}
			if want := tc.loads(tc.d.Seconds()); len(res.Titles) < want {
				t.Errorf("loaded %d pages in %v, want at least %d", len(res.Titles), took.Round(time.Second), want)
			}
			docs := hostDocuments(s, host)
			if len(docs) != len(res.Titles) {
				t.Errorf("the site saw %d documents, the session loaded %d", len(docs), len(res.Titles))
			}
			if tc.mode == "active" {
				checkAtSite(t, r, host, docs, longSpacing, exactSlack)
			}
			t.Logf("selenium, %s: one session of %v through the relay, %d pages", tc.mode, took.Round(time.Second), len(res.Titles))
		})
	}
}
