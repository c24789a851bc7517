//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// The navigation-kind tests drive every way a page's main frame can load a
// document through a relay with a fixed 300 ms interval and no burst, one
// kind after another to one host, each asked for as soon as the one before
// has loaded. Each must reach the server once, in a slot of its own: the
// k-th arrival no earlier than (k−1)×300 ms after the first, and the run no
// longer than (N−1)×300 ms plus a little, which a navigation booking two
// slots (its command and its request, say) would overrun by a whole slot.
//
// The first navigation to a host is preceded by a warm-up (warm=1, left
// out), so that it too waits for its slot: a request the relay holds
// reaches the server a steady 2-6 ms after its release, while one it lets
// go at once can take 2-160 ms (the browser is still busy with the
// navigation it has just begun), which would make a late anchor for the
// schedule.

// kindsInterval is the spacing of the navigation-kind tests; it is well
// above what a client takes from one load to the next navigation, so most
// navigations wait for their slot.
const kindsInterval = 300 * time.Millisecond

// slack is how much sooner after the first than its slot a held request
// may reach the server. Held requests arrive 2-8 ms after their release on
// a quiet machine; on a busy one (two cores, neighbours compiling and
// racing) one now and then takes 20 ms more than the next one held. A
// navigation let go at once would come a whole slot early, and a slot
// miscounted by that much would show within a few navigations.
const slack = 25 * time.Millisecond

// heldJitter is the same allowance when the browser is busy loading other
// pages as requests are released (navigations asked for together): up to
// ~50 ms on this kind of two-core machine with neighbours at work.
const heldJitter = 50 * time.Millisecond

// spanSlack is how much longer than its slots a run may take, besides the
// time a client asked late for a navigation the relay then did not hold:
// what the browser adds between release and arrival, well under a slot.
const spanSlack = 250 * time.Millisecond

// runID makes each run's URLs unique, so nothing comes from a cache and no
// test sees another's requests.
func runID() string { return fmt.Sprintf("%x", time.Now().UnixNano()) }

// isDocumentPath reports whether path is one of the site's top-level
// documents rather than a subresource.
func isDocumentPath(path string) bool {
	for _, p := range []string{"/page", "/redirect", "/status", "/auth"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// navigations returns host's document requests, in the order they arrived,
// leaving out those a script made to warm a connection (warm=1).
func navigations(s *site, host string) []hit {
	return s.hitsOf(func(h hit) bool {
		return h.Host == host && isDocumentPath(h.Path) && !strings.Contains(h.Query, "warm=1")
	})
}

func arrivals(hits []hit) []time.Time {
	at := make([]time.Time, len(hits))
	for i, h := range hits {
		at[i] = h.At
	}
	return at
}

// describe lists hits with their arrival after the first, for failures.
func describe(hits []hit) string {
	var b strings.Builder
	for i, h := range hits {
		fmt.Fprintf(&b, "\n  %2d  +%7.1fms  %-4s %s %s?%.80s", i+1, ms(h.At.Sub(hits[0].At)), h.Method, h.Host, h.Path, h.Query)
	}
	return b.String()
}

// booking is a navigation the relay held, read from its log line
// "navigation held".
type booking struct {
	at       time.Time     // when it was booked
	release  time.Time     // when the relay let it go
	spacing  time.Duration // how far it pushed its host's schedule
	pressure int           // its host's pressure once booked
	atOnce   bool          // let go when booked, asked for after its slot
}

// heldBookings returns the navigations to host that r held, in the order
// they were booked.
func heldBookings(r *relayed, host string) []booking {
	var out []booking
	for _, b := range bookings(r, host) {
		if !b.atOnce {
			out = append(out, b)
		}
	}
	return out
}

// heldAfter returns the navigations to host that r held, booked after
// since, in the order they were booked.
func heldAfter(r *relayed, host string, since time.Time) []booking {
	var out []booking
	for _, b := range heldBookings(r, host) {
		if b.at.After(since) {
			out = append(out, b)
		}
	}
	return out
}

// bookings returns every navigation to host that r booked, in the order
// it booked them: those it let go at once ("navigation goes at once",
// released when booked) and those it held ("navigation held").
func bookings(r *relayed, host string) []booking {
	var out []booking
	for _, line := range strings.Split(r.logs.String(), "\n") {
		var l struct {
			Message, Host string
			Delay         float64 `json:"delay_ms"`
			Spacing       float64 `json:"spacing_ms"`
			Pressure      int
			AtNs          int64 `json:"at_ns"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Host != host ||
			(l.Message != "navigation held" && l.Message != "navigation goes at once") {
			continue
		}
		at := time.Unix(0, l.AtNs)
		out = append(out, booking{
			at:       at,
			release:  at.Add(time.Duration(l.Delay * float64(time.Millisecond))),
			spacing:  time.Duration(l.Spacing * float64(time.Millisecond)),
			pressure: l.Pressure,
			atOnce:   l.Message == "navigation goes at once",
		})
	}
	return out
}

// heldReleases returns when r let go each navigation to host that it held.
func heldReleases(r *relayed, host string) []time.Time {
	var out []time.Time
	for _, b := range heldBookings(r, host) {
		out = append(out, b.release)
	}
	return out
}

// checkSlots checks that hits are n navigations to one host through r,
// each in a slot of its own at interval: none early against the absolute
// schedule, and none taking a second slot.
//
// The schedule counts from the first navigation the relay held (its log
// says which): k slots after it, the k-th after it arrives no sooner than
// k intervals less slack, as held requests reach the server a steady few
// milliseconds after their release. A navigation it let go at once (the
// client asked after its slot) can take much longer to arrive, so one
// before the first held counts only to half a slot.
//
// The run spans n−1 intervals and spanSlack at most, plus the time by
// which the client asked for navigations after their slots had passed:
// one the relay did not hold went when the client asked for it, and
// whatever it lost is the client's. One it held a slot too many has no
// such excuse.
func checkSlots(t *testing.T, r *relayed, name string, hits []hit, n int, interval time.Duration) {
	t.Helper()
	checkSlotsWithin(t, r, name, hits, n, interval, slack)
}

// checkSlotsWithin is checkSlots for held navigations that may reach the
// server up to early sooner after the first held one than their slots are
// apart.
func checkSlotsWithin(t *testing.T, r *relayed, name string, hits []hit, n int, interval, early time.Duration) {
	t.Helper()
	if len(hits) != n {
		t.Errorf("%s: the server saw %d navigations, want %d (each exactly once):%s", name, len(hits), n, describe(hits))
		return
	}
	at := arrivals(hits)
	releases := heldReleases(r, hits[0].Host)
	held := make([]bool, n)
	anchor := -1
	for k, a := range at {
		// A released request reaches the server within milliseconds, a
		// held command within tens of them; slots are far further apart.
		held[k] = slices.ContainsFunc(releases, func(rel time.Time) bool { d := a.Sub(rel); return d >= 0 && d < interval/2 })
		if held[k] && anchor < 0 {
			anchor = k
		}
	}
	if anchor < 0 {
		anchor = 0
	}
	for k := 1; k < n; k++ {
		allow := early
		from := anchor
		if k <= anchor {
			from, allow = 0, interval/2
		}
		if got, want := at[k].Sub(at[from]), time.Duration(k-from)*interval; got < want-allow {
			t.Errorf("%s: navigation %d arrived %v after navigation %d, want at least %v (its slot):%s", name, k+1, got, from+1, want, describe(hits))
			return
		}
	}
	var late time.Duration
	nheld := 0
	for k := 1; k < n; k++ {
		if held[k] {
			nheld++
		} else {
			late += max(0, at[k].Sub(at[k-1])-interval)
		}
	}
	// A client can be late for a slot or two on a busy machine, but not for
	// every one of a run: then the relay held nothing and the run shows
	// nothing. (A short run is left to the runs it is part of.)
	if nheld == 0 && n >= 4 {
		t.Errorf("%s: the relay held none of the %d navigations after the first: the test shows nothing:%s", name, n-1, describe(hits))
	}
	span, limit := at[n-1].Sub(at[0]), time.Duration(n-1)*interval+spanSlack+late
	if span >= limit {
		t.Errorf("%s: %d navigations span %v, want under %v: one took more than one slot:%s", name, n, span, limit, describe(hits))
	}
	// The closest two held navigations came to each other at the server.
	closest := time.Duration(-1)
	for k := 1; k < n; k++ {
		if held[k] && (closest < 0 || at[k].Sub(at[k-1]) < closest) {
			closest = at[k].Sub(at[k-1])
		}
	}
	t.Logf("%s: %d navigations span %.0fms (slots: %.0fms); %d of the %d after the first held (closest to the one before: %.1fms), the others asked for %.0fms after their slots",
		name, n, ms(span), ms(time.Duration(n-1)*interval), nheld, n-1, ms(closest), ms(late))
}

// checkRedirects checks the redirect steps the kinds scripts end with: rb
// gets /page s=1, then ra's redirect to rb's /page s=2, which must wait
// for rb's slot however free ra was; ra's redirect to itself books ra once,
// its hop going at once, and the next navigation to ra comes one slot later.
func checkRedirects(t *testing.T, r *relayed, s *site, ra, rb string) {
	t.Helper()
	checkRedirectsAt(t, r, s, ra, s, rb)
}

// checkRedirectsAt is checkRedirects for ra served by sa and rb by sb.
func checkRedirectsAt(t *testing.T, r *relayed, sa *site, ra string, sb *site, rb string) {
	t.Helper()
	b := navigations(sb, rb)
	checkSlotsWithin(t, r, rb+" (second one a redirect hop from "+ra+")", b, 2, kindsInterval, heldJitter)
	a := navigations(sa, ra)
	if len(a) != 4 {
		t.Errorf("%s: the server saw %d documents, want 4 (redirect, redirect, its hop, page):%s", ra, len(a), describe(a))
		return
	}
	if a[0].Path != "/redirect" || a[1].Path != "/redirect" || a[2].Path != "/page" || a[3].Path != "/page" {
		t.Errorf("%s: documents arrived out of order:%s", ra, describe(a))
		return
	}
	if hop := a[2].At.Sub(a[1].At); hop >= kindsInterval/2 {
		t.Errorf("%s: the hop of a redirect within the host came %v after its redirect, want it at once (it books nothing):%s", ra, hop, describe(a))
	}
	checkSlots(t, r, ra+" (redirects, without the same-host hop)", []hit{a[0], a[1], a[3]}, 3, kindsInterval)
}

// TestNavKindsPuppeteer: through Puppeteer, goto, link click, reload,
// location.href, form GET and POST, history.back past an unload handler,
// meta refresh, window.open, Target.createTarget and PUT /json/new to one
// host each take exactly one slot; a redirect books its own host and then
// the host it lands on, whose slot its hop waits for.
func TestNavKindsPuppeteer(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, fixed(kindsInterval, 1))
	const host, ra, rb = "pptr.test", "pptr-a.test", "pptr-b.test"
	out := runNode(t, 90*time.Second, "pptr-kinds.mjs", "RELAY="+r.url, "RUN="+runID(),
		"BASE="+s.url(host, ""), "RA="+s.url(ra, ""), "RB="+s.url(rb, ""))
	t.Logf("client steps: %s", out)
	checkSlots(t, r, host, navigations(s, host), 15, kindsInterval)
	checkRedirects(t, r, s, ra, rb)
	if t.Failed() {
		t.Logf("the server saw:%s", describe(s.hitsOf(nil)))
	}
}

// TestNavKindsPlaywright: through Playwright's connectOverCDP, goto, link
// click, reload, location.href, form GET and POST, history.back past an
// unload handler, meta refresh and a popup to one host each take exactly
// one slot.
func TestNavKindsPlaywright(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, fixed(kindsInterval, 1))
	const host = "pw.test"
	out := runNode(t, 90*time.Second, "pw-kinds.mjs", "RELAY="+r.url, "RUN="+runID(), "BASE="+s.url(host, ""))
	t.Logf("client steps: %s", out)
	checkSlots(t, r, host, navigations(s, host), 13, kindsInterval)
}

// rawSettled waits until session's page shows a loaded document whose URL
// contains marker. Runtime.evaluate needs no domain enabled; it fails while
// documents swap, and is retried.
func rawSettled(t *testing.T, rc *rawClient, session, marker string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	last := ""
	for ctx.Err() == nil {
		res, err := rc.call(ctx, session, "Runtime.evaluate", map[string]any{
			"expression": "location.href + ' ' + document.readyState", "returnByValue": true,
		})
		if err == nil {
			var v struct{ Result struct{ Value string } }
			json.Unmarshal(res, &v)
			last = v.Result.Value
			if strings.Contains(last, marker) && strings.HasSuffix(last, " complete") {
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the page never settled on %s: last seen %s", marker, last)
}

// TestNeverHeld: the iframes, images, scripts, fetch and XHR of a page go
// at once, though their host's next slot is a second away: the page's own
// host for /page?sub=1, and another host, just booked, for a cross-site
// iframe. The relay holds none of them (its log), and they arrive well
// before a slot after their page's document, once for a page that went
// at once and once for a page that waited for its slot.
func TestNeverHeld(t *testing.T) {
	const interval = time.Second
	s := newSite(t)
	r := startRelay(t, fixed(interval, 1))
	const host, other = "never.test", "never-x.test"
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	run := runID()

	// Book other's slot: its next one is a second away when the iframe asks.
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(other, "/page?warm=1&run="+run)})
	rawSettled(t, rc, session, "warm=1")
	var docs []string
	for i := 1; i <= 2; i++ {
		q := url.Values{"run": {run}, "n": {fmt.Sprint(i)}, "sub": {"1"}}
		if i == 1 {
			q.Set("xframe", s.url(other, "/frame?run="+run))
		}
		docs = append(docs, q.Encode())
		rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?"+q.Encode())})
		rawSettled(t, rc, session, fmt.Sprintf("n=%d", i))
	}
	// fetch and XHR may still be under way at load.
	time.Sleep(300 * time.Millisecond)

	var docAt []time.Time
	for i, query := range docs {
		doc := s.hitsOf(func(h hit) bool { return h.Host == host && h.Path == "/page" && h.Query == query })
		if len(doc) != 1 {
			t.Fatalf("page %d: the server saw its document %d times, want once", i+1, len(doc))
		}
		docAt = append(docAt, doc[0].At)
		want := []string{host + " /frame", host + " /img", host + " /script", host + " /fetch", host + " /xhr"}
		if i == 0 {
			want = append(want, other+" /frame")
		}
		for _, w := range want {
			wantHost, path, _ := strings.Cut(w, " ")
			sub := s.hitsOf(func(h hit) bool {
				return h.Host == wantHost && h.Path == path && (h.Query == query || h.Query == "run="+run)
			})
			if len(sub) != 1 {
				t.Errorf("page %d: the server saw %s %d times, want once", i+1, w, len(sub))
				continue
			}
			// The relay's log says what it held: it let nothing of this
			// host go between the document's arrival and this one's.
			if slices.ContainsFunc(heldReleases(r, wantHost), func(rel time.Time) bool {
				return rel.After(doc[0].At) && !rel.After(sub[0].At)
			}) {
				t.Errorf("page %d: the relay held %s until a slot", i+1, w)
			}
			// Held, it would have come about a slot later (less what the
			// document took to arrive, at most ~150 ms).
			if d := sub[0].At.Sub(doc[0].At); d >= interval-150*time.Millisecond {
				t.Errorf("page %d: %s arrived %v after its document, want at once (not a slot of %v later)", i+1, w, d, interval)
			} else {
				t.Logf("page %d: %s %.1fms after its document", i+1, w, ms(d))
			}
		}
	}
	// The second page itself did wait for its slot.
	if d := docAt[1].Sub(docAt[0]); d < interval/2 {
		t.Errorf("the second page arrived %v after the first, want about %v (its slot)", d, interval)
	}
}

// TestFallbackPuppeteer: with the fallback that holds navigation commands
// in the client's stream (hold.InterceptNavigate, for browsers without
// browser-level Fetch), Puppeteer's goto and reload each wait for a slot of
// their own.
//
// The fallback sees only Page.navigate, Page.reload and
// Target.createTarget as they pass: link clicks, form submissions,
// location assignments, history navigation, meta refreshes, popups and
// redirect hops go unheld (a redirect to another host is booked but not
// held, as the browser follows it by itself), and it reads answers only
// from Network events the client enabled itself (Puppeteer does).
func TestFallbackPuppeteer(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, fixed(kindsInterval, 1), func(p *relay.Proxy) { p.Intercept = hold.InterceptNavigate })
	const host = "fallback.test"
	out := runNode(t, 60*time.Second, "pptr-fallback.mjs", "RELAY="+r.url, "RUN="+runID(), "BASE="+s.url(host, ""))
	t.Logf("client steps: %s", out)
	// Held here, a navigation is held as a command: its request follows
	// once the browser has started it, 8-30 ms later, which varies more
	// than a released request's few milliseconds.
	checkSlotsWithin(t, r, host, navigations(s, host), 5, kindsInterval, 2*slack)
}
