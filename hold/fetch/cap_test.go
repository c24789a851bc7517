package fetch

// The cap on navigations in flight, through the relay's own connections
// (Chromium): a navigation over the cap waits for a place, and its place
// is given back whichever way the navigation ends. The cap is 1 in these
// tests, so a place that leaks holds the next navigation of its host for
// good.

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

const (
	recordedPage = "790930CD9B2465672A55F9C74C38BAEC" // the page the recording navigates
	otherPage    = "0THER0PAGE0000000000000000000000"
)

// onPage moves a recorded chain to another page target.
func onPage(chain [][]byte, target string) [][]byte {
	out := make([][]byte, len(chain))
	for i, m := range chain {
		out[i] = bytes.ReplaceAll(m, []byte(recordedPage), []byte(target))
	}
	return out
}

// announceTarget tells the relay's connection of a page target.
func announceTarget(t *testing.T, hc *fakebrowser.Conn, target string) {
	t.Helper()
	if err := hc.Send(fmt.Appendf(nil, `{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":%q,"type":"page","title":"","url":"about:blank","attached":false,"canAccessOpener":false}}}`, target)); err != nil {
		t.Fatal(err)
	}
}

// inJob moves a recorded pause to the interception job of requestID.
func inJob(msg []byte, requestID string) []byte {
	return fakebrowser.JobID.ReplaceAll(msg, []byte(`"`+requestID[:strings.LastIndexByte(requestID, '.')+1]))
}

// continuedWithin reports whether hc continued requestID within d.
func continuedWithin(hc *fakebrowser.Conn, requestID string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		hc.Mu.Lock()
		_, ok := hc.Continued[requestID]
		hc.Mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// goesAtOnce plays the request of a navigation of host on a fresh page and
// fails unless the relay lets it go at once, then answers it.
func goesAtOnce(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, host string) {
	t.Helper()
	page := fmt.Sprintf("PROBE%027d", fb.NewJob())
	announceTarget(t, hc, page)
	chain := onPage(fb.FetchRec.Chain(t, "/page?first"), page)
	if host != "a.test" {
		chain = onPage(fb.FetchRec.Chain(t, "/page?created"), page) // b.test
	}
	job := fb.NewJob()
	req := fakebrowser.RenumberJob(chain[0], job)
	p, _ := fakebrowser.ReadPause(req)
	hc.Send(req)
	if !continuedWithin(hc, p.RequestID, 2*time.Second) {
		t.Fatalf("the next navigation of %s is held: a place was not given back", host)
	}
	hc.Send(fakebrowser.RenumberJob(chain[1], job))
	hc.ContinuedAt(p.RequestID)
}

// TestCapFetch: through the relay's own connections (Chromium), every way
// a navigation ends gives its place back, and the next navigation of its
// host goes at once.
func TestCapFetch(t *testing.T) {
	tests := []struct {
		name    string
		bound   time.Duration
		dropped bool   // it drops the connection it played on
		host    string // whose places are checked
		// end plays a navigation and ends it one way.
		end func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy)
	}{
		{name: "answer", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first"))
		}},
		{name: "429", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/busy"))
		}},
		{name: "no answer: refused", host: "c.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "http://c.test"))
		}},
		{name: "redirect to another host", host: "b.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			chain := fb.FetchRec.Chain(t, "/r")
			hops := hc.MustPlay(t, chain[:2]) // a.test answered 302
			// Its place goes with its hop unless that is to another host.
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			for i, m := range [][]byte{inJob(chain[2], hops[0].RequestID), inJob(chain[3], hops[0].RequestID)} {
				p, _ := fakebrowser.ReadPause(m)
				hc.Send(m)
				if _, err := hc.ContinuedAt(p.RequestID); err != nil {
					t.Fatal(err)
				}
				hc.Mu.Lock()
				delete(hc.Continued, p.RequestID)
				hc.Mu.Unlock()
				if i == 0 {
					holdtest.AwaitInFlight(t, pol, "a.test", 0)
					holdtest.AwaitInFlight(t, pol, "b.test", 1)
				}
			}
		}},
		{name: "redirect within the host keeps its place to the end", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			chain := fb.FetchRec.Chain(t, "/r2")
			hops := hc.MustPlay(t, chain[:2])
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			hop := inJob(chain[2], hops[0].RequestID)
			p, _ := fakebrowser.ReadPause(hop)
			hc.Send(hop)
			hc.ContinuedAt(p.RequestID)
			hc.Mu.Lock()
			delete(hc.Continued, p.RequestID)
			hc.Mu.Unlock()
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			answer := inJob(chain[3], hops[0].RequestID)
			hc.Send(answer)
			hc.ContinuedAt(p.RequestID)
		}},
		{name: "page closed mid-navigation", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1])
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			hc.Send(fmt.Appendf(nil, `{"method":"Target.targetDestroyed","params":{"targetId":%q}}`, recordedPage))
		}},
		{name: "a later navigation of the page", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			chain := fb.FetchRec.Chain(t, "/page?first")
			hc.MustPlay(t, chain[:1])
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			hc.MustPlay(t, chain) // the page's next navigation, answered
		}},
		{name: "page closed while waiting for a place", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			chain := fb.FetchRec.Chain(t, "/page?first")
			hops := hc.MustPlay(t, chain[:1]) // in flight
			announceTarget(t, hc, otherPage)
			waiting := fakebrowser.RenumberJob(onPage(chain, otherPage)[0], fb.NewJob())
			p, _ := fakebrowser.ReadPause(waiting)
			hc.Send(waiting)
			if continuedWithin(hc, p.RequestID, 300*time.Millisecond) {
				t.Fatal("a second navigation of a.test went while one was in flight, cap 1")
			}
			if n, w := holdtest.InFlight(pol, "a.test"); n != 1 || w != 1 {
				t.Fatalf("a.test: %d in flight, %d waiting; want 1 and 1", n, w)
			}
			hc.Send(fmt.Appendf(nil, `{"method":"Target.targetDestroyed","params":{"targetId":%q}}`, otherPage))
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			hc.Send(inJob(chain[1], hops[0].RequestID))
			hc.ContinuedAt(hops[0].RequestID)
		}},
		{name: "connection lost", host: "a.test", dropped: true, end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1])
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			hc.Drop() // its answer would have come here
		}},
		{name: "browser lost", host: "a.test", dropped: true, end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1])
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			for _, h := range append(fb.Holders(), fb.PagesConns()...) {
				h.Drop()
			}
		}},
		{name: "the bound", bound: 300 * time.Millisecond, host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, pol *policy.Policy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1]) // its end is never seen
			holdtest.AwaitInFlight(t, pol, "a.test", 1)
			time.Sleep(300 * time.Millisecond)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pol *policy.Policy
			fb, _ := armNew(t, limiter.Config{Mode: limiter.Off}, holdtest.Capped(holdtest.CapOne(tt.bound), &pol))
			hc := fb.Holder(t)
			fb.Pages(t) // both of the relay's connections are up; net holds what pauses there
			fakebrowser.AnnouncePages(t, fb, hc, false)
			tt.end(t, fb, hc, pol)
			holdtest.AwaitInFlight(t, pol, tt.host, 0)
			if tt.dropped { // the relay reconnects: the next navigation pauses there
				hc.Ended(t)
				hc = fb.Holder(t)
				fakebrowser.AnnouncePages(t, fb, hc, false)
			}
			goesAtOnce(t, fb, hc, tt.host)
			holdtest.AwaitInFlight(t, pol, tt.host, 0)
			if expired := pol.Expired(); (expired == 1) != (tt.bound > 0) {
				t.Errorf("%d places given back by the bound", expired)
			}
		})
	}
}

// TestCapFetchHolds: a navigation over the cap waits, in arrival order,
// and goes once a place is given back; the spacing still applies after.
// The first time the cap holds a host it is warned about, and the wait is
// counted (Metrics.Waited, which the relay's /metrics shows as
// cdp_throttle_concurrency_wait_seconds); the policy shows the host's
// navigation in flight and the one waiting under the cap of the flags
// (what the relay's /hosts, /status and page show).
func TestCapFetchHolds(t *testing.T) {
	var pol *policy.Policy
	fb, th := armNew(t, limiter.Config{Mode: limiter.Off},
		holdtest.Capped(policy.Config{Default: holdtest.Fixed(200 * time.Millisecond), Concurrency: 1}, &pol))
	hc := fb.Holder(t)
	fakebrowser.AnnouncePages(t, fb, hc, false)
	chain := fb.FetchRec.Chain(t, "/page?first")
	first := hc.MustPlay(t, chain[:1])
	var waiting []string
	for i := range 2 {
		page := fmt.Sprintf("WAITING%025d", i)
		announceTarget(t, hc, page)
		m := fakebrowser.RenumberJob(onPage(chain, page)[0], fb.NewJob())
		p, _ := fakebrowser.ReadPause(m)
		hc.Send(m)
		waiting = append(waiting, p.RequestID)
		time.Sleep(20 * time.Millisecond) // arrival order
	}
	if continuedWithin(hc, waiting[0], 400*time.Millisecond) {
		t.Fatal("a navigation over the cap went")
	}
	answered := time.Now()
	hc.Send(inJob(chain[1], first[0].RequestID)) // the first is answered
	at, err := hc.ContinuedAt(waiting[0])
	if err != nil {
		t.Fatal(err)
	}
	if continuedWithin(hc, waiting[1], 100*time.Millisecond) {
		t.Error("the third went before the second was answered")
	}
	// Its place came at once; its slot was the one the spacing gave it.
	t.Logf("the second navigation went %v after the first was answered", at.Sub(answered))
	if d := at.Sub(first[0].Continued); d < 200*time.Millisecond {
		t.Errorf("the second navigation went %v after the first, want its slot 200ms after", d)
	}
	if lines := th.Logs.Lines("holding navigations to this host until one in flight is answered", `"host":"a.test"`, `"concurrency":1`); len(lines) != 1 {
		t.Errorf("warnings: %q, want one", lines)
	}
	if n := th.Counts.Waits.Load(); n != 1 {
		t.Errorf("%d waits for a place counted, want 1: the navigation that waited", n)
	}
	if h, ok := holdtest.HostOf(pol, "a.test"); !ok || h.InFlight != 1 || h.Waiting != 1 || h.Concurrency != 1 || h.ConcurrencySource != policy.SourceFlags {
		t.Errorf("a.test as the policy shows it: %+v (shown: %v), want 1 in flight, 1 waiting, concurrency 1 from the flags", h, ok)
	}
}
