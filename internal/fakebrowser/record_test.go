//go:build record

package fakebrowser

// The recorder drives a real headless Chromium and writes, verbatim, what it
// sends into the transcripts the fake browser of the unit tests replays:
//
//	testdata/chromium-http.jsonl     /json/* answers
//	testdata/chromium-fetch.jsonl    the relay's net connection (browser-level Fetch, pausing
//	                                 every document, as it does while it holds alone)
//	testdata/chromium-pages.jsonl    the relay's pages connection: auto-attached to every page,
//	                                 Fetch and Network in each page's session
//	testdata/chromium-session.jsonl  a puppeteer-like client on a flat session
//	                                 of the same browser, with Page and Network enabled
//
// Rerun it after a Chromium upgrade (CHROMIUM overrides /usr/bin/chromium):
//
//	go test -tags record -run TestRecord -count=1 ./internal/fakebrowser
//
// The site is served on 127.0.0.2, which Chromium reaches for every *.test
// name, so a.test, b.test and c.test are hosts of their own.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

const recordSiteIP = "127.0.0.2"

// documentPattern is the pattern the relay's own connections enable Fetch
// with (hold/fetch_conn.go, unexported there): the recorder must send
// what they send, so change both together.
var documentPattern = []*fetch.RequestPattern{
	{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest},
}

// autoAttach is what the relay's pages connection sets its auto-attach to
// (hold/fetch/pages.go, unexported there).
var autoAttach = struct {
	AutoAttach             bool `json:"autoAttach"`
	WaitForDebuggerOnStart bool `json:"waitForDebuggerOnStart"`
	Flatten                bool `json:"flatten"`
}{true, true, true}

// networkParams is what the relay's pages connection enables Network with
// in a page session (hold/fetch/pages.go, unexported there).
var networkParams = struct {
	MaxTotalBufferSize    int64 `json:"maxTotalBufferSize"`
	MaxResourceBufferSize int64 `json:"maxResourceBufferSize"`
	MaxPostDataSize       int64 `json:"maxPostDataSize"`
}{}

var recordChromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--host-resolver-rules=MAP *.test " + recordSiteIP,
}

func TestRecord(t *testing.T) {
	site := startRecordSite(t)
	refused := closedPort(t)
	httpAddr, wsURL, version := startRecordChromium(t)
	meta := map[string]string{
		"browser":  httpAddr,
		"site":     site,
		"chromium": version,
		"recorder": "go test -tags record -run TestRecord -count=1 ./internal/fakebrowser",
	}
	_, sitePort, _ := net.SplitHostPort(site)
	url := func(host, path string) string { return "http://" + host + ":" + sitePort + path }

	recordHTTP(t, httpAddr, url("a.test", "/page?new"), meta)

	start := time.Now()
	fetchLog := newTranscript(t, "testdata/chromium-fetch.jsonl", meta, start)
	pagesLog := newTranscript(t, "testdata/chromium-pages.jsonl", meta, start)
	sessionLog := newTranscript(t, "testdata/chromium-session.jsonl", meta, start)

	// The relay's side: exactly what fetchConn sends, and the same choices,
	// releasing every request at once.
	rc := dialRecorded(t, wsURL, fetchLog)
	holder := &recordHolder{c: rc, pages: map[string]bool{}, notPages: map[string]bool{}}
	rc.onEvent = holder.event
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rc.mustCall(ctx, "", "Target.setDiscoverTargets", &target.SetDiscoverTargetsParams{Discover: true})
	rc.mustCall(ctx, "", "Fetch.enable", &fetch.EnableParams{Patterns: documentPattern})
	// The pages connection: exactly what fetchConn sends in that role,
	// arming every page and releasing every request at once.
	pc := dialRecorded(t, wsURL, pagesLog)
	pager := &recordPager{c: pc}
	pc.onEvent = pager.event
	pc.mustCall(ctx, "", "Target.setDiscoverTargets", &target.SetDiscoverTargetsParams{Discover: true})
	pc.mustCall(ctx, "", "Target.setAutoAttach", autoAttach)

	// A puppeteer-like client on a flat session.
	cc := dialRecorded(t, wsURL, sessionLog)
	loads := make(chan string, 16)
	attached := make(chan [2]string, 16) // session, target
	cc.onEvent = func(m *cdproto.Message) {
		switch m.Method {
		case "Page.loadEventFired":
			loads <- m.SessionID.String()
		case "Target.attachedToTarget":
			var ev target.EventAttachedToTarget
			if jsonv2.Unmarshal(m.Params, &ev) == nil && ev.TargetInfo != nil && ev.TargetInfo.Type == "page" {
				attached <- [2]string{string(ev.SessionID), string(ev.TargetInfo.TargetID)}
			}
		}
	}
	waitLoad := func() {
		t.Helper()
		select {
		case <-loads:
		case <-time.After(5 * time.Second):
		}
		// Let the stragglers in: OOPIF targets, loadingFinished, the relay's releases.
		time.Sleep(300 * time.Millisecond)
	}
	cc.mustCall(ctx, "", "Target.setDiscoverTargets", map[string]any{"discover": true})
	cc.mustCall(ctx, "", "Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": false, "flatten": true})
	var created struct {
		TargetID string `json:"targetId"`
	}
	json.Unmarshal(cc.mustCall(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}), &created)
	var session string
	for session == "" {
		select {
		case a := <-attached:
			if a[1] == created.TargetID {
				session = a[0]
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no Target.attachedToTarget for the new page")
		}
	}
	cc.mustCall(ctx, session, "Page.enable", nil)
	cc.mustCall(ctx, session, "Network.enable", nil)
	navigate := func(u string) {
		t.Helper()
		cc.mustCall(ctx, session, "Page.navigate", map[string]any{"url": u, "frameId": created.TargetID})
		waitLoad()
	}
	navigate(url("a.test", "/page?first"))
	cc.mustCall(ctx, session, "Page.reload", map[string]any{})
	waitLoad()
	navigate(url("a.test", "/frames"))
	navigate(url("a.test", "/r"))  // 302 to b.test
	navigate(url("a.test", "/r2")) // 302 within a.test
	navigate(url("a.test", "/busy"))
	navigate("http://c.test:" + refused + "/")
	// A page opened with its URL, then both closed before Chromium's
	// net-error auto-reload of the refused page kicks in.
	var popup struct {
		TargetID string `json:"targetId"`
	}
	json.Unmarshal(cc.mustCall(ctx, "", "Target.createTarget", map[string]any{"url": url("b.test", "/page?created")}), &popup)
	time.Sleep(700 * time.Millisecond) // its session has no Page events to wait for
	cc.mustCall(ctx, "", "Target.closeTarget", map[string]any{"targetId": created.TargetID})
	cc.mustCall(ctx, "", "Target.closeTarget", map[string]any{"targetId": popup.TargetID})
	time.Sleep(300 * time.Millisecond)
	holder.wait()
	pager.wait()
	cc.close()
	rc.close()
	pc.close()
	sessionLog.close()
	fetchLog.close()
	pagesLog.close()

	checkRecorded(t, "testdata/chromium-fetch.jsonl",
		`"method":"Fetch.requestPaused"`, `"responseStatusCode":429`, `"Retry-After"`,
		`"redirectedRequestId"`, `"responseErrorReason":"ConnectionRefused"`, `/child?same`, `/child?cross`,
		`"method":"Target.getTargetInfo"`, `"type":"page"`)
	checkRecorded(t, "testdata/chromium-pages.jsonl",
		`"method":"Target.attachedToTarget"`, `"waitingForDebugger":true`, `"method":"Fetch.requestPaused"`, `"networkId"`,
		`"method":"Network.requestWillBeSentExtraInfo"`, `"method":"Network.responseReceived"`, `"sendStart"`,
		`"redirectResponse"`, `"status":429`, `"method":"Network.loadingFailed"`, `/child?same`)
	checkRecorded(t, "testdata/chromium-session.jsonl",
		`"method":"Target.attachedToTarget"`, `"method":"Network.requestWillBeSent"`, `"redirectResponse"`,
		`"method":"Network.responseReceived"`, `"status":429`, `"method":"Network.loadingFailed"`,
		`net::ERR_CONNECTION_REFUSED`, `"method":"Page.reload"`)
}

// recordHolder makes the relay's choices on the recorded connection.
type recordHolder struct {
	c        *recordedConn
	mu       sync.Mutex
	pages    map[string]bool // guarded by Mu
	notPages map[string]bool // guarded by Mu
	wg       sync.WaitGroup
}

func (h *recordHolder) wait() { h.wg.Wait() }

// release lets a request go on; a page's document request of a host the
// relay books is let go asking for its answer, as the relay does.
func (h *recordHolder) release(id fetch.RequestID, answer bool) {
	p := &fetch.ContinueRequestParams{RequestID: id}
	if answer {
		p.InterceptResponse = &answer
	}
	h.c.send("", "Fetch.continueRequest", p, nil)
}

func (h *recordHolder) event(m *cdproto.Message) {
	switch m.Method {
	case "Target.targetCreated", "Target.targetInfoChanged":
		var ev target.EventTargetCreated
		if jsonv2.Unmarshal(m.Params, &ev) == nil && ev.TargetInfo != nil && ev.TargetInfo.Type == "page" {
			h.mu.Lock()
			h.pages[string(ev.TargetInfo.TargetID)] = true
			h.mu.Unlock()
		}
	case "Fetch.requestPaused":
		var ev fetch.EventRequestPaused
		if jsonv2.Unmarshal(m.Params, &ev) != nil || ev.Request == nil {
			return
		}
		if ev.ResponseStatusCode != 0 || ev.ResponseErrorReason != "" {
			h.release(ev.RequestID, false)
			return
		}
		host, ok := limiter.Key(ev.Request.URL)
		booked := ok && !limiter.Exempt(host)
		frame := string(ev.FrameID)
		h.mu.Lock()
		page, notPage := h.pages[frame], h.notPages[frame]
		h.mu.Unlock()
		if !booked || page || notPage {
			h.release(ev.RequestID, booked && page)
			return
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res, err := h.c.call(ctx, "", "Target.getTargetInfo", &target.GetTargetInfoParams{TargetID: target.ID(frame)})
			var info target.GetTargetInfoResult
			h.mu.Lock()
			page := err == nil && jsonv2.Unmarshal(res, &info) == nil && info.TargetInfo != nil && info.TargetInfo.Type == "page"
			if page {
				h.pages[frame] = true
			} else {
				h.notPages[frame] = true
			}
			h.mu.Unlock()
			h.release(ev.RequestID, page)
		}()
	}
}

// recordPager makes the relay's choices on the recorded pages connection:
// every page is a client's, armed before it runs, and every request goes
// on at once.
type recordPager struct {
	c  *recordedConn
	wg sync.WaitGroup
}

func (p *recordPager) wait() { p.wg.Wait() }

func (p *recordPager) event(m *cdproto.Message) {
	switch m.Method {
	case "Target.attachedToTarget":
		var ev target.EventAttachedToTarget
		if jsonv2.Unmarshal(m.Params, &ev) != nil || ev.TargetInfo == nil {
			return
		}
		session := string(ev.SessionID)
		if ev.TargetInfo.Type != "page" {
			if ev.WaitingForDebugger {
				p.c.send(session, "Runtime.runIfWaitingForDebugger", nil, nil)
			}
			p.c.send("", "Target.detachFromTarget", map[string]string{"sessionId": session}, nil)
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p.c.call(ctx, session, "Network.enable", networkParams)
			p.c.call(ctx, session, "Fetch.enable", &fetch.EnableParams{Patterns: documentPattern})
			if ev.WaitingForDebugger {
				p.c.send(session, "Runtime.runIfWaitingForDebugger", nil, nil)
			}
		}()
	case "Fetch.requestPaused":
		var ev fetch.EventRequestPaused
		if jsonv2.Unmarshal(m.Params, &ev) != nil {
			return
		}
		p.c.send(string(m.SessionID), "Fetch.continueRequest", &fetch.ContinueRequestParams{RequestID: ev.RequestID}, nil)
	}
}

// transcript writes one JSON line per message: {"t":ms,"from":side,"msg":…}
// with the message as it was on the wire.
type transcript struct {
	t     *testing.T
	mu    sync.Mutex
	f     *os.File
	w     *bufio.Writer
	start time.Time
}

func newTranscript(t *testing.T, path string, meta map[string]string, start time.Time) *transcript {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tr := &transcript{t: t, f: f, w: bufio.NewWriter(f), start: start}
	m, _ := json.Marshal(map[string]any{"meta": meta})
	tr.w.Write(append(m, '\n'))
	return tr
}

func (tr *transcript) add(from string, msg []byte) {
	if !json.Valid(msg) {
		tr.t.Errorf("%s sent a message that is not JSON: %.100q", from, msg)
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	fmt.Fprintf(tr.w, `{"t":%.1f,"from":%q,"msg":`, float64(time.Since(tr.start).Microseconds())/1000, from)
	tr.w.Write(msg)
	tr.w.WriteString("}\n")
}

func (tr *transcript) close() {
	if err := tr.w.Flush(); err != nil {
		tr.t.Fatal(err)
	}
	if err := tr.f.Close(); err != nil {
		tr.t.Fatal(err)
	}
}

// recordedConn is a CDP connection whose traffic goes into a transcript.
type recordedConn struct {
	t       *testing.T
	c       *websocket.Conn
	log     *transcript
	onEvent func(*cdproto.Message) // called by the reader

	wmu    sync.Mutex
	nextID int64 // guarded by wmu

	mu    sync.Mutex
	calls map[int64]chan *cdproto.Message // guarded by Mu
	done  chan struct{}
}

func dialRecorded(t *testing.T, wsURL string, log *transcript) *recordedConn {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(256 << 20)
	rc := &recordedConn{t: t, c: c, log: log, calls: map[int64]chan *cdproto.Message{}, done: make(chan struct{})}
	go rc.read()
	return rc
}

func (rc *recordedConn) read() {
	defer close(rc.done)
	for {
		_, data, err := rc.c.ReadMessage()
		if err != nil {
			return
		}
		rc.log.add("browser", data)
		var m cdproto.Message
		if err := jsonv2.Unmarshal(data, &m); err != nil {
			rc.t.Errorf("unreadable message: %v", err)
			continue
		}
		if m.ID != 0 {
			rc.mu.Lock()
			ch := rc.calls[m.ID]
			delete(rc.calls, m.ID)
			rc.mu.Unlock()
			if ch != nil {
				ch <- &m
			}
			continue
		}
		if rc.onEvent != nil {
			rc.onEvent(&m)
		}
	}
}

// send writes a command the way fetchConn.send does.
func (rc *recordedConn) send(session, method string, params any, reply chan *cdproto.Message) {
	var p []byte
	if params != nil {
		var err error
		if p, err = jsonv2.Marshal(params); err != nil {
			rc.t.Errorf("%s: %v", method, err)
			return
		}
	}
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	rc.nextID++
	msg, err := jsonv2.Marshal(&cdproto.Message{ID: rc.nextID, SessionID: target.SessionID(session), Method: cdproto.MethodType(method), Params: p})
	if err != nil {
		rc.t.Errorf("%s: %v", method, err)
		return
	}
	rc.mu.Lock()
	rc.calls[rc.nextID] = reply
	rc.mu.Unlock()
	rc.log.add("client", msg)
	if err := rc.c.WriteMessage(websocket.TextMessage, msg); err != nil {
		rc.t.Errorf("%s: %v", method, err)
	}
}

func (rc *recordedConn) call(ctx context.Context, session, method string, params any) ([]byte, error) {
	reply := make(chan *cdproto.Message, 1)
	rc.send(session, method, params, reply)
	select {
	case m := <-reply:
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m.Result, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// mustCall calls method as call does, and fails the recording on an
// error.
func (rc *recordedConn) mustCall(ctx context.Context, session, method string, params any) []byte {
	rc.t.Helper()
	res, err := rc.call(ctx, session, method, params)
	if err != nil {
		rc.t.Fatal(err)
	}
	return res
}

func (rc *recordedConn) close() {
	rc.wmu.Lock()
	rc.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	rc.wmu.Unlock()
	select {
	case <-rc.done:
	case <-time.After(2 * time.Second):
	}
	rc.c.Close()
	<-rc.done
}

// recordHTTP records the /json endpoints: one line per request with its
// answer's status, Content-Type and body as sent.
func recordHTTP(t *testing.T, addr, pageURL string, meta map[string]string) {
	t.Helper()
	f, err := os.Create("testdata/chromium-http.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, _ := json.Marshal(map[string]any{"meta": meta})
	f.Write(append(m, '\n'))
	do := func(method, path, query string) []byte {
		t.Helper()
		a := AskHTTP(t, addr, method, path, query)
		line, _ := json.Marshal(a)
		f.Write(append(line, '\n'))
		return []byte(a.Body)
	}
	do("GET", "/json/version", "")
	do("GET", "/json/list", "")
	var created struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(do("PUT", "/json/new", pageURL), &created); err != nil || created.ID == "" {
		t.Fatalf("PUT /json/new: %v", err)
	}
	do("GET", "/json/new", pageURL)
	time.Sleep(500 * time.Millisecond) // let the new page load, so the list shows it with its title
	do("GET", "/json/list", "")
	do("GET", "/json/activate/"+created.ID, "")
	do("GET", "/json/activate/NOSUCHTARGET", "")
	do("GET", "/json/close/"+created.ID, "")
	do("GET", "/json/close/NOSUCHTARGET", "")
	time.Sleep(300 * time.Millisecond)
}

func startRecordSite(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", recordSiteIP+":0")
	if err != nil {
		t.Fatalf("listening on %s: %v", recordSiteIP, err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	html := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><title>t</title>%s", body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) { html(w, "<p>page</p>") })
	mux.HandleFunc("/frames", func(w http.ResponseWriter, r *http.Request) {
		html(w, `<iframe src="/child?same"></iframe><iframe src="http://b.test:`+port+`/child?cross"></iframe>`)
	})
	mux.HandleFunc("/child", func(w http.ResponseWriter, r *http.Request) { html(w, "<p>child</p>") })
	mux.HandleFunc("/r", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://b.test:"+port+"/x", http.StatusFound)
	})
	mux.HandleFunc("/r2", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/y", http.StatusFound) })
	mux.HandleFunc("/x", func(w http.ResponseWriter, r *http.Request) { html(w, "<p>x</p>") })
	mux.HandleFunc("/y", func(w http.ResponseWriter, r *http.Request) { html(w, "<p>y</p>") })
	mux.HandleFunc("/busy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "<p>busy</p>")
	})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		mux.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedPort returns a port on the site's address where nothing listens.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", recordSiteIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

// startRecordChromium starts headless Chromium with a fresh profile and
// returns its HTTP address, browser websocket URL and version.
func startRecordChromium(t *testing.T) (addr, wsURL, version string) {
	t.Helper()
	bin := os.Getenv("CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	dir := t.TempDir()
	args := append(append([]string(nil), recordChromiumFlags...),
		"--user-data-dir="+filepath.Join(dir, "profile"), "--remote-debugging-port=0", "about:blank")
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	addr, wsURL, err = ListeningOn(stderr)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return addr, wsURL, strings.TrimSpace(string(out))
}

func checkRecorded(t *testing.T, path string, wants ...string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wants {
		if !bytes.Contains(data, []byte(w)) {
			t.Errorf("%s: nothing recorded with %s: the unit tests replay that", path, w)
		}
	}
}
