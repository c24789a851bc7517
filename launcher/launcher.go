// Package launcher starts browsers from the command line a user gave after
// --, keeps each running (restarting it when it dies, giving up when it
// keeps dying at once), stops them with their helpers, and learns where
// each serves CDP from what the browser itself announces: Chromium's
// "DevTools listening on ws://…" line or its DevToolsActivePort file,
// lightpanda serve's "server running" line. It knows nothing of CDP
// messages, the relay or the limiter.
package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/redact"
)

// Browser is one browser process started from a command line, and the
// processes that replace it when it dies. Its methods are safe for
// concurrent use; create it with Start or StartGroup.
type Browser struct {
	argv  []string // as given, placeholders unfilled
	index int      // 1-based, in its group
	name  string   // for logs and errors: the command's base name
	o     Options
	log   zerolog.Logger
	tail  *tailBuffer // the last of its output, for errors

	mu       sync.Mutex
	cmd      *exec.Cmd     // guarded by mu; the current process
	cur      *process      // guarded by mu; what the current process announced
	capacity int           // guarded by mu; what the current process's command says it takes
	stopping bool          // guarded by mu; set once by Stop: nothing starts after it
	err      error         // guarded by mu; why it was given up
	stop     chan struct{} // closed by Stop; ends the wait before a restart
	first    *process      // set once by Start: the first process
	exited   chan struct{} // closed when the browser is given up or stopped
	done     chan struct{} // closed when the supervising goroutine returns
}

// process is one run of the command and what it said about its endpoint.
type process struct {
	pid   int
	ready chan struct{} // closed once endpoint or err is set
	gone  chan struct{} // closed once the process has exited (after ready)
	next  chan struct{} // closed when a later process replaces it, or none will
	once  sync.Once
	// capacity is how many clients it takes at once, as it announced it;
	// 0 until it does (lightpanda serve's pretty log says it after the
	// address).
	capacity atomic.Int64
	// Set once before ready is closed.
	endpoint string
	err      error
}

func newProcess() *process {
	return &process{ready: make(chan struct{}), gone: make(chan struct{}), next: make(chan struct{})}
}

// settle records the process's endpoint, or why it has none; the first
// call wins.
func (pr *process) settle(endpoint string, err error) bool {
	won := false
	pr.once.Do(func() {
		pr.endpoint, pr.err, won = endpoint, err, true
		close(pr.ready)
	})
	return won
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// HeadlessChromium are the flags Chromium needs to run headless on a
// server, as root too, without calling out to Google's services.
var HeadlessChromium = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"}

// FindChromium looks for Chromium on PATH.
func FindChromium() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium on PATH: install it (apt-get install chromium) or pass --browser PATH")
}

// FindBrowser resolves a browser named on the command line: "" or
// "chromium" is Chromium on PATH; "lightpanda" is $LIGHTPANDA, else the
// `lightpanda` command of the project's .venv (make lightpanda), else one
// on PATH; anything else is a path, taken as it is.
func FindBrowser(name string) (string, error) {
	switch name {
	case "", "chromium":
		return FindChromium()
	case "lightpanda":
		if p := os.Getenv("LIGHTPANDA"); p != "" {
			return p, nil
		}
		if p := filepath.Join(".venv", "bin", "lightpanda"); fileExists(p) {
			return filepath.Abs(p)
		}
		if p, err := exec.LookPath("lightpanda"); err == nil {
			return p, nil
		}
		return "", errors.New("no Lightpanda: run `make lightpanda` (lightpanda==1.0.2 from PyPI into .venv), pip install lightpanda in a virtual environment, or pass --browser PATH")
	}
	return name, nil
}

// IsLightpanda says whether path runs Lightpanda: its binary, or the PyPI
// package's command that execs it.
func IsLightpanda(path string) bool {
	return strings.Contains(strings.ToLower(filepath.Base(path)), "lightpanda")
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// maxQuickExits is how many times in a row a browser may die within
// quickExit of starting before it is given up; restartDelay is the pause
// before each restart, stopGrace how long a stopped browser has between
// SIGTERM and SIGKILL.
const (
	maxQuickExits = 3
	quickExit     = 10 * time.Second
)

// Variables so that tests can shorten them.
var (
	restartDelay = time.Second
	stopGrace    = 5 * time.Second
)

// errStopping is start's answer once Stop has been called.
var errStopping = errors.New("launcher: stopping")

// Start starts argv as one browser and supervises it until Stop. It does
// not wait for the browser to announce its endpoint: Endpoint does.
func Start(argv []string, log zerolog.Logger) (*Browser, error) {
	b := newBrowser(argv, 1, Options{Log: log})
	if err := b.start(); err != nil {
		return nil, err
	}
	go b.supervise()
	return b, nil
}

func newBrowser(argv []string, index int, o Options) *Browser {
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	name := filepath.Base(argv[0])
	log := o.Log.With().Str("browser", name)
	if o.Count > 1 {
		log = log.Int("index", index)
		name = fmt.Sprintf("%s %d of %d", name, index, o.Count)
	}
	return &Browser{argv: argv, index: index, name: name, o: o, log: log.Logger(),
		tail: &tailBuffer{max: 4 << 10}, stop: make(chan struct{}), exited: make(chan struct{}), done: make(chan struct{})}
}

// start starts one process of the command, unless Stop has been called.
func (b *Browser) start() error {
	argv, err := fill(b.argv, b.index)
	if err != nil {
		return err
	}
	k := kindOf(argv)
	pr := newProcess()
	out := &lineWriter{tail: b.tail}
	if k.watch != nil {
		out.line = k.watch(pr)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so stopping it stops its helpers too; killed
	// with the relay if the relay is killed. Helpers that keep its output
	// open do not keep Wait waiting.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	began := time.Now()

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopping {
		return errStopping
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("launcher: starting %s: %w", b.name, err)
	}
	pr.pid = cmd.Process.Pid
	if b.cur != nil {
		close(b.cur.next)
	}
	b.cmd, b.cur = cmd, pr
	b.capacity = k.capacity
	if b.first == nil {
		b.first = pr
	}
	b.log.Info().Int("pid", pr.pid).Strs("argv", redact.Args(argv)).Msg("browser started")
	if ep := k.static; ep != "" {
		pr.settle(ep, nil)
	} else if k.activePort != "" {
		go watchActivePort(pr, k.activePort, began)
	}
	go b.await(pr)
	return nil
}

// await waits for the process to announce its endpoint, up to
// StartTimeout, and kills a process that did not or said it cannot serve
// CDP: supervise then restarts it like one that died.
func (b *Browser) await(pr *process) {
	t := time.NewTimer(b.o.StartTimeout)
	defer t.Stop()
	select {
	case <-pr.ready:
	case <-t.C:
		pr.settle("", fmt.Errorf("%s did not say where it serves CDP within %v%s%s", b.name, b.o.StartTimeout, b.o.flag(), b.lastWords()))
	}
	if pr.err == nil {
		b.log.Info().Int("pid", pr.pid).Str("endpoint", redact.URL(pr.endpoint)).Msg("browser listening")
		return
	}
	if !closed(pr.gone) {
		b.log.Warn().Int("pid", pr.pid).Err(pr.err).Msg("browser cannot be reached: killing it")
		syscall.Kill(-pr.pid, syscall.SIGKILL)
	}
}

func (b *Browser) supervise() {
	defer close(b.done)
	quick := 0
	for {
		b.mu.Lock()
		cmd, pr := b.cmd, b.cur
		b.mu.Unlock()
		began := time.Now()
		err := cmd.Wait()
		served := !pr.settle("", fmt.Errorf("%s exited (%v) before saying where it serves CDP%s", b.name, err, b.lastWords())) && pr.err == nil
		close(pr.gone)
		syscall.Kill(-pr.pid, syscall.SIGKILL) // helpers it left behind
		if b.isStopping() {
			b.giveUp(nil)
			return
		}
		switch {
		case served && err == nil:
			// It served, then exited of its own accord: closed by a
			// client (Browser.close, let through with
			// --allow-browser-close), not a crash, however soon.
			quick = 0
			b.log.Info().Int("pid", pr.pid).Msg("browser exited normally: restarting it")
		case time.Since(began) < quickExit:
			quick++
		default:
			quick = 0
		}
		if !served || err != nil {
			b.log.Warn().Err(err).Int("pid", pr.pid).Str("output", b.tail.String()).Msg("browser exited")
		}
		if quick >= maxQuickExits {
			b.giveUp(fmt.Errorf("%s exited %d times in a row within %v of starting; last: %v%s",
				b.name, quick, quickExit, err, b.lastWords()))
			return
		}
		// Stop may come now: it must not wait out the delay, and no
		// process may start after it (start checks under mu).
		select {
		case <-time.After(restartDelay):
		case <-b.stop:
			b.giveUp(nil)
			return
		}
		if err := b.start(); err != nil {
			if errors.Is(err, errStopping) {
				err = nil
			}
			b.giveUp(err)
			return
		}
	}
}

func (b *Browser) isStopping() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopping
}

// giveUp ends the browser's life: err says why, nil when it was stopped.
func (b *Browser) giveUp(err error) {
	b.mu.Lock()
	b.err = err
	close(b.cur.next) // no process follows the last one
	b.mu.Unlock()
	close(b.exited)
}

// lastWords is the end of the browser's output, on one line, for errors.
func (b *Browser) lastWords() string {
	lines := strings.Split(b.tail.String(), "\n")
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < 2; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			if len(l) > 300 {
				l = l[:300] + "…"
			}
			keep = append([]string{l}, keep...)
		}
	}
	if len(keep) == 0 {
		return ""
	}
	return "; its output ends: " + strings.Join(keep, " / ")
}

// Exited is closed when the browser is given up on, or stopped.
func (b *Browser) Exited() <-chan struct{} { return b.exited }

// Bind returns a context that ends with parent, or when the browser is
// given up on, with Err as its cause.
func (b *Browser) Bind(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go b.cancelOnExit(ctx, cancel)
	return ctx, func() { cancel(nil) }
}

// cancelOnExit cancels ctx with Err as its cause when the browser is
// given up on; it returns then, or when ctx ends first.
func (b *Browser) cancelOnExit(ctx context.Context, cancel context.CancelCauseFunc) {
	select {
	case <-b.exited:
		cancel(b.Err())
	case <-ctx.Done():
	}
}

// Err says why the browser was given up on.
func (b *Browser) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		if b.stopping {
			return fmt.Errorf("launcher: %s stopped", b.name)
		}
		return fmt.Errorf("launcher: %s exited", b.name)
	}
	return fmt.Errorf("launcher: %w", b.err)
}

// Endpoint returns where the browser serves CDP now, as it announced it:
// the ws:// URL of Chromium's browser endpoint, or http://host:port. It
// waits for the current process to announce it and, when that process
// dies or cannot serve CDP, for the next one, until ctx ends or the
// browser is given up on.
func (b *Browser) Endpoint(ctx context.Context) (string, error) {
	for {
		if closed(b.exited) { // given up: its last process may look settled
			return "", b.Err()
		}
		b.mu.Lock()
		pr := b.cur
		b.mu.Unlock()
		select {
		case <-pr.ready:
		case <-pr.gone:
		case <-b.exited:
			return "", b.Err()
		case <-ctx.Done():
			return "", fmt.Errorf("launcher: waiting for %s to say where it serves CDP: %w", b.name, ctx.Err())
		}
		if pr.err == nil && !closed(pr.gone) {
			return pr.endpoint, nil
		}
		select {
		case <-pr.next:
		case <-ctx.Done():
			err := ctx.Err()
			if pr.err != nil {
				err = fmt.Errorf("%w; last: %w", err, pr.err)
			}
			return "", fmt.Errorf("launcher: waiting for %s to restart: %w", b.name, err)
		}
	}
}

// Capacity reports how many CDP clients the browser takes at once: what
// its current process announced (lightpanda serve's
// max_browser_connections), else what its command says
// (--cdp-max-connections, Lightpanda's default 16); 0 when it has no such
// bound (Chromium).
func (b *Browser) Capacity() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.cur.capacity.Load(); n > 0 {
		return int(n)
	}
	return b.capacity
}

// String names the browser, for logs.
func (b *Browser) String() string { return b.name }

// Stop ends the browser: SIGTERM to its process group, then SIGKILL after
// stopGrace. It returns once the browser and its helpers are gone; no
// process is started after it, even when it comes during a restart.
func (b *Browser) Stop() {
	b.mu.Lock()
	already := b.stopping
	if !already {
		b.stopping = true
		close(b.stop)
	}
	cmd := b.cmd // the last process: start checks stopping under mu
	b.mu.Unlock()
	if already {
		<-b.done
		return
	}
	pid := cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(stopGrace):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-b.done
	}
	// Helpers left in the group after the browser itself exited.
	syscall.Kill(-pid, syscall.SIGKILL)
	b.log.Info().Msg("browser stopped")
}

// lineWriter keeps a process's output in tail and hands each complete
// line to line.
type lineWriter struct {
	tail *tailBuffer
	line func(string)

	mu      sync.Mutex
	partial []byte // guarded by mu
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.tail.Write(p)
	if w.line == nil {
		return len(p), nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	if len(w.partial) > 64<<10 { // no line is that long; do not grow without bound
		w.partial = w.partial[:0]
	}
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}
