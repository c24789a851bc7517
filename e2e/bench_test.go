//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// BenchmarkPuppeteerLoop is BENCHMARKS.md's (a): the loop "new browser
// context, new page, goto a local page, evaluate, close page and context"
// 100 times with puppeteer-core, directly against Chromium and through the
// relay (loopback, so nothing is throttled), in 5 alternating pairs. It
// reports the median ratio relay/direct.
func BenchmarkPuppeteerLoop(b *testing.B) {
	puppeteerLoop(b, browser.http, 5)
}

// BenchmarkPuppeteerLoopLightpanda is the same loop against `lightpanda
// serve` (1.0.2, its own limiter off), where the relay holds navigations
// in the client's stream. A run of 100 loops takes under 3 s there, where
// a neighbour's burst of CPU shows: 15 pairs.
func BenchmarkPuppeteerLoopLightpanda(b *testing.B) {
	puppeteerLoop(b, startLightpanda(b), 15)
}

func puppeteerLoop(b *testing.B, direct string, npairs int) {
	s := newSiteAt(b, "127.0.0.1")
	r := startRelayTo(b, direct, limiter.Config{})
	page := s.url("127.0.0.1", "/page/bench")
	run := func(url string) float64 {
		out := runNode(b, 5*time.Minute, "bench-loop.mjs", "CDP_URL="+url, "PAGE_URL="+page, "N=100")
		var res struct{ MS float64 }
		if err := json.Unmarshal(lastLineOf(out), &res); err != nil {
			b.Fatalf("bench-loop output %q: %v", out, err)
		}
		return res.MS
	}
	for range b.N {
		run(direct) // warm up the browser
		var ratios, directs, relayed []float64
		for range npairs {
			d := run(direct)
			rl := run(r.url)
			directs, relayed = append(directs, d), append(relayed, rl)
			ratios = append(ratios, rl/d)
		}
		b.Logf("ms per loop, direct / relay, in pairs: %s", pairs(directs, relayed))
		b.ReportMetric(median(directs)/100, "direct-ms/loop")
		b.ReportMetric(median(relayed)/100, "relay-ms/loop")
		b.ReportMetric(median(ratios), "relay/direct")
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
// for 5 s, directly and through the relay, in 3 alternating pairs; it
// reports messages per second (a command and its reply count as one) and
// the median ratio.
func BenchmarkThroughputChromium(b *testing.B) {
	r := startRelay(b, limiter.Config{})
	relayWS := browserWSVia(b, r)
	for range b.N {
		var ratios, direct, relayed []float64
		for range 3 {
			d := throughput(b, browser.ws, 100, 8, 5*time.Second)
			rl := throughput(b, relayWS, 100, 8, 5*time.Second)
			direct, relayed = append(direct, d), append(relayed, rl)
			ratios = append(ratios, rl/d)
		}
		b.ReportMetric(median(direct), "direct-msgs/s")
		b.ReportMetric(median(relayed), "relay-msgs/s")
		b.ReportMetric(median(ratios), "relay/direct")
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
// timed (it answers once the document's answer is in), 100 at a time on a
// fresh page, with a relay's two connections intercepting the browser and
// without, in alternating pairs; the figure is the p50 of each run.
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
		for range 100 {
			nav++
			t0 := time.Now()
			rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url("foreign.test", "/page?n="+strconv.Itoa(nav))})
			took = append(took, float64(time.Since(t0).Microseconds())/1000)
		}
		return median(took)
	}
	holding := func() (stop func()) {
		cfg := fixed(100*time.Millisecond, 1)
		nop := zerolog.Nop()
		p := &relay.Proxy{Upstream: browser.http, Limiter: policy.New(policy.Config{Default: cfg}, limiter.New(cfg)), Log: &nop}
		p.Metrics = relay.NewMetrics(p.Limiter)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Start(ctx); err != nil {
			b.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // both connections up
		return func() { p.Close() }
	}
	for range b.N {
		var without, with, added []float64
		for range 7 {
			d := run()
			stop := holding()
			h := run()
			stop()
			without, with, added = append(without, d), append(with, h), append(added, h-d)
		}
		var ps []string
		for i := range without {
			ps = append(ps, fmt.Sprintf("%.1f/%.1f", without[i], with[i]))
		}
		b.Logf("Page.navigate p50 in ms, without / with a holding relay, in pairs: %s", strings.Join(ps, ", "))
		b.ReportMetric(median(without), "alone-ms/nav")
		b.ReportMetric(median(with), "beside-relay-ms/nav")
		b.ReportMetric(median(added), "added-ms/nav")
	}
}
