package fetch

// Holding through the relay's own connections (Fetch), played against the
// fake browser's recorded transcripts with no client: what is held, what
// is booked, what answers do to the limiter.

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// TestFetchHolderReplaysChromium replays the net connection's transcript
// recorded from Chromium, in causal order, and checks that the relay sends
// the very commands the recorder sent (ids aside) and books what it should
// when net holds as the whole browser's interceptor (pages away).
func TestFetchHolderReplaysChromium(t *testing.T) {
	fb, th := armNew(t, limiter.Config{}) // adaptive: a few navigations never wait
	hc := fb.Holder(t)

	busyAnswered := fakebrowser.ReplayChromium(t, fb, hc)

	// a.test: six navigations, the last answered 429 with Retry-After 3;
	// b.test: a redirect hop and a new page; c.test: refused. The iframes
	// booked nothing.
	holdtest.CheckRecorded(t, th.Lim, busyAnswered, 0)
}

// TestFetchHolder plays recorded navigations through the relay's own
// connections and checks what is held, what is booked and what the answers
// do to the limiter.
func TestFetchHolder(t *testing.T) {
	const hour = time.Hour // an interval no test waits for: a booked host shows
	tests := []struct {
		name string
		cfg  limiter.Config
		// prime prepares the limiter before the navigations play.
		prime  func(*limiter.Limiter)
		chains []string // recorded navigations played in turn, by URL
		check  func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time)
	}{
		{
			name: "top-level request waits for its slot, in the page's session", cfg: holdtest.Fixed(300 * time.Millisecond),
			chains: []string{"/page?first", "/page?first"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				// The limiter booked the first at its pause at the earliest.
				if waited := hops[1][0].Continued.Sub(hops[0][0].Paused); waited < 300*time.Millisecond {
					t.Errorf("second navigation released %v after the first was paused, want at least 300ms", waited)
				}
				warned := th.Logs.Lines("spacing out navigations to this host", `"host":"a.test"`, "use --http-nav-delay 0 to disable")
				if len(warned) != 1 || !strings.Contains(warned[0], `"level":"debug"`) {
					t.Errorf("got %q, want one debug line naming a.test and the tip (fixed mode)", warned)
				}
				// One pause each, in the pages connection: net's patterns
				// named the held request while it waited, and not once it
				// was let go.
				if n := len(fakebrowser.Commands(pages, "Fetch.continueRequest")); n != 2 {
					t.Errorf("pages connection let %d requests go, want 2", n)
				}
				// Net, whose patterns name a held request until its release,
				// may still pause it when the browser takes the release
				// first: it then lets it go at once, booking nothing.
				if n := len(fakebrowser.Commands(net, "Fetch.continueRequest")); n > 2 {
					t.Errorf("net connection let %d requests go, want none (or the echo of a release)", n)
				}
				if n := len(th.Logs.Lines(`"message":"navigation held"`)); n != 1 {
					t.Errorf("%d navigations held, want 1", n)
				}
				named := false
				for _, m := range fakebrowser.Commands(net, "Fetch.enable") {
					named = named || strings.Contains(string(m.Wire.Params), `/page\\?first`)
				}
				if !named {
					t.Errorf("net's patterns never named the held request")
				}
				deadline := time.Now().Add(fakebrowser.WaitFor)
				for {
					last := fakebrowser.Commands(net, "Fetch.enable")
					if !strings.Contains(string(last[len(last)-1].Wire.Params), "page") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("net's patterns still name a request let go: %s", last[len(last)-1].Wire.Params)
					}
					time.Sleep(time.Millisecond)
				}
			},
		},
		{
			name: "adaptive mode warns once per host", cfg: limiter.Config{Burst: 1},
			// A host already answered with 503s: its spacing is long enough
			// that the navigations played back to back wait, however slow
			// the machine.
			prime: func(l *limiter.Limiter) {
				for range 12 {
					l.Observe("a.test", limiter.Outcome{Status: 503}, time.Now())
				}
			},
			chains: []string{"/page?first", "/page?first", "/page?first"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				if waited := hops[2][0].Continued.Sub(hops[1][0].Paused); waited <= 0 {
					t.Errorf("third navigation not held")
				}
				warned := th.Logs.Lines("spacing out navigations to this host", `"host":"a.test"`, "use --http-nav-delay 0 to disable")
				if len(warned) != 1 || !strings.Contains(warned[0], `"level":"warn"`) {
					t.Errorf("got %q, want one warn line naming a.test and the tip", warned)
				}
				if held := th.Logs.Lines(`"message":"navigation held"`, `"host":"a.test"`); len(held) != 2 {
					t.Errorf("got %d debug lines for held navigations, want 2", len(held))
				}
			},
		},
		{
			name: "iframes are released at once and book nothing", cfg: holdtest.Fixed(hour),
			chains: []string{"/child?same", "/child?cross", "/child?same"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				if n := th.Lim.Len(); n != 0 {
					t.Errorf("limiter knows %d hosts, want none", n)
				}
			},
		},
		{
			name: "redirect to another host books that host", cfg: holdtest.Fixed(hour),
			chains: []string{"/r"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				if len(hops[0]) != 2 {
					t.Fatalf("got %d pauses, want 2 (two hops, each once)", len(hops[0]))
				}
				for _, host := range []string{"a.test", "b.test"} {
					if r := th.Lim.Reserve(host, time.Now()); time.Until(r.Start) < hour/2 {
						t.Errorf("%s not booked: next slot in %v", host, time.Until(r.Start))
					}
				}
			},
		},
		{
			name: "redirect within the host books once", cfg: holdtest.Fixed(hour),
			chains: []string{"/r2"}, // a second booking would hold the hop for an hour
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				if r := th.Lim.Reserve("a.test", time.Now()); time.Until(r.Start) > hour+hour/2 {
					t.Errorf("a.test booked twice: next slot in %v", time.Until(r.Start))
				}
			},
		},
		{
			name: "429 with Retry-After pushes the next slot", cfg: limiter.Config{},
			chains: []string{"/busy"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				th.WaitFeedback(t, 1)
				r := th.Lim.Reserve("a.test", time.Now())
				if r.Start.Sub(began[0]) < 3*time.Second {
					t.Errorf("next slot %v after the 429, want at least Retry-After 3s", r.Start.Sub(began[0]))
				}
				if r.Pressure < 50 {
					t.Errorf("pressure %d after a 429, want at least 50", r.Pressure)
				}
			},
		},
		{
			name: "refused connection adds pressure", cfg: limiter.Config{},
			chains: []string{"http://c.test"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				th.WaitFeedback(t, 1)
				if r := th.Lim.Reserve("c.test", time.Now()); r.Pressure < 5 {
					t.Errorf("pressure %d after a refused connection, want it raised by 10", r.Pressure)
				}
			},
		},
		{
			name: "200 adds nothing", cfg: limiter.Config{},
			chains: []string{"/page?first"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				th.WaitFeedback(t, 1)
				now := time.Now()
				if r := th.Lim.Reserve("a.test", now); r.Pressure > 2 || r.Start.After(now) {
					t.Errorf("after a 200: pressure %d, start in %v; want 2 at most, now", r.Pressure, r.Start.Sub(now))
				}
			},
		},
		{
			name: "fixed mode ignores the 429", cfg: holdtest.Fixed(time.Millisecond),
			chains: []string{"/busy"},
			check: func(t *testing.T, th *holdtest.Holder, net, pages *fakebrowser.Conn, hops [][]fakebrowser.Hops, began []time.Time) {
				th.WaitFeedback(t, 1)
				now := time.Now()
				if r := th.Lim.Reserve("a.test", now); r.Start.Sub(now) > time.Second {
					t.Errorf("next slot in %v, want Retry-After ignored", r.Start.Sub(now))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb, th, net, pages := connected(t, tt.cfg)
			if tt.prime != nil {
				tt.prime(th.Lim)
			}
			var hops [][]fakebrowser.Hops
			var began []time.Time
			for _, url := range tt.chains {
				began = append(began, time.Now())
				hops = append(hops, fb.Navigate(t, fb.FetchRec.Chain(t, url)))
			}
			tt.check(t, th, net, pages, hops, began)
		})
	}
}

// TestFetchHolderExemptHost checks that a navigation to an exempt host is
// never held nor booked, and pauses once only.
func TestFetchHolderExemptHost(t *testing.T) {
	fb, th, net, pages := connected(t, holdtest.Fixed(time.Hour))
	chain := fb.FetchRec.Chain(t, "/page?first")
	for _, host := range []string{"localhost", "127.0.0.1", "LocalHost"} {
		var local [][]byte
		for _, msg := range chain {
			local = append(local, bytes.ReplaceAll(msg, []byte("http://a.test:"), []byte("http://"+host+":")))
		}
		p, _ := fakebrowser.ReadPause(local[0])
		netOff(t, fb, p.Request.URL) // else it may pause at net too, before net's patterns change
		fb.Navigate(t, local)
		fb.Navigate(t, local)
	}
	if n := th.Lim.Len(); n != 0 {
		t.Errorf("limiter knows %d hosts, want none", n)
	}
	if got := len(fakebrowser.Commands(pages, "Fetch.continueRequest")); got != 6 {
		t.Errorf("pages connection let %d requests go, want 6: each paused there once", got)
	}
	if got := len(fakebrowser.Commands(net, "Fetch.continueRequest")); got != 0 {
		t.Errorf("net connection let %d requests go, want none: no exempt navigation pauses twice", got)
	}
}

// TestFetchHolderConcurrent plays navigations to many hosts at once, each
// on a page of its own, and checks each host's navigations are spaced.
func TestFetchHolderConcurrent(t *testing.T) {
	const interval = 50 * time.Millisecond
	fb, th, net, pages := connected(t, holdtest.Fixed(interval))
	chain := fb.FetchRec.Chain(t, "/r") // a.test → b.test
	p, _ := fakebrowser.ReadPause(chain[0])
	const hosts, navs = 8, 4
	var wg sync.WaitGroup
	times := make([][]fakebrowser.Hops, hosts*navs)
	for h := range hosts {
		for n := range navs {
			page := fmt.Sprintf("PAGE-%d-%d", h, n)
			net.Send(fakebrowser.PageCreated(page, ""))
			var mine [][]byte
			for _, msg := range chain {
				msg = bytes.ReplaceAll(msg, []byte("http://a.test:"), []byte("http://a"+string(rune('a'+h))+".test:"))
				msg = bytes.ReplaceAll(msg, []byte("http://b.test:"), []byte("http://b"+string(rune('a'+h))+".test:"))
				mine = append(mine, bytes.ReplaceAll(msg, []byte(`"frameId":"`+p.FrameID+`"`), []byte(`"frameId":"`+page+`"`)))
			}
			fb.Armed(t, pages, page)
			wg.Go(func() { times[h*navs+n] = fb.Navigate(t, mine) })
		}
	}
	wg.Wait()
	// Per host, each navigation's first hop booked a slot: the last one
	// went at least (navs-1) intervals after the earliest pause.
	for h := range hosts {
		var first, last time.Time
		for n := range navs {
			hop := times[h*navs+n][0]
			if first.IsZero() || hop.Paused.Before(first) {
				first = hop.Paused
			}
			if hop.Continued.After(last) {
				last = hop.Continued
			}
		}
		if spread := last.Sub(first); spread < (navs-1)*interval {
			t.Errorf("host %d: %d navigations released within %v, want at least %v", h, navs, spread, (navs-1)*interval)
		}
	}
	if got, want := th.Lim.Len(), 2*hosts; got != want {
		t.Errorf("limiter knows %d hosts, want %d", got, want)
	}
	if got, want := len(fakebrowser.Commands(pages, "Fetch.continueRequest")), hosts*navs*2; got != want {
		t.Errorf("relay continued %d pauses, want %d", got, want)
	}
}

// TestFetchPagesReplaysChromium replays the pages connection's transcript
// recorded from Chromium: auto-attached to every page, Network and Fetch
// in each page's session, the document requests paused there and the
// Network events that say when each left and how it was answered. The
// relay sends the very commands the recorder sent, lets every target that
// is no page go, and books and feeds back what it should.
func TestFetchPagesReplaysChromium(t *testing.T) {
	fb, th := armNew(t, limiter.Config{}) // adaptive: a few navigations never wait
	fb.Pages(t).Drop()
	fb.ReplayNext(fb.PagesRec)
	pc := fb.Pages(t) // reconnected, and answered from the recording
	auto := fb.PagesRec.ReplyIndex(t, "Target.setAutoAttach")
	// The recorder enabled Network in its session as it armed a page; the
	// relay enables it as it holds the page's first request (no client
	// here has it on): the recorded events come either way.
	busyAnswered := fakebrowser.ReplayTranscript(t, fb.PagesRec, auto, pc, func(m fakebrowser.Msg) bool { return m.Wire.Method == "Network.enable" })
	th.WaitFeedback(t, 8)
	holdtest.CheckRecorded(t, th.Lim, busyAnswered, 100*time.Millisecond)
}

// TestNavigationLinesNameThePage: a held navigation's debug lines say
// which page it is in (the websocket path of most clients is /, which
// names nothing).
func TestNavigationLinesNameThePage(t *testing.T) {
	fb, th := armNew(t, holdtest.Fixed(300*time.Millisecond))
	hc := fb.Holder(t)
	chain := fb.FetchRec.Chain(t, "/page?first")
	fakebrowser.AnnouncePages(t, fb, hc, false)
	fb.PlayAll(t, chain)
	fb.PlayAll(t, chain) // held
	p, _ := fakebrowser.ReadPause(chain[0])
	for _, msg := range []string{"navigation goes at once", "navigation held"} {
		lines := th.Logs.Lines(`"message":"` + msg + `"`)
		if len(lines) != 1 || !strings.Contains(lines[0], `"page":"`+p.FrameID+`"`) {
			t.Errorf("%q: got %q, want one line naming page %s", msg, lines, p.FrameID)
		}
	}
}

// TestFetchHolderLearnsAddress: with --bucket ip, the address a document's
// answer came from (Chromium's remoteIPAddress) reaches the policy, and
// the host's next navigation is booked on it.
func TestFetchHolderLearnsAddress(t *testing.T) {
	var pol *policy.Policy
	fb, _, _, _ := connected(t, limiter.Config{}, func(hd *hold.Holder) {
		cfg, err := policy.FromFlags(policy.Flags{Delay: "1ms", Burst: "100", Bucket: "ip", IPSource: "browser"})
		if err != nil {
			t.Fatal(err)
		}
		pol = policy.New(cfg, limiter.New(cfg.Default))
		t.Cleanup(pol.Close)
		hd.Limiter = pol
	})
	if got := pol.Bucket("a.test"); got != "a.test" {
		t.Fatalf("before any answer: bucket %q, want a.test", got)
	}
	fb.Navigate(t, fb.FetchRec.Chain(t, "/page?first"))
	deadline := time.Now().Add(5 * time.Second)
	for pol.Bucket("a.test") != "127.0.0.2" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := pol.Bucket("a.test"); got != "127.0.0.2" {
		t.Errorf("after its answer: bucket %q, want 127.0.0.2", got)
	}
}

// TestFetchHolderFollowsByFrame: a page's first document request pauses
// with no networkId when no session had the page's Network events on as
// it started (a page created with a URL, a popup: in
// chromium-headless-shell, which lets no new page navigate before the
// relay's session on it runs it, the pages connection holds those), and
// its Network events name it only by its loader and frame. The relay
// follows it by its frame all the same: each hop's departure and answer,
// a redirect's too, so the next navigation of its host goes at its slot,
// not after pace's bound on waiting for a departure (2 s, the cause of
// URL pages loading late through the relay in front of the shell).
func TestFetchHolderFollowsByFrame(t *testing.T) {
	const interval = 300 * time.Millisecond
	fb, th, _, pages := connected(t, holdtest.Fixed(interval))
	first := fb.Navigate(t, fb.FetchRec.Chain(t, "/r")) // a.test → b.test, no session with Network on
	next := fb.Navigate(t, fb.FetchRec.Chain(t, "/page?first"))
	if gap := next[0].Continued.Sub(first[0].Continued); gap > interval+500*time.Millisecond {
		t.Errorf("a.test's next navigation let go %v after the first, want it at its slot, %v", gap, interval)
	}
	th.WaitFeedback(t, 3) // the redirect, b.test's answer, a.test's
	for _, host := range []string{"a.test", "b.test"} {
		if lines := th.Logs.Lines(`"message":"a navigation left the browser"`, `"bucket":"`+host+`"`); len(lines) == 0 {
			t.Errorf("no departure of %s seen", host)
		}
	}
	if n := len(fakebrowser.Commands(pages, "Fetch.continueRequest")); n != 3 {
		t.Errorf("pages connection let %d requests go, want 3: every hop held there", n)
	}
}
