package fetch

// Holding through the relay's own connections (Fetch) when one or both of
// them are lost, or the relay closes them, while navigations are held.

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestFetchHolderReconnects drops the relay's own connections: with one
// gone the other holds on (net pausing every document while pages is
// away), the relay reconnects, and with both gone the relay says so and
// holds again once one is back; navigations stay spaced throughout.
func TestFetchHolderReconnects(t *testing.T) {
	for _, how := range []string{"dropped", "closed"} {
		t.Run(how, func(t *testing.T) {
			fb, th, net, pages := connected(t, holdtest.Fixed(300*time.Millisecond))
			lose := func(hc *fakebrowser.Conn) {
				if how == "dropped" {
					hc.Drop()
				} else {
					hc.CloseWith(1001, "")
				}
				hc.Ended(t)
			}
			chain := fb.FetchRec.Chain(t, "/page?first")
			first := fb.Navigate(t, chain)
			lose(pages)
			// Net pauses every document until pages is back.
			fb.Await(t, "net pausing every document", func() bool { return slices.Contains(net.Patterns, "*") })
			awaitArmed(t, th)
			second := fb.Navigate(t, chain) // net alone
			if waited := second[0].Continued.Sub(first[0].Paused); waited < 300*time.Millisecond {
				t.Errorf("second navigation released %v after the first paused, want at least 300ms", waited)
			}
			// Said once the other one answered: the browser is still there.
			th.Logs.Wait("lost one of")
			if n := len(th.Logs.Lines(`"level":"info"`, "lost one of the relay's browser connections")); n != 1 {
				t.Errorf("got %d notes about one lost connection, want 1", n)
			}
			again := fb.Pages(t) // the relay reconnected
			fakebrowser.ArmedPages(t, fb, again)
			fb.Await(t, "net pausing only what pages holds", func() bool { return !slices.Contains(net.Patterns, "*") })
			third := fb.Navigate(t, chain)
			if waited := third[0].Continued.Sub(second[0].Paused); waited < 300*time.Millisecond {
				t.Errorf("third navigation released %v after the second paused, want at least 300ms", waited)
			}
			lose(net)
			awaitArmed(t, th)
			fourth := fb.Navigate(t, chain) // pages alone
			if waited := fourth[0].Continued.Sub(third[0].Paused); waited < 300*time.Millisecond {
				t.Errorf("fourth navigation released %v after the third paused, want at least 300ms", waited)
			}
			net2 := fb.Holder(t)
			lose(net2)
			lose(again)
			fb.Holder(t)
			th.Logs.Wait("browser connection is back")
			if n := len(th.Logs.Lines(`"level":"warn"`, "the browser closed the relay's connections")); n != 1 {
				t.Errorf("got %d warnings about losing both connections, want 1", n)
			}
			if n := len(th.Logs.Lines("browser connection is back")); n != 1 {
				t.Errorf("got %d notes that the connection is back, want 1", n)
			}
			if n := th.Counts.Unheld.Load(); n != 0 {
				t.Errorf("unheld navigations: %d, want 0", n)
			}
		})
	}
}

// awaitArmed waits until the relay can hold navigations again.
func awaitArmed(t *testing.T, th *holdtest.Holder) {
	t.Helper()
	fakebrowser.Eventually(t, "the relay holding navigations again", func() bool { return th.Browser.Holding() != "waiting" })
}

// TestFetchHolderBrowserGone: when the browser goes away (stopped, or
// killed: on the wire they look the same), both of the relay's connections
// drop at once; the relay says so once, and does not call it one lost
// connection that the other holds on for; once the browser is back it
// holds again. When the relay itself shuts down, it says nothing of them.
func TestFetchHolderBrowserGone(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	// A browser going away answers nothing more before its connections
	// drop; dropped one after the other here, the second must not answer
	// the relay's question in between, as a live browser would.
	fb := fakebrowser.New(t, fakebrowser.Config{Silent: map[string]bool{"Target.getTargets": true}})
	th := holdOn(t, fb, holdtest.Fixed(300*time.Millisecond))
	hc1, hc2 := fb.Holder(t), fb.Pages(t)
	for st := StateOf(th.Browser); !st.Pages || !st.Net; st = StateOf(th.Browser) { // the relay has them both, not only the fake
		time.Sleep(time.Millisecond)
	}
	hc1.Drop()
	hc2.Drop()
	hc1.Ended(t)
	hc2.Ended(t)
	fb.Holder(t)
	th.Logs.Wait("browser connection is back")
	time.Sleep(50 * time.Millisecond) // what the first drop would say after asking the other connection
	if n := len(th.Logs.Lines(`"level":"warn"`, "the browser closed the relay's connections")); n != 1 {
		t.Errorf("got %d warnings that the browser closed the relay's connections, want 1", n)
	}
	if n := len(th.Logs.Lines("lost one of")); n != 0 {
		t.Errorf("got %d notes about one lost connection, want none: the browser went away", n)
	}
	th.Close()
	for _, m := range []string{"lost one of", "closed the relay's connections"} {
		if n := len(th.Logs.Lines(m)); n > 1 || m == "lost one of" && n > 0 {
			t.Errorf("after Close: %d lines with %q", n, m)
		}
	}
}

// TestFetchHolderHandsOver drops the relay's pages connection while it
// holds a navigation: Chromium hands the request to net, whose patterns
// name it, which holds it until the slot already booked, books nothing
// more, and counts nothing as unheld.
func TestFetchHolderHandsOver(t *testing.T) {
	fb, th, net, pages := connected(t, holdtest.Fixed(500*time.Millisecond))
	chain := fb.FetchRec.Chain(t, "/page?first")
	first := fb.Navigate(t, chain)
	held := make(chan []fakebrowser.Hops, 1)
	go func() { held <- fb.Navigate(t, chain) }()
	fakebrowser.Eventually(t, "the second navigation booked", func() bool { return int(th.Counts.Booked.Load()) == 2 })
	fb.Await(t, "net's patterns naming the held request", func() bool {
		return slices.ContainsFunc(net.Patterns, func(p string) bool { return strings.Contains(p, "/page\\?first") })
	})
	pages.Drop()
	second := <-held
	if waited := second[0].Continued.Sub(first[0].Paused); waited < 500*time.Millisecond {
		t.Errorf("held navigation went %v after the first, want at least its slot, 500ms", waited)
	}
	if n := len(fakebrowser.Commands(net, "Fetch.continueRequest")); n == 0 {
		t.Errorf("net never let the handed-over request go")
	}
	if n := int(th.Counts.Booked.Load()); n != 2 {
		t.Errorf("%d bookings, want 2: the handed-over navigation books nothing more", n)
	}
	time.Sleep(orphanWait + 200*time.Millisecond)
	if n := th.Counts.Unheld.Load(); n != 0 {
		t.Errorf("unheld navigations: %d, want 0", n)
	}
}

// gatedLimiter books nothing until gate is closed, and says on asked that
// a booking waits.
type gatedLimiter struct {
	hold.Limiter
	asked chan struct{}
	gate  chan struct{}
}

func (g gatedLimiter) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	select {
	case g.asked <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Limiter.Reserve(ctx, host, rawURL, time.Now())
}

// TestFetchHolderLostWhileBooking drops the relay's pages connection while
// a request it paused is being booked, before it waits (so before net's
// patterns name it). Chromium either lets the request go, and the relay
// counts it unheld, or, when net's patterns already pause every document
// (the relay widens them as soon as it sees pages gone), hands it to net,
// which holds it: never out uncounted.
func TestFetchHolderLostWhileBooking(t *testing.T) {
	g := gatedLimiter{asked: make(chan struct{}, 1), gate: make(chan struct{})}
	var open sync.Once
	defer open.Do(func() { close(g.gate) })
	fb, th, net, pages := connected(t, holdtest.Fixed(time.Hour), func(hd *hold.Holder) { g.Limiter = hd.Limiter; hd.Limiter = g })
	nav := make(chan []fakebrowser.Hops, 1)
	go func() { nav <- fb.Navigate(t, fb.FetchRec.Chain(t, "/page?first")) }()
	select {
	case <-g.asked:
	case <-time.After(fakebrowser.WaitFor):
		t.Fatal("the navigation was never booked")
	}
	pages.Drop()
	fakebrowser.Eventually(t, "the relay seeing its pages connection gone", func() bool { return !StateOf(th.Browser).Pages })
	open.Do(func() { close(g.gate) }) // the booking is in once the relay knows
	var hops []fakebrowser.Hops
	select {
	case hops = <-nav:
	case <-time.After(fakebrowser.WaitFor):
		t.Fatal("the request was never let go")
	}
	if hops[0].Pauses == 0 {
		// The browser let it go: counted.
		fakebrowser.Eventually(t, "the request counted unheld", func() bool { return th.Counts.Unheld.Load() == 1 })
		if n := len(th.Logs.Lines("the browser released what the relay's lost connections held")); n != 1 {
			t.Errorf("logged %d times that the browser released what the relay held, want once", n)
		}
		return
	}
	if n := len(fakebrowser.Commands(net, "Fetch.continueRequest")); n == 0 {
		t.Error("net never let the handed-over request go")
	}
	time.Sleep(orphanWait + 200*time.Millisecond)
	if n := th.Counts.Unheld.Load(); n != 0 {
		t.Errorf("unheld navigations: %d, want 0: net held it", n)
	}
}

// TestFetchHolderCloseReleases checks that closing the relay while a
// navigation is held ends its connections (Chromium then lets the request
// go) and leaves nothing running.
func TestFetchHolderCloseReleases(t *testing.T) {
	fb, th, net, pages := connected(t, holdtest.Fixed(time.Hour))
	chain := fb.FetchRec.Chain(t, "/page?first")
	fb.Navigate(t, chain)
	held := make(chan []fakebrowser.Hops, 1)
	go func() { held <- fb.Navigate(t, chain) }()
	if !th.Logs.Wait(`"message":"navigation held"`) {
		t.Fatal("navigation not held")
	}
	th.Close()
	<-held
	pages.Ended(t)
	net.Ended(t)
	if n := len(fakebrowser.Commands(pages, "Fetch.continueRequest")); n != 1 {
		t.Errorf("pages let %d requests go, want only the first: the held one went with its connection", n)
	}
}
