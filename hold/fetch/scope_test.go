package fetch

// Which pages the Fetch way holds, through a relay of clients: the pages
// the relay's clients drive, create or open, and no other; when the
// browser-level interception is on for them; what the clients see of it.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// startScope starts a relay of clients in front of a new fake browser,
// holding with the Fetch way and a limiter for cfg (opts adjust the
// Holder), and returns it with the relay's own two connections to the
// browser, net and pages, once they are up; the test is checked for
// leaked goroutines (fakebrowser.CheckLeaks).
func startScope(t *testing.T, cfg limiter.Config, opts ...func(*hold.Holder)) (fb *fakebrowser.Browser, th *holdtest.Relay, net, pages *fakebrowser.Conn) {
	t.Helper()
	fakebrowser.CheckLeaks(t)
	fb = fakebrowser.New(t, fakebrowser.Config{})
	th = holdtest.Start(t, fb, cfg, ways, opts...)
	net, pages = fb.Holder(t), fb.Pages(t)
	return fb, th, net, pages
}

// letGo announces new pages to the relay (net) that no client drives,
// and waits until the relay let them run and let go of them.
func letGo(t *testing.T, fb *fakebrowser.Browser, net, pages *fakebrowser.Conn, ids ...string) {
	t.Helper()
	for _, id := range ids {
		net.Send(fakebrowser.PageCreated(id, ""))
	}
	fb.Await(t, "the relay letting go of pages no client drives", func() bool {
		for _, id := range ids {
			if pages.SessionLocked(id) != nil {
				return false
			}
		}
		return true
	})
}

// driveMine has the client drive page MINE as Puppeteer and Playwright
// drive a page they are attached to: the client learns of its session on
// the page (S-MINE), the relay of the page (net), and cmd, the client's
// command in that session, reaches the browser.
func driveMine(t *testing.T, c *websocket.Conn, fc, net *fakebrowser.Conn, cmd string) {
	t.Helper()
	fc.Send(holdtest.AttachedTo("S-MINE", "MINE", "page"))
	holdtest.ReadClient(t, c)
	net.Send(fakebrowser.PageCreated("MINE", ""))
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(cmd))
	fc.Next(t)
}

// stillHeld fails the test with why unless nav, a navigation played
// (fakebrowser.Browser.NavigateTo), is still held d later.
func stillHeld(t *testing.T, nav <-chan []fakebrowser.Hops, d time.Duration, why string) {
	t.Helper()
	select {
	case <-nav:
		t.Error(why)
	case <-time.After(d):
	}
}

// fetchOn reports whether the relay's browser-level Fetch (net's) is on.
func fetchOn(fb *fakebrowser.Browser, net *fakebrowser.Conn) bool {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	return net.FetchOn
}

// TestScope checks that in Fetch mode the relay holds the navigations of
// the pages its clients drive, create or open as popups, and that every
// other page's navigations pause nowhere: the relay lets such a page run
// as soon as it appears and lets go of it.
func TestScope(t *testing.T) {
	var rec *holdtest.Recorder
	fb, th, net, pages := startScope(t, holdtest.Fixed(time.Hour), holdtest.RecordBookings(&rec))
	for _, host := range []string{"a.test", "b.test", "c.test", "d.test", "e.test"} {
		th.Lim.Reserve(host, time.Now()) // each host's next slot is an hour away
	}
	c, fc := th.Client(t)
	// New pages no client drives: let run and let go.
	letGo(t, fb, net, pages, "MINE", "OTHERS")
	if n := len(fakebrowser.Commands(pages, "Runtime.runIfWaitingForDebugger")); n != 2 {
		t.Errorf("the relay let %d new pages run, want 2", n)
	}
	// The client is attached to both pages, as Puppeteer and Playwright
	// are to every page there is, and drives one of them: the relay arms
	// that page before the client's command goes on.
	fc.Send(holdtest.AttachedTo("S-MINE", "MINE", "page"))
	fc.Send(holdtest.AttachedTo("S-OTHERS", "OTHERS", "page"))
	holdtest.ReadClient(t, c)
	holdtest.ReadClient(t, c)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-OTHERS","method":"Page.enable"}`))
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"document.querySelector('a').click()"}}`))
	fc.Next(t)
	fc.Next(t)
	if ss := pages.Session("MINE"); ss == nil || !ss.Fetch {
		t.Fatalf("the client's command reached the browser before the relay's interception of its page was on: %+v", ss)
	}

	others := <-fb.NavigateTo(t, "OTHERS", "http://a.test/")
	if others[0].Pauses != 0 {
		t.Errorf("another client's navigation paused %d times, want never", others[0].Pauses)
	}
	mine := fb.NavigateTo(t, "MINE", "http://b.test/")
	stillHeld(t, mine, 200*time.Millisecond, "the client's page was not held")

	// A popup of the client's page is the client's.
	net.Send(fakebrowser.PageCreated("POPUP2", "MINE"))
	fb.Armed(t, pages, "POPUP2")
	popup := fb.NavigateTo(t, "POPUP2", "http://c.test/")
	stillHeld(t, popup, 200*time.Millisecond, "a popup of the client's page was not held")

	// A page the client creates with its URL pauses before the client
	// learns its id, and before the relay can attach to it: the relay
	// pauses every document at the browser level from before the command
	// goes on, waits for the answer, then holds the request.
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":3,"method":"Target.createTarget","params":{"url":"http://d.test/"}}`))
	create := fc.Next(t)
	if !slices.Contains(net.Patterns, "*") {
		t.Errorf("net's patterns %q when the creation went on, want every document", net.Patterns)
	}
	net.Send(fakebrowser.PageCreated("NEW", ""))
	created := fb.NavigateTo(t, "NEW", "http://d.test/")
	stillHeld(t, created, 200*time.Millisecond, "a page being created went before the relay knew whose it is")
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{"targetId":"NEW"}}`, *create.Wire.ID))
	holdtest.ReadClient(t, c)
	fb.Armed(t, pages, "NEW")
	fb.Await(t, "net pausing only what is held once the new page is armed", func() bool { return !slices.Contains(net.Patterns, "*") })
	stillHeld(t, created, 200*time.Millisecond, "the page the client created was not held")
	var hosts []string
	for _, b := range rec.Bookings() {
		hosts = append(hosts, b.Host)
	}
	if got, want := strings.Join(hosts, " "), "b.test c.test d.test"; got != want {
		t.Errorf("booked %s, want %s", got, want)
	}
}

// TestScopeAttached: a page the relay's own connection is attached to, and
// none of its clients, is announced to its clients as not attached, as it
// would be without the relay (chromedp takes only an unattached target for
// a new one); once a client attaches, as attached.
func TestScopeAttached(t *testing.T) {
	fb, th, net, pages := startScope(t, holdtest.Fixed(time.Hour))
	c, fc := th.Client(t)
	driveMine(t, c, fc, net, `{"id":1,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"1"}}`)
	fb.Armed(t, pages, "MINE")
	net.Send(fakebrowser.PageCreated("POPUP", "MINE"))
	fb.Armed(t, pages, "POPUP")
	info := func(id string) []byte {
		b, _ := json.Marshal(map[string]any{"method": "Target.targetInfoChanged", "params": map[string]any{"targetInfo": map[string]any{
			"targetId": id, "type": "page", "title": "", "url": "http://a.test/", "attached": true, "openerId": "MINE", "canAccessOpener": true, "browserContextId": "CTX"}}})
		return b
	}
	// As Chromium writes it, targetId first (read from the first bytes).
	chromium := func(id string) []byte {
		return fmt.Appendf(nil, `{"method":"Target.targetInfoChanged","params":{"targetInfo":{"targetId":%q,"type":"page","title":"","url":"http://a.test/","attached":true,"openerId":"MINE","canAccessOpener":true,"browserContextId":"CTX"}}}`, id)
	}
	for _, msg := range [][]byte{info("POPUP"), chromium("POPUP")} {
		fc.Send(msg)
		if _, got := holdtest.ReadClient(t, c); !strings.Contains(string(got), `"attached":false`) {
			t.Errorf("the client got %s, want the popup not attached: only the relay is", got)
		}
	}
	fc.Send(holdtest.AttachedTo("S-POPUP", "POPUP", "page"))
	holdtest.ReadClient(t, c)
	for _, msg := range [][]byte{info("POPUP"), chromium("POPUP")} {
		fc.Send(msg)
		if _, got := holdtest.ReadClient(t, c); !strings.Contains(string(got), `"attached":true`) {
			t.Errorf("the client got %s, want the popup attached: the client is", got)
		}
	}
	// A page the relay is not attached to is as the browser says.
	fc.Send(info("ELSEWHERE"))
	if _, got := holdtest.ReadClient(t, c); !strings.Contains(string(got), `"attached":true`) {
		t.Errorf("the client got %s, want it as the browser sent it", got)
	}
}

// TestFetchNeverPauses plays a browser that acknowledges browser-level
// Fetch and never pauses: the first page navigation that loads a document
// unseen gives it away, the relay warns once, counts it unheld and holds
// navigations in the client sessions instead.
func TestFetchNeverPauses(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	th := holdtest.Start(t, fb, holdtest.Fixed(time.Hour), ways)
	fb.Holder(t)
	c, fc := th.Client(t)
	fc.Send(holdtest.AttachedTo("S1", "PAGE", "page"))
	holdtest.ReadClient(t, c)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S1","method":"Page.navigate","params":{"url":"http://a.test/"}}`))
	nav := fc.Next(t)
	// The document loaded, and the relay's connections saw nothing.
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{"frameId":"PAGE","loaderId":"L1"},"sessionId":"S1"}`, *nav.Wire.ID))
	holdtest.ReadClient(t, c)
	deadline := time.Now().Add(fakebrowser.WaitFor)
	for th.Browser.Holding() != "session" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := th.Browser.Holding(); got != "session" {
		t.Fatalf("navigations held by %q, want session", got)
	}
	if n := len(th.Logs.Lines(`"level":"warn"`, "did not pause a page's document request", "holding navigations through each client session")); n != 1 {
		t.Errorf("got %d warnings naming what happened and what the relay does instead, want 1", n)
	}
	if n := th.Counts.Unheld.Load(); n != 1 {
		t.Errorf("unheld navigations: %d, want 1", n)
	}
	// The client's page session gets the relay's own interception.
	for {
		m := fc.Next(t)
		if m.Wire.ID != nil && *m.Wire.ID < 0 && m.Wire.Method == "Fetch.enable" && m.Wire.SessionID == "S1" {
			break
		}
	}
}

// slowLimiter books hosts named slow.* only after a pause, as a shared
// store that answers slowly does.
type slowLimiter struct {
	hold.Limiter
	wait time.Duration
}

func (s slowLimiter) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	if strings.HasPrefix(host, "slow.") {
		time.Sleep(s.wait)
	}
	return s.Limiter.Reserve(ctx, host, rawURL, time.Now())
}

// TestSlowStoreDelaysNothingElse books through a store that takes a second
// to answer for one host: the other pages' requests and every message of
// the clients keep flowing meanwhile.
func TestSlowStoreDelaysNothingElse(t *testing.T) {
	for _, mode := range []string{"fetch", "navigate"} {
		t.Run(mode, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{})
			opts := []func(*hold.Holder){func(hd *hold.Holder) { hd.Limiter = slowLimiter{hd.Limiter, time.Second} }}
			if mode == "navigate" {
				opts = append(opts, func(hd *hold.Holder) { hd.Intercept = hold.InterceptNavigate })
			}
			th := holdtest.Start(t, fb, holdtest.Fixed(time.Millisecond), holdtest.EveryPage(ways), opts...)
			c, fc := th.Client(t)
			start := time.Now()
			if mode == "fetch" {
				hc := fb.Holder(t)
				hc.Send(fakebrowser.PageCreated("P1", ""))
				hc.Send(fakebrowser.PageCreated("P2", ""))
				hc.Send(fakebrowser.PausedDoc("interception-job-1.0", "P1", "http://slow.test/"))
				hc.Send(fakebrowser.PausedDoc("interception-job-2.0", "P2", "http://fast.test/"))
				if !continuedWithin(hc, "interception-job-2.0", fakebrowser.WaitFor) {
					t.Fatal("the other page's request never went")
				}
			} else {
				holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S1","method":"Page.navigate","params":{"url":"http://slow.test/"}}`))
				holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"S2","method":"Page.navigate","params":{"url":"http://fast.test/"}}`))
				if m := fc.Next(t); !strings.Contains(string(m.Data), "fast.test") {
					t.Fatalf("browser got %s first, want the other page's navigation", m.Data)
				}
			}
			var wg sync.WaitGroup
			wg.Go(func() { fc.Send([]byte(`{"method":"Page.loadEventFired","params":{"timestamp":1},"sessionId":"S2"}`)) })
			holdtest.ReadClient(t, c)
			wg.Wait()
			if took := time.Since(start); took >= time.Second {
				t.Errorf("the other page's navigation and an event took %v: they waited for the store", took)
			}
		})
	}
}

// TestScopeCreateLeftUnanswered: a client that leaves while its
// Target.createTarget is unanswered leaves nothing pending: another page's
// navigation is let go at once, not held while the relay waits to learn
// whose it is.
func TestScopeCreateLeftUnanswered(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	th := holdtest.Start(t, fb, holdtest.Fixed(time.Hour), ways)
	th.Lim.Reserve("a.test", time.Now())
	hc := fb.Holder(t)
	c, fc := th.Client(t)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"about:blank"}}`))
	fc.Next(t)
	c.Close()
	fc.Ended(t) // the relay let go of the client's browser connection
	hc.Send(fakebrowser.PageCreated("OTHERS", ""))
	hc.Send(fakebrowser.PausedDoc("interception-job-1.0", "OTHERS", "http://a.test/"))
	if !continuedWithin(hc, "interception-job-1.0", time.Second) {
		t.Error("another client's page waited for a page creation its client left")
	}
}

// TestScopeAttachedTwice: the relay's pages connection attached to one page
// twice (its own Target.attachToTarget crossing the browser's auto-attach)
// keeps one session on it and lets the other go: two would each pause and
// book the page's requests.
func TestScopeAttachedTwice(t *testing.T) {
	var rec *holdtest.Recorder
	fb, th, net, pages := startScope(t, holdtest.Fixed(time.Hour), holdtest.RecordBookings(&rec))
	c, fc := th.Client(t)
	driveMine(t, c, fc, net, `{"id":1,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"1"}}`)
	fb.Armed(t, pages, "MINE")
	kept := pages.Session("MINE").ID

	seq := fb.NewJob()
	fb.Mu.Lock()
	info := fb.Targets["MINE"]
	pages.Sessions["AGAIN"] = &fakebrowser.Session{ID: "AGAIN", Target: "MINE", Seq: seq}
	fb.Mu.Unlock()
	pages.WriteFrame(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":"AGAIN","targetInfo":%s,"waitingForDebugger":false}}`, info))
	fb.Await(t, "the relay letting its second session on the page go", func() bool { return pages.Sessions["AGAIN"] == nil })
	for _, m := range pages.Received() {
		if m.Wire.SessionID == "AGAIN" && m.Wire.Method != "Runtime.runIfWaitingForDebugger" {
			t.Errorf("the relay sent %s in its second session on the page, want nothing", m.Wire.Method)
		}
	}
	if ss := pages.Session("MINE"); ss == nil || ss.ID != kept || !ss.Fetch {
		t.Errorf("the relay's session on the page is %+v, want %s, armed", ss, kept)
	}
	th.Lim.Reserve("a.test", time.Now()) // the next slot is an hour away
	nav := fb.NavigateTo(t, "MINE", "http://a.test/")
	stillHeld(t, nav, 200*time.Millisecond, "the page's navigation was not held")
	if n := len(rec.Bookings()); n != 1 {
		t.Errorf("booked %d times, want once", n)
	}
}

// TestScopeNetOnlyForClients: the relay's browser-level Fetch, which every
// request of the browser passes while it is on, is on only while the
// relay's clients have a page: off with none, on before a client's command
// reaches its page (Chromium puts a browser-level interceptor on a
// request's way only if it was on when the request started, so a request
// started earlier could not be handed over), and off again Holder.NetLinger after
// the last one is gone. A page the client drives then is held where it
// navigates, and losing the pages connection hands it to net.
func TestScopeNetOnlyForClients(t *testing.T) {
	fb, th, net, pages := startScope(t, holdtest.Fixed(time.Hour), func(hd *hold.Holder) { hd.NetLinger = 300 * time.Millisecond })
	th.Lim.Reserve("b.test", time.Now()) // the next slot is an hour away
	fb.Await(t, "net's Fetch off while no client has a page", func() bool { return !net.FetchOn })

	net.Send(fakebrowser.PageCreated("OTHERS", ""))
	if got := <-fb.NavigateTo(t, "OTHERS", "http://a.test/"); got[0].Pauses != 0 {
		t.Errorf("another client's navigation paused %d times, want never", got[0].Pauses)
	}

	c, fc := th.Client(t)
	driveMine(t, c, fc, net, `{"id":1,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"location = 'http://b.test/'"}}`)
	if !fetchOn(fb, net) {
		t.Fatal("the client's command reached its page before net's Fetch was on")
	}
	fb.Armed(t, pages, "MINE")
	mine := fb.NavigateTo(t, "MINE", "http://b.test/")
	fb.Await(t, "the client's navigation held in the pages connection", func() bool {
		return slices.Contains(net.Patterns, "http://b.test/")
	})
	pages.Drop()
	stillHeld(t, mine, 300*time.Millisecond, "the held navigation went when the pages connection was lost, want it handed to net")

	// The client's page goes: net's Fetch is off Holder.NetLinger later (and
	// stays on while the pages connection is back and arming).
	fb.Pages(t)
	net.Send([]byte(`{"method":"Target.targetDestroyed","params":{"targetId":"MINE"}}`))
	fb.Await(t, "net's Fetch off once the client's last page is gone", func() bool { return !net.FetchOn })
}

// TestScopeForeignWhileCreating: a page that appears while a client is
// creating one may be the client's; the relay arms it while it waits to
// know, and once it knows that page is not the client's, lets it run and
// lets go of it: its requests pause nowhere, and nothing is counted as a
// page the relay could not arm.
func TestScopeForeignWhileCreating(t *testing.T) {
	fb, th, net, pages := startScope(t, holdtest.Fixed(time.Hour))
	c, fc := th.Client(t)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"about:blank"}}`))
	create := fc.Next(t)
	net.Send(fakebrowser.PageCreated("OTHERS", ""))
	net.Send(fakebrowser.PageCreated("NEW", ""))
	fb.Await(t, "the relay arming both pages while it waits to know whose they are", func() bool {
		o, n := pages.SessionLocked("OTHERS"), pages.SessionLocked("NEW")
		return o != nil && o.Fetch && n != nil && n.Fetch
	})
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{"targetId":"NEW"}}`, *create.Wire.ID))
	holdtest.ReadClient(t, c)
	fb.Armed(t, pages, "NEW")
	fb.Await(t, "the relay letting go of the page that is not the client's", func() bool {
		return pages.SessionLocked("OTHERS") == nil
	})
	if got := <-fb.NavigateTo(t, "OTHERS", "http://a.test/"); got[0].Pauses != 0 {
		t.Errorf("another client's navigation paused %d times, want never", got[0].Pauses)
	}
	if holes := StateOf(th.Browser).Unarmed; holes != 0 {
		t.Errorf("%d pages counted as client pages the relay could not arm, want 0", holes)
	}
}

// TestEventsOfTheClient: the relay reads when a held request left, and
// how it was answered, from the Network events of its client's own
// session on the page when the client enabled them (Puppeteer, Playwright
// and chromedp do on every page they drive), and enables them in its own
// session only on a page where no client did, before the client's
// navigation goes on.
func TestEventsOfTheClient(t *testing.T) {
	fb, th, net, pages := startScope(t, holdtest.Fixed(10*time.Millisecond))
	c, fc := th.Client(t)
	letGo(t, fb, net, pages, "READS", "READSNOT")
	for _, page := range []string{"READS", "READSNOT"} {
		fc.Send(holdtest.AttachedTo("S-"+page, page, "page"))
		holdtest.ReadClient(t, c)
	}
	// The client's own Network on READS, as the fake browser keeps it.
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-READS","method":"Network.enable"}`))
	fc.Next(t)
	fb.Mu.Lock()
	if fc.Sessions == nil {
		fc.Sessions = map[string]*fakebrowser.Session{}
	}
	fc.Sessions["S-READS"] = &fakebrowser.Session{ID: "S-READS", Target: "READS", Network: true}
	fb.Mu.Unlock()

	for i, page := range []string{"READS", "READSNOT"} {
		holdtest.WriteClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"sessionId":"S-%s","method":"Page.navigate","params":{"url":"http://a.test/%d"}}`, i+2, page, i))
		fc.Next(t)
		ss := pages.Session(page)
		if ss == nil || !ss.Fetch {
			t.Fatalf("%s: the client's navigation reached the browser before the relay's interception of its page was on: %+v", page, ss)
		}
		if want := page == "READSNOT"; ss.Network != want {
			t.Errorf("%s: the relay's session has Network on: %v, want %v", page, ss.Network, want)
		}
		<-fb.NavigateTo(t, page, fmt.Sprintf("http://a.test/%d", i))
		th.WaitFeedback(t, i+1) // the answer came back to the limiter
	}
	if ss := pages.Session("READS"); ss == nil || ss.Network {
		t.Errorf("READS: the relay enabled Network in its own session, where the client reads the events: %+v", ss)
	}
	if n := len(th.Logs.Lines(`"message":"a navigation left the browser"`)); n != 2 {
		t.Errorf("%d departures read, want 2 (one from the client's events, one from the relay's)", n)
	}
}

// TestNoBackup: without HoldBackup (the relay's default), the relay's
// browser-level Fetch stays off while its clients have pages and their
// navigations are held, so no request of the browser passes it; it goes on
// only to pause every document while a client creates a page with a URL,
// whose first request no session can hold. A held navigation the browser
// lets go when the pages connection is lost is counted unheld and logged.
func TestNoBackup(t *testing.T) {
	fb, th, net, pages := startScope(t, holdtest.Fixed(time.Hour), func(hd *hold.Holder) { hd.HoldBackup = false })
	th.Lim.Reserve("b.test", time.Now()) // the next slot is an hour away
	fb.Await(t, "net's Fetch off", func() bool { return !net.FetchOn })

	c, fc := th.Client(t)
	driveMine(t, c, fc, net, `{"id":1,"sessionId":"S-MINE","method":"Page.navigate","params":{"url":"http://b.test/"}}`)
	fb.Armed(t, pages, "MINE")
	mine := fb.NavigateTo(t, "MINE", "http://b.test/")
	time.Sleep(100 * time.Millisecond) // held, waiting for its slot
	if fetchOn(fb, net) {
		t.Errorf("net's Fetch is on while a client's navigation is held (patterns %q), want off", net.Patterns)
	}
	select {
	case <-mine:
		t.Fatal("the held navigation went before its slot")
	default:
	}

	// The client creates a page with a URL: net pauses every document
	// until the new page is armed.
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Target.createTarget","params":{"url":"http://c.test/"}}`))
	fc.Next(t)
	fb.Mu.Lock()
	wide := net.FetchOn && slices.Contains(net.Patterns, "*")
	fb.Mu.Unlock()
	if !wide {
		t.Errorf("the client's Target.createTarget with a URL reached the browser before net paused every document (on %v, patterns %q)", fetchOn(fb, net), net.Patterns)
	}

	// The pages connection is lost: the browser lets the held navigation go.
	pages.Drop()
	select {
	case <-mine:
	case <-time.After(fakebrowser.WaitFor):
		t.Fatal("the held navigation was not let go when the pages connection was lost")
	}
	fakebrowser.Eventually(t, "the navigation counted unheld", func() bool { return th.Counts.Unheld.Load() == 1 })
}

// TestPageClosedBeforeItsNavigateAnswer: a client's page closed while its
// held navigation is under way (a stop closing the clients' pages, a
// client closing one) is destroyed on the relay's connections before the
// answer to its Page.navigate reaches the client's: the navigation was
// held, so nothing is counted unheld and the relay goes on holding with
// Fetch.
func TestPageClosedBeforeItsNavigateAnswer(t *testing.T) {
	fb, th, net, pages := startScope(t, holdtest.Fixed(time.Millisecond))
	c, fc := th.Client(t)
	fc.Send(holdtest.AttachedTo("S-MINE", "MINE", "page"))
	holdtest.ReadClient(t, c)
	net.Send(fakebrowser.PageCreated("MINE", ""))
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-MINE","method":"Page.navigate","params":{"url":"http://a.test/"}}`))
	nav := fc.Next(t)
	fb.Armed(t, pages, "MINE")
	if got := <-fb.NavigateTo(t, "MINE", "http://a.test/"); got[0].Pauses == 0 {
		t.Fatal("the client's navigation paused nowhere")
	}
	net.Send([]byte(`{"method":"Target.targetDestroyed","params":{"targetId":"MINE"}}`))
	fb.Await(t, "the relay forgetting the destroyed page", func() bool { return !th.Browser.(hold.FetchCore).Claimed("MINE") })
	fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{"frameId":"MINE","loaderId":"L1"},"sessionId":"S-MINE"}`, *nav.Wire.ID))
	holdtest.ReadClient(t, c) // the check runs before the answer goes on
	if got := th.Browser.Holding(); got != "fetch" {
		t.Errorf("navigations held by %q, want fetch", got)
	}
	if n := th.Counts.Unheld.Load(); n != 0 {
		t.Errorf("unheld navigations: %d, want 0", n)
	}
}
