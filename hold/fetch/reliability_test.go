package fetch

// Holding through the relay's own connections when the browser
// misbehaves: it never answers the relay's releases, or dies while a
// navigation is held.

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestBrowserNeverAnswersReleases checks that the relay keeps nothing for
// Fetch.continueRequest commands the browser never answers.
func TestBrowserNeverAnswersReleases(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Silent: map[string]bool{"Fetch.continueRequest": true}})
	th := holdOn(t, fb, limiter.Config{})
	_, pc := fakebrowser.RelayConns(t, fb, false)
	chain := fb.FetchRec.Chain(t, "/r") // a.test → b.test: two hops
	for range 25 {
		fb.Navigate(t, chain)
	}
	// What the browser answers (net's pattern updates) may still be on its
	// way; what it never answers must not be kept.
	fakebrowser.Eventually(t, "the relay's own connections keeping no command", func() bool { return StateOf(th.Browser).Commands == 0 })
	if n := len(fakebrowser.Commands(pc, "Fetch.continueRequest")); n != 25*2 {
		t.Errorf("relay let %d requests go on its pages connection, want %d", n, 25*2)
	}
}

// TestBrowserDiesMidNavigation kills the browser while a navigation is
// held, in both interception modes, and checks that the client is closed
// as the browser's death closes it (without a frame), that the held
// navigation is let go (never written, nothing left waiting), that the
// relay reconnects to the restarted browser and serves new clients there,
// and that the hosts' schedules outlive the browser.
func TestBrowserDiesMidNavigation(t *testing.T) {
	for _, mode := range []string{"fetch", "navigate"} {
		t.Run(mode, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{})
			var rec *holdtest.Recorder
			opts := []func(*hold.Holder){holdtest.RecordBookings(&rec)}
			if mode == "navigate" {
				opts = append(opts, func(hd *hold.Holder) { hd.Intercept = hold.InterceptNavigate })
			}
			tp := holdtest.Start(t, fb, holdtest.Fixed(time.Hour), holdtest.EveryPage(ways), opts...)
			c, fc := tp.Client(t)
			var hc *fakebrowser.Conn
			held := make(chan error, 1)
			if mode == "fetch" {
				hc = fb.Holder(t)
				fakebrowser.AnnouncePages(t, fb, hc, false)
				chain := fb.FetchRec.Chain(t, "/page?first")
				hc.MustPlay(t, chain)
				go func() {
					_, err := hc.Play(chain)
					held <- err
				}()
			} else {
				holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/1"}}`))
				fc.Next(t)
				holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"}}`))
			}
			if !tp.Logs.Wait(`"message":"navigation held"`) {
				t.Fatal("navigation not held")
			}
			fb.Restart("0f0f0f0f-0000-4000-8000-00000000dead")
			if ce := fakebrowser.CloseOf(t, c); ce.Code != fakebrowser.Ended {
				t.Errorf("client got close %d %q, want its connection ended, as the browser's death ends it", ce.Code, ce.Text)
			}
			tp.WaitLetGo(t)
			if mode == "fetch" {
				if err := <-held; err == nil {
					t.Error("held request was continued on a dead connection")
				}
			} else if n := len(fc.Received()); n != 1 {
				t.Errorf("dead browser connection got %d messages, want only the first navigation", n)
			}
			// The relay serves the restarted browser, and a.test keeps its schedule.
			before := len(rec.Bookings())
			c2, fc2 := tp.Client(t)
			if want := "/devtools/browser/0f0f0f0f-0000-4000-8000-00000000dead"; fc2.Path != want {
				t.Errorf("new client reached %q, want %q", fc2.Path, want)
			}
			if mode == "fetch" {
				hc2 := fb.Holder(t)
				fakebrowser.AnnouncePages(t, fb, hc2, false)
				go hc2.Play(fb.FetchRec.Chain(t, "/page?first")) // ends when the relay closes
			} else {
				holdtest.WriteClient(t, c2, websocket.TextMessage, []byte(`{"id":3,"method":"Page.navigate","params":{"url":"http://a.test/3"}}`))
			}
			deadline := time.Now().Add(fakebrowser.WaitFor)
			for len(rec.Bookings()) == before {
				if time.Now().After(deadline) {
					t.Fatal("navigation to the restarted browser not booked")
				}
				time.Sleep(time.Millisecond)
			}
			b := rec.Bookings()
			if got, first := b[len(b)-1].Start, b[0].Start; got.Sub(first) < 2*time.Hour-time.Minute {
				t.Errorf("navigation after the restart booked %v after the first, want the third hourly slot", got.Sub(first))
			}
			if mode == "fetch" {
				// Said once both connections are back, which may be after
				// the pages connection booked the navigation.
				tp.Logs.Wait("browser connection is back")
				if n := len(tp.Logs.Lines("browser connection is back")); n != 1 {
					t.Errorf("got %d notes that the relay's browser connection is back, want 1", n)
				}
			}
		})
	}
}
