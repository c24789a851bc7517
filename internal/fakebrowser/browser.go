// Package fakebrowser is a fake CDP browser for the unit tests of the
// relay and of holding: an httptest.Server that answers /json/* and
// websockets the way Chromium 156 does, from transcripts recorded off a
// real one (testdata/chromium-*.jsonl, embedded; record_test.go records
// them), or the way `lightpanda serve` does. Tests inject recorded events,
// play recorded navigations against the relay's own connections and watch
// what the relay sends.
//
// It is test support, imported only by _test.go files: its helpers take a
// testing.TB and fail the test rather than return errors. A Browser and
// its Conns are safe for concurrent use; fields documented as guarded by
// a Mu are read under it.
package fakebrowser

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// WaitFor bounds every wait of the tests; nothing they wait for takes
// anywhere near as long unless it is broken.
const WaitFor = 30 * time.Second

// Config chooses what the fake browser pretends to be.
type Config struct {
	// lightpanda serves what `lightpanda serve` serves: a websocket only
	// at "/", no /json/new, /json/activate or /json/close, an empty
	// /json/list, and no browser-level Fetch.
	Lightpanda bool
	// rejectFetch makes a Chromium-like browser refuse browser-level
	// Fetch.enable, as one without the domain would.
	RejectFetch bool
	// silent lists methods of the relay's own commands that the fake
	// receives (and acts on) but never answers, as a hung browser would.
	Silent map[string]bool
	// listener, when set, is where the fake serves instead of a port of
	// its own choosing.
	Listener net.Listener
	// commandLine is what Browser.getBrowserCommandLine answers; nil
	// answers the error of a Chromium started without --enable-automation.
	CommandLine []string
}

// Browser is a CDP browser on an httptest.Server.
type Browser struct {
	t    *testing.T
	cfg  Config
	srv  *httptest.Server
	Addr string // host:port, as Chrome writes it into its URLs; set once by New

	FetchRec   *Recording // the net connection's transcript; set once by New
	PagesRec   *Recording // the pages connection's transcript; set once by New
	httpMeta   map[string]string
	httpLines  []RecordedHTTP
	recordedID string // of /devtools/browser/ID in the recording
	upgrader   websocket.Upgrader

	Mu        sync.Mutex                 // guards what says so, and each Session's fields
	browserID string                     // guarded by Mu; of /devtools/browser/ID, changed by restart
	quiet     bool                       // guarded by Mu; connections accepted from now on answer nothing by themselves
	replaying *Recording                 // guarded by Mu; the next connection accepted answers from it
	hits      []Hit                      // guarded by Mu
	conns     []*Conn                    // guarded by Mu
	returned  map[*Conn]bool             // guarded by Mu; handed to a test already
	Targets   map[string]json.RawMessage // guarded by Mu; targetInfo by id, as announced
	nextJob   int                        // guarded by Mu
	changed   chan struct{}              // guarded by Mu; closed and replaced when conns or hits change
	wg        sync.WaitGroup             // connection readers
}

// Hit is an HTTP request the fake got.
type Hit struct {
	Method, Path, Query, Host string
	Upgrade                   bool
}

// String returns the request as its first line names it: the method and
// the path, with its query if it has one.
func (h Hit) String() string {
	if h.Query == "" {
		return h.Method + " " + h.Path
	}
	return h.Method + " " + h.Path + "?" + h.Query
}

// ClosedAddr returns a loopback address where nothing listens: a port the
// system just gave out and took back, where a test finds connections
// refused, or listens later itself.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// New starts a fake browser as cfg says, answering from the recorded
// transcripts; it is stopped when t's test ends.
func New(t *testing.T, cfg Config) *Browser {
	t.Helper()
	fb := &Browser{
		t:        t,
		cfg:      cfg,
		FetchRec: LoadRecording(t, "chromium-fetch.jsonl"),
		PagesRec: LoadRecording(t, "chromium-pages.jsonl"),
		returned: map[*Conn]bool{},
		Targets:  map[string]json.RawMessage{},
		nextJob:  1000,
		changed:  make(chan struct{}),
	}
	fb.httpMeta, fb.httpLines = LoadHTTP(t)
	fb.upgrader = websocket.Upgrader{CheckOrigin: fb.checkOrigin}
	fb.srv = httptest.NewUnstartedServer(http.HandlerFunc(fb.serve))
	if cfg.Listener != nil {
		fb.srv.Listener.Close()
		fb.srv.Listener = cfg.Listener
	}
	fb.Addr = fb.srv.Listener.Addr().String()
	var v struct{ WebSocketDebuggerURL string }
	json.Unmarshal([]byte(fb.answerFor(t, "GET", "/json/version").Body), &v)
	fb.recordedID = v.WebSocketDebuggerURL[strings.LastIndexByte(v.WebSocketDebuggerURL, '/')+1:]
	fb.browserID = fb.recordedID
	fb.srv.Start() // a relay may be asking already
	t.Cleanup(fb.Close)
	return fb
}

// Close stops the server and ends every connection.
func (fb *Browser) Close() {
	fb.srv.Close()
	fb.Mu.Lock()
	conns := fb.conns
	fb.Mu.Unlock()
	for _, c := range conns {
		c.WS.Close()
	}
	fb.wg.Wait()
}

// URL returns the fake's HTTP endpoint.
func (fb *Browser) URL() string { return "http://" + fb.Addr }

// WSURL returns the URL of the browser endpoint.
func (fb *Browser) WSURL() string {
	if fb.cfg.Lightpanda {
		return "ws://" + fb.Addr + "/"
	}
	return "ws://" + fb.Addr + "/devtools/browser/" + fb.ID()
}

// ID returns the browser's id, as in /devtools/browser/ID.
func (fb *Browser) ID() string {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	return fb.browserID
}

// Restart gives the browser a new id, as a restarted Chromium on the same
// port has: its connections are gone, and so is its old browser endpoint.
func (fb *Browser) Restart(id string) {
	fb.Mu.Lock()
	fb.browserID = id
	conns := fb.conns
	fb.Mu.Unlock()
	for _, c := range conns {
		c.Drop()
	}
}

func (fb *Browser) broadcast() {
	close(fb.changed)
	fb.changed = make(chan struct{})
}

// answerFor returns the last recorded answer to method path.
func (fb *Browser) answerFor(t testing.TB, method, path string) RecordedHTTP {
	var found *RecordedHTTP
	for i, l := range fb.httpLines {
		if l.Method == method && l.Path == path {
			found = &fb.httpLines[i]
		}
	}
	if found == nil {
		// Errorf, not Fatalf: the fake's handlers call this too.
		t.Errorf("nothing recorded for %s %s", method, path)
		return RecordedHTTP{Status: http.StatusInternalServerError}
	}
	return *found
}

// served is a recorded body as the fake serves it: Chromium writes its own
// address, as the client reached it, into its URLs.
func (fb *Browser) served(body, host string) string {
	body = strings.ReplaceAll(body, fb.recordedID, fb.ID())
	return strings.ReplaceAll(body, fb.httpMeta["browser"], host)
}

// hostAllowed is Chromium's check of the Host header (Lightpanda's is
// stricter: IP literals only).
func (fb *Browser) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if _, err := netip.ParseAddr(host); err == nil || hostport == "" {
		return true
	}
	if fb.cfg.Lightpanda {
		return false
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

func (fb *Browser) checkOrigin(r *http.Request) bool {
	origin, ok := r.Header["Origin"]
	if !ok {
		return true
	}
	return !fb.cfg.Lightpanda && len(origin) == 1 && origin[0] == "http://"+r.Host
}

func (fb *Browser) serve(w http.ResponseWriter, r *http.Request) {
	upgrade := websocket.IsWebSocketUpgrade(r)
	fb.Mu.Lock()
	fb.hits = append(fb.hits, Hit{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, Upgrade: upgrade})
	fb.broadcast()
	fb.Mu.Unlock()
	if !fb.hostAllowed(r.Host) {
		if fb.cfg.Lightpanda {
			http.Error(w, "Host not allowed", http.StatusForbidden)
		} else {
			http.Error(w, "Host header is specified and is not an IP address or localhost.", http.StatusInternalServerError)
		}
		return
	}
	if upgrade {
		fb.serveWebsocket(w, r)
		return
	}
	if fb.cfg.Lightpanda {
		fb.serveLightpanda(w, r)
		return
	}
	answer := func(l RecordedHTTP, body string) {
		w.Header().Set("Content-Type", l.ContentType)
		w.WriteHeader(l.Status)
		w.Write([]byte(body))
	}
	path := r.URL.Path
	switch {
	case path == "/json/version" || path == "/json/list" || path == "/json":
		if path == "/json" {
			path = "/json/list"
		}
		l := fb.answerFor(fb.t, "GET", path)
		answer(l, fb.served(l.Body, r.Host))
	case path == "/json/new":
		l := fb.answerFor(fb.t, r.Method, path)
		answer(l, fb.served(l.Body, r.Host))
	case path == "/json/protocol":
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.Write(fakeProtocol)
	case strings.HasPrefix(path, "/json/activate/"), strings.HasPrefix(path, "/json/close/"):
		verb, id, _ := strings.Cut(strings.TrimPrefix(path, "/json/"), "/")
		for _, l := range fb.httpLines {
			if !strings.HasPrefix(l.Path, "/json/"+verb+"/") {
				continue
			}
			known := strings.Contains(fb.answerFor(fb.t, "GET", "/json/list").Body, `"id": "`+id+`"`)
			if (l.Status == http.StatusOK) == known {
				answer(l, strings.ReplaceAll(l.Body, "NOSUCHTARGET", id))
				return
			}
		}
		http.NotFound(w, r)
	default:
		http.NotFound(w, r)
	}
}

// fakeProtocol stands in for /json/protocol (1.6 MB from Chromium), with
// spacing and escapes a re-encoding would change.
var fakeProtocol = []byte("{\"version\": {\"major\": \"1\", \"minor\": \"3\"},\n \"domains\": [{\"domain\": \"Fetch\", \"description\": \"<b>\\u00e9</b> & more\"}]}\n")

func (fb *Browser) serveLightpanda(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Connection", "close")
	switch r.URL.Path {
	case "/json/version", "/json/version/":
		fmt.Fprintf(w, `{"Browser": "Lightpanda/1.0", "Protocol-Version": "1.3", "User-Agent": "Lightpanda/1.0", "Lightpanda-Version": "dev", "webSocketDebuggerUrl": "ws://%s/"}`, fb.Addr)
	case "/json", "/json/", "/json/list", "/json/list/":
		w.Write([]byte("[]"))
	case "/json/protocol":
		w.Write(fakeProtocol)
	default:
		http.NotFound(w, r)
	}
}

func (fb *Browser) serveWebsocket(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	ok := path == "/"
	if !fb.cfg.Lightpanda {
		ok = path == "/devtools/browser/"+fb.ID() || strings.HasPrefix(path, "/devtools/page/")
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	c, err := fb.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	fc := &Conn{fb: fb, WS: c, Path: path, arrived: make(chan struct{}), Continued: map[string]time.Time{}, done: make(chan struct{})}
	fb.Mu.Lock()
	fc.auto = !fb.quiet
	fc.replay, fb.replaying = fb.replaying, nil
	fb.Mu.Unlock()
	c.SetPingHandler(func(data string) error {
		fc.Mu.Lock()
		fc.pings++
		fc.Mu.Unlock()
		return c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	fb.Mu.Lock()
	fb.conns = append(fb.conns, fc)
	fb.broadcast()
	fb.wg.Add(1)
	fb.Mu.Unlock()
	go func() {
		defer fb.wg.Done()
		fc.read()
	}()
}

// Await calls check until it reports true, each time something changes.
func (fb *Browser) Await(t testing.TB, what string, check func() bool) {
	t.Helper()
	deadline := time.After(WaitFor)
	for {
		fb.Mu.Lock()
		changed := fb.changed
		done := check()
		fb.Mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("fake browser: no %s within %v", what, WaitFor)
		}
	}
}

// Eventually polls check until it reports true, failing t after WaitFor.
// Unlike Browser.Await, check may call into the fake and the code under
// test.
func Eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitFor)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, WaitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Holder returns the next connection that enabled browser-level Fetch:
// the relay's own.
func (fb *Browser) Holder(t testing.TB) *Conn {
	t.Helper()
	return fb.next(t, "relay connection with Fetch enabled", func(c *Conn) bool { return c.holder && !c.ended_() })
}

// Accept returns the next connection relayed for a client.
func (fb *Browser) Accept(t testing.TB) *Conn {
	t.Helper()
	return fb.next(t, "relayed connection", func(c *Conn) bool { return !c.holder && !c.own })
}

// next waits for a connection that is what is and that none of Holder,
// Accept and Pages returned yet, and returns it; is runs under fb.Mu.
func (fb *Browser) next(t testing.TB, what string, is func(*Conn) bool) *Conn {
	t.Helper()
	var got *Conn
	fb.Await(t, what, func() bool {
		for _, c := range fb.conns {
			if !fb.returned[c] && is(c) {
				got, fb.returned[c] = c, true
				return true
			}
		}
		return false
	})
	return got
}

// ConnCount reports how many websockets the fake has accepted.
func (fb *Browser) ConnCount() int {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	return len(fb.conns)
}

// Hits returns the HTTP requests the fake got.
func (fb *Browser) Hits() []Hit {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	return append([]Hit(nil), fb.hits...)
}

// Announce makes the fake know a target, as if it had been created.
func (fb *Browser) Announce(id string, info json.RawMessage) {
	fb.Mu.Lock()
	fb.Targets[id] = info
	fb.Mu.Unlock()
}

// NewJob returns a fresh interception job number.
func (fb *Browser) NewJob() int {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	fb.nextJob++
	return fb.nextJob
}

// Hush makes the connections accepted from now on answer nothing by
// themselves: a test that replays a client's transcript plays the
// browser's part itself.
func (fb *Browser) Hush() {
	fb.Mu.Lock()
	fb.quiet = true
	fb.Mu.Unlock()
}

// Scripted is a Chromium-like endpoint whose websockets the test scripts
// by hand, for what the recorded Browser cannot do (answer badly, late or
// never): /json/version names its browser endpoint, and each websocket is
// handed to the script with its number (0 for the first), which owns it
// until done is closed. The test's cleanup closes done and every
// websocket, and waits for the scripts to return.
type Scripted struct {
	// URL is the endpoint's http:// address, as httptest.Server's.
	URL string

	srv   *httptest.Server
	done  chan struct{}
	n     atomic.Int32
	mu    sync.Mutex
	conns []*websocket.Conn // guarded by mu
	wg    sync.WaitGroup
}

// NewScripted starts a Scripted endpoint whose websockets script drives.
func NewScripted(t testing.TB, script func(i int, c *websocket.Conn, done <-chan struct{})) *Scripted {
	t.Helper()
	sb := &Scripted{done: make(chan struct{})}
	up := websocket.Upgrader{}
	sb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !websocket.IsWebSocketUpgrade(r) {
			fmt.Fprintf(w, `{"Browser":"Chrome/156.0.0.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/scripted"}`, r.Host)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		sb.mu.Lock()
		sb.conns = append(sb.conns, c)
		sb.wg.Add(1)
		sb.mu.Unlock()
		defer sb.wg.Done()
		defer c.Close()
		script(int(sb.n.Add(1)-1), c, sb.done)
	}))
	sb.URL = sb.srv.URL
	t.Cleanup(func() {
		close(sb.done)
		sb.mu.Lock()
		for _, c := range sb.conns {
			c.Close()
		}
		sb.mu.Unlock()
		sb.wg.Wait()
		sb.srv.Close()
	})
	return sb
}

// Echo answers every command on c with an empty result until c ends: the
// least a browser must do for a relay with its limiter off.
func Echo(c *websocket.Conn) {
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		var m struct{ ID int64 }
		json.Unmarshal(msg, &m)
		if c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{}}`, m.ID)) != nil {
			return
		}
	}
}
