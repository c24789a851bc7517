//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// basicAuth answers 401 with a Basic challenge until the request carries
// user:secret.
func basicAuth(w http.ResponseWriter, r *http.Request) {
	if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "secret" {
		w.Header().Set("WWW-Authenticate", `Basic realm="e2e"`)
		http.Error(w, "who are you?", http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "text/html")
	w.Write([]byte("<!doctype html><title>in</title>welcome"))
}

// intercepted is what an interception script prints.
type intercepted struct {
	Seen  []string
	Steps json.RawMessage
}

func runIntercept(t *testing.T, script, browserURL, base, run string) intercepted {
	t.Helper()
	t.Logf("running %s against %s", script, browserURL)
	out := runNode(t, 90*time.Second, script, "BROWSER_URL="+browserURL, "BASE="+base, "RUN="+run)
	var got intercepted
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s printed %q: %v", script, out, err)
	}
	return got
}

// sameSeen compares what a client's interception saw through the relay
// with what it saw talking to Chromium itself: the same requests, and the
// navigations among them in the same order. (Subresources of one page may
// come in any order.)
func sameSeen(t *testing.T, direct, relayed []string) {
	t.Helper()
	nav := func(seen []string) []string {
		var out []string
		for _, s := range seen {
			if strings.Contains(s, " navigation ") {
				out = append(out, s)
			}
		}
		return out
	}
	if d, r := nav(direct), nav(relayed); !slices.Equal(d, r) {
		t.Errorf("navigations the client intercepted:\n direct:  %q\n relayed: %q", d, r)
	}
	if d, r := slices.Sorted(slices.Values(direct)), slices.Sorted(slices.Values(relayed)); !slices.Equal(d, r) {
		t.Errorf("requests the client intercepted:\n direct:  %q\n relayed: %q", d, r)
	}
	t.Logf("the client intercepted %d requests, the same with and without the relay:\n  %s", len(relayed), strings.Join(relayed, "\n  "))
}

// TestTransparentPuppeteerInterception: Puppeteer's setRequestInterception
// (continue, abort, respond) and page.authenticate see exactly the requests
// they see on Chromium directly, while the relay holds the navigations that
// go on. A document the client aborted or answered itself never reaches
// the server and books no slot.
func TestTransparentPuppeteerInterception(t *testing.T) {
	interceptBothWays(t, "pptr-intercept.mjs", "direct-pptr.test", "relayed-pptr.test")
}

// interceptBothWays runs an interception script against Chromium directly
// on directHost, then through a relay on host, and checks that the client
// saw the same requests both ways and that the relay held what went on.
func interceptBothWays(t *testing.T, script, directHost, host string) {
	t.Helper()
	s := newSite(t)
	s.handle("/auth", basicAuth)
	run := runID()
	// Directly first: a relay, once started, holds every page's navigations.
	direct := runIntercept(t, script, browser.http, s.url(directHost, ""), run)
	r := startRelay(t, fixed(kindsInterval, 1))
	relayed := runIntercept(t, script, r.url, s.url(host, ""), run)
	t.Logf("client steps, direct: %s", direct.Steps)
	t.Logf("client steps, relayed: %s", relayed.Steps)
	sameSeen(t, direct.Seen, relayed.Seen)
	checkClientHeld(t, r, s, host)
}

// checkClientHeld checks the relay's side of an interception script's run
// on host: the documents the client aborted or answered itself never
// reached the server, and the others went each in a slot of its own: s=1,
// s=3 and its reload, s=4 (a click), s=6, and /auth, whose second request
// (the credentials the client gave, for the same navigation) went at once.
func checkClientHeld(t *testing.T, r *relayed, s *site, host string) {
	t.Helper()
	docs := navigations(s, host)
	var slots []hit
	for i, h := range docs {
		switch {
		case strings.Contains(h.Query, "act="):
			t.Errorf("the client aborted or answered %s?%s itself, but it reached the server", h.Path, h.Query)
		case h.Path == "/auth" && i > 0 && docs[i-1].Path == "/auth":
			if d := h.At.Sub(docs[i-1].At); d >= kindsInterval/2 {
				t.Errorf("/auth with credentials came %v after the challenge, want at once (the same navigation books no second slot)", d)
			}
		default:
			slots = append(slots, h)
		}
	}
	checkSlots(t, r, host, slots, 6, kindsInterval)
}

// TestTransparentPlaywrightRoute: Playwright's page.route (continue, abort,
// fulfill) and httpCredentials see exactly the requests they see on
// Chromium directly, while the relay holds the navigations that go on. A
// document the client aborted or fulfilled never reaches the server and
// books no slot.
func TestTransparentPlaywrightRoute(t *testing.T) {
	interceptBothWays(t, "pw-route.mjs", "direct-pw.test", "relayed-pw.test")
}

// rawRun drives one page through a raw websocket client that enables the
// Page domain and nothing else, navigating to host with Page.navigate,
// Page.reload and a location.href assignment, and returns every message
// the client got and how many commands it sent.
func rawRun(t *testing.T, wsURL string, s *site, host, run string) (msgs []rawMessage, sent int64) {
	t.Helper()
	rc := dialRaw(t, wsURL)
	session, _ := rc.newPage()
	rc.mustCall(session, "Page.enable", nil)
	page := func(step int) string { return s.url(host, fmt.Sprintf("/page?run=%s&s=%d", run, step)) }
	navigate := func(url, marker string) {
		rc.mustCall(session, "Page.navigate", map[string]any{"url": url})
		rawSettled(t, rc, session, marker)
	}
	// The page's first load, in a window of its own, keeps the browser
	// busy for a while: let that pass, then warm up for the first slot.
	navigate(s.url(host, "/page?warm=1&first=1&run="+run), "first=1")
	time.Sleep(kindsInterval + 100*time.Millisecond)
	navigate(s.url(host, "/page?warm=1&run="+run), "warm=1&run")
	navigate(page(1), "s=1")
	rc.mustCall(session, "Page.reload", nil)
	rawSettled(t, rc, session, "s=1")
	rc.mustCall(session, "Runtime.evaluate", map[string]any{"expression": fmt.Sprintf("location.href = %q", page(2))})
	rawSettled(t, rc, session, "s=2")
	navigate(page(3), "s=3")
	rc.mu.Lock()
	sent = rc.nextID
	rc.mu.Unlock()
	return rc.messages(), sent
}

// TestTransparentRawClient: a raw websocket client that enabled the Page
// domain and never Network or Fetch, whose navigations the relay holds,
// gets nothing it did not ask for: one reply to each of its commands,
// events of Page and the Target.attachedToTarget its attach asked for;
// the same kinds of event it gets from Chromium directly.
func TestTransparentRawClient(t *testing.T) {
	s := newSite(t)
	run := runID()
	const host = "raw.test"
	check := func(name string, msgs []rawMessage, sent int64) map[string]bool {
		t.Helper()
		replies := map[int64]int{}
		methods := map[string]bool{}
		for _, m := range msgs {
			switch {
			case m.ID != 0:
				if m.ID < 1 || m.ID > sent {
					t.Errorf("%s: a reply to id %d, which the client never used (it sent 1 to %d)", name, m.ID, sent)
				}
				if replies[m.ID]++; replies[m.ID] > 1 {
					t.Errorf("%s: a second reply to id %d", name, m.ID)
				}
			case strings.HasPrefix(m.Method, "Page."), m.Method == "Target.attachedToTarget":
				methods[m.Method] = true
			default:
				t.Errorf("%s: an event the client did not ask for: %s (session %q) %.200s", name, m.Method, m.SessionID, m.Params)
			}
		}
		if int64(len(replies)) != sent {
			t.Errorf("%s: %d of the client's %d commands were answered", name, len(replies), sent)
		}
		return methods
	}
	// Directly first: a relay, once started, holds every page's navigations.
	msgs, sent := rawRun(t, browser.ws, s, "direct-raw.test", run)
	direct := check("direct", msgs, sent)
	r := startRelay(t, fixed(kindsInterval, 1))
	msgs, sent = rawRun(t, browserWSVia(t, r), s, host, run)
	relayed := check("relayed", msgs, sent)
	if kd, kr := slices.Sorted(maps.Keys(direct)), slices.Sorted(maps.Keys(relayed)); !slices.Equal(kd, kr) {
		t.Errorf("kinds of event:\n direct:  %q\n relayed: %q", kd, kr)
	} else {
		t.Logf("events, the same kinds with and without the relay: %q", kr)
	}
	checkSlots(t, r, host, navigations(s, host), 4, kindsInterval)
}

// TestWarnOncePerHost: in adaptive mode the relay warns once for each
// host whose navigations it delays, the first time, and for no other:
// not for a host it never delayed, not again for a host that comes back
// after going idle. In fixed mode the same line is at debug level.
func TestWarnOncePerHost(t *testing.T) {
	warns := func(t *testing.T, r *relayed) (total int, perHost map[string]int) {
		perHost = map[string]int{}
		for _, line := range strings.Split(r.logs.String(), "\n") {
			var l struct {
				Level, Host, Tip, Message string
			}
			if json.Unmarshal([]byte(line), &l) != nil || l.Message != "spacing out navigations to this host" && l.Level != "warn" {
				continue
			}
			if l.Level == "warn" {
				total++
			}
			if l.Message == "spacing out navigations to this host" {
				if l.Tip != "use --http-nav-delay 0 to disable" {
					t.Errorf("the warning about %s gives the tip %q", l.Host, l.Tip)
				}
				perHost[l.Level+" "+l.Host]++
			}
		}
		return total, perHost
	}

	s := newSite(t)
	run := runID()
	t.Run("adaptive", func(t *testing.T) {
		r := startRelay(t, adaptive1)
		rc := dialRaw(t, browserWSVia(t, r))
		tabs := newTabs(t, rc, 4)
		// delayed makes sure the relay delays a navigation to host: after a
		// 500 (10 units of pressure, so 40 ms spacing), four navigations asked
		// for at once cannot all go at once.
		delayed := func(host string) {
			t.Helper()
			before := len(heldReleases(r, host))
			rc.mustCall(tabs[0], "Page.navigate", map[string]any{"url": s.url(host, "/status?code=500&run="+run)})
			togetherTo(t, rc, s, tabs, host, func(i int) string { return s.url(host, fmt.Sprintf("/page?run=%s&i=%d", run, i)) })
			if len(heldReleases(r, host)) == before {
				t.Fatalf("the relay delayed nothing of %s: the test shows nothing", host)
			}
		}
		delayed("warn-a.test")
		delayed("warn-b.test")
		rc.mustCall(tabs[0], "Page.navigate", map[string]any{"url": s.url("warn-once.test", "/page?run="+run)})
		// warn-a.test goes idle until the limiter forgets it (pressure 15 is
		// gone in 1.5 s, and an idle host is remembered for a second more),
		// and comes back.
		time.Sleep(3 * time.Second)
		delayed("warn-a.test")
		total, perHost := warns(t, r)
		if want := map[string]int{"warn warn-a.test": 1, "warn warn-b.test": 1}; !maps.Equal(perHost, want) || total != 2 {
			t.Errorf("got %d warn lines, warnings per host %v; want 2, %v\n%s", total, perHost, want, r.logs.String())
		}
	})
	t.Run("fixed", func(t *testing.T) {
		f := startRelay(t, fixed(50*time.Millisecond, 1))
		rc := dialRaw(t, browserWSVia(t, f))
		tabs := newTabs(t, rc, 4)
		togetherTo(t, rc, s, tabs, "warn-fixed.test", func(i int) string { return s.url("warn-fixed.test", fmt.Sprintf("/page?run=%s&i=%d", run, i)) })
		total, perHost := warns(t, f)
		if want := map[string]int{"debug warn-fixed.test": 1}; !maps.Equal(perHost, want) || total != 0 {
			t.Errorf("got %d warn lines, warnings per host %v; want 0, %v", total, perHost, want)
		}
	})
}
