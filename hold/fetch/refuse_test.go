package fetch

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// rewritten is chain with one URL's path and query replaced.
func rewritten(chain [][]byte, from, to string) [][]byte {
	var out [][]byte
	for _, msg := range chain {
		out = append(out, bytes.ReplaceAll(msg, []byte(from), []byte(to)))
	}
	return out
}

// busiest is the Limiter's state of its busiest buckets, as the relay's
// /hosts lists it (its default 50 of them).
func busiest(t *testing.T, th *holdtest.Holder) []limiter.HostState {
	t.Helper()
	b, ok := th.Holder.Limiter.(interface {
		Busiest(now time.Time, n int) []limiter.HostState
	})
	if !ok {
		t.Fatalf("the Holder's Limiter %T lists no buckets", th.Holder.Limiter)
	}
	return b.Busiest(time.Now(), 50)
}

// TestFetchHolderRefusesDisallowed: with --robots obey, a navigation its
// site's robots.txt disallows is failed where it paused with
// BlockedByClient, books nothing (neither a slot of its host's hour-long
// spacing nor its one place in flight), is counted disallowed, and
// refused for its host in the Limiter's state (/hosts), and said once;
// one it allows goes on.
func TestFetchHolderRefusesDisallowed(t *testing.T) {
	obey, lim := holdtest.Obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1,concurrency:1")
	fb, th, _, pages := connected(t, limiter.Config{}, obey)
	chain := fb.FetchRec.Chain(t, "/page?first")

	for i, path := range []string{"/private/x", "/private/y?q=1"} {
		hops := fb.Navigate(t, rewritten(chain, "/page?first", path))
		if len(hops) != 1 || hops[0].Failed != "BlockedByClient" {
			t.Fatalf("navigation %d to %s: got %+v, want failed with BlockedByClient where it paused", i, path, hops)
		}
	}
	if got := len(fakebrowser.Commands(pages, "Fetch.failRequest")); got != 2 {
		t.Errorf("pages failed %d requests, want 2", got)
	}
	if n := (*lim).Len(); n != 0 {
		t.Errorf("limiter knows %d hosts after refusals, want none: a refusal books nothing", n)
	}
	// Allowed: it goes at once, as the first of its host (neither a slot
	// nor a place was taken by the refused ones).
	done := make(chan []fakebrowser.Hops, 1)
	go func() { done <- fb.Navigate(t, chain) }()
	select {
	case hops := <-done:
		if len(hops) == 0 || hops[0].Failed != "" {
			t.Errorf("allowed navigation: got %+v, want it let go", hops)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the allowed navigation was held: the refused ones booked something")
	}

	if n := th.Counts.Disallowed.Load(); n != 2 {
		t.Errorf("holding counted %d disallowed navigations, want 2", n)
	}
	if hosts := busiest(t, th); len(hosts) != 1 || hosts[0].Host != "a.test" || hosts[0].Refused != 2 {
		t.Errorf("the Limiter's busiest buckets: got %+v, want a.test with 2 refused", hosts)
	}
	warned := th.Logs.Lines("navigation refused: robots.txt disallows it")
	if len(warned) != 1 || !strings.Contains(warned[0], `"level":"warn"`) || !strings.Contains(warned[0], `"host":"a.test"`) ||
		!strings.Contains(warned[0], `"path":"/private/x"`) || !strings.Contains(warned[0], `"source":"robots.txt"`) {
		t.Errorf("got %q, want one warning naming the host, the path and robots.txt", warned)
	}
}

// TestFetchHolderRefusesUnspaced: --robots obey with --http-nav-delay 0
// (nothing spaced, nothing capped) still holds navigations, to refuse the
// disallowed ones; the others go at once, booking nothing.
func TestFetchHolderRefusesUnspaced(t *testing.T) {
	obey, lim := holdtest.ObeyingFlags(t, "User-agent: *\nDisallow: /private/\n", policy.Flags{Robots: "obey", Delay: "0"})
	fb, th, _, _ := connected(t, limiter.Config{}, obey)
	chain := fb.FetchRec.Chain(t, "/page?first")
	if hops := fb.Navigate(t, rewritten(chain, "/page?first", "/private/x")); len(hops) != 1 || hops[0].Failed != "BlockedByClient" {
		t.Fatalf("got %+v, want failed with BlockedByClient", hops)
	}
	for range 2 {
		if hops := fb.Navigate(t, chain); len(hops) == 0 || hops[0].Failed != "" {
			t.Fatalf("allowed navigation: got %+v, want it let go", hops)
		}
	}
	if n := (*lim).Len(); n != 0 {
		t.Errorf("limiter knows %d hosts, want none: nothing is spaced", n)
	}
	if disallowed, exempt := th.Counts.Disallowed.Load(), th.Counts.Exempt.Load(); disallowed != 1 || exempt != 2 {
		t.Errorf("holding counted %d disallowed and %d exempt navigations, want 1 and 2", disallowed, exempt)
	}
}

// TestFetchHolderRefusesRedirectHop: a redirect within its host into a
// path robots.txt disallows (a.test/r2 → a.test/y, recorded off Chromium)
// is failed at its hop, which books nothing more.
func TestFetchHolderRefusesRedirectHop(t *testing.T) {
	obey, _ := holdtest.Obeying(t, "User-agent: *\nDisallow: /y\n", "a.test=fixed:1h,burst:1")
	fb, th, _, _ := connected(t, limiter.Config{}, obey)
	hops := fb.Navigate(t, fb.FetchRec.Chain(t, "/r2"))
	if len(hops) != 2 || hops[0].Failed != "" || hops[1].Failed != "BlockedByClient" {
		t.Fatalf("got %+v, want /r2 let go and its hop to /y failed with BlockedByClient", hops)
	}
	if n := th.Counts.Disallowed.Load(); n != 1 {
		t.Errorf("holding counted %d disallowed navigations, want 1", n)
	}
}

// TestFetchHolderDefers: with --max-wait, a navigation whose slot lies
// further ahead is answered where it paused with the relay's own 429
// (Fetch.fulfillRequest): Retry-After the seconds to its slot, the header
// that says the relay made it. It books nothing (the host's next slot
// stays where the first booking put it), is counted deferred and said
// once, and its 429, which the browser tells as the page's answer, is not
// fed back as the host's: the host's one answer is the first's.
func TestFetchHolderDefers(t *testing.T) {
	cfg, err := policy.FromFlags(policy.Flags{Rules: []string{"a.test=adaptive,burst:1"}, MaxWait: "10s"})
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(cfg.Default)
	pol := policy.New(cfg, lim)
	fb, th, _, _ := connected(t, limiter.Config{}, func(hd *hold.Holder) { hd.Limiter = pol })
	chain := fb.FetchRec.Chain(t, "/page?first")

	if hops := fb.Navigate(t, chain); len(hops) == 0 || hops[0].Failed != "" || hops[0].Fulfilled != 0 {
		t.Fatalf("first navigation: got %+v, want it let go", hops)
	}
	th.WaitFeedback(t, 1)
	// The site answers 429 with Retry-After: 60: the next slot is a minute away.
	pol.Observe("a.test", limiter.Outcome{Status: 429, RetryAfter: "60"}, time.Now())
	next := pol.Busiest(time.Now(), 50)[0].NextFree
	for i := range 2 {
		hops := fb.Navigate(t, chain)
		if len(hops) != 1 || hops[0].Fulfilled != refusal.Status {
			t.Fatalf("navigation %d: got %+v, want answered at once with %d", i+2, hops, refusal.Status)
		}
		h := hops[0].Headers
		if after, err := strconv.Atoi(h["Retry-After"]); err != nil || after < 55 || after > 60 {
			t.Errorf("navigation %d: Retry-After %q, want the 60 s to its slot", i+2, h["Retry-After"])
		}
		if got := h[refusal.Header]; got != "deferred; reason=max-wait" {
			t.Errorf("navigation %d: %s %q, want deferred; reason=max-wait", i+2, refusal.Header, got)
		}
	}
	th.Holder.Wait()
	if n := th.Counts.Deferred.Load(); n != 2 {
		t.Errorf("holding counted %d deferred navigations, want 2", n)
	}
	if n := th.Counts.Fed.Load(); n != 1 {
		t.Errorf("holding fed %d answers back, want the first's alone: the relay's own 429 is no answer of the host", n)
	}
	if now := pol.Busiest(time.Now(), 50)[0].NextFree; now > next || now < next-time.Second {
		t.Errorf("the host's next slot moved from %v to %v: a deferred navigation books nothing", next, now)
	}
	if warned := th.Logs.Lines("deferring navigations to this host"); len(warned) != 1 || !strings.Contains(warned[0], `"reason":"max-wait"`) {
		t.Errorf("got %q, want one warning with the reason", warned)
	}
}
