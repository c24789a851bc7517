package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// ownPagesOnly makes a test relay hold only the pages its clients drive,
// as a real one does.
func ownPagesOnly(p *Proxy) { p.everyPage = false }

// pausedDoc is a Request-stage pause of a page's document.
func pausedDoc(id, frame, url string) []byte {
	b, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "params": map[string]any{
		"requestId": id, "frameId": frame, "resourceType": "Document",
		"request": map[string]any{"url": url, "method": "GET", "headers": map[string]string{}},
	}})
	return b
}

// pageCreated announces a page, as Target.targetCreated does.
func pageCreated(id, opener string) []byte {
	info := map[string]any{"targetId": id, "type": "page", "title": "", "url": "about:blank", "attached": false, "browserContextId": "CTX"}
	if opener != "" {
		info["openerId"] = opener
	}
	b, _ := json.Marshal(map[string]any{"method": "Target.targetCreated", "params": map[string]any{"targetInfo": info}})
	return b
}

// attachedTo is a Target.attachedToTarget a client gets for a page.
func attachedTo(session, target, typ string) []byte {
	b, _ := json.Marshal(map[string]any{"method": "Target.attachedToTarget", "params": map[string]any{
		"sessionId": session, "waitingForDebugger": false,
		"targetInfo": map[string]any{"targetId": target, "type": typ, "title": "", "url": "about:blank", "attached": true},
	}})
	return b
}

// continuedWithin reports whether hc continued requestID within d.
func continuedWithin(hc *fakeConn, requestID string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		hc.mu.Lock()
		_, ok := hc.continued[requestID]
		hc.mu.Unlock()
		if ok {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// TestScope checks that in Fetch mode the relay holds the navigations of
// the pages its clients drive, create or open as popups, and that every
// other page's navigations pause nowhere: the relay lets such a page run
// as soon as it appears and lets go of it.
func TestScope(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	var rec *recorder
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly, recordBookings(&rec))
	for _, host := range []string{"a.test", "b.test", "c.test", "d.test", "e.test"} {
		tp.lim.Reserve(host, time.Now()) // each host's next slot is an hour away
	}
	net, pages := fb.holder(t), fb.pages(t)
	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	for _, page := range []string{"MINE", "OTHERS"} {
		net.send(pageCreated(page, ""))
	}
	// New pages no client drives: let run and let go.
	fb.await(t, "the relay letting go of pages no client drives", func() bool {
		return pages.sessionLocked("MINE") == nil && pages.sessionLocked("OTHERS") == nil
	})
	if n := len(commands(pages, "Runtime.runIfWaitingForDebugger")); n != 2 {
		t.Errorf("the relay let %d new pages run, want 2", n)
	}
	// The client is attached to both pages, as Puppeteer and Playwright
	// are to every page there is, and drives one of them: the relay arms
	// that page before the client's command goes on.
	fc.send(attachedTo("S-MINE", "MINE", "page"))
	fc.send(attachedTo("S-OTHERS", "OTHERS", "page"))
	readClient(t, c)
	readClient(t, c)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-OTHERS","method":"Page.enable"}`))
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"document.querySelector('a').click()"}}`))
	fc.next(t)
	fc.next(t)
	if ss := pages.session("MINE"); ss == nil || !ss.fetch {
		t.Fatalf("the client's command reached the browser before the relay's interception of its page was on: %+v", ss)
	}

	others := <-fb.navigateTo(t, "OTHERS", "http://a.test/")
	if others[0].pauses != 0 {
		t.Errorf("another client's navigation paused %d times, want never", others[0].pauses)
	}
	mine := fb.navigateTo(t, "MINE", "http://b.test/")
	select {
	case <-mine:
		t.Error("the client's page was not held")
	case <-time.After(200 * time.Millisecond):
	}

	// A popup of the client's page is the client's.
	net.send(pageCreated("POPUP2", "MINE"))
	fb.armed(t, pages, "POPUP2")
	popup := fb.navigateTo(t, "POPUP2", "http://c.test/")
	select {
	case <-popup:
		t.Error("a popup of the client's page was not held")
	case <-time.After(200 * time.Millisecond):
	}

	// A page the client creates with its URL pauses before the client
	// learns its id, and before the relay can attach to it: the relay
	// pauses every document at the browser level from before the command
	// goes on, waits for the answer, then holds the request.
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":3,"method":"Target.createTarget","params":{"url":"http://d.test/"}}`))
	create := fc.next(t)
	if !slices.Contains(net.patterns, "*") {
		t.Errorf("net's patterns %q when the creation went on, want every document", net.patterns)
	}
	net.send(pageCreated("NEW", ""))
	created := fb.navigateTo(t, "NEW", "http://d.test/")
	select {
	case <-created:
		t.Error("a page being created went before the relay knew whose it is")
	case <-time.After(200 * time.Millisecond):
	}
	fc.send(fmt.Appendf(nil, `{"id":%d,"result":{"targetId":"NEW"}}`, *create.m.ID))
	readClient(t, c)
	fb.armed(t, pages, "NEW")
	fb.await(t, "net pausing only what is held once the new page is armed", func() bool { return !slices.Contains(net.patterns, "*") })
	select {
	case <-created:
		t.Error("the page the client created was not held")
	case <-time.After(200 * time.Millisecond):
	}
	var hosts []string
	for _, b := range rec.bookings() {
		hosts = append(hosts, b.host)
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
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly)
	net, pages := fb.holder(t), fb.pages(t)
	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	fc.send(attachedTo("S-MINE", "MINE", "page"))
	readClient(t, c)
	net.send(pageCreated("MINE", ""))
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"1"}}`))
	fc.next(t)
	fb.armed(t, pages, "MINE")
	net.send(pageCreated("POPUP", "MINE"))
	fb.armed(t, pages, "POPUP")
	info := func(id string) []byte {
		b, _ := json.Marshal(map[string]any{"method": "Target.targetInfoChanged", "params": map[string]any{"targetInfo": map[string]any{
			"targetId": id, "type": "page", "title": "", "url": "http://a.test/", "attached": true, "openerId": "MINE", "canAccessOpener": true, "browserContextId": "CTX"}}})
		return b
	}
	fc.send(info("POPUP"))
	if _, got := readClient(t, c); !strings.Contains(string(got), `"attached":false`) {
		t.Errorf("the client got %s, want the popup not attached: only the relay is", got)
	}
	fc.send(attachedTo("S-POPUP", "POPUP", "page"))
	readClient(t, c)
	fc.send(info("POPUP"))
	if _, got := readClient(t, c); !strings.Contains(string(got), `"attached":true`) {
		t.Errorf("the client got %s, want the popup attached: the client is", got)
	}
	// A page the relay is not attached to is as the browser says.
	fc.send(info("ELSEWHERE"))
	if _, got := readClient(t, c); !strings.Contains(string(got), `"attached":true`) {
		t.Errorf("the client got %s, want it as the browser sent it", got)
	}
}

// TestFetchNeverPauses plays a browser that acknowledges browser-level
// Fetch and never pauses: the first page navigation that loads a document
// unseen gives it away, the relay warns once, counts it unheld and holds
// navigations in the client sessions instead.
func TestFetchNeverPauses(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly)
	fb.holder(t)
	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	fc.send(attachedTo("S1", "PAGE", "page"))
	readClient(t, c)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S1","method":"Page.navigate","params":{"url":"http://a.test/"}}`))
	nav := fc.next(t)
	// The document loaded, and the relay's connections saw nothing.
	fc.send(fmt.Appendf(nil, `{"id":%d,"result":{"frameId":"PAGE","loaderId":"L1"},"sessionId":"S1"}`, *nav.m.ID))
	readClient(t, c)
	deadline := time.Now().Add(waitFor)
	for tp.p.ups[0].holding() != "session" && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := tp.p.ups[0].holding(); got != "session" {
		t.Fatalf("navigations held by %q, want session", got)
	}
	if n := len(tp.logs.lines(`"level":"warn"`, "did not pause a page's document request", "holding navigations through each client session")); n != 1 {
		t.Errorf("got %d warnings naming what happened and what the relay does instead, want 1", n)
	}
	if n := tp.p.Metrics.Unheld(); n != 1 {
		t.Errorf("unheld navigations: %d, want 1", n)
	}
	// The client's page session gets the relay's own interception.
	for {
		m := fc.next(t)
		if m.m.ID != nil && *m.m.ID < 0 && m.m.Method == "Fetch.enable" && m.m.SessionID == "S1" {
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
			checkLeaks(t)
			fb := newFakeBrowser(t, fakeConfig{})
			opts := []func(*Proxy){func(p *Proxy) { p.Limiter = slowLimiter{p.Limiter, time.Second} }}
			if mode == "navigate" {
				opts = append(opts, navigateInStream)
			}
			tp := relayTo(t, fb, fixed(time.Millisecond), opts...)
			c := tp.dial(t, "/", nil)
			fc := fb.accept(t)
			start := time.Now()
			if mode == "fetch" {
				hc := fb.holder(t)
				hc.send(pageCreated("P1", ""))
				hc.send(pageCreated("P2", ""))
				hc.send(pausedDoc("interception-job-1.0", "P1", "http://slow.test/"))
				hc.send(pausedDoc("interception-job-2.0", "P2", "http://fast.test/"))
				if !continuedWithin(hc, "interception-job-2.0", waitFor) {
					t.Fatal("the other page's request never went")
				}
			} else {
				writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S1","method":"Page.navigate","params":{"url":"http://slow.test/"}}`))
				writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"sessionId":"S2","method":"Page.navigate","params":{"url":"http://fast.test/"}}`))
				if m := fc.next(t); !strings.Contains(string(m.data), "fast.test") {
					t.Fatalf("browser got %s first, want the other page's navigation", m.data)
				}
			}
			var wg sync.WaitGroup
			wg.Go(func() { fc.send([]byte(`{"method":"Page.loadEventFired","params":{"timestamp":1},"sessionId":"S2"}`)) })
			readClient(t, c)
			wg.Wait()
			if took := time.Since(start); took >= time.Second {
				t.Errorf("the other page's navigation and an event took %v: they waited for the store", took)
			}
		})
	}
}

// metricsBody returns what /metrics serves.
func metricsBody(t *testing.T, tp *testProxy) string {
	t.Helper()
	w := httptest.NewRecorder()
	tp.p.Metrics.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

// TestScopeCreateLeftUnanswered: a client that leaves while its
// Target.createTarget is unanswered leaves nothing pending: another page's
// navigation is let go at once, not held while the relay waits to learn
// whose it is.
func TestScopeCreateLeftUnanswered(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly)
	tp.lim.Reserve("a.test", time.Now())
	hc := fb.holder(t)
	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"about:blank"}}`))
	fc.next(t)
	c.Close()
	waitConns(t, tp, 0)
	hc.send(pageCreated("OTHERS", ""))
	hc.send(pausedDoc("interception-job-1.0", "OTHERS", "http://a.test/"))
	if !continuedWithin(hc, "interception-job-1.0", time.Second) {
		t.Error("another client's page waited for a page creation its client left")
	}
}

// TestScopeAttachedTwice: the relay's pages connection attached to one page
// twice (its own Target.attachToTarget crossing the browser's auto-attach)
// keeps one session on it and lets the other go: two would each pause and
// book the page's requests.
func TestScopeAttachedTwice(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	var rec *recorder
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly, recordBookings(&rec))
	net, pages := fb.holder(t), fb.pages(t)
	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	fc.send(attachedTo("S-MINE", "MINE", "page"))
	readClient(t, c)
	net.send(pageCreated("MINE", ""))
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"1"}}`))
	fc.next(t)
	fb.armed(t, pages, "MINE")
	kept := pages.session("MINE").id

	seq := fb.newJob()
	fb.mu.Lock()
	info := fb.targets["MINE"]
	pages.sessions["AGAIN"] = &fakeSess{id: "AGAIN", target: "MINE", seq: seq}
	fb.mu.Unlock()
	pages.write(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":"AGAIN","targetInfo":%s,"waitingForDebugger":false}}`, info))
	fb.await(t, "the relay letting its second session on the page go", func() bool { return pages.sessions["AGAIN"] == nil })
	for _, m := range pages.received() {
		if m.m.SessionID == "AGAIN" && m.m.Method != "Runtime.runIfWaitingForDebugger" {
			t.Errorf("the relay sent %s in its second session on the page, want nothing", m.m.Method)
		}
	}
	if ss := pages.session("MINE"); ss == nil || ss.id != kept || !ss.fetch {
		t.Errorf("the relay's session on the page is %+v, want %s, armed", ss, kept)
	}
	tp.lim.Reserve("a.test", time.Now()) // the next slot is an hour away
	nav := fb.navigateTo(t, "MINE", "http://a.test/")
	select {
	case <-nav:
		t.Error("the page's navigation was not held")
	case <-time.After(200 * time.Millisecond):
	}
	if n := len(rec.bookings()); n != 1 {
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
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly, func(p *Proxy) { p.netLinger = 300 * time.Millisecond })
	tp.lim.Reserve("b.test", time.Now()) // the next slot is an hour away
	net, pages := fb.holder(t), fb.pages(t)
	netOn := func() bool {
		fb.mu.Lock()
		defer fb.mu.Unlock()
		return net.fetchOn
	}
	fb.await(t, "net's Fetch off while no client has a page", func() bool { return !net.fetchOn })

	net.send(pageCreated("OTHERS", ""))
	if got := <-fb.navigateTo(t, "OTHERS", "http://a.test/"); got[0].pauses != 0 {
		t.Errorf("another client's navigation paused %d times, want never", got[0].pauses)
	}

	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	fc.send(attachedTo("S-MINE", "MINE", "page"))
	readClient(t, c)
	net.send(pageCreated("MINE", ""))
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-MINE","method":"Runtime.evaluate","params":{"expression":"location = 'http://b.test/'"}}`))
	fc.next(t)
	if !netOn() {
		t.Fatal("the client's command reached its page before net's Fetch was on")
	}
	fb.armed(t, pages, "MINE")
	mine := fb.navigateTo(t, "MINE", "http://b.test/")
	fb.await(t, "the client's navigation held in the pages connection", func() bool {
		return slices.Contains(net.patterns, "http://b.test/")
	})
	pages.drop()
	select {
	case <-mine:
		t.Error("the held navigation went when the pages connection was lost, want it handed to net")
	case <-time.After(300 * time.Millisecond):
	}

	// The client's page goes: net's Fetch is off Holder.NetLinger later (and
	// stays on while the pages connection is back and arming).
	fb.pages(t)
	net.send([]byte(`{"method":"Target.targetDestroyed","params":{"targetId":"MINE"}}`))
	fb.await(t, "net's Fetch off once the client's last page is gone", func() bool { return !net.fetchOn })
}

// TestScopeForeignWhileCreating: a page that appears while a client is
// creating one may be the client's; the relay arms it while it waits to
// know, and once it knows that page is not the client's, lets it run and
// lets go of it: its requests pause nowhere, and nothing is counted as a
// page the relay could not arm.
func TestScopeForeignWhileCreating(t *testing.T) {
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly)
	net, pages := fb.holder(t), fb.pages(t)
	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"about:blank"}}`))
	create := fc.next(t)
	net.send(pageCreated("OTHERS", ""))
	net.send(pageCreated("NEW", ""))
	fb.await(t, "the relay arming both pages while it waits to know whose they are", func() bool {
		o, n := pages.sessionLocked("OTHERS"), pages.sessionLocked("NEW")
		return o != nil && o.fetch && n != nil && n.fetch
	})
	fc.send(fmt.Appendf(nil, `{"id":%d,"result":{"targetId":"NEW"}}`, *create.m.ID))
	readClient(t, c)
	fb.armed(t, pages, "NEW")
	fb.await(t, "the relay letting go of the page that is not the client's", func() bool {
		return pages.sessionLocked("OTHERS") == nil
	})
	if got := <-fb.navigateTo(t, "OTHERS", "http://a.test/"); got[0].pauses != 0 {
		t.Errorf("another client's navigation paused %d times, want never", got[0].pauses)
	}
	if holes := hold.StateOf(tp.p.ups[0].holds).Unarmed; holes != 0 {
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
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(10*time.Millisecond), ownPagesOnly)
	net, pages := fb.holder(t), fb.pages(t)
	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	for _, page := range []string{"READS", "READSNOT"} {
		net.send(pageCreated(page, ""))
	}
	fb.await(t, "the relay letting the pages go", func() bool {
		return pages.sessionLocked("READS") == nil && pages.sessionLocked("READSNOT") == nil
	})
	for _, page := range []string{"READS", "READSNOT"} {
		fc.send(attachedTo("S-"+page, page, "page"))
		readClient(t, c)
	}
	// The client's own Network on READS, as the fake browser keeps it.
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-READS","method":"Network.enable"}`))
	fc.next(t)
	fb.mu.Lock()
	if fc.sessions == nil {
		fc.sessions = map[string]*fakeSess{}
	}
	fc.sessions["S-READS"] = &fakeSess{id: "S-READS", target: "READS", network: true}
	fb.mu.Unlock()

	for i, page := range []string{"READS", "READSNOT"} {
		writeClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"sessionId":"S-%s","method":"Page.navigate","params":{"url":"http://a.test/%d"}}`, i+2, page, i))
		fc.next(t)
		ss := pages.session(page)
		if ss == nil || !ss.fetch {
			t.Fatalf("%s: the client's navigation reached the browser before the relay's interception of its page was on: %+v", page, ss)
		}
		if want := page == "READSNOT"; ss.network != want {
			t.Errorf("%s: the relay's session has Network on: %v, want %v", page, ss.network, want)
		}
		<-fb.navigateTo(t, page, fmt.Sprintf("http://a.test/%d", i))
		waitFeedback(t, tp, i+1) // the answer came back to the limiter
	}
	if ss := pages.session("READS"); ss == nil || ss.network {
		t.Errorf("READS: the relay enabled Network in its own session, where the client reads the events: %+v", ss)
	}
	if n := len(tp.logs.lines(`"message":"a navigation left the browser"`)); n != 2 {
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
	checkLeaks(t)
	fb := newFakeBrowser(t, fakeConfig{})
	tp := relayTo(t, fb, fixed(time.Hour), ownPagesOnly, noBackup)
	tp.lim.Reserve("b.test", time.Now()) // the next slot is an hour away
	net, pages := fb.holder(t), fb.pages(t)
	netOn := func() bool {
		fb.mu.Lock()
		defer fb.mu.Unlock()
		return net.fetchOn
	}
	fb.await(t, "net's Fetch off", func() bool { return !net.fetchOn })

	c := tp.dial(t, "/", nil)
	fc := fb.accept(t)
	fc.send(attachedTo("S-MINE", "MINE", "page"))
	readClient(t, c)
	net.send(pageCreated("MINE", ""))
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"sessionId":"S-MINE","method":"Page.navigate","params":{"url":"http://b.test/"}}`))
	fc.next(t)
	fb.armed(t, pages, "MINE")
	mine := fb.navigateTo(t, "MINE", "http://b.test/")
	time.Sleep(100 * time.Millisecond) // held, waiting for its slot
	if netOn() {
		t.Errorf("net's Fetch is on while a client's navigation is held (patterns %q), want off", net.patterns)
	}
	select {
	case <-mine:
		t.Fatal("the held navigation went before its slot")
	default:
	}

	// The client creates a page with a URL: net pauses every document
	// until the new page is armed.
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Target.createTarget","params":{"url":"http://c.test/"}}`))
	fc.next(t)
	fb.mu.Lock()
	wide := net.fetchOn && slices.Contains(net.patterns, "*")
	fb.mu.Unlock()
	if !wide {
		t.Errorf("the client's Target.createTarget with a URL reached the browser before net paused every document (on %v, patterns %q)", netOn(), net.patterns)
	}

	// The pages connection is lost: the browser lets the held navigation go.
	pages.drop()
	select {
	case <-mine:
	case <-time.After(waitFor):
		t.Fatal("the held navigation was not let go when the pages connection was lost")
	}
	eventually(t, "the navigation counted unheld", func() bool { return tp.p.Metrics.Unheld() == 1 })
}
