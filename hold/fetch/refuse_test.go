package fetch

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
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
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	obey, lim := holdtest.Obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1,concurrency:1")
	th := holdOn(t, fb, limiter.Config{}, obey)
	_, pages := fakebrowser.RelayConns(t, fb, false)
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
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	obey, lim := holdtest.ObeyingFlags(t, "User-agent: *\nDisallow: /private/\n", policy.Flags{Robots: "obey", Delay: "0"})
	th := holdOn(t, fb, limiter.Config{}, obey)
	fakebrowser.RelayConns(t, fb, false)
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
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	obey, _ := holdtest.Obeying(t, "User-agent: *\nDisallow: /y\n", "a.test=fixed:1h,burst:1")
	th := holdOn(t, fb, limiter.Config{}, obey)
	fakebrowser.RelayConns(t, fb, false)
	hops := fb.Navigate(t, fb.FetchRec.Chain(t, "/r2"))
	if len(hops) != 2 || hops[0].Failed != "" || hops[1].Failed != "BlockedByClient" {
		t.Fatalf("got %+v, want /r2 let go and its hop to /y failed with BlockedByClient", hops)
	}
	if n := th.Counts.Disallowed.Load(); n != 1 {
		t.Errorf("holding counted %d disallowed navigations, want 1", n)
	}
}
