package relay

// A fake CDP browser for the unit tests: an httptest.Server that answers
// /json/* and websockets the way Chromium 156 does, from transcripts
// recorded off a real one (testdata/chromium-*.jsonl, see record_test.go),
// or the way `lightpanda serve` does. Tests inject recorded events, play
// recorded navigations against the relay's own connection and watch what
// the relay sends.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
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

// recordedHTTP is one line of testdata/chromium-http.jsonl.
type recordedHTTP struct {
	Method      string `json:"method"`
	Path        string `json:"path"`
	Query       string `json:"query"`
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

// recordedMsg is one line of a websocket transcript.
type recordedMsg struct {
	T    float64         `json:"t"`    // ms after the recording started
	From string          `json:"from"` // "client" or "browser"
	Msg  json.RawMessage `json:"msg"`  // as it was on the wire

	m wireMsg // Msg, decoded
}

// wireMsg is what the fake reads of a CDP message, with encoding/json
// rather than the scanner under test.
type wireMsg struct {
	ID        *int64          `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
}

func decodeWire(data []byte) (wireMsg, bool) {
	var m wireMsg
	return m, json.Unmarshal(data, &m) == nil
}

// recording is a websocket transcript.
type recording struct {
	meta map[string]string
	msgs []recordedMsg
}

func readLines(t testing.TB, path string, line func(meta map[string]string, data []byte)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (record it with: go test -tags record -run TestRecord ./relay)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var meta map[string]string
	for sc.Scan() {
		if meta == nil {
			var m struct{ Meta map[string]string }
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Meta == nil {
				t.Fatalf("%s: first line is not the meta line", path)
			}
			meta = m.Meta
			continue
		}
		line(meta, sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func loadRecording(t testing.TB, name string) *recording {
	t.Helper()
	r := &recording{}
	readLines(t, "testdata/"+name, func(meta map[string]string, data []byte) {
		r.meta = meta
		var rm recordedMsg
		if err := json.Unmarshal(data, &rm); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ok bool
		if rm.m, ok = decodeWire(rm.Msg); !ok {
			t.Fatalf("%s: unreadable message %.100s", name, rm.Msg)
		}
		r.msgs = append(r.msgs, rm)
	})
	return r
}

func loadHTTP(t testing.TB) (meta map[string]string, lines []recordedHTTP) {
	t.Helper()
	readLines(t, "testdata/chromium-http.jsonl", func(m map[string]string, data []byte) {
		meta = m
		var l recordedHTTP
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	})
	return meta, lines
}

// reply returns the browser's recorded reply to the first command calling
// method for which match (nil: any) is true.
func (r *recording) reply(t testing.TB, method string, match func(params []byte) bool) []byte {
	t.Helper()
	for _, c := range r.msgs {
		if c.From != "client" || c.m.Method != method || c.m.ID == nil || match != nil && !match(c.m.Params) {
			continue
		}
		for _, b := range r.msgs {
			if b.From == "browser" && b.m.ID != nil && *b.m.ID == *c.m.ID && b.m.Method == "" {
				return b.Msg
			}
		}
	}
	// Errorf, not Fatalf: the fake's connection readers call this too.
	t.Errorf("no recorded reply to %s", method)
	return []byte(`{"id":0,"result":{}}`)
}

// replyIndex returns the index of the browser's reply to the first command
// calling method.
func (r *recording) replyIndex(t testing.TB, method string) int {
	t.Helper()
	var id *int64
	for i, m := range r.msgs {
		switch {
		case id == nil && m.From == "client" && m.m.Method == method:
			id = m.m.ID
		case id != nil && m.From == "browser" && m.m.ID != nil && *m.m.ID == *id:
			return i
		}
	}
	t.Fatalf("no recorded reply to %s", method)
	return 0
}

// find returns the browser messages calling method for which match is true.
func (r *recording) find(method string, match func(params []byte) bool) [][]byte {
	var out [][]byte
	for _, m := range r.msgs {
		if m.From == "browser" && m.m.Method == method && (match == nil || match(m.m.Params)) {
			out = append(out, m.Msg)
		}
	}
	return out
}

// pause is what the tests read of a Fetch.requestPaused event.
type pause struct {
	RequestID           string `json:"requestId"`
	FrameID             string `json:"frameId"`
	RedirectedRequestID string `json:"redirectedRequestId"`
	Request             struct {
		URL string `json:"url"`
	} `json:"request"`
	ResponseStatusCode  int    `json:"responseStatusCode"`
	ResponseErrorReason string `json:"responseErrorReason"`
	ResponseHeaders     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"responseHeaders"`
}

func (p pause) requestStage() bool { return p.ResponseStatusCode == 0 && p.ResponseErrorReason == "" }

func readPause(msg []byte) (pause, bool) {
	var m struct {
		Method string `json:"method"`
		Params pause  `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "Fetch.requestPaused" {
		return pause{}, false
	}
	return m.Params, true
}

// chain returns the Fetch.requestPaused events of the document request
// whose first hop's URL contains urlPart: every hop at both stages, in the
// order Chromium sent them.
func (r *recording) chain(t testing.TB, urlPart string) [][]byte {
	t.Helper()
	var job string
	var out [][]byte
	for _, m := range r.msgs {
		p, ok := readPause(m.Msg)
		if !ok || m.From != "browser" {
			continue
		}
		if job == "" && p.requestStage() && p.RedirectedRequestID == "" && strings.Contains(p.Request.URL, urlPart) {
			job = p.RequestID[:strings.LastIndexByte(p.RequestID, '.')+1]
		}
		if job != "" && strings.HasPrefix(p.RequestID, job) {
			out = append(out, m.Msg)
		}
	}
	if out == nil {
		t.Fatalf("no recorded document request for %q", urlPart)
	}
	return out
}

// targetInfo returns the recorded targetInfo of the first Target.targetCreated
// for which match is true.
func (r *recording) targetInfo(t testing.TB, match func(info targetInfo) bool) (targetInfo, []byte) {
	t.Helper()
	for _, msg := range r.find("Target.targetCreated", nil) {
		if info, raw, ok := readTargetInfo(msg); ok && match(info) {
			return info, raw
		}
	}
	t.Fatal("no recorded Target.targetCreated matches")
	return targetInfo{}, nil
}

type targetInfo struct {
	TargetID string `json:"targetId"`
	Type     string `json:"type"`
	URL      string `json:"url"`
}

func readTargetInfo(msg []byte) (targetInfo, json.RawMessage, bool) {
	var m struct {
		Params struct {
			TargetInfo json.RawMessage `json:"targetInfo"`
		} `json:"params"`
	}
	var info targetInfo
	if json.Unmarshal(msg, &m) != nil || json.Unmarshal(m.Params.TargetInfo, &info) != nil || info.TargetID == "" {
		return info, nil, false
	}
	return info, m.Params.TargetInfo, true
}

var leadingID = regexp.MustCompile(`^\{"id":-?[0-9]+`)

// withID gives a recorded reply the id of the command it now answers.
func withID(reply []byte, id int64) []byte {
	if !leadingID.Match(reply) {
		panic(fmt.Sprintf("recorded reply does not start with its id: %.60s", reply))
	}
	return leadingID.ReplaceAllLiteral(reply, []byte(`{"id":`+strconv.FormatInt(id, 10)))
}

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

// fakeConn is one websocket the fake accepted.
type fakeConn struct {
	fb     *fakeBrowser
	c      *websocket.Conn
	path   string
	auto   bool       // set once: answers the relay's own commands as Chromium did
	replay *recording // set once: answers from this recording, the one of the relay's pages connection
	wmu    sync.Mutex // serialises writes

	mu        sync.Mutex
	holder    bool                 // guarded by fb.mu: sent browser-level Fetch.enable
	fetchOn   bool                 // guarded by fb.mu: its browser-level Fetch is on (not disabled since)
	onEpoch   int                  // guarded by fb.mu: how many times its browser-level Fetch was turned on
	own       bool                 // guarded by fb.mu: the relay's own (it discovers targets; clients here never do)
	pagesConn bool                 // guarded by fb.mu: auto-attaches to pages (the relay's pages connection)
	patterns  []string             // guarded by fb.mu: its browser-level Fetch patterns' URLs (Document, Request stage)
	sessions  map[string]*fakeSess // guarded by fb.mu: its page sessions, by session id
	msgs      []fakeMsg            // guarded by mu; everything received, in order
	nread     int                  // guarded by mu; msgs handed out by next
	arrived   chan struct{}        // guarded by mu; closed and replaced on each message
	continued map[string]time.Time // guarded by mu; Fetch.continueRequest (or failRequest) by requestId
	failed    map[string]string    // guarded by mu; Fetch.failRequest's errorReason by requestId
	answers   bool                 // guarded by mu; its Fetch patterns pause answers too
	watching  map[string]bool      // guarded by mu; requests continued with interceptResponse
	pings     int                  // guarded by mu
	closeErr  error                // set before done is closed
	done      chan struct{}        // closed when the reader ends
}

// fakeSess is a session the fake attached a connection to, on a page.
type fakeSess struct {
	id, target string
	seq        int  // attach order: newer sessions pause a request first
	fetch      bool // guarded by fb.mu: Fetch enabled for documents
	network    bool // guarded by fb.mu: Network enabled
	ran        bool // guarded by fb.mu: told to run (Runtime.runIfWaitingForDebugger)
}

// fakeMsg is a message the fake received.
type fakeMsg struct {
	typ  int
	data []byte
	at   time.Time
	m    wireMsg
}

func (fc *fakeConn) read() {
	defer close(fc.done)
	for {
		typ, data, err := fc.c.ReadMessage()
		if err != nil {
			fc.closeErr = err
			fc.mu.Lock()
			close(fc.arrived)
			fc.arrived = make(chan struct{})
			fc.mu.Unlock()
			return
		}
		msg := fakeMsg{typ: typ, data: data, at: time.Now()}
		msg.m, _ = decodeWire(data)
		fc.mu.Lock()
		fc.msgs = append(fc.msgs, msg)
		fc.mu.Unlock()
		fc.answer(msg)
		fc.mu.Lock()
		close(fc.arrived)
		fc.arrived = make(chan struct{})
		fc.mu.Unlock()
	}
}

// answer answers the commands the relay sends for itself, as Chromium did.
func (fc *fakeConn) answer(msg fakeMsg) {
	m := msg.m
	if !fc.auto || m.ID == nil {
		return
	}
	if fc.replay != nil {
		fc.answerReplay(msg)
		return
	}
	fb := fc.fb
	id := *m.ID
	send := fc.send
	if fb.cfg.silent[m.Method] {
		send = func([]byte) error { return nil }
	}
	if m.SessionID != "" {
		fb.mu.Lock()
		pages := fc.pagesConn
		ss := fc.sessions[m.SessionID]
		fb.mu.Unlock()
		if !pages {
			return // a client's session: the test answers
		}
		if ss == nil {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32001,"message":"Session with given id not found."},"sessionId":%q}`, id, m.SessionID))
			return
		}
		switch m.Method {
		case "Fetch.enable", "Network.enable", "Runtime.runIfWaitingForDebugger":
			fb.mu.Lock()
			switch m.Method {
			case "Fetch.enable":
				ss.fetch = true
			case "Network.enable":
				ss.network = true
			default:
				ss.ran = true
			}
			fb.broadcast()
			fb.mu.Unlock()
		case "Fetch.continueRequest":
			fc.continuedNow(m.Params, msg.at)
		case "Fetch.failRequest":
			fc.failedNow(m.Params, msg.at)
		}
		send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, id, m.SessionID))
		return
	}
	switch m.Method {
	case "Target.setAutoAttach":
		fb.mu.Lock()
		fc.pagesConn = true
		var pages []json.RawMessage
		for _, info := range fb.targets {
			if t, _, ok := readTargetInfo(fmt.Appendf(nil, `{"params":{"targetInfo":%s}}`, info)); ok && t.Type == "page" {
				pages = append(pages, info)
			}
		}
		fb.broadcast()
		fb.mu.Unlock()
		for _, info := range pages {
			fc.attach(info, false)
		}
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	case "Target.getTargets":
		send(fmt.Appendf(nil, `{"id":%d,"result":{"targetInfos":[]}}`, id))
		return
	case "Browser.getBrowserCommandLine":
		if fb.cfg.commandLine == nil {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32000,"message":"Command line not returned because --enable-automation not set."}}`, id))
			return
		}
		args, _ := json.Marshal(fb.cfg.commandLine)
		send(fmt.Appendf(nil, `{"id":%d,"result":{"arguments":%s}}`, id, args))
		return
	case "Target.detachFromTarget":
		var p struct{ SessionID string }
		json.Unmarshal(m.Params, &p)
		fb.mu.Lock()
		delete(fc.sessions, p.SessionID)
		fb.broadcast()
		fb.mu.Unlock()
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.detachedFromTarget","params":{"sessionId":%q}}`, p.SessionID))
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	case "Target.attachToTarget":
		var p struct{ TargetID string }
		json.Unmarshal(m.Params, &p)
		fb.mu.Lock()
		info, ok := fb.targets[p.TargetID]
		fb.mu.Unlock()
		if !ok {
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32602,"message":"No target with given id found"}}`, id))
			return
		}
		fb.mu.Lock()
		if fc.sessions == nil {
			fc.sessions = map[string]*fakeSess{}
		}
		fb.nextJob++
		ss := &fakeSess{id: fmt.Sprintf("RELAY-%s-%d", p.TargetID, fb.nextJob), target: p.TargetID, seq: fb.nextJob, ran: true}
		fc.sessions[ss.id] = ss
		fb.broadcast()
		fb.mu.Unlock()
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":%q,"targetInfo":%s,"waitingForDebugger":false}}`, ss.id, info))
		send(fmt.Appendf(nil, `{"id":%d,"result":{"sessionId":%q}}`, id, ss.id))
		return
	case "Target.setDiscoverTargets":
		fb.mu.Lock()
		fc.own = true
		fb.mu.Unlock()
	}
	switch m.Method {
	case "Target.setDiscoverTargets":
		// Chromium announces the targets it has, then replies.
		for _, rm := range fb.fetch.msgs {
			if rm.From == "browser" && rm.m.ID != nil {
				break
			}
			if rm.From == "browser" {
				fc.send(rm.Msg)
			}
		}
		send(withID(fb.fetch.reply(fb.t, m.Method, nil), id))
	case "Fetch.enable":
		switch {
		case fb.cfg.lightpanda:
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-31998,"message":"BrowserContextNotLoaded"}}`, id))
		case fb.cfg.rejectFetch:
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32601,"message":"'Fetch.enable' wasn't found"}}`, id))
		default:
			// Marked before the reply, so the relay's Start cannot return
			// before the fake knows which connection is the relay's own.
			var p struct {
				Patterns []struct{ URLPattern, RequestStage string }
			}
			json.Unmarshal(m.Params, &p)
			fc.mu.Lock()
			fc.answers = slices.ContainsFunc(p.Patterns, func(pt struct{ URLPattern, RequestStage string }) bool { return pt.RequestStage == "Response" })
			fc.mu.Unlock()
			fb.mu.Lock()
			fc.holder = true
			if !fc.fetchOn {
				fc.fetchOn = true
				fc.onEpoch++
			}
			fc.patterns = fc.patterns[:0]
			for _, pt := range p.Patterns {
				fc.patterns = append(fc.patterns, pt.URLPattern)
			}
			fb.broadcast()
			fb.mu.Unlock()
			send(withID(fb.fetch.reply(fb.t, m.Method, nil), id))
		}
	case "Fetch.disable":
		fb.mu.Lock()
		fc.fetchOn = false
		fc.patterns = nil
		fb.broadcast()
		fb.mu.Unlock()
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
	case "Fetch.continueRequest":
		send(withID(fb.fetch.reply(fb.t, m.Method, nil), id))
		fc.continuedNow(m.Params, msg.at)
	case "Fetch.failRequest":
		send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		fc.failedNow(m.Params, msg.at)
	case "Target.closeTarget", "Target.disposeBrowserContext":
		// As Chromium answers: a target or context whose id starts with
		// GONE is not there (any more).
		var p struct{ TargetID, BrowserContextID string }
		json.Unmarshal(m.Params, &p)
		switch {
		case strings.HasPrefix(p.TargetID, "GONE"):
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32602,"message":"No target with given id found"}}`, id))
		case strings.HasPrefix(p.BrowserContextID, "GONE"):
			send(fmt.Appendf(nil, `{"id":%d,"error":{"code":-32000,"message":"Failed to find context with id %s"}}`, id, p.BrowserContextID))
		case m.Method == "Target.closeTarget":
			send(fmt.Appendf(nil, `{"id":%d,"result":{"success":true}}`, id))
		default:
			send(fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		}
	case "Target.getTargetInfo":
		var p struct{ TargetID string }
		json.Unmarshal(m.Params, &p)
		fb.mu.Lock()
		info, ok := fb.targets[p.TargetID]
		fb.mu.Unlock()
		if ok {
			send(fmt.Appendf(nil, `{"id":%d,"result":{"targetInfo":%s}}`, id, info))
			return
		}
		send(withID(fb.fetch.reply(fb.t, m.Method, nil), id)) // No target with given id found
	}
}

// replayNext makes the next connection accepted answer from rec.
func (fb *fakeBrowser) replayNext(rec *recording) {
	fb.mu.Lock()
	fb.replaying = rec
	fb.mu.Unlock()
}

// answerReplay answers a command from fc.replay: discovery and
// auto-attaching with the events recorded before their replies, and every
// command with the reply recorded (a session's with an empty result).
func (fc *fakeConn) answerReplay(msg fakeMsg) {
	m := msg.m
	rec := fc.replay
	id := *m.ID
	if m.SessionID != "" {
		if m.Method == "Fetch.continueRequest" {
			fc.continuedNow(m.Params, msg.at)
		}
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, id, m.SessionID))
		return
	}
	switch m.Method {
	case "Target.setDiscoverTargets", "Target.setAutoAttach":
		fb := fc.fb
		fb.mu.Lock()
		fc.own = true
		fc.pagesConn = fc.pagesConn || m.Method == "Target.setAutoAttach"
		fb.broadcast()
		fb.mu.Unlock()
		from := 0
		for i, rm := range rec.msgs {
			if rm.From == "client" && rm.m.Method == m.Method {
				from = i
				break
			}
		}
		for _, rm := range rec.msgs[from+1:] {
			if rm.From == "browser" && rm.m.ID != nil {
				break
			}
			if rm.From == "browser" {
				fc.send(rm.Msg)
			}
		}
	}
	if m.Method == "Target.detachFromTarget" {
		fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"result":{}}`, id))
		return
	}
	fc.write(websocket.TextMessage, withID(rec.reply(fc.fb.t, m.Method, nil), id))
}

// continuedNow records a Fetch.continueRequest received at at.
func (fc *fakeConn) continuedNow(params []byte, at time.Time) {
	var p struct {
		RequestID         string
		InterceptResponse bool
	}
	json.Unmarshal(params, &p)
	fc.mu.Lock()
	fc.continued[p.RequestID] = at
	if p.InterceptResponse {
		if fc.watching == nil {
			fc.watching = map[string]bool{}
		}
		fc.watching[p.RequestID] = true
	}
	fc.mu.Unlock()
}

// failedNow records a Fetch.failRequest received at at: the pause is
// over (continuedAt returns), the request failed with its errorReason.
func (fc *fakeConn) failedNow(params []byte, at time.Time) {
	var p struct{ RequestID, ErrorReason string }
	json.Unmarshal(params, &p)
	fc.mu.Lock()
	if fc.failed == nil {
		fc.failed = map[string]string{}
	}
	fc.failed[p.RequestID] = p.ErrorReason
	fc.continued[p.RequestID] = at
	fc.mu.Unlock()
}

// failedWith returns the errorReason requestID was failed with, "" when
// it was not.
func (fc *fakeConn) failedWith(requestID string) string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.failed[requestID]
}

// attach attaches fc, the relay's pages connection, to a page, as
// Chromium's auto-attach does: waiting for the debugger when the page is
// new.
func (fc *fakeConn) attach(info json.RawMessage, waiting bool) {
	fb := fc.fb
	t, _, ok := readTargetInfo(fmt.Appendf(nil, `{"params":{"targetInfo":%s}}`, info))
	if !ok || t.Type != "page" {
		return
	}
	fb.mu.Lock()
	if fc.sessions == nil {
		fc.sessions = map[string]*fakeSess{}
	}
	if fc.sessionLocked(t.TargetID) != nil || fc.replay != nil {
		fb.mu.Unlock()
		return
	}
	fb.nextJob++
	ss := &fakeSess{id: fmt.Sprintf("RELAY-%s-%d", t.TargetID, fb.nextJob), target: t.TargetID, seq: fb.nextJob, ran: !waiting}
	fc.sessions[ss.id] = ss
	fb.broadcast()
	fb.mu.Unlock()
	fc.write(websocket.TextMessage, fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":%q,"targetInfo":%s,"waitingForDebugger":%v}}`, ss.id, info, waiting))
}

// send writes a text message to the relay; the fake learns the targets it
// announces, and attaches the relay's pages connection to each new page.
func (fc *fakeConn) send(data []byte) error {
	var created json.RawMessage
	if m, ok := decodeWire(data); ok && (m.Method == "Target.targetCreated" || m.Method == "Target.targetInfoChanged") {
		if info, raw, ok := readTargetInfo(data); ok {
			fc.fb.announce(info.TargetID, raw)
			if m.Method == "Target.targetCreated" {
				created = raw
			}
		}
	}
	err := fc.write(websocket.TextMessage, data)
	if created != nil {
		for _, pc := range fc.fb.pagesConns() {
			pc.attach(created, true)
		}
	}
	return err
}

// pagesConns returns the live connections that auto-attach to pages.
func (fb *fakeBrowser) pagesConns() []*fakeConn {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out []*fakeConn
	for _, c := range fb.conns {
		if c.pagesConn && !c.ended_() {
			out = append(out, c)
		}
	}
	return out
}

func (fc *fakeConn) write(typ int, data []byte) error {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.c.SetWriteDeadline(time.Now().Add(waitFor))
	return fc.c.WriteMessage(typ, data)
}

// closeWith sends a close frame with code and text.
func (fc *fakeConn) closeWith(code int, text string) error {
	return fc.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}

// drop ends the connection without a close frame, as a crashed browser does.
func (fc *fakeConn) drop() { fc.c.Close() }

// next returns the next message the relay sent on this connection, in order.
func (fc *fakeConn) next(t testing.TB) fakeMsg {
	t.Helper()
	deadline := time.After(waitFor)
	for {
		fc.mu.Lock()
		if fc.nread < len(fc.msgs) {
			m := fc.msgs[fc.nread]
			fc.nread++
			fc.mu.Unlock()
			return m
		}
		arrived := fc.arrived
		fc.mu.Unlock()
		select {
		case <-arrived:
		case <-fc.done:
			fc.mu.Lock()
			more := fc.nread < len(fc.msgs)
			fc.mu.Unlock()
			if !more {
				t.Fatalf("fake browser: connection ended (%v) while waiting for a message", fc.closeErr)
			}
		case <-deadline:
			t.Fatalf("fake browser: no message from the relay within %v", waitFor)
		}
	}
}

// received returns every message received so far.
func (fc *fakeConn) received() []fakeMsg {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return append([]fakeMsg(nil), fc.msgs...)
}

// ended waits for the connection to end and returns how it ended.
func (fc *fakeConn) ended(t testing.TB) error {
	t.Helper()
	select {
	case <-fc.done:
		return fc.closeErr
	case <-time.After(waitFor):
		t.Fatalf("fake browser: connection still open after %v", waitFor)
		return nil
	}
}

// ended reports whether the connection has ended.
func (fc *fakeConn) ended_() bool {
	select {
	case <-fc.done:
		return true
	default:
		return false
	}
}

// pingCount reports how many pings the fake has answered.
func (fc *fakeConn) pingCount() int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.pings
}

// continuedAt waits for the relay to continue requestID and returns when
// the fake got that command.
func (fc *fakeConn) continuedAt(requestID string) (time.Time, error) {
	deadline := time.After(waitFor)
	for {
		fc.mu.Lock()
		at, ok := fc.continued[requestID]
		arrived := fc.arrived
		fc.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-arrived:
		case <-fc.done:
			return time.Time{}, fmt.Errorf("connection ended before %s was continued", requestID)
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s not continued within %v", requestID, waitFor)
		}
	}
}

// hopTimes is one paused request of a played navigation: when the fake
// paused it and when the relay let it go.
type hopTimes struct {
	requestID string
	paused    time.Time
	continued time.Time
	pauses    int    // how many interceptors paused it (navigate)
	failed    string // the errorReason it was failed with, "" when let go (navigate)
}

// play replays a recorded chain of paused requests the way Chromium
// drives it: each pause is sent once the one before it was continued.
// The chain gets a fresh interception job, so a recording can be played
// many times.
func (fc *fakeConn) play(chain [][]byte) ([]hopTimes, error) {
	job := fc.fb.newJob()
	var out []hopTimes
	for _, msg := range chain {
		msg = renumberJob(msg, job)
		p, _ := readPause(msg)
		if !p.requestStage() && !fc.pausesAnswer(p.RequestID) {
			continue // as Chromium: an answer pauses only where it was asked for
		}
		sent := time.Now()
		if err := fc.send(msg); err != nil {
			return out, err
		}
		at, err := fc.continuedAt(p.RequestID)
		if err != nil {
			return out, err
		}
		// A Response-stage pause reuses the requestId of its Request stage.
		fc.mu.Lock()
		delete(fc.continued, p.RequestID)
		fc.mu.Unlock()
		out = append(out, hopTimes{requestID: p.RequestID, paused: sent, continued: at})
	}
	return out, nil
}

// pausesAnswer reports whether the answer to requestID pauses at fc: its
// patterns ask for answers, or it continued the request asking for its
// answer (interceptResponse).
func (fc *fakeConn) pausesAnswer(requestID string) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.answers || fc.watching[requestID]
}

// holders returns the live connections that enabled browser-level Fetch,
// in the order they did: the order Chromium passes a request along.
func (fb *fakeBrowser) holders() []*fakeConn {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out []*fakeConn
	for _, c := range fb.conns {
		if c.fetchOn && !c.ended_() {
			out = append(out, c)
		}
	}
	return out
}

// playAll replays a recorded chain the way Chromium passes each paused
// request from one interceptor to the next: a Request-stage hop pauses at
// every live holder in turn (a Response-stage hop in the reverse order),
// each with an interception id of its own, and goes on once the last one
// continued it. A holder that ends while it holds a hop hands it to the
// next, as Chromium does. It returns, per hop, when the first holder got it
// and when the last one let it go.
func (fb *fakeBrowser) playAll(t testing.TB, chain [][]byte) []hopTimes {
	t.Helper()
	var out []hopTimes
	jobs := map[*fakeConn]int{} // each holder's interception job of the request under way
	for _, msg := range chain {
		p, _ := readPause(msg)
		hs := fb.holders()
		if !p.requestStage() {
			slices.Reverse(hs)
		}
		var ht hopTimes
		for i, hc := range hs {
			job, ok := jobs[hc]
			if p.requestStage() || !ok {
				job = fb.newJob()
				jobs[hc] = job
			}
			m := renumberJob(msg, job)
			mp, _ := readPause(m)
			if !p.requestStage() && !hc.pausesAnswer(mp.RequestID) {
				continue // as Chromium: an answer pauses only where it was asked for
			}
			sent := time.Now()
			if err := hc.send(m); err != nil {
				continue // gone already: the next one gets it
			}
			at, err := hc.continuedAt(mp.RequestID)
			if err != nil {
				continue // ended while holding: the next one gets it
			}
			if i == 0 || ht.paused.IsZero() {
				ht.paused, ht.requestID = sent, mp.RequestID
			}
			ht.continued = at
		}
		out = append(out, ht)
	}
	return out
}

func (fc *fakeConn) mustPlay(t testing.TB, chain [][]byte) []hopTimes {
	t.Helper()
	hops, err := fc.play(chain)
	if err != nil {
		t.Fatal(err)
	}
	return hops
}

var jobID = regexp.MustCompile(`"interception-job-[0-9]+\.`)

// renumberJob moves every interception id of a recorded pause to job.
func renumberJob(msg []byte, job int) []byte {
	return jobID.ReplaceAll(msg, []byte(`"interception-job-`+strconv.Itoa(job)+`.`))
}

// equalMsg explains how got differs from want, or returns "".
func equalMsg(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	if len(got) != len(want) {
		return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d: got %.60q, want %.60q", i, got[i:], want[i:])
		}
	}
	return ""
}

// pages returns the relay's pages connection: the next live one that
// auto-attached to pages.
func (fb *fakeBrowser) pages(t testing.TB) *fakeConn {
	t.Helper()
	var got *fakeConn
	fb.await(t, "relay connection attached to pages", func() bool {
		for _, c := range fb.conns {
			if c.pagesConn && !fb.returned[c] && !c.ended_() {
				got, fb.returned[c] = c, true
				return true
			}
		}
		return false
	})
	return got
}

// session returns fc's session on page target (the armed one, if any),
// nil when it has none.
func (fc *fakeConn) session(target string) *fakeSess {
	fc.fb.mu.Lock()
	defer fc.fb.mu.Unlock()
	return fc.sessionLocked(target)
}

// sessionLocked is session. Callers hold fb.mu.
func (fc *fakeConn) sessionLocked(target string) *fakeSess {
	var got *fakeSess
	for _, ss := range fc.sessions {
		if ss.target == target && (got == nil || ss.fetch && !got.fetch) {
			got = ss
		}
	}
	return got
}

// armed waits until the relay enabled Fetch in fc's session on
// target.
func (fb *fakeBrowser) armed(t testing.TB, fc *fakeConn, target string) {
	t.Helper()
	fb.await(t, "the relay's interception on page "+target, func() bool {
		ss := fc.sessionLocked(target)
		return ss != nil && ss.fetch && !fc.ended_()
	})
}

// matchPattern reports whether a Fetch urlPattern matches url: * is any
// run of characters, ? any one, and a backslash escapes the next.
func matchPattern(pattern, url string) bool {
	if pattern == "" {
		return true
	}
	var match func(p, s string) bool
	match = func(p, s string) bool {
		for len(p) > 0 {
			switch p[0] {
			case '*':
				for i := len(s); i >= 0; i-- {
					if match(p[1:], s[i:]) {
						return true
					}
				}
				return false
			case '?':
				if s == "" {
					return false
				}
				p, s = p[1:], s[1:]
				continue
			case '\\':
				if len(p) > 1 {
					p = p[1:]
				}
			}
			if s == "" || s[0] != p[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
		return s == ""
	}
	return match(pattern, url)
}

// interceptor is one place Chromium pauses a request at: a session of a
// connection, or a connection at the browser level.
type interceptor struct {
	fc      *fakeConn
	session string // "" at the browser level
	network bool   // the session has Network enabled
	rank    int    // its place in Chromium's order: lower pauses first
}

// interceptors returns where a document request of frame to url pauses,
// in Chromium's order: the page's sessions with Fetch on, newest first,
// then the browser-level interceptors whose patterns match, in the order
// they enabled Fetch. As in Chromium, a browser-level interceptor is on a
// request's way only if its Fetch was on when the request started (on,
// from fetchOnNow), and stayed on; its patterns count as they are now.
func (fb *fakeBrowser) interceptors(frame, url string, on map[*fakeConn]int) []interceptor {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var sess []*fakeSess
	owner := map[*fakeSess]*fakeConn{}
	for _, c := range fb.conns {
		if c.ended_() {
			continue
		}
		for _, ss := range c.sessions {
			if ss.target == frame && ss.fetch {
				sess = append(sess, ss)
				owner[ss] = c
			}
		}
	}
	slices.SortFunc(sess, func(a, b *fakeSess) int { return b.seq - a.seq })
	var out []interceptor
	for _, ss := range sess {
		out = append(out, interceptor{fc: owner[ss], session: ss.id, network: ss.network, rank: -ss.seq})
	}
	for i, c := range fb.conns {
		if !c.fetchOn || on[c] != c.onEpoch || c.ended_() {
			continue
		}
		if slices.ContainsFunc(c.patterns, func(p string) bool { return matchPattern(p, url) }) {
			out = append(out, interceptor{fc: c, rank: i})
		}
	}
	return out
}

// nextInterceptor returns the interceptor a request of frame to url goes
// to after the one of rank after (math.MinInt: the first), as things are
// now: a pattern set changed meanwhile counts.
func (fb *fakeBrowser) nextInterceptor(frame, url string, after int, on map[*fakeConn]int) (interceptor, bool) {
	for _, ic := range fb.interceptors(frame, url, on) {
		if ic.rank > after {
			return ic, true
		}
	}
	return interceptor{}, false
}

// fetchOnNow returns the connections whose browser-level Fetch is on, as
// a request that starts now sees them.
func (fb *fakeBrowser) fetchOnNow() map[*fakeConn]int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	on := map[*fakeConn]int{}
	for _, c := range fb.conns {
		if c.fetchOn {
			on[c] = c.onEpoch
		}
	}
	return on
}

// networkSessions returns the live sessions with Network on for page frame.
func (fb *fakeBrowser) networkSessions(frame string) []interceptor {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out []interceptor
	for _, c := range fb.conns {
		for _, ss := range c.sessions {
			if ss.target == frame && ss.network && !c.ended_() {
				out = append(out, interceptor{fc: c, session: ss.id, network: true})
			}
		}
	}
	return out
}

// mono is the fake browser's monotonic clock, in seconds, as its Network
// events stamp them.
func (fb *fakeBrowser) mono(at time.Time) float64 {
	return 1000 + at.Sub(fakeEpoch).Seconds()
}

var fakeEpoch = time.Now()

// asPause rewrites a recorded browser-level pause for ic: its own
// interception job, and for a session its sessionId and the request's
// networkId.
func asPause(msg []byte, job int, ic interceptor, networkID string) []byte {
	msg = renumberJob(msg, job)
	if ic.session == "" {
		return msg
	}
	var m map[string]json.RawMessage
	json.Unmarshal(msg, &m)
	var params map[string]json.RawMessage
	json.Unmarshal(m["params"], &params)
	params["networkId"], _ = json.Marshal(networkID)
	m["params"], _ = json.Marshal(params)
	m["sessionId"], _ = json.Marshal(ic.session)
	out, _ := json.Marshal(m)
	return out
}

// navigate plays a recorded chain of a document request the way Chromium
// drives it through every interceptor of the browser (fb.interceptors): a
// Request-stage hop pauses at each in turn, each with an interception id
// of its own, and goes on once the last one let it go; one that ends while
// holding it hands it to the next. A Response-stage hop pauses, in the
// reverse order, only at the browser-level interceptors that asked for it.
// Sessions with Network on get the request's Network events: that it is
// being sent, and how each hop was answered (timed as it left). It
// returns, per Request-stage hop, when the first interceptor got it and
// when it left.
func (fb *fakeBrowser) navigate(t testing.TB, chain [][]byte) []hopTimes {
	t.Helper()
	networkID := fmt.Sprintf("NET-%d", fb.newJob())
	var out []hopTimes
	var frame string
	var sent time.Time
	answered := true
	jobs := map[*fakeConn]int{} // each browser-level interceptor's job of the hop under way
	on := fb.fetchOnNow()
	for i, msg := range chain {
		p, _ := readPause(msg)
		frame = p.FrameID
		if p.requestStage() {
			if !answered {
				fb.networkEnd(frame, networkID, pause{ResponseStatusCode: 200}, sent, false)
			}
			var ht hopTimes
			for at := math.MinInt; ; {
				ic, ok := fb.nextInterceptor(frame, p.Request.URL, at, on)
				if !ok {
					break
				}
				at = ic.rank
				job := fb.newJob()
				if ic.session == "" {
					jobs[ic.fc] = job
				}
				m := asPause(msg, job, ic, networkID)
				mp, _ := readPause(m)
				at := time.Now()
				if err := ic.fc.send(m); err != nil {
					continue // gone already: the next one gets it
				}
				cont, err := ic.fc.continuedAt(mp.RequestID)
				if err != nil {
					continue // ended while holding: the next one gets it
				}
				ic.fc.mu.Lock()
				delete(ic.fc.continued, mp.RequestID)
				ic.fc.mu.Unlock()
				if ht.paused.IsZero() {
					ht.paused, ht.requestID = at, mp.RequestID
				}
				ht.continued = cont
				ht.pauses++
				if reason := ic.fc.failedWith(mp.RequestID); reason != "" {
					// Failed where it paused: no one else sees it, and the
					// navigation is over.
					ht.failed = reason
					fb.networkEnd(frame, networkID, pause{ResponseErrorReason: reason}, time.Now(), false)
					return append(out, ht)
				}
			}
			sent = time.Now()
			if ht.paused.IsZero() {
				ht.paused, ht.continued = sent, sent
			}
			for _, ns := range fb.networkSessions(frame) {
				ns.fc.send(fmt.Appendf(nil, `{"method":"Network.requestWillBeSentExtraInfo","params":{"requestId":%q,"associatedCookies":[],"headers":{}},"sessionId":%q}`, networkID, ns.session))
			}
			out = append(out, ht)
			answered = false
			continue
		}
		// The answer: paused where it was asked for, then told in Network
		// events.
		hs := fb.holders()
		slices.Reverse(hs)
		for _, hc := range hs {
			job, ok := jobs[hc]
			if !ok {
				continue
			}
			m := renumberJob(msg, job)
			mp, _ := readPause(m)
			if !hc.pausesAnswer(mp.RequestID) {
				continue
			}
			if err := hc.send(m); err != nil {
				continue
			}
			hc.continuedAt(mp.RequestID)
			hc.mu.Lock()
			delete(hc.continued, mp.RequestID)
			hc.mu.Unlock()
		}
		more := i+1 < len(chain)
		fb.networkEnd(frame, networkID, p, sent, more && redirects(p.ResponseStatusCode))
		answered = true
	}
	if !answered {
		fb.networkEnd(frame, networkID, pause{ResponseStatusCode: 200}, sent, false)
	}
	return out
}

// networkEnd tells the sessions with Network on for frame how a hop sent
// at sent was answered: p's status or failure, a redirect when redirect is
// set (the request goes on).
func (fb *fakeBrowser) networkEnd(frame, networkID string, p pause, sent time.Time, redirect bool) {
	now := fb.mono(time.Now())
	timing := fmt.Sprintf(`{"requestTime":%.6f,"sendStart":0,"sendEnd":0.1}`, fb.mono(sent))
	for _, ns := range fb.networkSessions(frame) {
		var ev string
		switch {
		case p.ResponseErrorReason != "":
			ev = fmt.Sprintf(`{"method":"Network.loadingFailed","params":{"requestId":%q,"timestamp":%.6f,"type":"Document","errorText":"net::ERR_%s","canceled":false},"sessionId":%q}`,
				networkID, now, netError(p.ResponseErrorReason), ns.session)
		case redirect:
			ev = fmt.Sprintf(`{"method":"Network.requestWillBeSent","params":{"requestId":%q,"loaderId":%q,"timestamp":%.6f,"wallTime":%.6f,"type":"Document","frameId":%q,"request":{"url":"http://next.test/"},"redirectResponse":{"status":%d,"headers":%s,"remoteIPAddress":"127.0.0.2","remotePort":42557,"timing":%s}},"sessionId":%q}`,
				networkID, networkID, now, now, frame, p.ResponseStatusCode, headersOf(p), timing, ns.session)
		default:
			ev = fmt.Sprintf(`{"method":"Network.responseReceived","params":{"requestId":%q,"loaderId":%q,"timestamp":%.6f,"type":"Document","response":{"status":%d,"headers":%s,"remoteIPAddress":"127.0.0.2","remotePort":42557,"timing":%s},"frameId":%q},"sessionId":%q}`,
				networkID, networkID, now, p.ResponseStatusCode, headersOf(p), timing, frame, ns.session)
		}
		ns.fc.send([]byte(ev))
	}
}

// headersOf returns a paused answer's headers as Network events carry them.
func headersOf(p pause) string {
	h := map[string]string{}
	for _, e := range p.ResponseHeaders {
		h[e.Name] = e.Value
	}
	b, _ := json.Marshal(h)
	return string(b)
}

// netError turns a Fetch ErrorReason into the net error Network events name.
func netError(reason string) string {
	switch reason {
	case "ConnectionRefused":
		return "CONNECTION_REFUSED"
	case "NameNotResolved":
		return "NAME_NOT_RESOLVED"
	case "TimedOut":
		return "TIMED_OUT"
	case "Aborted":
		return "ABORTED"
	case "BlockedByClient":
		return "BLOCKED_BY_CLIENT"
	}
	return "FAILED"
}

// navigateTo plays a navigation of page to url (one Request-stage hop,
// answered 200) on a goroutine of its own, and returns where its times
// arrive.
func (fb *fakeBrowser) navigateTo(t testing.TB, page, url string) <-chan []hopTimes {
	ch := make(chan []hopTimes, 1)
	job := fb.newJob()
	go func() {
		ch <- fb.navigate(t, [][]byte{pausedDoc(fmt.Sprintf("interception-job-%d.0", job), page, url)})
	}()
	return ch
}

// redirects reports whether a status sends the browser on to another URL.
func redirects(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}
