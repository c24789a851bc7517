package relay

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// announcePages sends the recorded Target.targetCreated events of the
// pages created while the recording ran, as Chromium does before a page's
// first request. With quietly, the fake only learns of them, so it can
// answer Target.getTargetInfo, but announces nothing.
func announcePages(t *testing.T, fb *fakeBrowser, hc *fakeConn, quietly bool) {
	t.Helper()
	for _, rm := range fb.fetch.msgs[fb.fetch.replyIndex(t, "Fetch.enable"):] {
		info, raw, ok := readTargetInfo(rm.Msg)
		if !ok || rm.m.Method != "Target.targetCreated" || info.Type != "page" {
			continue
		}
		if quietly {
			fb.announce(info.TargetID, raw)
			continue
		}
		if err := hc.send(rm.Msg); err != nil {
			t.Fatal(err)
		}
	}
}

// commands returns the commands the relay sent on hc calling method.
func commands(hc *fakeConn, method string) []fakeMsg {
	var out []fakeMsg
	for _, m := range hc.received() {
		if m.m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// TestFetchHolderReplaysChromium replays the relay-side transcript
// recorded from Chromium, in causal order, and checks that the relay sends
// the very commands the recorder sent (ids aside) and books what it should.
func TestFetchHolderReplaysChromium(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, limiter.Config{}) // adaptive: a few navigations never wait
	hc := fb.holder(t)

	busyAnswered := replayChromium(t, fb, hc)

	// a.test: six navigations, the last answered 429 with Retry-After 3;
	// b.test: a redirect hop and a new page; c.test: refused. The iframes
	// booked nothing.
	if got := tp.lim.Len(); got != 3 {
		t.Errorf("limiter knows %d hosts, want 3 (a.test, b.test, c.test)", got)
	}
	now := time.Now()
	if r := tp.lim.Reserve("a.test", now); r.Start.Sub(busyAnswered) < 3*time.Second {
		t.Errorf("next a.test slot at %v after the 429, want at least its Retry-After 3s", r.Start.Sub(busyAnswered))
	}
	if r := tp.lim.Reserve("c.test", now); r.Pressure < 5 {
		t.Errorf("c.test pressure %d after a refused connection, want it raised by 10", r.Pressure)
	}
}

// TestFetchHolder plays recorded navigations against the relay's own
// connection and checks what is held, what is booked and what the answers
// do to the limiter.
func TestFetchHolder(t *testing.T) {
	const hour = time.Hour // an interval no test waits for: a booked host shows
	tests := []struct {
		name string
		cfg  limiter.Config
		late bool // the pages are not announced before their requests
		// prime prepares the limiter before the navigations play.
		prime  func(*limiter.Limiter)
		chains []string // recorded navigations played in turn, by URL
		check  func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes)
	}{
		{
			name: "top-level request waits for its slot", cfg: fixed(300 * time.Millisecond),
			chains: []string{"/page?first", "/page?first"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				// The limiter booked the first at its pause at the earliest.
				if waited := hops[1][0].continued.Sub(hops[0][0].paused); waited < 300*time.Millisecond {
					t.Errorf("second navigation released %v after the first was paused, want at least 300ms", waited)
				}
				warned := tp.logs.lines("spacing out navigations to this host", `"host":"a.test"`, "use --http-nav-delay 0 to disable")
				if len(warned) != 1 || !strings.Contains(warned[0], `"level":"debug"`) {
					t.Errorf("got %q, want one debug line naming a.test and the tip (fixed mode)", warned)
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
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				if waited := hops[2][0].continued.Sub(hops[1][0].paused); waited <= 0 {
					t.Errorf("third navigation not held")
				}
				warned := tp.logs.lines("spacing out navigations to this host", `"host":"a.test"`, "use --http-nav-delay 0 to disable")
				if len(warned) != 1 || !strings.Contains(warned[0], `"level":"warn"`) {
					t.Errorf("got %q, want one warn line naming a.test and the tip", warned)
				}
				if held := tp.logs.lines(`"message":"navigation held"`, `"host":"a.test"`); len(held) != 2 {
					t.Errorf("got %d debug lines for held navigations, want 2", len(held))
				}
			},
		},
		{
			name: "iframes are released at once and book nothing", cfg: fixed(hour),
			chains: []string{"/child?same", "/child?cross", "/child?same"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				if n := tp.lim.Len(); n != 0 {
					t.Errorf("limiter knows %d hosts, want none", n)
				}
				// Each frame is asked about once.
				if got := len(commands(hc, "Target.getTargetInfo")); got != 2 {
					t.Errorf("relay asked Target.getTargetInfo %d times, want 2", got)
				}
			},
		},
		{
			name: "page announced late is asked about and held", cfg: fixed(hour), late: true,
			chains: []string{"/page?first"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				if got := len(commands(hc, "Target.getTargetInfo")); got != 1 {
					t.Errorf("relay asked Target.getTargetInfo %d times, want 1", got)
				}
				if r := tp.lim.Reserve("a.test", time.Now()); time.Until(r.Start) < hour/2 {
					t.Errorf("a.test not booked: next slot in %v", time.Until(r.Start))
				}
			},
		},
		{
			name: "redirect to another host books that host", cfg: fixed(hour),
			chains: []string{"/r"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				if len(hops[0]) != 4 {
					t.Fatalf("got %d pauses, want 4 (two hops, two stages)", len(hops[0]))
				}
				for _, host := range []string{"a.test", "b.test"} {
					if r := tp.lim.Reserve(host, time.Now()); time.Until(r.Start) < hour/2 {
						t.Errorf("%s not booked: next slot in %v", host, time.Until(r.Start))
					}
				}
			},
		},
		{
			name: "redirect within the host books once", cfg: fixed(hour),
			chains: []string{"/r2"}, // a second booking would hold the hop for an hour
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				if r := tp.lim.Reserve("a.test", time.Now()); time.Until(r.Start) > hour+hour/2 {
					t.Errorf("a.test booked twice: next slot in %v", time.Until(r.Start))
				}
			},
		},
		{
			name: "new page with its URL is held", cfg: fixed(hour),
			chains: []string{"/page?created"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				if r := tp.lim.Reserve("b.test", time.Now()); time.Until(r.Start) < hour/2 {
					t.Errorf("b.test not booked: next slot in %v", time.Until(r.Start))
				}
			},
		},
		{
			name: "429 with Retry-After pushes the next slot", cfg: limiter.Config{},
			chains: []string{"/busy"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				answered := hops[0][1].paused
				r := tp.lim.Reserve("a.test", time.Now())
				if r.Start.Sub(answered) < 3*time.Second {
					t.Errorf("next slot %v after the 429, want at least Retry-After 3s", r.Start.Sub(answered))
				}
				if r.Pressure < 50 {
					t.Errorf("pressure %d after a 429, want at least 50", r.Pressure)
				}
			},
		},
		{
			name: "refused connection adds pressure", cfg: limiter.Config{},
			chains: []string{"http://c.test"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				if r := tp.lim.Reserve("c.test", time.Now()); r.Pressure < 5 {
					t.Errorf("pressure %d after a refused connection, want it raised by 10", r.Pressure)
				}
			},
		},
		{
			name: "200 adds nothing", cfg: limiter.Config{},
			chains: []string{"/page?first"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				now := time.Now()
				if r := tp.lim.Reserve("a.test", now); r.Pressure > 2 || r.Start.After(now) {
					t.Errorf("after a 200: pressure %d, start in %v; want 2 at most, now", r.Pressure, r.Start.Sub(now))
				}
			},
		},
		{
			name: "fixed mode ignores the 429", cfg: fixed(time.Millisecond),
			chains: []string{"/busy"},
			check: func(t *testing.T, tp *testProxy, hc *fakeConn, hops [][]hopTimes) {
				now := time.Now()
				if r := tp.lim.Reserve("a.test", now); r.Start.Sub(now) > time.Second {
					t.Errorf("next slot in %v, want Retry-After ignored", r.Start.Sub(now))
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			tp := relayTo(t, fb, tt.cfg)
			if tt.prime != nil {
				tt.prime(tp.lim)
			}
			hc := fb.holder(t)
			announcePages(t, fb, hc, tt.late)
			var hops [][]hopTimes
			for _, url := range tt.chains {
				hops = append(hops, hc.mustPlay(t, fb.fetch.chain(t, url)))
			}
			tt.check(t, tp, hc, hops)
		})
	}
}

// TestFetchHolderExemptHost checks that a navigation to an exempt host is
// never held nor booked.
func TestFetchHolderExemptHost(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour))
	hc := fb.holder(t)
	chain := fb.fetch.chain(t, "/page?first")
	announcePages(t, fb, hc, false)
	for _, host := range []string{"localhost", "127.0.0.1", "LocalHost"} {
		var local [][]byte
		for _, msg := range chain {
			local = append(local, bytes.ReplaceAll(msg, []byte("http://a.test:"), []byte("http://"+host+":")))
		}
		hc.mustPlay(t, local)
		hc.mustPlay(t, local)
	}
	if n := tp.lim.Len(); n != 0 {
		t.Errorf("limiter knows %d hosts, want none", n)
	}
}

// TestFetchHolderReconnects drops the relay's own connections: with one
// gone the other holds on, the relay reconnects, and with both gone the
// relay says so and holds again once one is back; navigations stay spaced
// throughout.
func TestFetchHolderReconnects(t *testing.T) {
	for _, how := range []string{"dropped", "closed"} {
		t.Run(how, func(t *testing.T) {
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			tp := relayTo(t, fb, fixed(300*time.Millisecond))
			lose := func(hc *fakeConn) {
				if how == "dropped" {
					hc.drop()
				} else {
					hc.closeWith(1001, "")
				}
				hc.ended(t)
			}
			hc1, hc2 := fb.holder(t), fb.holder(t)
			chain := fb.fetch.chain(t, "/page?first")
			announcePages(t, fb, hc1, false)
			first := fb.playAll(t, chain)
			lose(hc1)
			second := fb.playAll(t, chain) // the other connection alone
			if waited := second[0].continued.Sub(first[0].paused); waited < 300*time.Millisecond {
				t.Errorf("second navigation released %v after the first paused, want at least 300ms", waited)
			}
			// Said once the other one answered: the browser is still there.
			for deadline := time.Now().Add(waitFor); len(tp.logs.lines("lost one of")) == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			if n := len(tp.logs.lines(`"level":"info"`, "lost one of the relay's browser connections")); n != 1 {
				t.Errorf("got %d notes about one lost connection, want 1", n)
			}
			again := fb.holder(t) // the relay reconnected
			third := fb.playAll(t, chain)
			if waited := third[0].continued.Sub(second[0].paused); waited < 300*time.Millisecond {
				t.Errorf("third navigation released %v after the second paused, want at least 300ms", waited)
			}
			lose(hc2)
			lose(again)
			fb.holder(t)
			deadline := time.Now().Add(waitFor)
			for len(tp.logs.lines("browser connection is back")) == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if n := len(tp.logs.lines(`"level":"warn"`, "the browser closed the relay's connections")); n != 1 {
				t.Errorf("got %d warnings about losing both connections, want 1", n)
			}
			if n := len(tp.logs.lines("browser connection is back")); n != 1 {
				t.Errorf("got %d notes that the connection is back, want 1", n)
			}
			if n := tp.p.Metrics.Unheld(); n != 0 {
				t.Errorf("unheld navigations: %d, want 0", n)
			}
		})
	}
}

// TestFetchHolderBrowserGone: when the browser goes away (stopped, or
// killed: on the wire they look the same), both of the relay's connections
// drop at once; the relay says so once, and does not call it one lost
// connection that the other holds on for; once the browser is back it
// holds again. When the relay itself shuts down, it says nothing of them.
func TestFetchHolderBrowserGone(t *testing.T) {
	checkLeaks(t)
	// A browser going away answers nothing more before its connections
	// drop; dropped one after the other here, the second must not answer
	// the relay's question in between, as a live browser would.
	fb := newFakeBrowser(t, fakeConfig{silent: map[string]bool{"Target.getTargets": true}})
	tp := relayTo(t, fb, fixed(300*time.Millisecond))
	hc1, hc2 := fb.holder(t), fb.holder(t)
	for f := tp.p.ups[0].holder.fetch; f.up() < 2; { // the relay has them both, not only the fake
		time.Sleep(time.Millisecond)
	}
	hc1.drop()
	hc2.drop()
	hc1.ended(t)
	hc2.ended(t)
	fb.holder(t)
	for deadline := time.Now().Add(waitFor); len(tp.logs.lines("browser connection is back")) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // what the first drop would say after asking the other connection
	if n := len(tp.logs.lines(`"level":"warn"`, "the browser closed the relay's connections")); n != 1 {
		t.Errorf("got %d warnings that the browser closed the relay's connections, want 1", n)
	}
	if n := len(tp.logs.lines("lost one of")); n != 0 {
		t.Errorf("got %d notes about one lost connection, want none: the browser went away", n)
	}
	tp.p.Close()
	for _, m := range []string{"lost one of", "closed the relay's connections"} {
		if n := len(tp.logs.lines(m)); n > 1 || m == "lost one of" && n > 0 {
			t.Errorf("after Close: %d lines with %q", n, m)
		}
	}
}

// TestFetchHolderHandsOver drops the relay's connection that holds a
// navigation: Chromium hands the request to the relay's other connection,
// which holds it until the slot already booked, books nothing more, and
// counts nothing as unheld.
func TestFetchHolderHandsOver(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	var rec *recorder
	tp := relayTo(t, fb, fixed(500*time.Millisecond), recordBookings(&rec))
	hc1, _ := fb.holder(t), fb.holder(t)
	chain := fb.fetch.chain(t, "/page?first")
	announcePages(t, fb, hc1, false)
	first := fb.playAll(t, chain)
	held := make(chan []hopTimes, 1)
	go func() { held <- fb.playAll(t, chain) }()
	deadline := time.Now().Add(waitFor)
	for len(tp.logs.lines(`"message":"navigation held"`)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("navigation not held")
		}
		time.Sleep(time.Millisecond)
	}
	for _, hc := range fb.holders() {
		if len(commands(hc, "Fetch.continueRequest")) < len(chain)+1 { // the one holding it
			hc.drop()
			break
		}
	}
	second := <-held
	if waited := second[0].continued.Sub(first[0].paused); waited < 500*time.Millisecond {
		t.Errorf("held navigation went %v after the first, want at least its slot, 500ms", waited)
	}
	if n := len(rec.bookings()); n != 2 {
		t.Errorf("%d bookings, want 2: the handed-over navigation books nothing more", n)
	}
	time.Sleep(orphanWait + 200*time.Millisecond)
	if n := tp.p.Metrics.Unheld(); n != 0 {
		t.Errorf("unheld navigations: %d, want 0", n)
	}
}

// TestFetchHolderCloseReleases checks that closing the relay while a
// navigation is held ends its connection (Chromium then lets the request
// go) and leaves nothing running.
func TestFetchHolderCloseReleases(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour))
	hc := fb.holder(t)
	chain := fb.fetch.chain(t, "/page?first")
	announcePages(t, fb, hc, false)
	hc.mustPlay(t, chain)
	held := make(chan error, 1)
	go func() {
		_, err := hc.play(chain)
		held <- err
	}()
	// Wait until the relay has booked the held navigation.
	deadline := time.Now().Add(waitFor)
	for len(tp.logs.lines(`"message":"navigation held"`)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("navigation not held")
		}
		time.Sleep(time.Millisecond)
	}
	tp.p.Close()
	if err := <-held; err == nil {
		t.Error("held request was continued, want the connection closed instead")
	}
	hc.ended(t)
}

// TestFetchHolderConcurrent plays navigations to many hosts at once and
// checks each host's navigations are spaced.
func TestFetchHolderConcurrent(t *testing.T) {
	checkLeaks(t)
	const interval = 50 * time.Millisecond
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(interval))
	hc := fb.holder(t)
	chain := fb.fetch.chain(t, "/r") // a.test → b.test
	announcePages(t, fb, hc, false)
	const hosts, navs = 8, 4
	var wg sync.WaitGroup
	times := make([][]hopTimes, hosts*navs)
	errs := make(chan error, hosts*navs)
	for h := range hosts {
		var mine [][]byte
		for _, msg := range chain {
			msg = bytes.ReplaceAll(msg, []byte("http://a.test:"), []byte("http://a"+string(rune('a'+h))+".test:"))
			mine = append(mine, bytes.ReplaceAll(msg, []byte("http://b.test:"), []byte("http://b"+string(rune('a'+h))+".test:")))
		}
		for n := range navs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				hops, err := hc.play(mine)
				times[h*navs+n] = hops
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Per host, each navigation's first hop booked a slot: the last one
	// went at least (navs-1) intervals after the earliest pause.
	for h := range hosts {
		var first, last time.Time
		for n := range navs {
			hop := times[h*navs+n][0]
			if first.IsZero() || hop.paused.Before(first) {
				first = hop.paused
			}
			if hop.continued.After(last) {
				last = hop.continued
			}
		}
		if spread := last.Sub(first); spread < (navs-1)*interval {
			t.Errorf("host %d: %d navigations released within %v, want at least %v", h, navs, spread, (navs-1)*interval)
		}
	}
	if got, want := tp.lim.Len(), 2*hosts; got != want {
		t.Errorf("limiter knows %d hosts, want %d", got, want)
	}
	var cont int
	for _, m := range hc.received() {
		if m.m.Method == "Fetch.continueRequest" {
			cont++
		}
	}
	if want := hosts * navs * len(chain); cont != want {
		t.Errorf("relay continued %d pauses, want %d", cont, want)
	}
}

// replayChromium plays the relay-side transcript recorded from Chromium
// against the relay's own connection hc, in causal order, checks that the
// relay sends the very commands the recorder sent (ids aside), and returns
// when the recorded 429 was answered.
func replayChromium(t *testing.T, fb *fakeBrowser, hc *fakeConn) time.Time {
	t.Helper()
	// The fake answered discovery and Fetch.enable by itself; from then on
	// the browser's events are sent once the relay has sent what the
	// recorder sent before them.
	auto := fb.fetch.replyIndex(t, "Fetch.enable")
	var pending []fakeMsg // relay commands not matched yet
	var busyAnswered time.Time
	for i, rm := range fb.fetch.msgs {
		switch {
		case rm.From == "client":
			want := rm.m
			found := -1
			for found < 0 {
				for j, got := range pending {
					if got.m.Method == want.Method && bytes.Equal(got.m.Params, want.Params) && got.m.SessionID == "" {
						found = j
						break
					}
				}
				if found < 0 {
					pending = append(pending, hc.next(t))
				}
			}
			pending = append(pending[:found], pending[found+1:]...)
		case i <= auto, rm.m.ID != nil:
			// Sent by the fake itself: discovery, and the replies to commands.
		default:
			if p, ok := readPause(rm.Msg); ok && p.ResponseStatusCode == 429 {
				busyAnswered = time.Now()
			}
			if err := hc.send(rm.Msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range pending {
		t.Errorf("relay sent %s %s, which the recorder did not", m.m.Method, m.m.Params)
	}
	if busyAnswered.IsZero() {
		t.Fatal("the recording has no 429")
	}
	return busyAnswered

}

// TestNavigationLinesNameThePage: a held navigation's debug lines say
// which page it is in (the websocket path of most clients is /, which
// names nothing).
func TestNavigationLinesNameThePage(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(300*time.Millisecond))
	hc := fb.holder(t)
	chain := fb.fetch.chain(t, "/page?first")
	announcePages(t, fb, hc, false)
	fb.playAll(t, chain)
	fb.playAll(t, chain) // held
	p, _ := readPause(chain[0])
	for _, msg := range []string{"navigation goes at once", "navigation held"} {
		lines := tp.logs.lines(`"message":"` + msg + `"`)
		if len(lines) != 1 || !strings.Contains(lines[0], `"page":"`+p.FrameID+`"`) {
			t.Errorf("%q: got %q, want one line naming page %s", msg, lines, p.FrameID)
		}
	}
}
