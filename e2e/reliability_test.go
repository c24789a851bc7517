//go:build e2e

package e2e

// Issue 4 against real Chromium: bad input answered as the browser would
// answer it, the browser dying mid-navigation, a client vanishing while
// its navigation is held, signals, log hygiene of the command, and a soak.
// RELIABILITY.md tables each case.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// relCanonical is what a test compares of an answer: the message with the
// ids Chromium makes up anew each time (frames, loaders) blanked, and its
// members in a fixed order.
func relCanonical(msg []byte) string {
	var v any
	if err := json.Unmarshal(msg, &v); err != nil {
		return "unparsable: " + string(msg)
	}
	var blank func(v any) any
	blank = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "frameId" || k == "loaderId" || k == "targetId" || k == "objectId" {
					x[k] = "…"
				} else {
					x[k] = blank(e)
				}
			}
		case []any:
			for i, e := range x {
				x[i] = blank(e)
			}
		}
		return v
	}
	out, _ := json.Marshal(blank(v))
	return string(out)
}

const relSentinel = `{"id":424242,"method":"Runtime.evaluate","params":{"expression":"6*7"}}`

// relExchange sends frames on a fresh websocket to url, then the sentinel,
// and returns what came back until the sentinel's answer, or how the
// connection ended.
func relExchange(t *testing.T, url string, typ int, frames [][]byte) []string {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatalf("dialing %s: %v", url, err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for _, f := range frames {
		if err := c.WriteMessage(typ, f); err != nil {
			return []string{"write failed"}
		}
	}
	c.WriteMessage(websocket.TextMessage, []byte(relSentinel))
	var got []string
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return append(got, fmt.Sprintf("closed %d", ce.Code))
			}
			return append(got, "ended: "+err.Error())
		}
		if strings.HasPrefix(string(msg), `{"id":424242,`) {
			return got
		}
		got = append(got, relCanonical(msg))
	}
}

// answerIDs is the id of each answer relExchange got (-1 where it has none).
func answerIDs(answers []string) []int {
	ids := make([]int, len(answers))
	for i, a := range answers {
		var m struct{ ID *int }
		if json.Unmarshal([]byte(a), &m) != nil || m.ID == nil {
			ids[i] = -1
			continue
		}
		ids[i] = *m.ID
	}
	return ids
}

// relPage opens a page in a fresh browser context, straight on Chromium,
// and returns its id; it is closed when the test ends.
func relPage(t *testing.T) string {
	t.Helper()
	rc := dialRaw(t, browser.ws)
	_, id := rc.newPage()
	return id
}

// TestBadInputAsChromium sends what a buggy or hostile client might, once
// straight to Chromium and once through the relay (holding navigations
// with Fetch), and checks the client gets the same answers either way: the
// relay neither swallows, alters nor adds anything, and the connection
// keeps working. The one difference is the relay's on purpose: a binary
// frame, on which Chromium drops the connection, reaches it as text.
func TestBadInputAsChromium(t *testing.T) {
	s := newSite(t)
	r := startRelay(t, limiter.Config{})
	direct, relayed := relPage(t), relPage(t)
	nav := func(id int, url string) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "method": "Page.navigate", "params": map[string]any{"url": url}})
		return b
	}
	text := func(s string) []byte { return []byte(s) }
	rows := []struct {
		name   string
		frames [][]byte
	}{
		{"malformed JSON", [][]byte{text(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.te`)}},
		{"empty message", [][]byte{{}}},
		{"JSON array", [][]byte{text(`[{"id":2,"method":"Runtime.evaluate","params":{"expression":"1"}}]`)}},
		{"JSON string", [][]byte{text(`"Page.navigate"`)}},
		{"JSON number", [][]byte{text(`42`)}},
		{"JSON null", [][]byte{text(`null`)}},
		{"missing id", [][]byte{text(`{"method":"Runtime.evaluate","params":{"expression":"1"}}`)}},
		{"string id", [][]byte{text(`{"id":"3","method":"Runtime.evaluate","params":{"expression":"1"}}`)}},
		{"fractional id", [][]byte{text(`{"id":1.5,"method":"Runtime.evaluate","params":{"expression":"1"}}`)}},
		{"id out of range", [][]byte{text(`{"id":99999999999,"method":"Runtime.evaluate","params":{"expression":"1"}}`)}},
		{"negative id", [][]byte{text(`{"id":-3,"method":"Runtime.evaluate","params":{"expression":"1"}}`)}},
		{"missing method", [][]byte{text(`{"id":5}`)}},
		{"unknown method", [][]byte{text(`{"id":6,"method":"No.such"}`)}},
		{"unknown sessionId", [][]byte{text(`{"id":8,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"NO-SUCH-SESSION"}`)}},
		{"invalid UTF-8", [][]byte{text("{\"id\":10,\"method\":\"Runtime.evaluate\",\"params\":{\"expression\":\"'\xff\xfe'\"}}")}},
		{"invalid UTF-8 in a navigation URL", [][]byte{text("{\"id\":11,\"method\":\"Page.navigate\",\"params\":{\"url\":\"" + s.url("utf.test", "/page?\xff") + "\"}}")}},
		{"deep nesting", [][]byte{text(`{"id":12,"method":"Runtime.evaluate","params":{"x":` + strings.Repeat("[", 10_000) + strings.Repeat("]", 10_000) + `}}`)}},
		{"1 MiB command", [][]byte{text(`{"id":13,"method":"Runtime.evaluate","params":{"expression":"'` + strings.Repeat("x", 1<<20) + `'.length"}}`)}},
		{"navigate: no params", [][]byte{text(`{"id":20,"method":"Page.navigate"}`)}},
		{"navigate: missing url", [][]byte{text(`{"id":21,"method":"Page.navigate","params":{}}`)}},
		{"navigate: url not a string", [][]byte{text(`{"id":22,"method":"Page.navigate","params":{"url":42}}`)}},
		{"navigate: empty url", [][]byte{nav(23, "")}},
		{"navigate: relative url", [][]byte{nav(24, "/relative/path?q=1")}},
		{"navigate: scheme-relative url", [][]byte{nav(25, "//protorel.test/")}},
		{"navigate: no host", [][]byte{nav(26, "http:///path")}},
		{"navigate: huge url", [][]byte{nav(27, s.url("huge.test", "/page?"+strings.Repeat("p", 100<<10)))}},
		{"navigate: too long a url", [][]byte{nav(28, s.url("huge.test", "/page?"+strings.Repeat("p", 3<<20)))}},
		{"navigate: IDN", [][]byte{nav(29, s.url("bücher.test", "/page?idn"))}},
		{"navigate: IPv6", [][]byte{nav(30, "http://[::1]:1/")}},
		{"navigate: userinfo", [][]byte{nav(31, "http://user:pa55@"+strings.TrimPrefix(s.url("userinfo.test", "/page?ui"), "http://"))}},
		{"navigate: mixed case, trailing dot", [][]byte{nav(32, "HTTP://MiXeD.Test.:"+s.port+"/page?mixed")}},
		{"navigate: javascript:", [][]byte{nav(33, "javascript:void(0)")}},
		{"navigate: data:", [][]byte{nav(34, "data:text/html,<title>data</title>")}},
		{"navigate: about:blank", [][]byte{nav(35, "about:blank")}},
		{"navigate: chrome:", [][]byte{nav(36, "chrome://version")}},
		{"navigate: space in host", [][]byte{nav(37, "http://exa mple.test/")}},
		{"navigate: unknown scheme", [][]byte{nav(38, "gopher://gopher.test/")}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			want := relExchange(t, "ws://"+strings.TrimPrefix(browser.http, "http://")+"/devtools/page/"+direct, websocket.TextMessage, row.frames)
			got := relExchange(t, "ws://"+r.host+"/devtools/page/"+relayed, websocket.TextMessage, row.frames)
			if !slices.Equal(got, want) {
				t.Errorf("through the relay:\n%.300q\nstraight from Chromium:\n%.300q", got, want)
			}
			t.Logf("answered %.200q", got)
		})
	}
	t.Run("duplicate ids", func(t *testing.T) {
		// Chromium refuses the second only while the first is still
		// running, which depends on timing the relay's hop changes: what
		// must hold is that both answers reach the client, refused or not.
		dup := [][]byte{text(`{"id":9,"method":"Runtime.evaluate","params":{"expression":"1"}}`), text(`{"id":9,"method":"Runtime.evaluate","params":{"expression":"2"}}`)}
		want := relExchange(t, "ws://"+strings.TrimPrefix(browser.http, "http://")+"/devtools/page/"+direct, websocket.TextMessage, dup)
		got := relExchange(t, "ws://"+r.host+"/devtools/page/"+relayed, websocket.TextMessage, dup)
		if ids := answerIDs(got); !slices.Equal(ids, []int{9, 9}) || !slices.Equal(answerIDs(want), ids) {
			t.Errorf("through the relay:\n%.300q\nstraight from Chromium:\n%.300q\nwant two answers to id 9 either way", got, want)
		}
	})
	t.Run("binary frame", func(t *testing.T) {
		cmd := [][]byte{text(`{"id":40,"method":"Runtime.evaluate","params":{"expression":"1"}}`)}
		if got := relExchange(t, "ws://"+strings.TrimPrefix(browser.http, "http://")+"/devtools/page/"+direct, websocket.BinaryMessage, cmd); len(got) != 1 || !strings.HasPrefix(got[0], "ended") && !strings.HasPrefix(got[0], "closed") {
			t.Errorf("Chromium answered a binary frame with %q; the relay's conversion to text may be unneeded now", got)
		}
		want := relExchange(t, "ws://"+strings.TrimPrefix(browser.http, "http://")+"/devtools/page/"+direct, websocket.TextMessage, cmd)
		if got := relExchange(t, "ws://"+r.host+"/devtools/page/"+relayed, websocket.BinaryMessage, cmd); !slices.Equal(got, want) {
			t.Errorf("binary frame through the relay: got %q, want Chromium's answer to the text %q", got, want)
		}
	})
	if lines := r.logs.Lines(`"level":"error"`); len(lines) > 0 {
		t.Errorf("relay logged errors: %q", lines)
	}
}

// relNavigate navigates session to url and returns the error text of the
// navigation, "" when it went fine.
func relNavigate(ctx context.Context, rc *rawClient, session, url string) (string, error) {
	res, err := rc.call(ctx, session, "Page.navigate", map[string]any{"url": url})
	if err != nil {
		return "", err
	}
	var r struct{ ErrorText string }
	json.Unmarshal(res, &r)
	return r.ErrorText, nil
}

// waitLogged waits for a log line with all of parts.
func waitLogged(t *testing.T, r *relayed, within time.Duration, parts ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if len(r.logs.Lines(parts...)) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %v", parts, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestChromiumDiesMidNavigation kills a Chromium while the relay holds one
// of its navigations and checks that the client's connection ends as the
// browser's death ends it (no frame), that the relay keeps serving, finds the browser restarted on the
// same port, holds its navigations again, and that the host's schedule
// outlived the browser.
func TestChromiumDiesMidNavigation(t *testing.T) {
	s := newSite(t)
	port := freePort(t)
	httpURL, _, stop, err := startChromium("--remote-debugging-port=" + port)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stop() }()
	const interval = 2 * time.Second
	r := startRelayTo(t, httpURL, fixed(interval, 1))
	rc, first := secondHeld(t, r, s, "", "dies.test")

	stop()
	select {
	case <-rc.done:
	case <-time.After(30 * time.Second):
		t.Fatal("client still connected 30 s after its browser died")
	}
	if !endedWithoutFrame(rc.closeErr) {
		t.Errorf("client connection ended with %v, want it ended without a frame, as Chromium's death ends it", rc.closeErr)
	}
	waitLogged(t, r, 30*time.Second, "the browser closed the relay's connections")
	if strings.Contains(r.logs.String(), "lost one of the relay's browser connections") {
		t.Errorf("the browser went away, and the relay says it lost one connection that the other holds on for:\n%s", r.logs.String())
	}
	// The client, which does not close its end, is let go after the
	// close grace (2 s).
	for deadline := time.Now().Add(5 * time.Second); r.p.Conns() != 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if n := r.p.Conns(); n != 0 {
		t.Errorf("relay still relays %d connections", n)
	}

	// The browser comes back on the same port, under a new endpoint.
	if _, _, stop, err = startChromium("--remote-debugging-port=" + port); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, r, 60*time.Second, "browser connection is back")
	docs := thirdFromANewClient(t, r, s, "again", "dies.test")
	if len(docs) != 2 || docs[1].Query != "n=3" {
		t.Fatalf("dies.test got %v, want n=1 and then n=3 (n=2 died with its browser)", docs)
	}
	// n=2 booked the second slot and died; n=3 waited for the third.
	if gap := docs[1].At.Sub(first); gap < 2*interval-200*time.Millisecond {
		t.Errorf("n=3 reached the site %v after n=1, want its own slot two intervals (%v) later", gap, 2*interval)
	}
	if lines := r.logs.Lines(`"level":"error"`); len(lines) > 0 {
		t.Errorf("relay logged errors: %q", lines)
	}
}

// secondHeld opens a page from a new client through r, loads warm.test's
// /page+warmQuery, then host's /page?n=1, and sends host's /page?n=2,
// which it returns once r logs it held. It returns the client and when
// the site read n=1.
func secondHeld(t *testing.T, r *relayed, s *site, warmQuery, host string) (*rawClient, time.Time) {
	t.Helper()
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("warm.test", "/page"+warmQuery)})
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?n=1")})
	first := s.documents(host)[0].At
	rc.send(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?n=2")})
	waitLogged(t, r, 30*time.Second, `"message":"navigation held"`, `"host":"`+host+`"`)
	return rc, first
}

// thirdFromANewClient opens a page from a new client through r, loads
// warm.test's /page?warmQuery, then host's /page?n=3, and returns the
// documents host got.
func thirdFromANewClient(t *testing.T, r *relayed, s *site, warmQuery, host string) []hit {
	t.Helper()
	rc := dialRaw(t, browserWSVia(t, r))
	session, _ := rc.newPage()
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("warm.test", "/page?"+warmQuery)})
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?n=3")})
	return s.documents(host)
}

// TestClientVanishesWhileHeldChromium drops a client whose navigation the
// relay holds in Chromium and checks the relay lets go of everything
// quietly, the navigation never reaches the site, and the next client
// waits for the slot after the vanished one's.
func TestClientVanishesWhileHeldChromium(t *testing.T) {
	s := newSite(t)
	const interval = 2 * time.Second
	r := startRelay(t, fixed(interval, 1))
	// The page's context is disposed when the client goes.
	rc, first := secondHeld(t, r, s, "?v", "vanish.test")
	rc.c.UnderlyingConn().Close() // gone without a close frame
	<-rc.done
	deadline := time.Now().Add(30 * time.Second)
	for r.p.Conns() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("relay still relays the vanished client")
		}
		time.Sleep(10 * time.Millisecond)
	}
	docs := thirdFromANewClient(t, r, s, "v2", "vanish.test")
	if len(docs) != 2 || docs[1].Query != "n=3" {
		t.Fatalf("vanish.test got %v, want n=1 and n=3: the vanished client's page is gone", docs)
	}
	if gap := docs[1].At.Sub(first); gap < 2*interval-200*time.Millisecond {
		t.Errorf("n=3 reached the site %v after n=1, want the slot after the vanished one's (%v)", gap, 2*interval)
	}
	for _, level := range []string{"error", "warn"} {
		for _, l := range r.logs.Lines(`"level":"` + level + `"`) {
			if !strings.Contains(l, "spacing out navigations") {
				t.Errorf("relay logged %s", l)
			}
		}
	}
}

// relCommand starts the built relay with args (and env), logging JSON to
// the returned lines, and returns a function that waits for it to exit
// and for its log to be read to the end.
func relCommand(t *testing.T, env []string, args ...string) (*exec.Cmd, *logLines, func() error) {
	t.Helper()
	cmd := exec.Command(buildBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw // Wait returns once all of it is copied
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &logLines{seen: make(chan string, 64)}
	read := make(chan struct{})
	go func() {
		logs.read(bufio.NewScanner(pr))
		close(read)
	}()
	var once sync.Once
	var err error
	wait := func() error {
		once.Do(func() {
			err = cmd.Wait()
			pw.Close()
			<-read
		})
		return err
	}
	t.Cleanup(func() { cmd.Process.Kill(); wait() })
	return cmd, logs, wait
}

// TestCommandSignals sends SIGINT and SIGTERM to the relay command in
// front of a browser it did not launch: it stops accepting, ends its
// clients' connections as a browser's exit does, leaves the browser alone and exits 0.
func TestCommandSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			listen := "127.0.0.1:" + freePort(t)
			cmd, logs, wait := relCommand(t, nil, "--listen", listen, "--upstream", browser.http, "--log-format", "json")
			logs.waitFor(t, "relay ready", 30*time.Second)
			rc := dialRaw(t, browserWSVia(t, &relayed{url: "http://" + listen}))
			rc.mustCall("", "Browser.getVersion", nil)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- wait() }()
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("exit after %v: %v, want status 0", sig, err)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("still running 15 s after %v", sig)
			}
			<-rc.done
			if !endedWithoutFrame(rc.closeErr) {
				t.Errorf("client connection ended with %v, want it ended without a frame, as a browser's exit ends it", rc.closeErr)
			}
			if _, err := httpGet("http://" + listen + "/json/version"); err == nil {
				t.Errorf("relay still answers after exiting")
			}
			if _, err := httpGet(browser.http + "/json/version"); err != nil {
				t.Errorf("browser the relay did not launch is gone: %v", err)
			}
		})
	}
}

// TestCommandRefusesOpenListen: a non-loopback --listen without a token
// exits 2 with the reason on one line.
func TestCommandRefusesOpenListen(t *testing.T) {
	out, err := exec.Command(buildBinary(t), "--listen", "0.0.0.0:"+freePort(t), "--upstream", browser.http).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("got %v, want exit status 2\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "--token") || !strings.Contains(lines[0], "--insecure-listen") {
		t.Errorf("printed %q, want one line naming --token and --insecure-listen", out)
	}
}

// TestCommandLogHygiene runs the relay command at debug level, with its
// token from CDP_THROTTLE_TOKEN and an upstream given with credentials,
// through a session full of secrets: URLs with userinfo and tokens in their
// queries, the relay's token in every form, and message bodies. None of
// them may appear in its log.
func TestCommandLogHygiene(t *testing.T) {
	const (
		token = "relay-token-5ecret"
		pw    = "pa55w0rd-5ecret"
		query = "query-5ecret"
		body  = "body-5ecret"
		uppw  = "upstream-5ecret"
	)
	s := newSite(t)
	listen := "127.0.0.1:" + freePort(t)
	upstream := "http://user:" + uppw + "@" + strings.TrimPrefix(browser.http, "http://")
	cmd, logs, wait := relCommand(t, []string{"CDP_THROTTLE_TOKEN=" + token},
		"--listen", listen, "--upstream", upstream, "--http-nav-delay", "300", "--http-nav-burst", "1",
		"--log-level", "debug", "--log-format", "json")
	logs.waitFor(t, "relay ready", 30*time.Second)
	base := "http://" + listen
	if status := statusOf(t, base+"/json/version"); status != http.StatusUnauthorized {
		t.Errorf("/json/version without the token: got %d, want 401", status)
	}
	version, err := httpGet(base + "/json/version?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ WebSocketDebuggerURL string }
	json.Unmarshal(version, &v)
	rc := dialRaw(t, v.WebSocketDebuggerURL) // carries the token
	session, _ := rc.newPage()
	withUser := func(host, path string) string {
		return "http://user:" + pw + "@" + strings.TrimPrefix(s.url(host, path), "http://")
	}
	for _, url := range []string{
		withUser("hyg.test", "/page?token="+query),
		withUser("hyg.test", "/page?again="+query), // held
		s.url("hyg2.test", "/page?q="+query+"&b="+body),
		"javascript:'" + body + "'",
	} {
		rc.mustCall(session, "Page.navigate", map[string]any{"url": url})
	}
	rc.mustCall(session, "Runtime.evaluate", map[string]any{"expression": "'" + body + "'.length"})
	rc.mustCall("", "Target.getTargets", nil)
	req, _ := http.NewRequest(http.MethodPut, base+"/json/new?"+withUser("hyg3.test", "/page?new="+query), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	for _, target := range []string{"/json/list?token=" + token, "/json/list?token=wrong-" + token, "/json/protocol?token=" + token} {
		httpGet(base + target)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	logs.mu.Lock()
	out := logs.raw.String()
	logs.mu.Unlock()
	if !strings.Contains(out, `"level":"debug"`) || !strings.Contains(out, `"message":"navigation held"`) {
		t.Fatalf("the log has no debug lines of held navigations; the test proves nothing:\n%s", out)
	}
	for _, secret := range []string{token, pw, query, body, uppw} {
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("log line names %q: %s", secret, line)
			}
		}
	}
}

// TestSoak drives 8 pages of real Chromium through the relay at once,
// 1,200 navigations over 20 hosts, and checks none fails, every one is
// booked exactly once and reaches the site, and the relay returns to its
// goroutines of before. The relay runs in this process: its goroutines and
// the process's peak heap and RSS are reported (go test -v).
func TestSoak(t *testing.T) {
	const (
		pages    = 8
		navs     = 1200
		hosts    = 20
		run      = 10 // navigations of a page in a row to one host: a new site costs Chromium a new renderer
		interval = 50 * time.Millisecond
	)
	s := newSite(t)
	runtime.GC()
	goroutinesBefore := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapInuse
	var heapPeak, goroutinesPeak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > heapPeak.Load() {
				heapPeak.Store(ms.HeapInuse)
			}
			if g := uint64(runtime.NumGoroutine()); g > goroutinesPeak.Load() {
				goroutinesPeak.Store(g)
			}
		}
	}()

	var rec *soakRecorder
	r := startRelay(t, fixed(interval, 1), func(p *relay.Proxy) {
		rec = &soakRecorder{Limiter: p.Limiter, starts: map[string][]time.Time{}}
		p.Limiter = rec
		quiet := p.Log.Level(2) // warn and up
		p.Log = &quiet
	})
	clients := make([]*rawClient, pages)
	sessions := make([]string, pages)
	for i := range clients {
		clients[i] = dialRaw(t, browserWSVia(t, r))
		sessions[i], _ = clients[i].newPage()
	}
	start := time.Now()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for i := range pages {
		wg.Go(func() {
			for k := range navs / pages {
				// Two pages at a time on each host, so that navigations wait
				// for their slots; every host in turn.
				n := i*(navs/pages) + k
				host := "soak" + strconv.Itoa((k/run+i/2*(hosts/(pages/2)))%hosts) + ".test"
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				errText, err := relNavigate(ctx, clients[i], sessions[i], s.url(host, "/page?n="+strconv.Itoa(n)))
				cancel()
				if err != nil || errText != "" {
					if failed.Add(1) <= 5 {
						t.Errorf("navigation %d to %s: %v %s", n, host, err, errText)
					}
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	docs := s.hitsOf(func(h hit) bool { return strings.HasPrefix(h.Host, "soak") && h.Path == "/page" })
	perHost := map[string]int{}
	for _, d := range docs {
		perHost[d.Host]++
	}
	rec.mu.Lock()
	booked := 0
	for host, st := range rec.starts {
		booked += len(st)
		if perHost[host] != len(st) {
			t.Errorf("%s: %d bookings, %d documents", host, len(st), perHost[host])
		}
		slices.SortFunc(st, func(a, b time.Time) int { return a.Compare(b) })
		for k := 1; k < len(st); k++ {
			if st[k].Sub(st[k-1]) < interval {
				t.Errorf("%s: slots %v apart, want at least %v", host, st[k].Sub(st[k-1]), interval)
			}
		}
	}
	held := rec.held
	rec.mu.Unlock()
	if len(docs) != navs || booked != navs {
		t.Errorf("%d navigations, %d documents at the site, %d bookings: want all %d", navs, len(docs), booked, navs)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d navigations failed", n)
	}

	for _, rc := range clients {
		rc.close()
	}
	r.p.Close()
	r.srv.Close()                             // the test's server of the relay started after the count before
	s.srv.SetKeepAlivesEnabled(false)         // the site's connections from Chromium are not the relay's,
	http.DefaultClient.CloseIdleConnections() // nor the test's own to /json/version
	close(stopSampling)
	<-sampled
	deadline := time.Now().Add(30 * time.Second)
	for runtime.NumGoroutine() > goroutinesBefore && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	goroutinesAfter := runtime.NumGoroutine()
	t.Logf("soak: %d pages, %d navigations over %d hosts in %v (%.0f/s), %d held for their slot, %d failed",
		pages, navs, hosts, took.Round(time.Millisecond), float64(navs)/took.Seconds(), held, failed.Load())
	t.Logf("soak: goroutines %d before, %d at peak, %d after the relay closed; heap in use %.1f MiB before, %.1f MiB at peak; peak RSS of the test process %.1f MiB",
		goroutinesBefore, goroutinesPeak.Load(), goroutinesAfter, float64(heapBefore)/(1<<20), float64(heapPeak.Load())/(1<<20), float64(relPeakRSS())/(1<<20))
	if goroutinesAfter > goroutinesBefore {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d after, %d before:\n%s", goroutinesAfter, goroutinesBefore, buf[:runtime.Stack(buf, true)])
	}
}

// soakRecorder wraps the relay's limiter and keeps the slots it books.
type soakRecorder struct {
	hold.Limiter
	mu     sync.Mutex
	starts map[string][]time.Time // guarded by mu
	held   int                    // guarded by mu; bookings that had to wait
}

func (r *soakRecorder) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	res := r.Limiter.Reserve(ctx, host, rawURL, now)
	r.mu.Lock()
	r.starts[host] = append(r.starts[host], res.Start)
	if res.Start.After(now) {
		r.held++
	}
	r.mu.Unlock()
	return res
}

// relPeakRSS returns the process's peak resident set size (VmHWM).
func relPeakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
