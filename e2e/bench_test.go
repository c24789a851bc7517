//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// BenchmarkPuppeteerLoop is BENCHMARKS.md's (a): the loop "new browser
// context, new page, goto a local page, evaluate, close page and context"
// 100 times with puppeteer-core, directly against Chromium, through the
// floor (a proxy that copies bytes, floor_test.go) and through the relay
// (loopback, so nothing is throttled), in 5 rounds, each of which takes
// the three in turn, ten loops at a time. It reports the medians of relay
// ÷ floor and relay ÷ direct.
func BenchmarkPuppeteerLoop(b *testing.B) {
	puppeteerLoop(b, browser.http, 5, false)
}

// BenchmarkPuppeteerLoopLightpanda is the same loop against `lightpanda
// serve` (1.0.2, its own limiter off), where the relay holds navigations
// through each client session. A run of 100 loops takes under 3 s there,
// where a neighbour's burst of CPU shows: 15 rounds.
func BenchmarkPuppeteerLoopLightpanda(b *testing.B) {
	puppeteerLoop(b, startLightpanda(b), 15, true)
}

// quietRelay logs as the relay command does by default: info and up.
func quietRelay(p *relay.Proxy) {
	l := p.Log.Level(zerolog.InfoLevel)
	p.Log = &l
}

// rounds runs each of the named runs once per round, in an order that
// turns with the round so that none always goes first, and returns each
// one's results in round order.
func rounds[T any](n int, names []string, run func(name string) T) map[string][]T {
	out := map[string][]T{}
	for r := range n {
		for k := range names {
			name := names[(r+k)%len(names)]
			out[name] = append(out[name], run(name))
		}
	}
	return out
}

// ratios returns a[i] ÷ b[i].
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

// puppeteerLoop runs the loop of (a) against the browser at direct, in n
// rounds; lightpanda says it is Lightpanda (connectEnv).
func puppeteerLoop(b *testing.B, direct string, n int, lightpanda bool) {
	s := newSiteAt(b, "127.0.0.1")
	r := startRelayTo(b, direct, limiter.Config{}, quietRelay)
	urls := map[string]string{"direct": direct, "floor": startFloor(b, direct), "relay": r.url}
	page := s.url("127.0.0.1", "/page/bench")
	// Each round is ten blocks of ten loops of each, the three in turn, so
	// that what the machine's neighbours do in a round falls on all three
	// alike.
	const blocks, loops = 10, 10
	names := []string{"direct", "floor", "relay"}
	block := func(name string) float64 {
		env := append(connectEnv(urls[name], name, lightpanda), "PAGE_URL="+page, "N="+strconv.Itoa(loops))
		out := runNode(b, 5*time.Minute, "bench-loop.mjs", env...)
		var res struct{ MS float64 }
		if err := json.Unmarshal(lastLineOf(out), &res); err != nil {
			b.Fatalf("bench-loop output %q: %v", out, err)
		}
		return res.MS
	}
	for range b.N {
		block("direct") // warm up the browser
		got := map[string][]float64{}
		for r := range n {
			sum := map[string]float64{}
			for k := range blocks {
				for i := range names {
					name := names[(r*blocks+k+i)%len(names)]
					sum[name] += block(name)
				}
			}
			for _, name := range names {
				got[name] = append(got[name], sum[name]/(blocks*loops))
			}
		}
		reportRounds(b, got, "ms per loop", "ms/loop")
	}
}

// reportRounds logs the rounds of direct, floor and relay, in what (for
// the log) and unit (for the metrics), and reports each one's median and
// the medians of relay ÷ floor and relay ÷ direct.
func reportRounds(b *testing.B, got map[string][]float64, what, unit string) {
	b.Logf("load average %s; %s, direct / floor / relay, by round: %s", loadAverage(), what, triples(got["direct"], got["floor"], got["relay"]))
	for _, name := range []string{"direct", "floor", "relay"} {
		b.ReportMetric(median(got[name]), name+"-"+unit)
	}
	b.ReportMetric(median(ratios(got["relay"], got["floor"])), "relay/floor")
	b.ReportMetric(median(ratios(got["relay"], got["direct"])), "relay/direct")
}

// loadAverage is the machine's 1-minute load average, for the log.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

func triples(a, b, c []float64) string {
	var out []string
	for i := range a {
		out = append(out, fmt.Sprintf("%.1f/%.1f/%.1f", a[i], b[i], c[i]))
	}
	return strings.Join(out, ", ")
}

// BenchmarkFleetLightpanda is (i): 48 clients at once over four
// `lightpanda serve` processes, each client running the loop of (a) 20
// times, straight at the processes (each client on one in turn), through
// the floor (each connection to the next process) and through one relay in
// front of all four (each client to the process with the fewest); 5
// rounds. It reports loops per second and the medians of relay ÷ floor and
// relay ÷ direct, in throughput.
func BenchmarkFleetLightpanda(b *testing.B) {
	var eps, wss []string
	for range 4 {
		ep := startLightpanda(b)
		eps = append(eps, ep)
		wss = append(wss, strings.Replace(ep, "http://", "ws://", 1)+"/")
	}
	r := startRelayTo(b, eps[0], limiter.Config{}, quietRelay, func(p *relay.Proxy) { p.Upstreams = eps[1:] })
	fl := startFloor(b, eps...)
	fleet(b, map[string]string{
		"direct": strings.Join(wss, ","),
		"floor":  strings.Replace(fl, "http://", "ws://", 1) + "/",
		"relay":  strings.Replace(r.url, "http://", "ws://", 1) + "/",
	}, 48, 20)
}

// BenchmarkFleetChromium is (i) on one Chromium: 8 clients at once, each
// running the loop of (a) 10 times, straight, through the floor and
// through the relay; 5 rounds.
func BenchmarkFleetChromium(b *testing.B) {
	r := startRelay(b, limiter.Config{}, quietRelay)
	fleet(b, map[string]string{"direct": browser.http, "floor": startFloor(b, browser.http), "relay": r.url}, 8, 10)
}

func fleet(b *testing.B, urls map[string]string, clients, n int) {
	s := newSiteAt(b, "127.0.0.1")
	page := s.url("127.0.0.1", "/page/fleet")
	run := func(name string) float64 {
		out := runNode(b, 10*time.Minute, "bench-fleet.mjs", "CDP_URLS="+urls[name], "PAGE_URL="+page,
			"CLIENTS="+strconv.Itoa(clients), "N="+strconv.Itoa(n))
		var res struct {
			MS    float64
			Loops int
		}
		if err := json.Unmarshal(lastLineOf(out), &res); err != nil {
			b.Fatalf("bench-fleet output %q: %v", out, err)
		}
		return float64(res.Loops) / (res.MS / 1000)
	}
	for range b.N {
		run("direct") // warm up
		got := rounds(5, []string{"direct", "floor", "relay"}, run)
		reportRounds(b, got, "loops/s", "loops/s")
	}
}

// BenchmarkTimingAccuracy is (g): the gaps a web server sees between
// navigations that the relay spaces 100 ms apart (fixed, burst 1), back to
// back through real Chromium.
func BenchmarkTimingAccuracy(b *testing.B) {
	s := newSite(b)
	for range b.N {
		r := startRelay(b, fixed(100*time.Millisecond, 1))
		at := backToBack(b, r, s, "accuracy.test", 101)
		st := statsOf(at[1:]) // the first gap includes a fresh host's first connection
		b.ReportMetric(ms(st.p50), "gap-p50-ms")
		b.ReportMetric(ms(st.p95), "gap-p95-ms")
		b.ReportMetric(ms(st.max), "gap-max-ms")
	}
}

func pairs(a, b []float64) string {
	var out []string
	for i := range a {
		out = append(out, fmt.Sprintf("%.1f/%.1f", a[i]/100, b[i]/100))
	}
	return strings.Join(out, ", ")
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func lastLineOf(b []byte) []byte {
	lines := splitLines(b)
	return lines[len(lines)-1]
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	start := 0
	for i, c := range b {
		if c == '\n' {
			if i > start {
				out = append(out, b[start:i])
			}
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, b[start:])
	}
	return out
}

// BenchmarkThroughputChromium is (c) against the real browser: 100 clients
// on the browser endpoint each keep 8 Browser.getVersion commands in flight
// for 5 s, directly, through the floor and through the relay, 3 rounds; it
// reports messages per second (a command and its reply count as one) and
// the median ratios.
func BenchmarkThroughputChromium(b *testing.B) {
	r := startRelay(b, limiter.Config{}, quietRelay)
	_, path, _ := strings.Cut(strings.TrimPrefix(browser.ws, "ws://"), "/")
	urls := map[string]string{
		"direct": browser.ws,
		"floor":  strings.Replace(startFloor(b, browser.http), "http://", "ws://", 1) + "/" + path,
		"relay":  browserWSVia(b, r),
	}
	for range b.N {
		got := rounds(3, []string{"direct", "floor", "relay"}, func(name string) float64 {
			return throughput(b, urls[name], 100, 8, 5*time.Second)
		})
		b.Logf("load average %s; msgs/s, direct / floor / relay, by round: %s", loadAverage(), triples(got["direct"], got["floor"], got["relay"]))
		b.ReportMetric(median(got["direct"]), "direct-msgs/s")
		b.ReportMetric(median(got["floor"]), "floor-msgs/s")
		b.ReportMetric(median(got["relay"]), "relay-msgs/s")
		b.ReportMetric(median(ratios(got["relay"], got["floor"])), "relay/floor")
		b.ReportMetric(median(ratios(got["relay"], got["direct"])), "relay/direct")
	}
}

func throughput(b *testing.B, url string, clients, window int, d time.Duration) float64 {
	var done atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		c, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			id := 0
			send := func() bool {
				id++
				return c.WriteMessage(websocket.TextMessage, []byte(`{"id":`+strconv.Itoa(id)+`,"method":"Browser.getVersion"}`)) == nil
			}
			inFlight := 0
			for range window {
				if send() {
					inFlight++
				}
			}
			for inFlight > 0 {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
				inFlight--
				done.Add(1)
				if time.Now().Before(stop) && send() {
					inFlight++
				}
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds()
}

// BenchmarkForeignNavigation is (h): what a holding relay in front of a
// browser costs a client that is not its own, connected to the browser
// directly. Each Page.navigate of the client's page to a local page is
// timed (it answers once the document's answer is in), 40 at a time on a
// fresh page: without a relay, beside a holding relay whose clients have
// no page (its browser-level Fetch off), and beside one whose client has a
// page open (on), in 21 rounds whose order turns; the figures are the
// medians of each run's p50 and of the differences within rounds (short
// rounds, so that the machine's drift cancels in each).
func BenchmarkForeignNavigation(b *testing.B) {
	s := newSite(b)
	rc := dialRaw(b, browser.ws)
	nav := 0
	run := func() float64 {
		// A fresh page each run: a page's navigations slow down as its
		// history grows (27 to 57 ms over 1,400 here).
		session, target := rc.newPage()
		defer rc.mustCall("", "Target.closeTarget", map[string]any{"targetId": target})
		warm(b, rc, session, s, "foreign.test")
		var took []float64
		for range 40 {
			nav++
			t0 := time.Now()
			rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("foreign.test", "/page?n="+strconv.Itoa(nav))})
			took = append(took, float64(time.Since(t0).Microseconds())/1000)
		}
		return median(took)
	}
	holding := func(client bool) (stop func()) {
		nop := zerolog.Nop()
		p := startProxy(b, browser.http, fixed(100*time.Millisecond, 1), &nop)
		srv := httptest.NewServer(p)
		if client {
			// The relay's own client opens a page and leaves it open.
			_, path, _ := strings.Cut(strings.TrimPrefix(browser.ws, "ws://"), "/")
			own := dialRaw(b, "ws://"+srv.Listener.Addr().String()+"/"+path)
			own.newPage()
		}
		time.Sleep(500 * time.Millisecond) // both connections up
		return func() { srv.CloseClientConnections(); srv.Close(); p.Close() }
	}
	for range b.N {
		names := []string{"alone", "beside", "beside-client"}
		runs := map[string][]float64{}
		for i := range 21 {
			for k := range names {
				name := names[(i+k)%len(names)] // which goes first turns with the round
				var took float64
				switch name {
				case "alone":
					took = run()
				default:
					stop := holding(name == "beside-client")
					took = run()
					stop()
				}
				runs[name] = append(runs[name], took)
			}
		}
		var added, addedClient []float64
		var ps []string
		for i := range runs["alone"] {
			added = append(added, runs["beside"][i]-runs["alone"][i])
			addedClient = append(addedClient, runs["beside-client"][i]-runs["alone"][i])
			ps = append(ps, fmt.Sprintf("%.2f/%.2f/%.2f", runs["alone"][i], runs["beside"][i], runs["beside-client"][i]))
		}
		b.Logf("load average %s; Page.navigate p50 in ms, without a relay / beside a holding relay / beside one whose client has a page, in rounds: %s", loadAverage(), strings.Join(ps, ", "))
		b.ReportMetric(median(runs["alone"]), "alone-ms/nav")
		b.ReportMetric(median(runs["beside"]), "beside-relay-ms/nav")
		b.ReportMetric(median(added), "added-ms/nav")
		b.ReportMetric(median(runs["beside-client"]), "beside-client-ms/nav")
		b.ReportMetric(median(addedClient), "added-client-ms/nav")
	}
}
