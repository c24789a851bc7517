//go:build e2e

// Package e2e drives real headless Chromium, chromium-headless-shell and
// `lightpanda serve` through the relay with real clients (puppeteer-core,
// playwright-core, chromedp, raw websockets; Selenium, Playwright for
// Python and Scrapy from e2e/py), and measures what a web server on a
// non-exempt loopback address sees.
//
// Run with: go test -tags e2e ./e2e (after npm ci in e2e/, make lightpanda
// and make py-deps at the root: make deps does them all).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

var chromiumPath = flag.String("chromium", "", "Chromium binary (default: $CHROMIUM, else chromium on PATH)")

// browser is the Chromium every test shares; tests keep to their own pages.
var browser struct {
	http string // http://127.0.0.1:PORT of its CDP endpoint
	ws   string // its browser websocket URL
}

// siteIP is the non-exempt loopback address test sites listen on; Chromium
// maps every *.test name to it, so each name is a host of its own.
const siteIP = "127.0.0.2"

// ChromiumFlags are the flags Chromium needs as root on a closed network.
var ChromiumFlags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-dev-shm-usage", "--host-resolver-rules=MAP *.test " + siteIP,
}

func TestMain(m *testing.M) {
	if robots, ok := os.LookupEnv(siteProcessEnv); ok {
		siteProcessMain(robots)
	}
	if up, ok := os.LookupEnv(floorProcessEnv); ok {
		floorProcessMain(up)
	}
	if plan, ok := os.LookupEnv(rodSessionEnv); ok {
		rodSessionMain(plan)
	}
	if ws, ok := os.LookupEnv(netnsClientEnv); ok {
		netnsClientMain(ws)
	}
	flag.Parse()
	code, err := runWithChromium(m)
	plainBuild.remove()
	faultBuild.remove()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func findChromium() (string, error) {
	for _, p := range []string{*chromiumPath, os.Getenv("CHROMIUM")} {
		if p != "" {
			return p, nil
		}
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found: install Debian's chromium package (apt-get install chromium) or pass -chromium PATH")
}

// startChromium starts a headless Chromium with a fresh profile and returns
// its CDP endpoint and a function that stops it.
func startChromium(extra ...string) (httpURL, wsURL string, stop func(), err error) {
	return startChromiumOn("0", extra...)
}

// startChromiumOn is startChromium with --remote-debugging-port=port.
func startChromiumOn(port string, extra ...string) (httpURL, wsURL string, stop func(), err error) {
	bin, err := findChromium()
	if err != nil {
		return "", "", nil, err
	}
	return startChromiumBin(bin, port, extra...)
}

// startChromiumBin is startChromiumOn for the Chromium binary bin, e.g.
// chromium-headless-shell.
func startChromiumBin(bin, port string, extra ...string) (httpURL, wsURL string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "cdp-throttle-e2e-chromium-")
	if err != nil {
		return "", "", nil, err
	}
	args := append(slices.Clone(ChromiumFlags), "--user-data-dir="+dir, "--remote-debugging-port="+port)
	args = append(append(args, extra...), "about:blank")
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", "", nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	stop = func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		os.RemoveAll(dir)
	}
	addr, wsURL, err := fakebrowser.ListeningOn(stderr)
	if err != nil {
		stop()
		return "", "", nil, err
	}
	return "http://" + addr, wsURL, stop, nil
}

// ownChromium starts a Chromium for one test alone, stopped at cleanup,
// and returns its HTTP address.
func ownChromium(t testing.TB) string {
	t.Helper()
	httpURL, _, stop, err := startChromium()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return httpURL
}

// launchChromium is the end of a relay command that launches a Chromium
// of its own: "--", the browser, its flags, any port, a fresh profile.
func launchChromium(t *testing.T) []string {
	t.Helper()
	chromium, err := findChromium()
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]string{"--", chromium}, ChromiumFlags...), "--remote-debugging-port=0", "--user-data-dir="+t.TempDir())
}

func runWithChromium(m *testing.M) (int, error) {
	httpURL, wsURL, stop, err := startChromium()
	if err != nil {
		return 0, err
	}
	defer stop()
	browser.http, browser.ws = httpURL, wsURL
	return m.Run(), nil
}

// hit is one request a test site received.
type hit struct {
	At      time.Time // when the server read it
	Arrived time.Time // when the site's host received it, from its kernel
	Host    string    // without port
	Method  string
	Path    string
	Query   string
}

// reached is when the request reached the site: its kernel's arrival
// time, or when the server read it where that is not known.
func (h hit) reached() time.Time {
	if !h.Arrived.IsZero() {
		return h.Arrived
	}
	return h.At
}

// site is a web server on siteIP that records every request. Each *.test
// name is a separate host to the limiter.
type site struct {
	t    testing.TB
	port string
	srv  *http.Server

	mu     sync.Mutex
	hits   []hit     // guarded by mu
	notify func(hit) // guarded by mu
	routes map[string]http.HandlerFunc
}

func newSite(t testing.TB) *site { return newSiteAt(t, siteIP) }

// newSiteAt serves a site on ip, e.g. 127.0.0.1 for an exempt one.
func newSiteAt(t testing.TB, ip string) *site {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listening on %s (a loopback address Linux serves): %v", ip, err)
	}
	s := &site{t: t, routes: map[string]http.HandlerFunc{}}
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ConnContext: withConn}
	go s.srv.Serve(stamping(ln))
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// url returns the URL of path on host (a name ending in .test, or siteIP).
func (s *site) url(host, path string) string {
	return "http://" + host + ":" + s.port + path
}

// handle adds a route for path, served after the hit is recorded.
func (s *site) handle(path string, h http.HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes[path] = h
}

// onHit calls f for every request, as it arrives.
func (s *site) onHit(f func(hit)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notify = f
}

func (s *site) serve(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	h := hit{At: time.Now(), Arrived: arrivedAt(r), Host: host, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery}
	s.mu.Lock()
	s.hits = append(s.hits, h)
	notify, route := s.notify, s.routes[r.URL.Path]
	s.mu.Unlock()
	if notify != nil {
		notify(h)
	}
	w.Header().Set("Cache-Control", "no-store")
	if route != nil {
		route(w, r)
		return
	}
	defaultRoutes(w, r)
}

// hitsOf returns the recorded requests for which keep is true.
func (s *site) hitsOf(keep func(hit) bool) []hit {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []hit
	for _, h := range s.hits {
		if keep == nil || keep(h) {
			out = append(out, h)
		}
	}
	return out
}

// documents returns the top-level page loads of host: paths under /page.
func (s *site) documents(host string) []hit {
	return s.hitsOf(func(h hit) bool { return h.Host == host && strings.HasPrefix(h.Path, "/page") })
}

// defaultRoutes is the site's content. Every page is no-store and unique by
// its query, so the browser always asks the server.
func defaultRoutes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch {
	case strings.HasPrefix(r.URL.Path, "/page"):
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><title>%s</title><body><h1>%s</h1>", r.URL.RawQuery, r.URL.Path)
		if q.Get("sub") != "" {
			// Subresources of the page's own host: never held.
			fmt.Fprintf(w, `<iframe src="/frame?%[1]s"></iframe><img src="/img?%[1]s"><script src="/script?%[1]s"></script>
<script>fetch("/fetch?%[1]s"); var x = new XMLHttpRequest(); x.open("GET", "/xhr?%[1]s"); x.send();</script>`, r.URL.RawQuery)
		}
		if to := q.Get("xframe"); to != "" {
			// An iframe from another host, which gets a process and a
			// target of its own.
			fmt.Fprintf(w, `<iframe id="xframe" src="%s"></iframe>`, htmlEscape(to))
		}
		if to := q.Get("link"); to != "" {
			fmt.Fprintf(w, `<a id="link" href="%s">next</a>`, htmlEscape(to))
		}
		if to := q.Get("form"); to != "" {
			fmt.Fprintf(w, `<form id="get" action="%[1]s" method="get"><input name="f" value="get"><button id="getbtn">get</button></form>
<form id="post" action="%[1]s" method="post"><input name="f" value="post"><button id="postbtn">post</button></form>`, htmlEscape(to))
		}
		if to := q.Get("meta"); to != "" {
			fmt.Fprintf(w, `<meta http-equiv="refresh" content="0; url=%s">`, htmlEscape(to))
		}
		if q.Get("unload") != "" {
			// An unload handler keeps the page out of the back/forward
			// cache, so going back asks the server again.
			fmt.Fprint(w, `<script>addEventListener("unload", function () {});</script>`)
		}
		fmt.Fprint(w, "</body>")
	case r.URL.Path == "/frame":
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!doctype html><title>frame</title>frame")
	case r.URL.Path == "/img":
		w.Header().Set("Content-Type", "image/gif")
		w.Write([]byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"))
	case r.URL.Path == "/script":
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, "window.scriptRan = true;")
	case r.URL.Path == "/redirect":
		code := http.StatusFound
		fmt.Sscan(q.Get("code"), &code)
		http.Redirect(w, r, q.Get("to"), code)
	case r.URL.Path == "/status":
		code := http.StatusOK
		fmt.Sscan(q.Get("code"), &code)
		if ra := q.Get("ra"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		for _, h := range q["hdr"] { // NAME:VALUE, such as cf-mitigated:challenge; repeatable
			name, value, _ := strings.Cut(h, ":")
			w.Header().Add(name, value)
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(code)
		fmt.Fprintf(w, "<!doctype html><title>%d</title>status %d", code, code)
	default:
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "ok")
	}
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", `"`, "&quot;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// relayed is an in-process relay in front of the shared Chromium.
type relayed struct {
	url  string // http://127.0.0.1:PORT
	host string // 127.0.0.1:PORT
	p    *relay.Proxy
	srv  *http.Server // serves p on url
	logs *fakebrowser.Logs
}

// startRelay serves a relay with a limiter of its own.
func startRelay(t testing.TB, cfg limiter.Config, opts ...func(*relay.Proxy)) *relayed {
	t.Helper()
	return startRelayTo(t, browser.http, cfg, opts...)
}

func startRelayTo(t testing.TB, upstream string, cfg limiter.Config, opts ...func(*relay.Proxy)) *relayed {
	t.Helper()
	logs := &fakebrowser.Logs{}
	// at_ns puts each line on the clock the site's hits are on, to the
	// nanosecond (the timestamp has whole seconds).
	atNanos := zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) { e.Int64("at_ns", time.Now().UnixNano()) })
	log := zerolog.New(logs).Level(zerolog.DebugLevel).Hook(atNanos).With().Timestamp().Logger()
	p := startProxy(t, upstream, cfg, &log, opts...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	r := &relayed{url: "http://" + ln.Addr().String(), host: ln.Addr().String(), p: p, srv: srv, logs: logs}
	t.Cleanup(func() {
		srv.Close()
		p.Close()
		// Every navigation of the relay's clients was held, but for what the
		// browser itself let go when a connection dropped, which the relay
		// logs.
		if got, want := p.Metrics.Unheld(), r.unheldLogged(); got != want {
			t.Errorf("unheld navigations: %d, want %d (what the relay logged as released by the browser)", got, want)
		}
		if t.Failed() || os.Getenv("E2E_RELAY_LOG") != "" {
			t.Logf("relay log:\n%s", logs.String())
		}
	})
	return r
}

// startProxy starts a relay in front of upstream, with a limiter of its
// own and log, as opts set it up; the caller serves it and closes it.
func startProxy(t testing.TB, upstream string, cfg limiter.Config, log *zerolog.Logger, opts ...func(*relay.Proxy)) *relay.Proxy {
	t.Helper()
	p := &relay.Proxy{Upstream: upstream, Limiter: policy.New(policy.Config{Default: cfg}, limiter.New(cfg)), Log: log}
	for _, o := range opts {
		o(p)
	}
	if p.Metrics == nil {
		p.Metrics = relay.NewMetrics(p.Limiter)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("starting the relay: %v", err)
	}
	return p
}

// unheldLogged adds up the navigations the relay logged as reaching the
// network unheld.
func (r *relayed) unheldLogged() int {
	n := 0
	for _, l := range strings.Split(r.logs.String(), "\n") {
		var m struct {
			Message     string `json:"message"`
			Navigations int    `json:"navigations"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Message == "navigations reached the network unheld" {
			n += m.Navigations
		}
	}
	return n
}

// fixed is a fixed-interval limiter configuration.
func fixed(interval time.Duration, burst int) limiter.Config {
	return limiter.Config{Mode: limiter.Fixed, Interval: interval, Burst: burst}
}

// runNode runs e2e/js/<script> with node and the given environment, and
// returns its standard output. The script fails the test by exiting non-zero.
func runNode(t testing.TB, timeout time.Duration, script string, env ...string) []byte {
	t.Helper()
	nodeReady(t)
	return runScript(t, timeout, "node", filepath.Join("js", script), env...)
}

// nodeReady fails the test if e2e/'s node packages are not installed.
func nodeReady(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("node_modules", "puppeteer-core")); err != nil {
		t.Fatalf("node packages missing: run npm ci in e2e/ first (%v)", err)
	}
}

// nodeProc is an e2e/js script running beside the test.
type nodeProc struct {
	cmd            *exec.Cmd
	startAt        time.Time
	stdout, stderr fakebrowser.Logs
	exited         chan struct{} // closed once it exited
	err            error         // Wait's, set before exited is closed
}

// startNode starts e2e/js/<script> with env added to its environment.
// What it prints goes to stdout and, when onLine is not nil, line by line
// (up to 4 MiB each) to onLine too, on the goroutine that reads them. It
// is killed at cleanup if it still runs; a failed test logs its stderr.
func startNode(t *testing.T, script string, onLine func([]byte), env ...string) *nodeProc {
	t.Helper()
	nodeReady(t)
	p := &nodeProc{exited: make(chan struct{})}
	p.cmd = exec.Command("node", filepath.Join("js", script))
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = &p.stderr
	var out io.Reader
	if onLine == nil {
		p.cmd.Stdout = &p.stdout // as it comes, however long its lines
	} else {
		pipe, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		out = pipe
	}
	p.startAt = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		if out != nil {
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 64<<10), 4<<20)
			for sc.Scan() {
				p.stdout.Write(append(sc.Bytes(), '\n'))
				onLine(sc.Bytes())
			}
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() && p.stderr.String() != "" {
			t.Logf("%s stderr:\n%s", script, p.stderr.String())
		}
	})
	return p
}

// venvPython is the Python of the repository's virtual environment, where
// make deps installs Lightpanda and e2e/py/requirements.txt.
var venvPython = filepath.Join("..", ".venv", "bin", "python")

// runPython runs e2e/py/<script> with the virtual environment's Python and
// the given environment, and returns its standard output. The script fails
// the test by exiting non-zero.
func runPython(t testing.TB, timeout time.Duration, script string, env ...string) []byte {
	t.Helper()
	pythonReady(t)
	return runScript(t, timeout, venvPython, filepath.Join("py", script), env...)
}

// pythonReady fails the test unless the virtual environment has the
// packages of e2e/py/requirements.txt.
func pythonReady(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(venvPython, "-c", "import selenium, playwright, scrapy, scrapy_playwright").CombinedOutput(); err != nil {
		t.Fatalf("Python packages missing: run `make py-deps` at the repository root (e2e/py/requirements.txt into .venv): %v: %s", err, out)
	}
}

// runScript runs interpreter with script and the given environment added to
// the test's, and returns its standard output.
func runScript(t testing.TB, timeout time.Duration, interpreter, script string, env ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, interpreter, script)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstderr:\n%s\nstdout:\n%s", filepath.Base(interpreter), script, err, stderr.String(), stdout.String())
	}
	if stderr.Len() > 0 {
		t.Logf("%s %s stderr:\n%s", filepath.Base(interpreter), script, stderr.String())
	}
	return stdout.Bytes()
}
