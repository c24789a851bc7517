package store

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/store/redistest"
)

// server is a redis-server of a test's own, on a free loopback port, with
// no persistence unless asked, in a temporary directory. It can be killed
// and started again on the same port.
type server struct {
	t       testing.TB
	bin     string
	dir     string
	port    int
	persist bool // an append-only file, synced at every write, brings the keys back after a restart

	mu  sync.Mutex
	cmd *exec.Cmd         // guarded by mu; nil while stopped
	out *fakebrowser.Logs // guarded by mu; what the running server printed
}

// startRedis starts a redis-server for t and stops it when t ends. A
// machine without redis-server fails the test: the store's tests are
// worthless without a real server.
func startRedis(t testing.TB) *server {
	t.Helper()
	return startRedisWith(t, false)
}

// startPersistentRedis is startRedis with an append-only file: a restart
// brings the keys back, but not the script cache.
func startPersistentRedis(t testing.TB) *server {
	t.Helper()
	return startRedisWith(t, true)
}

func startRedisWith(t testing.TB, persist bool) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (%v): the store tests need a real Redis; install it with `apt-get install redis-server`", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{t: t, bin: bin, dir: t.TempDir(), port: port, persist: persist}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// URL is the server's address as NewRedis takes it.
func (s *server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// start starts the server and waits until it answers PING.
func (s *server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatal("redis-server already running")
	}
	s.out = new(fakebrowser.Logs)
	appendOnly := []string{"--appendonly", "no"}
	if s.persist {
		appendOnly = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	cmd := exec.Command(s.bin, append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--dir", s.dir,
		"--daemonize", "no", "--loglevel", "warning"}, appendOnly...)...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for { // until it listens: go-redis would log every refused dial
		conn, err := net.DialTimeout("tcp", s.addr(), time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on port %d does not listen: %v\n%s", s.port, err, s.out)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	if err := redistest.Ping(c, deadline, 10*time.Millisecond); err != nil {
		s.t.Fatalf("redis-server on port %d does not answer: %v\n%s", s.port, err, s.out)
	}
}

// stop kills the server, as a crash would, and waits for it to exit.
func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// client is a plain client of the server, for the tests to look at keys.
func (s *server) client() *redis.Client {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr()})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// pause stops the server without closing its connections, as an overloaded
// or partitioned server looks to a client; resume lets it go on.
func (s *server) pause() { s.signal(syscall.SIGSTOP) }

func (s *server) resume() { s.signal(syscall.SIGCONT) }

func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatal("redis-server is not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signalling redis-server: %v", err)
	}
}

// slowWay starts a TCP proxy to s that holds every byte on its way to
// Redis for delay (answers come back at once) and returns its redis:// URL.
func (s *server) slowWay(t testing.TB, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", s.addr())
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); r.Close() })
			go io.Copy(c, r)
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						r.Close()
						return
					}
					time.Sleep(delay)
					if _, err := r.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "redis://" + ln.Addr().String() + "/0"
}
