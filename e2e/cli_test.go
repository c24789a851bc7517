//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// build is one build of the relay binary, made once per run.
type build struct {
	once   sync.Once
	tags   string // go build -tags, "" for none
	binary string
	err    error
}

var (
	plainBuild = &build{}
	faultBuild = &build{tags: "faultinject"} // relay/fault_inject.go: CdpThrottle.panic panics
)

// buildBinary builds cdp-throttle the way the README says, once per run.
func buildBinary(t testing.TB) string { return plainBuild.get(t) }

// get builds b's binary the first time, and returns its path.
func (b *build) get(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "cdp-throttle-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.binary = filepath.Join(dir, "cdp-throttle")
		out, err := exec.Command("go", "build", "-tags", b.tags, "-o", b.binary, "..").CombinedOutput()
		if err != nil {
			b.err = errors.New(string(out))
		}
	})
	if b.err != nil {
		t.Fatalf("go build -tags %q: %v", b.tags, b.err)
	}
	return b.binary
}

// remove deletes the binary get built, if it did: each run builds its
// own (35 MB), and a run's would otherwise stay behind in the temporary
// directory.
func (b *build) remove() {
	if b.binary != "" {
		os.RemoveAll(filepath.Dir(b.binary))
	}
}

// freePort returns a port on 127.0.0.1 where nothing listens, for a
// process the test starts to listen on.
func freePort(t testing.TB) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(fakebrowser.ClosedAddr(t))
	return port
}

// logLines collects a process's JSON log lines and signals each message.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
	raw   bytes.Buffer
	seen  chan string
}

func (l *logLines) read(r *bufio.Scanner) {
	for r.Scan() {
		line := r.Bytes()
		var m map[string]any
		l.mu.Lock()
		l.raw.Write(line)
		l.raw.WriteByte('\n')
		if json.Unmarshal(line, &m) == nil {
			l.lines = append(l.lines, m)
		}
		l.mu.Unlock()
		if msg, _ := m["message"].(string); msg != "" {
			select {
			case l.seen <- msg:
			default:
			}
		}
	}
	close(l.seen)
}

func (l *logLines) waitFor(t *testing.T, message string, within time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(within)
	for {
		if found := l.withMessage(message); len(found) > 0 {
			return found[0]
		}
		select {
		case _, ok := <-l.seen:
			if !ok {
				l.mu.Lock()
				defer l.mu.Unlock()
				t.Fatalf("process ended before logging %q:\n%s", message, l.raw.String())
			}
		case <-deadline:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("no %q logged within %v:\n%s", message, within, l.raw.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// find returns the log lines keep is true of, in the order logged.
func (l *logLines) find(keep func(line map[string]any) bool) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, m := range l.lines {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// withMessage returns the log lines whose message is message.
func (l *logLines) withMessage(message string) []map[string]any {
	return l.find(func(m map[string]any) bool { return m["message"] == message })
}

// matching returns the log lines whose message contains message.
func (l *logLines) matching(message string) []map[string]any {
	return l.find(func(m map[string]any) bool { return strings.Contains(fmt.Sprint(m["message"]), message) })
}

// count counts the log lines whose message contains message.
func (l *logLines) count(message string) int { return len(l.matching(message)) }

// has reports whether a log line's message contains message.
func (l *logLines) has(message string) bool { return len(l.matching(message)) > 0 }

// linesOf returns the raw JSON of the lines whose message contains message.
func (l *logLines) linesOf(message string) []string {
	var out []string
	for _, m := range l.matching(message) {
		b, _ := json.Marshal(m)
		out = append(out, string(b))
	}
	return out
}

// bookings returns the log lines of the navigations to host that the
// process booked: those it held and those it let go at once.
func (l *logLines) bookings(host string) []map[string]any {
	return l.find(func(m map[string]any) bool {
		msg := m["message"]
		return m["host"] == host && (msg == "navigation held" || msg == "navigation goes at once")
	})
}

// unheld adds up the navigations the process logged as reaching the
// network unheld.
func (l *logLines) unheld() int {
	n := 0
	for _, m := range l.withMessage("navigations reached the network unheld") {
		v, _ := m["navigations"].(float64)
		n += int(v)
	}
	return n
}

// startLogging starts cmd and reads its stderr as log lines.
func startLogging(t *testing.T, cmd *exec.Cmd) *logLines {
	t.Helper()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &logLines{seen: make(chan string, 1024)}
	go logs.read(bufio.NewScanner(stderr))
	return logs
}

// loggedProc is a relay process started by startWatched: its log lines,
// and when and how it exited.
type loggedProc struct {
	cmd     *exec.Cmd
	logs    *logLines
	pr      *os.File      // its stderr, closed by the test
	exited  chan struct{} // closed once it exited
	exitAt  time.Time     // set before exited is closed
	exitErr error         // Wait's
}

// startWatched starts cmd and reads its stderr as log lines, as
// startLogging does, and watches for its exit. Its stderr is a pipe of the
// test's own, so that Wait returns when the relay exits, whatever else
// holds the pipe.
func startWatched(t *testing.T, cmd *exec.Cmd) *loggedProc {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := &loggedProc{cmd: cmd, logs: &logLines{seen: make(chan string, 1024)}, pr: pr, exited: make(chan struct{})}
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	go p.logs.read(sc)
	go func() {
		err := cmd.Wait()
		p.exitAt, p.exitErr = time.Now(), err
		close(p.exited)
	}()
	return p
}

// TestCommandLaunchesAndStopsBrowser runs the binary with a browser command
// after --: it starts Chromium, waits for it, relays to it, and on SIGTERM
// ends its clients' connections, stops the browser and exits 0.
func TestCommandLaunchesAndStopsBrowser(t *testing.T) {
	bin := buildBinary(t)
	chromium, err := findChromium()
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + freePort(t)
	cdpPort := freePort(t)
	args := []string{"--listen", listen, "--http-nav-delay", "300", "--http-nav-burst", "1", "--log-format", "json", "--",
		chromium}
	args = append(append(args, ChromiumFlags...), "--user-data-dir="+t.TempDir(), "--remote-debugging-port="+cdpPort)
	cmd := exec.Command(bin, args...)
	logs := startLogging(t, cmd)
	defer cmd.Process.Kill()

	start := logs.waitFor(t, "cdp-throttle starting", 10*time.Second)
	if start["mode"] != "fixed300" || start["burst"] != float64(1) || start["listen"] != listen || start["upstream"] != nil {
		t.Errorf("startup line: got %v, want mode fixed300, burst 1, listen %s, no upstream (the browser says where it listens)", start, listen)
	}
	started := logs.waitFor(t, "browser started", 10*time.Second)
	pid := int(started["pid"].(float64))
	if ep, _ := logs.waitFor(t, "browser listening", 40*time.Second)["endpoint"].(string); !strings.HasPrefix(ep, "ws://127.0.0.1:"+cdpPort+"/devtools/browser/") {
		t.Errorf("browser listening at %q, want the port of its command", ep)
	}
	logs.waitFor(t, "relay ready", 40*time.Second)

	// A client through the relay navigates twice; the second waits 300 ms.
	s := newSite(t)
	rc := dialRaw(t, browserWSVia(t, &relayed{url: "http://" + listen}))
	session, _ := rc.newPage()
	// A fresh page's first request takes longer to leave the browser; warm
	// it on another host so the server sees the relay's spacing.
	rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("warm.test", "/page")})
	for i := range 2 {
		rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("cli.test", "/page?n="+strconv.Itoa(i))})
	}
	docs := s.documents("cli.test")
	if len(docs) != 2 || docs[1].At.Sub(docs[0].At) < 250*time.Millisecond { // unheld: ~10 ms; a first request to a host leaves the browser a little later
		t.Fatalf("through the launched browser: got %d documents %v, want 2, 300 ms apart", len(docs), docs)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		for range logs.seen { // every line read: Wait closes the pipe
		}
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v, want status 0\n%s", err, logs.raw.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15 s after SIGTERM")
	}
	<-rc.done
	if !endedWithoutFrame(rc.closeErr) {
		t.Errorf("client connection ended with %v, want it ended without a frame, as a browser's exit ends it", rc.closeErr)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("browser pid %d still alive after the relay exited", pid)
	}
	if len(logs.withMessage("browser stopped")) == 0 {
		t.Errorf("no \"browser stopped\" in the log:\n%s", logs.raw.String())
	}
	// Stopping its own browser is no loss of a connection.
	for _, m := range []string{"lost one of the relay's browser connections", "the browser closed the relay's connections"} {
		if strings.Contains(logs.raw.String(), m) {
			t.Errorf("the relay logged %q on a normal shutdown:\n%s", m, logs.raw.String())
		}
	}
}

// TestCommandUpstreamNeverUp: a browser that never answers is a clear error.
func TestCommandUpstreamNeverUp(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "--listen", "127.0.0.1:"+freePort(t), "--upstream", "http://127.0.0.1:"+freePort(t), "--start-timeout", "2s", "--log-format", "json")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("got %v, want exit status 1\n%s", err, out)
	}
	last := lastLine(out)
	if !strings.Contains(last, "did not answer within 2s (--start-timeout)") || !strings.Contains(last, "connection refused") || strings.Count(last, "relay:") != 1 {
		t.Errorf("last line %q, want it to say the upstream did not answer, why, and which flag bounds the wait, with relay: once", last)
	}
}

// TestCommandBadFlags: bad input exits 2 with one line.
func TestCommandBadFlags(t *testing.T) {
	bin := buildBinary(t)
	for _, args := range [][]string{
		{"--http-nav-delay", "-1"},
		{"--http-nav-delay", "soon"},
		{"--http-nav-burst", "many"},
		{"--listen", "nowhere"},
		{"--upstream", "localhost:9222"},
		{"--log-level", "loud"},
		{"--intercept", "magic"},
		{"--no-such-flag"},
		{"--browsers", "0", "--", "chromium"},
		{"--browsers", "2", "--", "chromium", "--remote-debugging-port=9222"},
		{"--", "lightpanda", "serve", "--http-nav-delay", "100"},
		{"simulat"},
		{"chromium", "--headless", "--remote-debugging-port=9222"},
		{"--http-nav-dealy", "100"},
		{"simulate", "--", "chromium"},
	} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%v: got %v, want exit status 2\n%s", args, err, out)
			continue
		}
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "cdp-throttle: ") {
			t.Errorf("%v: printed %q, want one line starting cdp-throttle:", args, out)
		}
	}
}

// TestCommandVersion: --version, -v and version print one line, exit 0.
func TestCommandVersion(t *testing.T) {
	bin := buildBinary(t)
	for _, arg := range []string{"--version", "-v", "version"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		t.Logf("%s: %s", arg, out)
		if err != nil || !regexp.MustCompile(`^cdp-throttle \S+.*, built with go1\.\d+\S* \w+/\w+\n$`).Match(out) {
			t.Errorf("%s: got %v, %q; want exit 0 and one line naming the version and the Go that built it", arg, err, out)
		}
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
