//go:build e2e

package e2e

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// floor is the floor of any relay: a TCP proxy that copies bytes both ways
// and does nothing else (no websocket, no CDP). What it costs a client is
// one more hop each way, the least any relay in front of a browser costs;
// the benchmarks quote the relay against it (relay ÷ floor) beside the
// direct connection (relay ÷ direct). Each connection it accepts goes to
// the next of its upstreams in turn.
type floor struct {
	ln  net.Listener
	ups []string // host:port
	wg  sync.WaitGroup

	mu   sync.Mutex
	next int
}

// startFloor serves a floor in front of upstreams (http://host:port or
// ws://host:port/…) until the benchmark ends, and returns its http://
// address.
func startFloor(tb testing.TB, upstreams ...string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f := &floor{ln: ln}
	for _, u := range upstreams {
		u = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "ws://")
		host, _, _ := strings.Cut(u, "/")
		f.ups = append(f.ups, host)
	}
	f.wg.Add(1)
	go f.serve()
	tb.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return "http://" + ln.Addr().String()
}

// connectEnv is what a client script is given to connect through run name
// at url (http://host:port): CDP_URL, and for the floor in front of
// Lightpanda WS_URL too, the floor's ws:// URL. Lightpanda's
// /json/version names its own address whatever Host it was asked with,
// so a client that asks the floor for it (puppeteer.connect's
// browserURL) goes past the floor to Lightpanda itself; Lightpanda
// serves CDP at /.
func connectEnv(url, name string, lightpanda bool) []string {
	env := []string{"CDP_URL=" + url}
	if lightpanda && name == "floor" {
		env = append(env, "WS_URL=ws"+strings.TrimPrefix(url, "http")+"/")
	}
	return env
}

func (f *floor) serve() {
	defer f.wg.Done()
	for {
		a, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		up := f.ups[f.next%len(f.ups)]
		f.next++
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer a.Close()
			b, err := net.Dial("tcp", up)
			if err != nil {
				return
			}
			defer b.Close()
			done := make(chan struct{})
			go func() { io.Copy(b, a); b.(*net.TCPConn).CloseWrite(); close(done) }()
			io.Copy(a, b)
			a.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}
