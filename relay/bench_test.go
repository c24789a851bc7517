package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/dashboard"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// echoBrowser is the fastest possible CDP browser: it answers every command
// at once with an empty result, and answers "Bench.big" with a message of
// the asked size (a reply, or an event when params.event is set).
type echoBrowser struct {
	srv *httptest.Server
}

func newEchoBrowser(tb testing.TB) *echoBrowser {
	tb.Helper()
	up := websocket.Upgrader{ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}
	eb := &echoBrowser{}
	eb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/json/version" {
			fmt.Fprintf(w, `{"Browser":"Echo/1.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/echo"}`, r.Host)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadLimit(1 << 30)
		var out []byte
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				return
			}
			id := benchID(msg)
			if strings.Contains(string(msg), `"Bench.big"`) {
				var p struct {
					Params struct {
						Size  int  `json:"size"`
						Event bool `json:"event"`
					} `json:"params"`
				}
				json.Unmarshal(msg, &p)
				out = bigMessage(out[:0], id, p.Params.Size, p.Params.Event)
			} else {
				out = append(append(append(out[:0], `{"id":`...), id...), `,"result":{}}`...)
			}
			if err := c.WriteMessage(websocket.TextMessage, out); err != nil {
				return
			}
		}
	}))
	tb.Cleanup(eb.srv.Close)
	return eb
}

// benchID returns the raw id of a command written as {"id":N,...}.
func benchID(msg []byte) []byte {
	s := string(msg)
	i := strings.Index(s, `"id":`) + 5
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return msg[i:j]
}

// bigMessage builds a message of about size bytes: a screenshot-like reply,
// or a Network-event-like one when event is set.
func bigMessage(out, id []byte, size int, event bool) []byte {
	if event {
		out = append(out, `{"method":"Bench.bigEvent","params":{"data":"`...)
	} else {
		out = append(append(append(out, `{"id":`...), id...), `,"result":{"data":"`...)
	}
	for range size {
		out = append(out, 'A')
	}
	return append(out, `"}}`...)
}

func (eb *echoBrowser) wsURL() string {
	return "ws" + strings.TrimPrefix(eb.srv.URL, "http") + "/devtools/browser/echo"
}

// benchRelay serves a relay in front of eb (no limiter: nothing to hold).
func benchRelay(tb testing.TB, eb *echoBrowser) string {
	tb.Helper()
	nop := zerolog.Nop()
	p := &Proxy{Upstream: eb.srv.URL, Log: &nop, MaxMessageSize: 1 << 30}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(p)
	tb.Cleanup(func() {
		srv.Close()
		p.Close()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/devtools/browser/echo"
}

func benchDial(tb testing.TB, url string) *websocket.Conn {
	tb.Helper()
	d := websocket.Dialer{ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}
	c, _, err := d.Dial(url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	c.SetReadLimit(1 << 30)
	tb.Cleanup(func() { c.Close() })
	return c
}

// benchFloor serves the floor of any relay in front of eb: a TCP proxy
// that copies bytes both ways and does nothing else (no websocket, no
// CDP), one more hop each way. It returns the URL to dial through it.
func benchFloor(tb testing.TB, eb *echoBrowser) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	up := strings.TrimPrefix(eb.srv.URL, "http://")
	var wg sync.WaitGroup
	tb.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			a, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer a.Close()
				b, err := net.Dial("tcp", up)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { io.Copy(b, a); b.(*net.TCPConn).CloseWrite() }()
				io.Copy(a, b)
			})
		}
	})
	return "ws://" + ln.Addr().String() + "/devtools/browser/echo"
}

// targets runs f against the direct connection, through the floor (a
// proxy that copies bytes) and through the relay.
func targets(b *testing.B, f func(b *testing.B, url string)) {
	eb := newEchoBrowser(b)
	b.Run("direct", func(b *testing.B) { f(b, eb.wsURL()) })
	b.Run("floor", func(b *testing.B) { f(b, benchFloor(b, eb)) })
	b.Run("relay", func(b *testing.B) { f(b, benchRelay(b, eb)) })
}

const evaluate = `{"id":%d,"method":"Runtime.evaluate","params":{"expression":"1+1","returnByValue":true},"sessionId":"8E2C4AA1F1D6B2A1C6F2C0B7D1E0A9F3"}`

// BenchmarkRoundTrip sends one command and waits for its reply, one at a
// time: the latency a command pays. It reports p50 and p99 per round trip.
func BenchmarkRoundTrip(b *testing.B) {
	targets(b, roundTrips)
}

func roundTrips(b *testing.B, url string) {
	c := benchDial(b, url)
	lat := make([]time.Duration, 0, b.N)
	var msg []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		msg = fmt.Appendf(msg[:0], evaluate, i+1)
		t := time.Now()
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.ReadMessage(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkRoundTripPage is BenchmarkRoundTrip through a relay that holds
// navigations (a limiter, metrics, its own browser connections) and
// remembers as much as its page can show (50 hosts in the limiter and
// the timeline, 1,200 navigations each), with its page closed, open (as
// the page polls: /status once a second for what changed), and open ten
// times over asking for everything each time (a full /status, about 5 MB,
// every 100 ms).
func BenchmarkRoundTripPage(b *testing.B) {
	eb := newEchoBrowser(b)
	for _, c := range []struct {
		name  string
		every time.Duration
		full  bool
	}{{"closed", 0, false}, {"open", time.Second, false}, {"open-full-10x", 100 * time.Millisecond, true}} {
		b.Run(c.name, func(b *testing.B) {
			ws, base := pageRelay(b, eb)
			if c.every > 0 {
				stop := pollStatus(b, base, c.every, c.full)
				defer func() {
					polls, bytes := stop()
					b.ReportMetric(float64(polls), "polls")
					b.ReportMetric(float64(bytes)/float64(polls)/1e3, "kB/poll")
				}()
			}
			roundTrips(b, ws)
		})
	}
}

// pageRelay serves a relay in front of eb with a limiter and metrics, its
// limiter and timeline full, and returns its browser websocket URL and its
// address.
func pageRelay(b *testing.B, eb *echoBrowser) (ws, base string) {
	b.Helper()
	nop := zerolog.Nop()
	lim := limiter.New(limiter.Config{})
	p := &Proxy{Upstream: eb.srv.URL, Log: &nop, MaxMessageSize: 1 << 30, Limiter: withPolicy(lim, limiter.Config{}), Metrics: NewMetrics(lim)}
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for h := range dashboard.DefaultMaxBuckets {
		host := fmt.Sprintf("host%d.test", h)
		for i := range dashboard.DefaultPerBucket {
			at := now.Add(time.Duration(i-dashboard.DefaultPerBucket) * 100 * time.Millisecond)
			r := lim.Reserve(host, at)
			p.timeline.Booked(dashboard.Booking{Bucket: host, Host: host, At: at, Start: r.Start, Spacing: r.Spacing, Pressure: r.Pressure, Mode: r.Mode.String(), Source: "flag"})
			if i%2 == 0 {
				p.timeline.Answered(host, host, dashboard.OK, 200, r.Start.Add(time.Millisecond))
			}
		}
	}
	srv := httptest.NewServer(p)
	b.Cleanup(func() {
		srv.Close()
		p.Close()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/devtools/browser/echo", srv.URL
}

// pollStatus asks base's /status every interval, as the page does (for
// what changed since the last answer), or for everything each time (full),
// until the benchmark ends; the function it returns stops it and says how
// many polls were answered, and how many bytes they read.
func pollStatus(b *testing.B, base string, every time.Duration, full bool) func() (polls, bytes int64) {
	done := make(chan struct{})
	var n, size atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		var since uint64
		for {
			resp, err := http.Get(base + "/status?since=" + strconv.FormatUint(since, 10))
			if err != nil {
				b.Error(err)
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			var st struct{ Version uint64 }
			if err == nil {
				err = json.Unmarshal(body, &st)
			}
			if err != nil {
				b.Error(err)
				return
			}
			n.Add(1)
			size.Add(int64(len(body)))
			if !full {
				since = st.Version
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		return n.Load(), size.Load()
	}
}

// BenchmarkThroughput has 100 clients each keep 8 commands in flight and
// reports the messages per second (a command and its reply count as one).
func BenchmarkThroughput(b *testing.B) {
	targets(b, func(b *testing.B, url string) {
		const clients, window = 100, 8
		conns := make([]*websocket.Conn, clients)
		for i := range conns {
			conns[i] = benchDial(b, url)
		}
		var left atomic.Int64
		left.Store(int64(b.N))
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var sent, got int
				var msg []byte
				send := func() bool {
					if left.Add(-1) < 0 {
						return false
					}
					sent++
					msg = fmt.Appendf(msg[:0], evaluate, sent)
					return c.WriteMessage(websocket.TextMessage, msg) == nil
				}
				for range window {
					if !send() {
						break
					}
				}
				for got < sent {
					if _, _, err := c.ReadMessage(); err != nil {
						return
					}
					got++
					send()
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	})
}

// BenchmarkBigMessage asks for a 16 MiB reply or event and reports how
// long it takes and how much the heap grew at its peak while it passed.
func BenchmarkBigMessage(b *testing.B) {
	const size = 16 << 20
	for _, kind := range []string{"reply", "event"} {
		b.Run(kind, func(b *testing.B) {
			targets(b, func(b *testing.B, url string) {
				c := benchDial(b, url)
				cmd := fmt.Sprintf(`{"id":1,"method":"Bench.big","params":{"size":%d,"event":%v}}`, size, kind == "event")
				// Warm up buffers on both sides.
				c.WriteMessage(websocket.TextMessage, []byte(cmd))
				c.ReadMessage()
				peak := heapPeak()
				b.ResetTimer()
				for range b.N {
					if err := c.WriteMessage(websocket.TextMessage, []byte(cmd)); err != nil {
						b.Fatal(err)
					}
					_, r, err := c.NextReader()
					if err != nil {
						b.Fatal(err)
					}
					n, _ := discard(r)
					if n < size {
						b.Fatalf("got %d bytes, want %d", n, size)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(peak())/size, "peak-heap/msg")
			})
		})
	}
}

func discard(r interface{ Read([]byte) (int, error) }) (int, error) {
	buf := make([]byte, 64<<10)
	n := 0
	for {
		k, err := r.Read(buf)
		n += k
		if err != nil {
			return n, nil
		}
	}
}

// heapPeak samples the heap until the returned func is called, and then
// reports the largest growth over the heap at the start.
func heapPeak() func() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	return peakOf(2*time.Millisecond, func() uint64 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return max(ms.HeapInuse, base) - base
	})
}

// peakOf calls sample every interval on a goroutine of its own until the
// returned func is called, which ends the goroutine and reports the
// largest value sample gave.
func peakOf(every time.Duration, sample func() uint64) func() uint64 {
	var top atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if v := sample(); v > top.Load() {
				top.Store(v)
			}
		}
	}()
	return func() uint64 {
		close(stop)
		<-done
		return top.Load()
	}
}

// BenchmarkPassThrough measures what the relay itself spends per message,
// allocations included, with both peers as fast as can be.
func BenchmarkPassThrough(b *testing.B) {
	eb := newEchoBrowser(b)
	c := benchDial(b, benchRelay(b, eb))
	msg := []byte(fmt.Sprintf(evaluate, 1))
	before := warmUp(c, msg)
	b.ResetTimer()
	for range b.N {
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// Mallocs counts the whole process: the client and the echo browser
	// too. Subtract theirs, measured alone, to leave the relay's.
	total := float64(after.Mallocs-before.Mallocs) / float64(b.N)
	// A round trip is two messages: the command and its reply.
	b.ReportMetric((total-directAllocs(b, eb, msg))/2, "relay-allocs/msg")
}

// directAllocs is what one round trip allocates without the relay.
func directAllocs(b *testing.B, eb *echoBrowser, msg []byte) float64 {
	c := benchDial(b, eb.wsURL())
	const n = 20000
	before := warmUp(c, msg)
	for range n {
		c.WriteMessage(websocket.TextMessage, msg)
		c.ReadMessage()
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / n
}

// warmUp makes 100 round trips of msg on c, collects the garbage and
// returns the memory statistics to count the allocations that follow
// from.
func warmUp(c *websocket.Conn, msg []byte) runtime.MemStats {
	for range 100 {
		c.WriteMessage(websocket.TextMessage, msg)
		c.ReadMessage()
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms
}

// BenchmarkIdleConnections opens 1,000 client connections through the
// relay, run as its own process (the built binary), and reports how much
// its resident memory grew per connection.
func BenchmarkIdleConnections(b *testing.B) {
	eb := newEchoBrowser(b)
	bin := filepath.Join(b.TempDir(), "cdp-throttle")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	addr := fakebrowser.ClosedAddr(b)
	cmd := exec.Command(bin, "--listen", addr, "--upstream", eb.srv.URL, "--http-nav-delay", "0", "--log-level", "error")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	url := "ws://" + addr + "/devtools/browser/echo"
	for i := 0; ; i++ {
		if c, _, err := websocket.DefaultDialer.Dial(url, nil); err == nil {
			c.Close()
			break
		}
		if i > 200 {
			b.Fatal("the relay did not come up")
		}
		time.Sleep(25 * time.Millisecond)
	}
	const n = 1000
	for range b.N {
		time.Sleep(300 * time.Millisecond)
		before := rssKiB(b, cmd.Process.Pid)
		conns := make([]*websocket.Conn, n)
		for i := range conns {
			d := websocket.Dialer{ReadBufferSize: 1024, WriteBufferSize: 1024}
			c, _, err := d.Dial(url, nil)
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
		}
		time.Sleep(time.Second) // every pair settles into its blocking reads
		after := rssKiB(b, cmd.Process.Pid)
		for _, c := range conns {
			c.Close()
		}
		b.ReportMetric(float64(after-before)/n, "KiB/conn")
	}
}

// rssKiB reads a process's resident memory from /proc.
func rssKiB(b *testing.B, pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return kib
		}
	}
	b.Fatal("no VmRSS")
	return 0
}
