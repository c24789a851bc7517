package relay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/fetch"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// loadBrowser is a fake Chromium for the load test, with one page, PAGE.
// Like Chromium with the relay's pages connection, it attaches that
// connection to PAGE, pauses the document request of every Page.navigate
// in its session once the relay enabled Fetch there, tells it in Network
// events when the request left and that it was answered, and answers the
// navigation only then. (Without that session, it pauses at a connection
// whose browser-level Fetch pauses every document, at both stages.)
// Runtime.evaluate is answered with its own expression, so a client can
// tell its replies from anyone else's.
type loadBrowser struct {
	srv     *httptest.Server
	up      websocket.Upgrader
	closing chan struct{}
	once    sync.Once
	jobs    atomic.Int64
	navs    sync.WaitGroup // navigations under way
	readers sync.WaitGroup

	mu       sync.Mutex
	holder   *loadConn                 // guarded by mu; the relay's connection pausing every document
	pages    *loadConn                 // guarded by mu; the relay's connection with Fetch on in PAGE's session
	conns    []*loadConn               // guarded by mu
	pending  map[string]chan time.Time // guarded by mu; paused requests by id
	paused   int                       // guarded by mu; Request-stage pauses sent
	released map[string][]time.Time    // guarded by mu; Request-stage continues by host
}

type loadConn struct {
	c   *websocket.Conn
	wmu sync.Mutex
}

func (lc *loadConn) send(b []byte) error {
	lc.wmu.Lock()
	defer lc.wmu.Unlock()
	lc.c.SetWriteDeadline(time.Now().Add(waitFor))
	return lc.c.WriteMessage(websocket.TextMessage, b)
}

func newLoadBrowser(t *testing.T) *loadBrowser {
	lb := &loadBrowser{
		closing:  make(chan struct{}),
		pending:  map[string]chan time.Time{},
		released: map[string][]time.Time{},
		up:       websocket.Upgrader{ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10},
	}
	lb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			fmt.Fprintf(w, `{"Browser":"Chrome/156.0.0.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/load"}`, r.Host)
			return
		}
		c, err := lb.up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		lc := &loadConn{c: c}
		lb.mu.Lock()
		lb.conns = append(lb.conns, lc)
		lb.readers.Add(1)
		lb.mu.Unlock()
		go func() {
			defer lb.readers.Done()
			lb.read(lc)
		}()
	}))
	t.Cleanup(lb.close)
	return lb
}

func (lb *loadBrowser) close() {
	lb.once.Do(func() { close(lb.closing) })
	lb.navs.Wait()
	lb.mu.Lock()
	for _, lc := range lb.conns {
		lc.c.Close()
	}
	lb.mu.Unlock()
	lb.readers.Wait()
	lb.srv.Close()
}

func (lb *loadBrowser) read(lc *loadConn) {
	defer lc.c.Close()
	for {
		_, data, err := lc.c.ReadMessage()
		if err != nil {
			return
		}
		var m struct {
			ID        int64
			Method    string
			Params    json.RawMessage
			SessionID string
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		reply := fmt.Appendf(nil, `{"id":%d,"result":{}}`, m.ID)
		if m.SessionID != "" {
			reply = fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, m.ID, m.SessionID)
		}
		switch m.Method {
		case "Target.setDiscoverTargets":
			lc.send([]byte(`{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":"PAGE","type":"page","title":"","url":"about:blank","attached":false,"canAccessOpener":false,"browserContextId":"CTX"}}}`))
		case "Target.setAutoAttach", "Target.attachToTarget":
			lc.send([]byte(`{"method":"Target.attachedToTarget","params":{"sessionId":"S-PAGE","targetInfo":{"targetId":"PAGE","type":"page","title":"","url":"about:blank","attached":true,"canAccessOpener":false,"browserContextId":"CTX"},"waitingForDebugger":false}}`))
			if m.Method == "Target.attachToTarget" {
				reply = fmt.Appendf(nil, `{"id":%d,"result":{"sessionId":"S-PAGE"}}`, m.ID)
			}
		case "Target.detachFromTarget":
			lc.send([]byte(`{"method":"Target.detachedFromTarget","params":{"sessionId":"S-PAGE"}}`))
		case "Fetch.enable":
			var p struct{ Patterns []struct{ URLPattern string } }
			json.Unmarshal(m.Params, &p)
			lb.mu.Lock()
			switch {
			case m.SessionID != "":
				lb.pages = lc
			case len(p.Patterns) == 1 && p.Patterns[0].URLPattern == "*":
				lb.holder = lc
			case lb.holder == lc:
				lb.holder = nil // it pauses only what the other holds
			}
			lb.mu.Unlock()
		case "Fetch.continueRequest":
			var p struct{ RequestID string }
			json.Unmarshal(m.Params, &p)
			lb.mu.Lock()
			ch := lb.pending[p.RequestID]
			delete(lb.pending, p.RequestID)
			lb.mu.Unlock()
			if ch != nil {
				ch <- time.Now()
			}
		case "Runtime.evaluate":
			var p struct{ Expression string }
			json.Unmarshal(m.Params, &p)
			v, _ := json.Marshal(p.Expression)
			reply = fmt.Appendf(nil, `{"id":%d,"result":{"result":{"type":"string","value":%s}}}`, m.ID, v)
		case "Page.navigate":
			var p struct{ URL string }
			json.Unmarshal(m.Params, &p)
			lb.navs.Add(1)
			go func() {
				defer lb.navs.Done()
				lb.navigate(lc, m.ID, p.URL)
			}()
			continue
		}
		if lc.send(reply) != nil {
			return
		}
	}
}

// navigate pauses a navigation's document request in the relay's page
// session (or, without one, twice at the connection pausing every
// document) and then answers the client's command.
func (lb *loadBrowser) navigate(lc *loadConn, id int64, url string) {
	host, _ := limiter.Key(url)
	job := lb.jobs.Add(1)
	reqID := fmt.Sprintf("interception-job-%d.0", job)
	netID := fmt.Sprintf("NET-%d", job)
	lb.mu.Lock()
	pc, hc := lb.pages, lb.holder
	lb.mu.Unlock()
	at := time.Now() // with no Fetch, the relay held the command itself
	var ok bool
	switch {
	case pc != nil:
		if at, ok = lb.pause(pc, "S-PAGE", netID, reqID, url, 0); !ok {
			return
		}
	case hc != nil:
		if at, ok = lb.pause(hc, "", "", reqID, url, 0); !ok {
			return
		}
	}
	lb.mu.Lock()
	lb.released[host] = append(lb.released[host], at)
	lb.mu.Unlock()
	switch {
	case pc != nil:
		mono := time.Since(loadEpoch).Seconds() + 1000
		pc.send(fmt.Appendf(nil, `{"method":"Network.requestWillBeSentExtraInfo","params":{"requestId":%q,"headers":{}},"sessionId":"S-PAGE"}`, netID))
		pc.send(fmt.Appendf(nil, `{"method":"Network.responseReceived","params":{"requestId":%q,"loaderId":%q,"timestamp":%.6f,"type":"Document","response":{"status":200,"headers":{},"timing":{"requestTime":%.6f,"sendStart":0}},"frameId":"PAGE"},"sessionId":"S-PAGE"}`, netID, netID, mono, mono))
	case hc != nil:
		if _, ok := lb.pause(hc, "", "", reqID, url, 200); !ok {
			return
		}
	}
	lc.send(fmt.Appendf(nil, `{"id":%d,"result":{"frameId":"PAGE","loaderId":"%s"}}`, id, reqID))
}

var loadEpoch = time.Now()

// pause sends a Fetch.requestPaused, in session when set, and waits for
// its Fetch.continueRequest.
func (lb *loadBrowser) pause(hc *loadConn, session, netID, reqID, url string, status int) (time.Time, bool) {
	ch := make(chan time.Time, 1)
	lb.mu.Lock()
	lb.pending[reqID] = ch
	if status == 0 {
		lb.paused++
	}
	lb.mu.Unlock()
	params := map[string]any{
		"requestId": reqID, "frameId": "PAGE", "resourceType": "Document",
		"request": map[string]any{"url": url, "method": "GET", "headers": map[string]string{}},
	}
	if status != 0 {
		params["responseStatusCode"] = status
		params["responseHeaders"] = []map[string]string{{"name": "Content-Type", "value": "text/html"}}
	}
	msg := map[string]any{"method": "Fetch.requestPaused", "params": params}
	if session != "" {
		params["networkId"] = netID
		msg["sessionId"] = session
	}
	ev, _ := json.Marshal(msg)
	if hc == nil || hc.send(ev) != nil {
		return time.Time{}, false
	}
	select {
	case at := <-ch:
		return at, true
	case <-lb.closing:
		return time.Time{}, false
	}
}

// loadFigures is what TestLoad measures.
type loadFigures struct {
	conns, peakConns                 int
	navigations, answered, dropped   int
	commands, replies                int
	goroutinesBefore, goroutinesPeak int
	goroutinesAfter                  int
	heapPeakGrowth                   uint64
	rssPeak                          uint64
}

// TestLoad opens 500 concurrent client connections through the relay to a
// fake browser, each navigating to random hosts out of 100 (interleaved
// with commands whose replies name their client), while about one
// navigation in ten is dropped by its client vanishing mid-navigation and
// reconnecting. It checks that every reply reaches the client that sent
// the command, that every navigation is booked exactly once and released
// no earlier than its slot, that the slots of each host keep their
// spacing, that the relay is left holding nothing, that memory stays
// bounded and that goroutines return to where they were (goleak). Run it
// with -v for the figures:
//
//	go test -race -count=1 -run TestLoad -v ./relay
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	for _, mode := range []string{"fetch", "navigate"} {
		t.Run(mode, func(t *testing.T) { testLoad(t, mode) })
	}
}

func testLoad(t *testing.T, mode string) {
	fakebrowser.CheckLeaks(t)
	const (
		clients  = 500
		hosts    = 100
		perConn  = 8 // navigations per client
		dropOdds = 10
		interval = 20 * time.Millisecond
	)
	var fig loadFigures
	runtime.GC()
	fig.goroutinesBefore = runtime.NumGoroutine()
	peakHeap := heapPeak()
	peakGoroutines := peakOf(10*time.Millisecond, func() uint64 { return uint64(runtime.NumGoroutine()) })

	lb := newLoadBrowser(t)
	var rec *holdtest.Recorder
	tp := relayToURL(t, lb.srv.URL, holdtest.Fixed(interval), recordBookings(&rec), func(p *Proxy) {
		quiet := p.Log.Level(2) // warn and up: the debug lines of 4,000 navigations are no figure
		p.Log = &quiet
		if mode == "navigate" {
			p.Intercept = hold.InterceptNavigate
		}
	})

	var (
		wg                   sync.WaitGroup
		connsOpened, dropped atomic.Int64
		navs, answered       atomic.Int64
		cmds, replies        atomic.Int64
		peakConns            atomic.Int64
		errs                 = make(chan error, clients)
	)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loadClient(tp, i, hosts, perConn, dropOdds, &connsOpened, &dropped, &navs, &answered, &cmds, &replies, &peakConns); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Navigations of vanished clients are still released at their slots.
	navsDone := make(chan struct{})
	go func() { lb.navs.Wait(); close(navsDone) }()
	select {
	case <-navsDone:
	case <-time.After(waitFor):
		t.Fatal("navigations still under way")
	}
	waitConns(t, tp, 0)

	// Every navigation was booked once and released no earlier than its slot.
	starts := map[string][]time.Time{}
	for _, b := range rec.Bookings() {
		starts[b.Host] = append(starts[b.Host], b.Start)
	}
	lb.mu.Lock()
	released, paused, pending := lb.released, lb.paused, len(lb.pending)
	lb.mu.Unlock()
	if pending != 0 {
		t.Errorf("%d paused requests never continued", pending)
	}
	var booked, freed int
	for host, s := range starts {
		r := released[host]
		booked += len(s)
		freed += len(r)
		slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
		slices.SortFunc(r, func(a, b time.Time) int { return a.Compare(b) })
		// With Fetch every navigation is released, by the relay's own
		// connection; in the stream, those of clients that vanished while
		// they were held are dropped with the connection.
		if len(r) > len(s) || mode == "fetch" && len(r) != len(s) {
			t.Errorf("%s: %d bookings, %d navigations released", host, len(s), len(r))
			continue
		}
		for k := range s {
			if k > 0 && s[k].Sub(s[k-1]) < interval {
				t.Errorf("%s: slots %d and %d %v apart, want at least %v", host, k-1, k, s[k].Sub(s[k-1]), interval)
			}
			// Each navigation goes no earlier than its own slot, so the
			// k-th to go goes no earlier than the k-th slot.
			if k < len(r) && r[k].Before(s[k]) {
				t.Errorf("%s: navigation %d released %v before its slot", host, k, s[k].Sub(r[k]))
			}
		}
	}
	if n := int(navs.Load()); mode == "fetch" && (booked != paused || freed != paused || paused != n) || booked > n || freed > booked {
		t.Errorf("%d navigations sent, %d paused, %d booked, %d released", n, paused, booked, freed)
	}
	if n, want := answered.Load(), navs.Load()-dropped.Load(); n != want {
		t.Errorf("%d navigations answered, want %d (all but those of clients that vanished)", n, want)
	}
	// The relay holds nothing any more.
	if st := fetch.StateOf(tp.p.ups[0].holds); mode == "fetch" && st.Commands+st.Followed+st.Waiting != 0 {
		t.Errorf("relay's own connections keep %d calls, %d hops, %d timers, want none", st.Commands, st.Followed, st.Waiting)
	}

	fig.heapPeakGrowth = peakHeap()
	tp.p.Close()
	tp.srv.Close()
	lb.close()
	fig.goroutinesPeak = int(peakGoroutines())
	deadline := time.Now().Add(waitFor)
	for runtime.NumGoroutine() > fig.goroutinesBefore && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	fig.goroutinesAfter = runtime.NumGoroutine()
	fig.conns, fig.peakConns = int(connsOpened.Load()), int(peakConns.Load())
	fig.navigations, fig.answered, fig.dropped = int(navs.Load()), int(answered.Load()), int(dropped.Load())
	fig.commands, fig.replies = int(cmds.Load()), int(replies.Load())
	fig.rssPeak = peakRSS()
	t.Logf("load, %s mode: %d client connections (%d at once at most, %d dropped mid-navigation), %d navigations over %d hosts (%d answered to clients still there), %d commands and %d replies",
		mode, fig.conns, fig.peakConns, fig.dropped, fig.navigations, hosts, fig.answered, fig.commands, fig.replies)
	t.Logf("load, %s mode: goroutines %d before, %d at peak, %d after; heap grew by at most %.1f MiB; peak RSS of the test process %.1f MiB",
		mode, fig.goroutinesBefore, fig.goroutinesPeak, fig.goroutinesAfter, float64(fig.heapPeakGrowth)/(1<<20), float64(fig.rssPeak)/(1<<20))
	if fig.goroutinesAfter > fig.goroutinesBefore {
		t.Errorf("goroutines: %d after, %d before", fig.goroutinesAfter, fig.goroutinesBefore)
	}
	// Both ends of every connection live in this process (client, relay
	// twice, fake browser): 2 MiB a client is far above what they need
	// together, and far below a leak of a few messages each.
	if limit := uint64(clients) << 21; fig.heapPeakGrowth > limit {
		t.Errorf("heap grew by %d MiB, want at most %d MiB", fig.heapPeakGrowth>>20, limit>>20)
	}
}

// loadClient is one client of TestLoad: it navigates perConn times to
// random hosts, each time with a command whose reply names it, and now and
// then vanishes mid-navigation and comes back on a new connection.
func loadClient(tp *testProxy, i, hosts, perConn, dropOdds int, connsOpened, dropped, navs, answered, cmds, replies, peakConns *atomic.Int64) error {
	rng := rand.New(rand.NewPCG(uint64(i), 4))
	dial := func() (*websocket.Conn, error) {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+tp.addr+"/devtools/page/PAGE", nil) // the page the client drives
		if err != nil {
			return nil, err
		}
		connsOpened.Add(1)
		if n := int64(tp.p.Conns()); n > peakConns.Load() {
			peakConns.Store(n) // racy maximum: a figure, not a check
		}
		return c, nil
	}
	c, err := dial()
	if err != nil {
		return err
	}
	defer func() { c.Close() }()
	id := int64(0)
	for k := range perConn {
		host := "h" + strconv.Itoa(rng.IntN(hosts)) + ".test"
		expr := fmt.Sprintf("client %d nav %d", i, k)
		id++
		evalID := id
		eval, _ := json.Marshal(map[string]any{"id": evalID, "method": "Runtime.evaluate", "params": map[string]any{"expression": expr}})
		id++
		navID := id
		nav, _ := json.Marshal(map[string]any{"id": navID, "method": "Page.navigate", "params": map[string]any{"url": "http://" + host + "/" + strconv.Itoa(i) + "/" + strconv.Itoa(k)}})
		c.SetWriteDeadline(time.Now().Add(waitFor))
		if err := c.WriteMessage(websocket.TextMessage, eval); err != nil {
			return err
		}
		if err := c.WriteMessage(websocket.TextMessage, nav); err != nil {
			return err
		}
		cmds.Add(2)
		navs.Add(1)
		if rng.IntN(dropOdds) == 0 {
			// Vanish mid-navigation, without a close frame, and come back.
			c.UnderlyingConn().Close()
			dropped.Add(1)
			if c, err = dial(); err != nil {
				return err
			}
			continue
		}
		for got := 0; got < 2; got++ {
			c.SetReadDeadline(time.Now().Add(waitFor))
			_, data, err := c.ReadMessage()
			if err != nil {
				return err
			}
			var m struct {
				ID     int64
				Result struct {
					Result  struct{ Value string }
					FrameID string
				}
			}
			if err := json.Unmarshal(data, &m); err != nil {
				return fmt.Errorf("unreadable reply %q", data)
			}
			switch {
			case m.ID == evalID && m.Result.Result.Value == expr:
			case m.ID == navID && m.Result.FrameID == "PAGE":
				answered.Add(1)
			default:
				return fmt.Errorf("got %s, want the reply to %d or %d (%q)", data, evalID, navID, expr)
			}
			replies.Add(1)
		}
	}
	c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return nil
}

// peakRSS returns the process's peak resident set size (VmHWM), or 0 where
// /proc does not tell.
func peakRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kb, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
