package relay

// A fake CDP browser for the unit tests: an httptest.Server that answers
// /json/* and websockets the way Chromium 156 does, from transcripts
// recorded off a real one (testdata/chromium-*.jsonl, see record_test.go),
// or the way `lightpanda serve` does. Tests inject recorded events, play
// recorded navigations against the relay's own connection and watch what
// the relay sends.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// checkLeaks fails t if goroutines started during the test outlive it and
// its cleanups. Call it first, so its check runs last.
func checkLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// waitFor bounds every wait of the tests; nothing they wait for takes
// anywhere near as long unless it is broken.
const waitFor = 30 * time.Second

// fakeConfig chooses what the fake browser pretends to be.
type fakeConfig struct {
	// lightpanda serves what `lightpanda serve` serves: a websocket only
	// at "/", no /json/new, /json/activate or /json/close, an empty
	// /json/list, and no browser-level Fetch.
	lightpanda bool
	// rejectFetch makes a Chromium-like browser refuse browser-level
	// Fetch.enable, as one without the domain would.
	rejectFetch bool
	// silent lists methods of the relay's own commands that the fake
	// receives (and acts on) but never answers, as a hung browser would.
	silent map[string]bool
	// listener, when set, is where the fake serves instead of a port of
	// its own choosing.
	listener net.Listener
	// commandLine is what Browser.getBrowserCommandLine answers; nil
	// answers the error of a Chromium started without --enable-automation.
	commandLine []string
}

// fakeBrowser is a CDP browser on an httptest.Server.
type fakeBrowser struct {
	t    *testing.T
	cfg  fakeConfig
	srv  *httptest.Server
	addr string // host:port, as Chrome writes it into its URLs

	fetch      *recording // the net connection's transcript
	pagesRec   *recording // the pages connection's transcript
	httpMeta   map[string]string
	httpLines  []recordedHTTP
	recordedID string // of /devtools/browser/ID in the recording
	upgrader   websocket.Upgrader

	mu        sync.Mutex
	browserID string                     // guarded by mu; of /devtools/browser/ID, changed by restart
	quiet     bool                       // guarded by mu; connections accepted from now on answer nothing by themselves
	replaying *recording                 // guarded by mu; the next connection accepted answers from it
	hits      []httpHit                  // guarded by mu
	conns     []*fakeConn                // guarded by mu
	returned  map[*fakeConn]bool         // guarded by mu; handed to a test already
	targets   map[string]json.RawMessage // guarded by mu; targetInfo by id, as announced
	nextJob   int                        // guarded by mu
	changed   chan struct{}              // guarded by mu; closed and replaced when conns or hits change
	wg        sync.WaitGroup             // connection readers
}

// httpHit is an HTTP request the fake got.
type httpHit struct {
	Method, Path, Query, Host string
	Upgrade                   bool
}

func newFakeBrowser(t *testing.T, cfg fakeConfig) *fakeBrowser {
	t.Helper()
	fb := &fakeBrowser{
		t:        t,
		cfg:      cfg,
		fetch:    loadRecording(t, "chromium-fetch.jsonl"),
		pagesRec: loadRecording(t, "chromium-pages.jsonl"),
		returned: map[*fakeConn]bool{},
		targets:  map[string]json.RawMessage{},
		nextJob:  1000,
		changed:  make(chan struct{}),
	}
	fb.httpMeta, fb.httpLines = loadHTTP(t)
	fb.upgrader = websocket.Upgrader{CheckOrigin: fb.checkOrigin}
	fb.srv = httptest.NewUnstartedServer(http.HandlerFunc(fb.serve))
	if cfg.listener != nil {
		fb.srv.Listener.Close()
		fb.srv.Listener = cfg.listener
	}
	fb.addr = fb.srv.Listener.Addr().String()
	var v struct{ WebSocketDebuggerURL string }
	json.Unmarshal([]byte(fb.answerFor(t, "GET", "/json/version").Body), &v)
	fb.recordedID = v.WebSocketDebuggerURL[strings.LastIndexByte(v.WebSocketDebuggerURL, '/')+1:]
	fb.browserID = fb.recordedID
	fb.srv.Start() // a relay may be asking already
	t.Cleanup(fb.close)
	return fb
}

// close stops the server and ends every connection.
func (fb *fakeBrowser) close() {
	fb.srv.Close()
	fb.mu.Lock()
	conns := fb.conns
	fb.mu.Unlock()
	for _, c := range conns {
		c.c.Close()
	}
	fb.wg.Wait()
}

// url returns the fake's HTTP endpoint.
func (fb *fakeBrowser) url() string { return "http://" + fb.addr }

// wsURL returns the URL of the browser endpoint.
func (fb *fakeBrowser) wsURL() string {
	if fb.cfg.lightpanda {
		return "ws://" + fb.addr + "/"
	}
	return "ws://" + fb.addr + "/devtools/browser/" + fb.id()
}

// id returns the browser's id, as in /devtools/browser/ID.
func (fb *fakeBrowser) id() string {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.browserID
}

// restart gives the browser a new id, as a restarted Chromium on the same
// port has: its connections are gone, and so is its old browser endpoint.
func (fb *fakeBrowser) restart(id string) {
	fb.mu.Lock()
	fb.browserID = id
	conns := fb.conns
	fb.mu.Unlock()
	for _, c := range conns {
		c.drop()
	}
}

func (fb *fakeBrowser) broadcast() {
	close(fb.changed)
	fb.changed = make(chan struct{})
}

// answerFor returns the last recorded answer to method path.
func (fb *fakeBrowser) answerFor(t testing.TB, method, path string) recordedHTTP {
	var found *recordedHTTP
	for i, l := range fb.httpLines {
		if l.Method == method && l.Path == path {
			found = &fb.httpLines[i]
		}
	}
	if found == nil {
		// Errorf, not Fatalf: the fake's handlers call this too.
		t.Errorf("nothing recorded for %s %s", method, path)
		return recordedHTTP{Status: http.StatusInternalServerError}
	}
	return *found
}

// served is a recorded body as the fake serves it: Chromium writes its own
// address, as the client reached it, into its URLs.
func (fb *fakeBrowser) served(body, host string) string {
	body = strings.ReplaceAll(body, fb.recordedID, fb.id())
	return strings.ReplaceAll(body, fb.httpMeta["browser"], host)
}

// hostAllowed is Chromium's check of the Host header (Lightpanda's is
// stricter: IP literals only).
func (fb *fakeBrowser) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if _, err := netip.ParseAddr(host); err == nil || hostport == "" {
		return true
	}
	if fb.cfg.lightpanda {
		return false
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

func (fb *fakeBrowser) checkOrigin(r *http.Request) bool {
	origin, ok := r.Header["Origin"]
	if !ok {
		return true
	}
	return !fb.cfg.lightpanda && len(origin) == 1 && origin[0] == "http://"+r.Host
}

func (fb *fakeBrowser) serve(w http.ResponseWriter, r *http.Request) {
	upgrade := websocket.IsWebSocketUpgrade(r)
	fb.mu.Lock()
	fb.hits = append(fb.hits, httpHit{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, Upgrade: upgrade})
	fb.broadcast()
	fb.mu.Unlock()
	if !fb.hostAllowed(r.Host) {
		if fb.cfg.lightpanda {
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
	if fb.cfg.lightpanda {
		fb.serveLightpanda(w, r)
		return
	}
	answer := func(l recordedHTTP, body string) {
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

func (fb *fakeBrowser) serveLightpanda(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Connection", "close")
	switch r.URL.Path {
	case "/json/version", "/json/version/":
		fmt.Fprintf(w, `{"Browser": "Lightpanda/1.0", "Protocol-Version": "1.3", "User-Agent": "Lightpanda/1.0", "Lightpanda-Version": "dev", "webSocketDebuggerUrl": "ws://%s/"}`, fb.addr)
	case "/json", "/json/", "/json/list", "/json/list/":
		w.Write([]byte("[]"))
	case "/json/protocol":
		w.Write(fakeProtocol)
	default:
		http.NotFound(w, r)
	}
}

func (fb *fakeBrowser) serveWebsocket(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	ok := path == "/"
	if !fb.cfg.lightpanda {
		ok = path == "/devtools/browser/"+fb.id() || strings.HasPrefix(path, "/devtools/page/")
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	c, err := fb.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	fc := &fakeConn{fb: fb, c: c, path: path, arrived: make(chan struct{}), continued: map[string]time.Time{}, done: make(chan struct{})}
	fb.mu.Lock()
	fc.auto = !fb.quiet
	fc.replay, fb.replaying = fb.replaying, nil
	fb.mu.Unlock()
	c.SetPingHandler(func(data string) error {
		fc.mu.Lock()
		fc.pings++
		fc.mu.Unlock()
		return c.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	fb.mu.Lock()
	fb.conns = append(fb.conns, fc)
	fb.broadcast()
	fb.wg.Add(1)
	fb.mu.Unlock()
	go func() {
		defer fb.wg.Done()
		fc.read()
	}()
}

// await calls check until it reports true, each time something changes.
func (fb *fakeBrowser) await(t testing.TB, what string, check func() bool) {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		fb.mu.Lock()
		changed := fb.changed
		done := check()
		fb.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("fake browser: no %s within %v", what, waitFor)
		}
	}
}

// holder returns the next connection that enabled browser-level Fetch:
// the relay's own.
func (fb *fakeBrowser) holder(t testing.TB) *fakeConn {
	t.Helper()
	var got *fakeConn
	fb.await(t, "relay connection with Fetch enabled", func() bool {
		for _, c := range fb.conns {
			if c.holder && !fb.returned[c] && !c.ended_() {
				got, fb.returned[c] = c, true
				return true
			}
		}
		return false
	})
	return got
}

// accept returns the next connection relayed for a client.
func (fb *fakeBrowser) accept(t testing.TB) *fakeConn {
	t.Helper()
	var got *fakeConn
	fb.await(t, "relayed connection", func() bool {
		for _, c := range fb.conns {
			if !c.holder && !c.own && !fb.returned[c] {
				got, fb.returned[c] = c, true
				return true
			}
		}
		return false
	})
	return got
}

// connCount reports how many websockets the fake has accepted.
func (fb *fakeBrowser) connCount() int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return len(fb.conns)
}

// httpHits returns the HTTP requests the fake got.
func (fb *fakeBrowser) httpHits() []httpHit {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]httpHit(nil), fb.hits...)
}

// announce makes the fake know a target, as if it had been created.
func (fb *fakeBrowser) announce(id string, info json.RawMessage) {
	fb.mu.Lock()
	fb.targets[id] = info
	fb.mu.Unlock()
}

// newJob returns a fresh interception job number.
func (fb *fakeBrowser) newJob() int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	fb.nextJob++
	return fb.nextJob
}

// hush makes the connections accepted from now on answer nothing by
// themselves: a test that replays a client's transcript plays the
// browser's part itself.
func (fb *fakeBrowser) hush() {
	fb.mu.Lock()
	fb.quiet = true
	fb.mu.Unlock()
}
