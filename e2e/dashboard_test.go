//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

var dashboardPNG = flag.String("dashboard-png", "", "where TestDashboard writes its screenshot (../docs/dashboard.png updates the docs)")

// watcher is a second Chromium, a user's own browser, where the relay's
// page is opened: it reaches the relay as any browser would, and is
// nothing the relay relays or counts.
type watcher struct {
	rc      *rawClient
	session string
}

func openWatcher(t *testing.T) *watcher {
	t.Helper()
	_, ws, stop, err := startChromium()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	rc := dialRaw(t, ws)
	session, _ := rc.newPage()
	rc.mustCall(session, "Network.enable", nil)
	rc.mustCall(session, "Page.enable", nil)
	rc.mustCall(session, "Emulation.setDeviceMetricsOverride", map[string]any{"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false})
	// Anything the page's Content-Security-Policy refuses is recorded.
	rc.mustCall(session, "Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": `window.cspRefused = [];
document.addEventListener("securitypolicyviolation", e => window.cspRefused.push(e.violatedDirective + " " + e.blockedURI));`})
	return &watcher{rc: rc, session: session}
}

// open loads u and returns the HTTP status and MIME type of its document.
func (w *watcher) open(t *testing.T, u string) (status int, mime string) {
	t.Helper()
	before := len(w.rc.messages())
	w.rc.mustCall(w.session, "Page.navigate", map[string]any{"url": u})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range w.events("Network.responseReceived", before) {
			var ev struct {
				Type     string `json:"type"`
				Response struct {
					URL      string `json:"url"`
					Status   int    `json:"status"`
					MimeType string `json:"mimeType"`
				} `json:"response"`
			}
			json.Unmarshal(m.Params, &ev)
			if ev.Type == "Document" && ev.Response.URL == u {
				w.loaded(t, u)
				return ev.Response.Status, ev.Response.MimeType
			}
		}
	}
	t.Fatalf("no answer to the document %s", u)
	return 0, ""
}

// loaded waits until the page at u has loaded.
func (w *watcher) loaded(t *testing.T, u string) {
	t.Helper()
	expr := fmt.Sprintf(`location.href === %q && document.readyState === "complete"`, u)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var done bool
		if w.eval(t, expr, &done); done {
			return
		}
	}
	t.Fatalf("%s did not load within 10 s", u)
}

// eval returns the value of a JavaScript expression in the page.
func (w *watcher) eval(t *testing.T, expr string, v any) {
	t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	json.Unmarshal(w.rc.mustCall(w.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}), &res)
	if res.ExceptionDetails != nil {
		t.Fatalf("evaluating %s: %s", expr, res.ExceptionDetails.Text)
	}
	if err := json.Unmarshal(res.Result.Value, v); err != nil {
		t.Fatalf("evaluating %s: %v (%s)", expr, err, res.Result.Value)
	}
}

// pagesInOneContext opens n pages in one new browser context, as a crawler
// with n tabs does, and returns their sessions.
func pagesInOneContext(t *testing.T, rc *rawClient, n int) []string {
	t.Helper()
	bc := rc.newContext()
	var sessions []string
	for range n {
		sessions = append(sessions, rc.openTarget(map[string]any{"url": "about:blank", "browserContextId": bc}))
	}
	return sessions
}

// rows returns, for each bucket the page shows, how many navigations its
// chart draws, and the number of the chart's drawn shapes.
func (w *watcher) rows(t *testing.T) map[string][2]int {
	t.Helper()
	var got map[string][2]int
	w.eval(t, `Object.fromEntries([...document.querySelectorAll("#rows .bucket")].map(r => {
		const svg = r.querySelector("svg.chart");
		return [r.dataset.bucket, [svg ? +svg.dataset.marks : -1, svg ? svg.querySelectorAll("path[class^=m-]").length : -1]];
	}))`, &got)
	return got
}

// events returns the page's events of method, from the from-th message
// the client received on.
func (w *watcher) events(method string, from int) []rawMessage {
	var out []rawMessage
	for _, m := range w.rc.messages()[from:] {
		if m.Method == method && m.SessionID == w.session {
			out = append(out, m)
		}
	}
	return out
}

// requests returns the URL of every request the page made, and how many
// of them were documents.
func (w *watcher) requests() (urls []string, documents int) {
	for _, m := range w.events("Network.requestWillBeSent", 0) {
		var ev struct {
			Type    string `json:"type"`
			Request struct {
				URL string `json:"url"`
			} `json:"request"`
		}
		json.Unmarshal(m.Params, &ev)
		urls = append(urls, ev.Request.URL)
		if ev.Type == "Document" {
			documents++
		}
	}
	return urls, documents
}

// TestDashboard crawls two hosts through the relay, one of them fast
// enough for the adaptive ramp and answering one 503, with the relay's
// page open in another browser: the page names and draws both, shows a
// third host the crawl reaches afterwards within 5 s without a reload,
// and every request it makes goes to the relay's own origin. With
// -dashboard-png it writes its screenshot there (the docs' one).
func TestDashboard(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, limiter.Config{})
	w := openWatcher(t)
	if status, mime := w.open(t, r.url+"/?window=30"); status != 200 || mime != "text/html" {
		t.Fatalf("the page at /: status %d, %s; want 200, text/html", status, mime)
	}
	w.eval(t, `window.sameDocument = true`, new(bool))

	crawler := dialRaw(t, browserWSVia(t, r))
	const a, b, c = "shop.test", "news.test", "blog.test"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	navigate := func(session, u string) {
		if _, err := crawler.call(ctx, session, "Page.navigate", map[string]any{"url": u}); err != nil {
			t.Errorf("navigating to %s: %v", u, err)
		}
	}
	// a: ten pages, each loading the next page as soon as one has loaded,
	// for 20 s (the ramp), one 503 after 12 s; b: one page, a navigation
	// every 300 ms (never waits).
	const crawl = 20 * time.Second
	pages := pagesInOneContext(t, crawler, 10)
	begin := time.Now()
	var wg sync.WaitGroup
	var overload sync.Once
	for i, session := range pages {
		wg.Go(func() {
			for n := 0; time.Since(begin) < crawl && ctx.Err() == nil; n++ {
				u := s.url(a, fmt.Sprintf("/page/%d-%d", i, n))
				if time.Since(begin) > crawl*3/5 {
					overload.Do(func() { u = s.url(a, "/status?code=503") })
				}
				navigate(session, u)
			}
		})
	}
	sb, _ := crawler.newPage()
	wg.Go(func() {
		for n := 0; time.Since(begin) < crawl && ctx.Err() == nil; n++ {
			navigate(sb, s.url(b, fmt.Sprintf("/page/%d", n)))
			time.Sleep(300 * time.Millisecond)
		}
	})

	// Both hosts appear, drawn, while the crawl goes on.
	var rows map[string][2]int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if rows = w.rows(t); rows[a][0] > 0 && rows[b][0] > 0 {
			break
		}
	}
	if rows[a][0] <= 0 || rows[b][0] <= 0 || rows[a][1] <= 0 || rows[b][1] <= 0 {
		t.Fatalf("rows shown after 10 s of crawling (navigations drawn, shapes): %v; want %s and %s drawn", rows, a, b)
	}
	t.Logf("%.1f s into the crawl the page draws %v", time.Since(begin).Seconds(), rows)
	wg.Wait()

	// A third host, afterwards: on the page within 5 s, the page not reloaded.
	sc, _ := crawler.newPage()
	navigate(sc, s.url(c, "/page/first"))
	hits := s.documents(c)
	if len(hits) == 0 {
		t.Fatalf("%s never reached the server", c)
	}
	var appeared time.Duration
	for time.Since(hits[0].At) < 10*time.Second {
		if _, ok := w.rows(t)[c]; ok {
			appeared = time.Since(hits[0].At)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if appeared == 0 || appeared > 5*time.Second {
		t.Errorf("%s appeared on the page %v after its navigation reached the server (0: not within 10 s); want within 5 s", c, appeared)
	}
	t.Logf("%s on the page %v after the server saw it", c, appeared.Round(time.Millisecond))
	var same bool
	w.eval(t, `window.sameDocument === true`, &same)
	urls, documents := w.requests()
	if !same || documents != 1 {
		t.Errorf("the page was reloaded (same document: %v, documents loaded: %d); want one document, updated in place", same, documents)
	}

	// Every request of the page went to the relay's own origin; nothing was
	// refused by its Content-Security-Policy.
	polls := 0
	for _, u := range urls {
		if !strings.HasPrefix(u, r.url+"/") {
			t.Errorf("the page asked %s: not the relay's origin %s", u, r.url)
		}
		if strings.HasPrefix(u, r.url+"/status?") {
			polls++
		}
	}
	var refused []string
	w.eval(t, `window.cspRefused`, &refused)
	if len(refused) > 0 {
		t.Errorf("the page's Content-Security-Policy refused: %v", refused)
	}
	t.Logf("the page made %d requests, all to %s: the document and %d polls of /status", len(urls), r.url, polls)

	// What it shows, as a user sees it.
	time.Sleep(1200 * time.Millisecond) // one more poll: blog.test's answer
	raw, img := screenshotImage(t, w.rc, w.session)
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 800 {
		t.Errorf("screenshot is %dx%d, want 1280x800", b.Dx(), b.Dy())
	}
	// In a's chart, the 503 is drawn in the overload colour, the others in
	// the ok one.
	var box struct{ X, Y, W, H int }
	w.eval(t, fmt.Sprintf(`(() => { const r = document.querySelector('[data-bucket=%q] svg.chart').getBoundingClientRect();
		return {X: Math.round(r.x), Y: Math.round(r.y), W: Math.round(r.width), H: Math.round(r.height)}; })()`, a), &box)
	chart := image.Rect(box.X, box.Y, box.X+box.W, box.Y+box.H)
	for name, c := range map[string][3]uint32{"overload (503)": {0xd6, 0x27, 0x28}, "ok": {0x2a, 0x78, 0xb8}} {
		if n := pixelsOf(img, chart, c); n < 8 {
			t.Errorf("%s's chart (%v) has %d pixels of the %s colour in the screenshot, want a drawn mark (≥ 8)", a, chart, n, name)
		}
	}
	if *dashboardPNG != "" {
		if err := os.WriteFile(*dashboardPNG, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", *dashboardPNG)
	}
	var status struct {
		Buckets []struct {
			Bucket   string  `json:"bucket"`
			Pressure int     `json:"pressure"`
			Spacing  float64 `json:"spacing_ms"`
			Passed   int     `json:"passed"`
			Delayed  int     `json:"delayed"`
			Last     string  `json:"last_answer"`
		} `json:"buckets"`
	}
	body, err := httpGet(r.url + "/status")
	if err != nil || json.Unmarshal(body, &status) != nil {
		t.Fatalf("/status: %v: %.300s", err, body)
	}
	for _, b := range status.Buckets {
		t.Logf("/status: %-10s pressure %3d  spacing %6.1f ms  passed %3d  delayed %3d  last answer %s", b.Bucket, b.Pressure, b.Spacing, b.Passed, b.Delayed, b.Last)
	}
	// What a script reading /status gets, its navigations cut to two per
	// bucket (README quotes it).
	var example map[string]any
	json.Unmarshal(body, &example)
	for _, b := range example["buckets"].([]any) {
		b := b.(map[string]any)
		b["navigations"] = b["navigations"].([]any)[:min(2, len(b["navigations"].([]any)))]
	}
	cut, _ := json.MarshalIndent(example, "", "  ")
	t.Logf("/status, two navigations per bucket:\n%s", cut)
}

// screenshotImage captures session's page, as a PNG and decoded.
func screenshotImage(t *testing.T, rc *rawClient, session string) ([]byte, image.Image) {
	t.Helper()
	raw, err := rc.screenshot(session)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return raw, img
}

// pixelsOf counts the pixels of colour c in the rectangle in of img.
func pixelsOf(img image.Image, in image.Rectangle, c [3]uint32) int {
	n := 0
	b := img.Bounds().Intersect(in)
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r>>8, c[0]) && near(g>>8, c[1]) && near(bl>>8, c[2]) {
				n++
			}
		}
	}
	return n
}

// TestDashboardToken: with a token, the page answers 401 without it, and
// opened with ?token= it works: its own requests carry the token.
func TestDashboardToken(t *testing.T) {
	const token = "a+b/c=d e"
	r := startRelay(t, limiter.Config{}, func(p *relay.Proxy) { p.Token = token })
	w := openWatcher(t)
	for _, path := range []string{"/", "/status"} {
		if status := statusOf(t, r.url+path); status != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, status)
		}
	}
	if status, _ := w.open(t, r.url+"/"); status != http.StatusUnauthorized {
		t.Errorf("the page opened without the token: %d, want 401", status)
	}
	u := r.url + "/?token=" + url.QueryEscape(token)
	if status, mime := w.open(t, u); status != 200 || mime != "text/html" {
		t.Fatalf("the page opened with ?token=: %d, %s; want 200, text/html", status, mime)
	}
	var live, browsers string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && live != "live"; time.Sleep(100 * time.Millisecond) {
		w.eval(t, `document.getElementById("live").textContent`, &live)
	}
	w.eval(t, `document.getElementById("browsers").textContent`, &browsers)
	if live != "live" || !strings.Contains(browsers, "holding fetch") {
		t.Errorf("the page opened with the token: live %q, browsers %q; want live, and the browser holding through fetch", live, browsers)
	}
	urls, _ := w.requests()
	for _, u := range urls {
		pu, err := url.Parse(u)
		if err == nil && pu.Path == "/status" && pu.Query().Get("token") != token {
			t.Errorf("the page asked %s without its token", u)
		}
	}
	var links []string
	w.eval(t, `[...document.querySelectorAll("#links a")].map(a => a.href)`, &links)
	for _, l := range links {
		if status := statusOf(t, l); status != 200 {
			t.Errorf("the page's link %s: %d, want 200", l, status)
		}
	}
	t.Logf("the page with ?token=: live; its links %v answer 200", links)
}
