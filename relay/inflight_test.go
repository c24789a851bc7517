package relay

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// The cap on navigations in flight, through each holding strategy: a
// navigation over the cap waits for a place, and its place is given back
// whichever way the navigation ends. The cap is 1 in these tests, so a
// place that leaks holds the next navigation of its host for good.

// capped makes the relay's policy cap the navigations of every host at
// 1 in flight, with no spacing, and the cap's bound bound (0: the default).
func capped(bound time.Duration) func(*Proxy) {
	return func(p *Proxy) {
		cfg := policy.Config{Default: limiter.Config{Mode: limiter.Off}, Concurrency: 1, ConcurrencyBound: bound}
		p.Limiter = policy.New(cfg, limiter.New(cfg.Default))
		p.Metrics = NewMetrics(p.Limiter)
	}
}

// inFlight reads a host's navigations in flight and waiting as /hosts
// shows them.
func inFlight(tp *testProxy, host string) (inFlight, waiting int) {
	for _, h := range tp.p.Limiter.(*policy.Policy).Busiest(time.Now(), 100) {
		if h.Host == host {
			return h.InFlight, h.Waiting
		}
	}
	return 0, 0
}

// awaitInFlight waits (a place goes back on a goroutine of its own) until
// host has want navigations in flight and none waiting.
func awaitInFlight(t *testing.T, tp *testProxy, host string, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, w := inFlight(tp, host)
		if n == want && w == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d in flight and %d waiting, want %d and none", host, n, w, want)
		}
		time.Sleep(time.Millisecond)
	}
}

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

// announce tells the relay's connection of a page target.
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
		end func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy)
	}{
		{name: "answer", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first"))
		}},
		{name: "429", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/busy"))
		}},
		{name: "no answer: refused", host: "c.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "http://c.test"))
		}},
		{name: "redirect to another host", host: "b.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			chain := fb.FetchRec.Chain(t, "/r")
			hops := hc.MustPlay(t, chain[:2]) // a.test answered 302
			// Its place goes with its hop unless that is to another host.
			awaitInFlight(t, tp, "a.test", 1)
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
					awaitInFlight(t, tp, "a.test", 0)
					awaitInFlight(t, tp, "b.test", 1)
				}
			}
		}},
		{name: "redirect within the host keeps its place to the end", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			chain := fb.FetchRec.Chain(t, "/r2")
			hops := hc.MustPlay(t, chain[:2])
			awaitInFlight(t, tp, "a.test", 1)
			hop := inJob(chain[2], hops[0].RequestID)
			p, _ := fakebrowser.ReadPause(hop)
			hc.Send(hop)
			hc.ContinuedAt(p.RequestID)
			hc.Mu.Lock()
			delete(hc.Continued, p.RequestID)
			hc.Mu.Unlock()
			awaitInFlight(t, tp, "a.test", 1)
			answer := inJob(chain[3], hops[0].RequestID)
			hc.Send(answer)
			hc.ContinuedAt(p.RequestID)
		}},
		{name: "page closed mid-navigation", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1])
			awaitInFlight(t, tp, "a.test", 1)
			hc.Send(fmt.Appendf(nil, `{"method":"Target.targetDestroyed","params":{"targetId":%q}}`, recordedPage))
		}},
		{name: "a later navigation of the page", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			chain := fb.FetchRec.Chain(t, "/page?first")
			hc.MustPlay(t, chain[:1])
			awaitInFlight(t, tp, "a.test", 1)
			hc.MustPlay(t, chain) // the page's next navigation, answered
		}},
		{name: "page closed while waiting for a place", host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			chain := fb.FetchRec.Chain(t, "/page?first")
			hops := hc.MustPlay(t, chain[:1]) // in flight
			announceTarget(t, hc, otherPage)
			waiting := fakebrowser.RenumberJob(onPage(chain, otherPage)[0], fb.NewJob())
			p, _ := fakebrowser.ReadPause(waiting)
			hc.Send(waiting)
			if continuedWithin(hc, p.RequestID, 300*time.Millisecond) {
				t.Fatal("a second navigation of a.test went while one was in flight, cap 1")
			}
			if n, w := inFlight(tp, "a.test"); n != 1 || w != 1 {
				t.Fatalf("a.test: %d in flight, %d waiting; want 1 and 1", n, w)
			}
			hc.Send(fmt.Appendf(nil, `{"method":"Target.targetDestroyed","params":{"targetId":%q}}`, otherPage))
			awaitInFlight(t, tp, "a.test", 1)
			hc.Send(inJob(chain[1], hops[0].RequestID))
			hc.ContinuedAt(hops[0].RequestID)
		}},
		{name: "connection lost", host: "a.test", dropped: true, end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1])
			awaitInFlight(t, tp, "a.test", 1)
			hc.Drop() // its answer would have come here
		}},
		{name: "browser lost", host: "a.test", dropped: true, end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1])
			awaitInFlight(t, tp, "a.test", 1)
			for _, h := range append(fb.Holders(), fb.PagesConns()...) {
				h.Drop()
			}
		}},
		{name: "the bound", bound: 300 * time.Millisecond, host: "a.test", end: func(t *testing.T, fb *fakebrowser.Browser, hc *fakebrowser.Conn, tp *testProxy) {
			hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first")[:1]) // its end is never seen
			awaitInFlight(t, tp, "a.test", 1)
			time.Sleep(300 * time.Millisecond)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{})
			tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, capped(tt.bound))
			hc := fb.Holder(t)
			fb.Pages(t) // both of the relay's connections are up; net holds what pauses there
			fakebrowser.AnnouncePages(t, fb, hc, false)
			tt.end(t, fb, hc, tp)
			awaitInFlight(t, tp, tt.host, 0)
			if tt.dropped { // the relay reconnects: the next navigation pauses there
				hc.Ended(t)
				hc = fb.Holder(t)
				fakebrowser.AnnouncePages(t, fb, hc, false)
			}
			goesAtOnce(t, fb, hc, tt.host)
			awaitInFlight(t, tp, tt.host, 0)
			if expired := tp.p.Limiter.(*policy.Policy).Expired(); (expired == 1) != (tt.bound > 0) {
				t.Errorf("%d places given back by the bound", expired)
			}
		})
	}
}

// TestCapFetchHolds: a navigation over the cap waits, in arrival order,
// and goes once a place is given back; the spacing still applies after.
// The first time the cap holds a host it is warned about, and /metrics
// counts the wait.
func TestCapFetchHolds(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, func(p *Proxy) {
		cfg := policy.Config{Default: fixed(200 * time.Millisecond), Concurrency: 1}
		p.Limiter = policy.New(cfg, limiter.New(cfg.Default))
		p.Metrics = NewMetrics(p.Limiter)
	})
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
	if lines := tp.logs.Lines("holding navigations to this host until one in flight is answered", `"host":"a.test"`, `"concurrency":1`); len(lines) != 1 {
		t.Errorf("warnings: %q, want one", lines)
	}
	rec := httptestGet(t, tp, "/metrics")
	if !strings.Contains(rec, "cdp_throttle_concurrency_wait_seconds_count 1") {
		t.Errorf("/metrics does not count the navigation that waited:\n%s", grepLines(rec, "concurrency"))
	}
	hosts := httptestGet(t, tp, "/hosts")
	if !strings.Contains(hosts, `"in_flight":1,"waiting":1,"concurrency":1,"concurrency_source":"flag"`) {
		t.Errorf("/hosts: %s", hosts)
	}
	if status := httptestGet(t, tp, "/status"); !strings.Contains(status, `"in_flight":1`) || !strings.Contains(status, `"cap":1`) {
		t.Errorf("/status, the page's: %s", status)
	}
}

func httptestGet(t *testing.T, tp *testProxy, path string) string {
	t.Helper()
	c := tp.srv.Client()
	resp, err := c.Get(tp.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return b.String()
}

func grepLines(s, part string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, part) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestCapSession: through each client's page session (Lightpanda), every
// way a navigation ends gives its place back.
func TestCapSession(t *testing.T) {
	const S, F = "SID-1", "FID-1"
	doc := func(n int) []byte {
		return paused(S, fmt.Sprintf("INT-%d", n), fmt.Sprintf("REQ-%d", n), F, "Document", "http://a.test/")
	}
	response := func(n, status int) []byte {
		return fmt.Appendf(nil, `{"method":"Network.responseReceived","params":{"requestId":"REQ-%d","frameId":%q,"type":"Document","response":{"url":"http://a.test/","status":%d,"headers":{}}},"sessionId":%q}`, n, F, status, S)
	}
	tests := []struct {
		name string
		end  func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn)
	}{
		{"answer", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { fc.Send(response(1, 200)) }},
		{"5xx", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { fc.Send(response(1, 500)) }},
		{"connection reset", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(fmt.Appendf(nil, `{"method":"Network.loadingFailed","params":{"requestId":"REQ-1","type":"Document","errorText":"net::ERR_EMPTY_RESPONSE","canceled":false},"sessionId":%q}`, S))
		}},
		{"aborted", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(fmt.Appendf(nil, `{"method":"Network.loadingFailed","params":{"requestId":"REQ-1","type":"Document","errorText":"net::ERR_ABORTED","canceled":true},"sessionId":%q}`, S))
		}},
		{"page closed", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(fmt.Appendf(nil, `{"method":"Target.detachedFromTarget","params":{"sessionId":%q,"targetId":%q}}`, S, F))
		}},
		{"a later navigation of the page", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(doc(2))
			continuedOwn(t, fc, "INT-2")
			fc.Send(response(2, 200))
		}},
		{"client gone", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
			tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, capped(0))
			c := tp.dial(t, "/", nil)
			fc := fb.Accept(t)
			fc.Send(attachedTo(S, F, "page"))
			ownCommand(t, fc, "Fetch.enable", S)
			ownCommand(t, fc, "Network.enable", S)
			readClient(t, c)
			fc.Send(doc(1))
			continuedOwn(t, fc, "INT-1")
			awaitInFlight(t, tp, "a.test", 1)
			tt.end(t, fc, c)
			awaitInFlight(t, tp, "a.test", 0)
		})
	}
}

// TestCapSessionHolds: in the session strategy too, a document over the
// cap waits until the one in flight is answered; a held createTarget's
// place passes to its page's document.
func TestCapSessionHolds(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, capped(0))
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"http://a.test/"}}`))
	if m := fc.Next(t); m.Wire.Method != "Target.createTarget" {
		t.Fatalf("browser got %s, want the createTarget", m.Data)
	}
	awaitInFlight(t, tp, "a.test", 1)
	fc.Send(attachedTo("SID-1", "FID-1", "page"))
	ownCommand(t, fc, "Fetch.enable", "SID-1")
	ownCommand(t, fc, "Network.enable", "SID-1")
	readClient(t, c)
	fc.Send(paused("SID-1", "INT-1", "REQ-1", "FID-1", "Document", "http://a.test/"))
	continuedOwn(t, fc, "INT-1") // the createTarget's page: its place already
	awaitInFlight(t, tp, "a.test", 1)
	// Another page's document waits for that place.
	fc.Send(attachedTo("SID-2", "FID-2", "page"))
	ownCommand(t, fc, "Fetch.enable", "SID-2")
	ownCommand(t, fc, "Network.enable", "SID-2")
	readClient(t, c)
	fc.Send(paused("SID-2", "INT-2", "REQ-2", "FID-2", "Document", "http://a.test/2"))
	if fc.GotWithin(300 * time.Millisecond) {
		t.Fatalf("browser got %s while a.test had a navigation in flight, cap 1", fc.Next(t).Data)
	}
	fc.Send([]byte(`{"method":"Network.responseReceived","params":{"requestId":"REQ-1","frameId":"FID-1","type":"Document","response":{"url":"http://a.test/","status":200,"headers":{}}},"sessionId":"SID-1"}`))
	continuedOwn(t, fc, "INT-2")
	awaitInFlight(t, tp, "a.test", 1)
}

// TestCapStream: held in the client stream, a navigation command waits for
// a place; its place goes back with the answer in the client's Network
// events, the session's next navigation, or the client leaving.
func TestCapStream(t *testing.T) {
	navigate := func(id int, url string) []byte {
		return fmt.Appendf(nil, `{"id":%d,"method":"Page.navigate","params":{"url":%q},"sessionId":"SID-1"}`, id, url)
	}
	sent := func(req string) []byte {
		return fmt.Appendf(nil, `{"method":"Network.requestWillBeSent","params":{"requestId":%q,"frameId":"FID-1","type":"Document","documentURL":"http://a.test/","request":{"url":"http://a.test/","method":"GET"}},"sessionId":"SID-1"}`, req)
	}
	tests := []struct {
		name string
		end  func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn)
	}{
		{"answer in the client's Network events", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			fc.Send(sent("REQ-1"))
			readClient(t, c)
			fc.Send([]byte(`{"method":"Network.responseReceived","params":{"requestId":"REQ-1","frameId":"FID-1","type":"Document","response":{"url":"http://a.test/","status":200,"headers":{}}},"sessionId":"SID-1"}`))
			readClient(t, c)
		}},
		{"the session's next navigation", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) {
			writeClient(t, c, websocket.TextMessage, navigate(2, "http://b.test/"))
			if m := fc.Next(t); !strings.Contains(string(m.Data), "b.test") {
				t.Fatalf("browser got %s", m.Data)
			}
		}},
		{"client gone", func(t *testing.T, fc *fakebrowser.Conn, c *websocket.Conn) { c.Close() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
			tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, capped(0), navigateInStream)
			c := tp.dial(t, "/", nil)
			fc := fb.Accept(t)
			writeClient(t, c, websocket.TextMessage, navigate(1, "http://a.test/"))
			fc.Next(t)
			awaitInFlight(t, tp, "a.test", 1)
			tt.end(t, fc, c)
			awaitInFlight(t, tp, "a.test", 0)
		})
	}
	// Over the cap, a navigation command of another session waits.
	t.Run("holds", func(t *testing.T) {
		fakebrowser.CheckLeaks(t)
		fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
		tp := relayTo(t, fb, limiter.Config{Mode: limiter.Off}, capped(0), navigateInStream)
		c := tp.dial(t, "/", nil)
		fc := fb.Accept(t)
		writeClient(t, c, websocket.TextMessage, navigate(1, "http://a.test/"))
		fc.Next(t)
		writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"},"sessionId":"SID-2"}`))
		if fc.GotWithin(300 * time.Millisecond) {
			t.Fatalf("browser got %s while a.test had a navigation in flight, cap 1", fc.Next(t).Data)
		}
		fc.Send(sent("REQ-1"))
		readClient(t, c)
		fc.Send([]byte(`{"method":"Network.loadingFailed","params":{"requestId":"REQ-1","type":"Document","errorText":"net::ERR_CONNECTION_RESET","canceled":false},"sessionId":"SID-1"}`))
		readClient(t, c)
		if m := fc.Next(t); !strings.Contains(string(m.Data), `"id":2`) {
			t.Fatalf("browser got %s, want the second navigation", m.Data)
		}
		_ = tp
	})
}
