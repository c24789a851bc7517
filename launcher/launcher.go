// Package launcher starts a browser from the command line a user gave after
// --, keeps it running (restarting it when it dies, giving up when it keeps
// dying at once), stops it with its helpers, and works out where it serves
// CDP. It knows nothing of CDP messages, the relay or the limiter.
package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/redact"
)

// Browser is a browser started from a command line. It is restarted when
// it exits, unless it keeps dying at once. Its methods are safe for
// concurrent use; create it with Start.
type Browser struct {
	argv []string
	log  zerolog.Logger

	mu       sync.Mutex
	cmd      *exec.Cmd     // guarded by mu; the running process
	stopping bool          // guarded by mu
	err      error         // guarded by mu; why it was given up
	tail     *tailBuffer   // the last of its output, for errors
	exited   chan struct{} // closed when the browser is given up or stopped
	done     chan struct{} // closed when the supervising goroutine returns
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

// maxQuickExits is how many times in a row a browser may die within
// quickExit of starting before the relay gives up on it.
const (
	maxQuickExits = 3
	quickExit     = 10 * time.Second
	stopGrace     = 5 * time.Second
)

// Start starts argv as a browser and supervises it until Stop.
func Start(argv []string, log zerolog.Logger) (*Browser, error) {
	b := &Browser{argv: argv, log: log.With().Str("browser", filepath.Base(argv[0])).Logger(),
		tail: &tailBuffer{max: 4 << 10}, exited: make(chan struct{}), done: make(chan struct{})}
	if err := b.start(); err != nil {
		return nil, err
	}
	go b.supervise()
	return b, nil
}

func (b *Browser) start() error {
	cmd := exec.Command(b.argv[0], b.argv[1:]...)
	cmd.Stdout, cmd.Stderr = b.tail, b.tail
	// Its own process group, so stopping it stops its helpers too; killed
	// with the relay if the relay is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the browser: %w", err)
	}
	b.mu.Lock()
	b.cmd = cmd
	b.mu.Unlock()
	b.log.Info().Int("pid", cmd.Process.Pid).Strs("argv", redact.Args(b.argv)).Msg("browser started")
	return nil
}

func (b *Browser) supervise() {
	defer close(b.done)
	quick := 0
	for {
		b.mu.Lock()
		cmd := b.cmd
		b.mu.Unlock()
		began := time.Now()
		err := cmd.Wait()
		b.mu.Lock()
		stopping := b.stopping
		b.mu.Unlock()
		if stopping {
			close(b.exited)
			return
		}
		if time.Since(began) < quickExit {
			quick++
		} else {
			quick = 0
		}
		b.log.Warn().Err(err).Str("output", b.tail.String()).Msg("browser exited")
		if quick >= maxQuickExits {
			b.mu.Lock()
			b.err = fmt.Errorf("the browser exited %d times in a row within %v of starting; last: %v; its output ends:\n%s",
				quick, quickExit, err, b.tail.String())
			b.mu.Unlock()
			close(b.exited)
			return
		}
		time.Sleep(time.Second)
		if err := b.start(); err != nil {
			b.mu.Lock()
			b.err = err
			b.mu.Unlock()
			close(b.exited)
			return
		}
	}
}

// Exited is closed when the browser is given up on, or stopped.
func (b *Browser) Exited() <-chan struct{} { return b.exited }

// Bind returns a context that ends with parent, or when the browser is
// given up on, with Err as its cause.
func (b *Browser) Bind(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-b.exited:
			cancel(b.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Err says why the browser was given up on.
func (b *Browser) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		return errors.New("the browser exited")
	}
	return b.err
}

// Stop ends the browser: SIGTERM to its process group, then SIGKILL after
// stopGrace.
func (b *Browser) Stop() {
	b.mu.Lock()
	b.stopping = true
	cmd := b.cmd
	b.mu.Unlock()
	select {
	case <-b.exited:
		<-b.done
		return
	default:
	}
	pid := cmd.Process.Pid
	syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(stopGrace):
		syscall.Kill(-pid, syscall.SIGKILL)
		<-b.exited
	}
	<-b.done
	// Helpers left in the group after the browser itself exited.
	syscall.Kill(-pid, syscall.SIGKILL)
	b.log.Info().Msg("browser stopped")
}

// Endpoint finds where a browser command will serve CDP: Chrome's
// --remote-debugging-port=N or lightpanda serve's --host/--port, else def.
func Endpoint(argv []string, def string) string {
	host, port := "127.0.0.1", ""
	serve := false
	for i, a := range argv {
		name, val, hasVal := strings.Cut(a, "=")
		if !hasVal && i+1 < len(argv) {
			val = argv[i+1]
		}
		switch name {
		case "--remote-debugging-port":
			if n, err := strconv.Atoi(val); err == nil && n > 0 && hasVal {
				return "http://127.0.0.1:" + strconv.Itoa(n)
			}
		case "--remote-debugging-address", "--host":
			if val != "" && val != "0.0.0.0" && val != "::" {
				host = val
			}
		case "--port":
			port = val
		case "serve":
			serve = true
		}
	}
	if serve && port != "" {
		if _, err := strconv.Atoi(port); err == nil {
			return "http://" + hostPort(host, port)
		}
	}
	return def
}

func hostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return host + ":" + port
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
