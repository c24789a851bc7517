//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// launched is the binary running with a browser command after --.
type launched struct {
	cmd    *exec.Cmd
	logs   *logLines
	listen string
	exited chan error // gets Wait's result
}

// launch runs the binary with args and a browser command, and waits until
// it says "relay ready" (ready true) or exits (ready false).
func launch(t *testing.T, args ...string) (l *launched, ready bool) {
	t.Helper()
	l = &launched{listen: "127.0.0.1:" + freePort(t), exited: make(chan error, 1)}
	l.cmd = exec.Command(buildBinary(t), append([]string{"--listen", l.listen, "--log-format", "json"}, args...)...)
	// Non-JSON lines (the refusal) are kept in raw too.
	l.logs = startLogging(t, l.cmd)
	t.Cleanup(func() {
		l.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(15 * time.Second):
			l.cmd.Process.Kill()
		}
	})
	go func() { l.exited <- l.cmd.Wait() }()
	deadline := time.After(60 * time.Second)
	for {
		if len(l.logs.withMessage("relay ready")) > 0 {
			return l, true
		}
		select {
		case err := <-l.exited:
			l.exited <- err
			// Let the reader take the last lines.
			time.Sleep(100 * time.Millisecond)
			return l, false
		case <-deadline:
			t.Fatalf("neither ready nor exited within 60s:\n%s", l.logs.raw.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// wait returns the process's exit, once it has exited.
func (l *launched) wait() error {
	err := <-l.exited
	l.exited <- err
	return err
}

// browserIDAt returns the browser id in /json/version at base.
func browserIDAt(t *testing.T, base string) string {
	t.Helper()
	body, err := httpGet(base + "/json/version")
	if err != nil {
		t.Fatalf("%s/json/version: %v", base, err)
	}
	var v struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s/json/version: %v: %s", base, err, body)
	}
	_, id, _ := strings.Cut(v.WS, "/devtools/browser/")
	return id
}

// TestLaunchedBrowserIsItsOwn launches Chromium with a port that another
// Chromium already holds on 127.0.0.1: the relay fronts the browser it
// launched (Chromium falls back to [::1] and says so), never the other
// one; with both loopbacks taken it refuses to start, on one line; a port
// 0 in the command works.
func TestLaunchedBrowserIsItsOwn(t *testing.T) {
	chromium, err := findChromium()
	if err != nil {
		t.Fatal(err)
	}
	command := func(port string) []string {
		args := append([]string{"--", chromium}, ChromiumFlags...)
		return append(args, "--user-data-dir="+t.TempDir(), "--remote-debugging-port="+port)
	}

	t.Run("port taken on 127.0.0.1", func(t *testing.T) {
		port := freePort(t)
		otherHTTP, _, stop, err := startChromiumOn(port)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		other := browserIDAt(t, otherHTTP)
		l, ready := launch(t, command(port)...)
		if !ready {
			// Refusing is allowed, clearly.
			if err := l.wait(); err == nil {
				t.Fatalf("exited 0 without serving")
			}
			t.Logf("refused to start:\n%s", l.logs.raw.String())
			if last := lastLine(l.logs.raw.Bytes()); !strings.HasPrefix(last, "cdp-throttle: ") {
				t.Errorf("last line %q, want the reason on one line", last)
			}
			return
		}
		announced, _ := l.logs.waitFor(t, "browser listening", time.Second)["endpoint"].(string)
		_, own, _ := strings.Cut(announced, "/devtools/browser/")
		through := browserIDAt(t, "http://"+l.listen)
		t.Logf("other browser %s on 127.0.0.1:%s; launched one announced %s; through the relay: %s", other, port, announced, through)
		if through == other {
			t.Fatalf("the relay fronts the other browser (%s), not the one it launched (%s)", other, own)
		}
		if through != own || own == "" {
			t.Errorf("browser id through the relay %q, want the launched one's %q", through, own)
		}
		// And its websocket reaches the launched browser: the other one
		// does not know the target this client creates.
		rc := dialRaw(t, browserWSVia(t, &relayed{url: "http://" + l.listen}))
		_, target := rc.newPage()
		if body, _ := httpGet(otherHTTP + "/json/list"); strings.Contains(string(body), target) {
			t.Errorf("a page opened through the relay appeared in the other browser")
		}
	})

	t.Run("port taken on both loopbacks", func(t *testing.T) {
		port := freePort(t)
		for _, addr := range []string{"127.0.0.1:" + port, "[::1]:" + port} {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("taking %s: %v", addr, err)
			}
			defer ln.Close()
		}
		began := time.Now()
		l, ready := launch(t, command(port)...)
		if ready {
			t.Fatalf("relay ready with no DevTools endpoint of its own:\n%s", l.logs.raw.String())
		}
		err := l.wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("exit: %v, want status 1", err)
		}
		last := lastLine(l.logs.raw.Bytes())
		if !strings.HasPrefix(last, "cdp-throttle: ") || !strings.Contains(last, "Cannot start http server for devtools") || !strings.Contains(last, port) {
			t.Errorf("last line %q, want the reason on one line, naming Chromium's complaint and the port", last)
		}
		t.Logf("refused after %v: %s", time.Since(began).Round(time.Millisecond), last)
	})

	t.Run("port 0, killed and restarted", func(t *testing.T) {
		l, ready := launch(t, append([]string{"--http-nav-delay", "300", "--http-nav-burst", "1"}, command("0")...)...)
		if !ready {
			t.Fatalf("not ready:\n%s", l.logs.raw.String())
		}
		first, _ := l.logs.waitFor(t, "browser listening", time.Second)["endpoint"].(string)
		pid := int(l.logs.waitFor(t, "browser started", time.Second)["pid"].(float64))
		syscall.Kill(-pid, syscall.SIGKILL)
		var second string
		for deadline := time.Now().Add(30 * time.Second); second == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for _, m := range l.logs.withMessage("browser listening") {
				if ep, _ := m["endpoint"].(string); ep != first {
					second = ep
				}
			}
		}
		if second == "" {
			t.Fatalf("the killed browser did not come back:\n%s", l.logs.raw.String())
		}
		t.Logf("restarted: %s, then %s", first, second)
		_, own, _ := strings.Cut(second, "/devtools/browser/")
		// The relay follows: the new id, and its own connection holds
		// navigations again.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			body, _ := httpGet("http://" + l.listen + "/healthz")
			if strings.Contains(string(body), `"holding":"fetch"`) && browserIDAt(t, "http://"+l.listen) == own {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the relay did not follow the browser to %s: /healthz %s", second, body)
			}
		}
		s := newSite(t)
		rc := dialRaw(t, browserWSVia(t, &relayed{url: "http://" + l.listen}))
		session, _ := rc.newPage()
		rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("warm.test", "/page")})
		for i := range 2 {
			rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("restarted.test", "/page?n="+strconv.Itoa(i))})
		}
		if docs := s.documents("restarted.test"); len(docs) != 2 || docs[1].At.Sub(docs[0].At) < 250*time.Millisecond {
			t.Errorf("through the restarted browser: got %d documents %v, want 2, 300 ms apart", len(docs), docs)
		}
	})

	t.Run("port 0", func(t *testing.T) {
		l, ready := launch(t, command("0")...)
		if !ready {
			t.Fatalf("not ready:\n%s", l.logs.raw.String())
		}
		announced, _ := l.logs.waitFor(t, "browser listening", time.Second)["endpoint"].(string)
		_, own, _ := strings.Cut(announced, "/devtools/browser/")
		if through := browserIDAt(t, "http://"+l.listen); through != own || own == "" {
			t.Errorf("browser id through the relay %q, want the launched one's %q (announced %s)", through, own, announced)
		}
		s := newSite(t)
		rc := dialRaw(t, browserWSVia(t, &relayed{url: "http://" + l.listen}))
		session, _ := rc.newPage()
		rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("port0.test", "/page")})
		if n := len(s.documents("port0.test")); n != 1 {
			t.Errorf("navigation through the relay reached the server %d times, want 1", n)
		}
	})
}
