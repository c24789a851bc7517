//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkSteadyLoop is BENCHMARKS.md's loop (a, a′) measured so that it
// holds still from run to run (issue 47): the loop "new browser context,
// new page, goto a loopback page, evaluate, close page and context" in
// many short blocks of STEADY_LOOPS (5) loops, through each of
// STEADY_RUNS (direct,floor,relay) in turn, STEADY_BLOCKS (24) rounds
// whose order turns, after one warm-up round that is not counted, in
// front of one browser started for the run (STEADY_BROWSER: chromium or
// lightpanda).
//
// Each block measures the loop's wall time, and the CPU time the browser
// (all its processes) and the proxy (the floor, or the relay and its
// guardian) used, each per loop: CPU per loop moves less than wall time
// on a machine whose neighbours come and go. The runs are as
// BenchmarkCrawl's (startCrawlProxy): direct (no proxy), floor, a relay
// (the tree's build, or CRAWL_BIN_<NAME>, with CRAWL_FLAGS_<NAME>), so
// that another commit's build runs in the same rounds. It prints, per
// run, each figure's median and interquartile range over the blocks, and
// the ratios against the floor and the direct connection (and the runs
// STEADY_VS names, such as another commit's build), computed block by
// block within a round, as a median with its 95% bootstrap interval: the
// margin a difference must clear to be one.
//
// STEADY_SCRIPT=bench-evaluate.mjs measures instead one CDP message's
// round trip on a page (STEADY_LOOPS of them a block, one after another):
// BENCHMARKS.md's round trip (b) against a real browser; with
// STEADY_SIZE, a reply of that many bytes (d).
func BenchmarkSteadyLoop(b *testing.B) {
	names := strings.Split(envOr("STEADY_RUNS", "direct,floor,relay"), ",")
	blocks := envInt(b, "STEADY_BLOCKS", 24)
	loops := envInt(b, "STEADY_LOOPS", 5)
	kind := envOr("STEADY_BROWSER", "chromium")
	script := envOr("STEADY_SCRIPT", "bench-loop.mjs")
	bin := crawlBinary(b)
	s := newSiteAt(b, "127.0.0.1")
	page := s.url("127.0.0.1", "/page/bench")
	for range b.N {
		browser, endpoint := startSteadyBrowser(b, kind)
		proxies := map[string]*measured{}
		urls := map[string]string{}
		for _, name := range names {
			if name == "direct" {
				urls[name] = endpoint
				continue
			}
			p, url, err := startCrawlProxy(b, bin, name, []string{endpoint})
			if err != nil {
				browser.stop()
				b.Fatalf("%s: %v", name, err)
			}
			proxies[name], urls[name] = p, url
		}
		block := func(name string) steadyBlock {
			p := proxies[name]
			b0, p0 := browser.usage(), p.usage()
			env := append(connectEnv(urls[name], name, kind == "lightpanda"), "PAGE_URL="+page, "N="+strconv.Itoa(loops), "SIZE="+os.Getenv("STEADY_SIZE"))
			out := runNode(b, 5*time.Minute, script, env...)
			var res struct{ MS float64 }
			if err := json.Unmarshal(lastLineOf(out), &res); err != nil {
				b.Fatalf("%s output %q: %v", script, out, err)
			}
			n := float64(loops)
			return steadyBlock{
				wall:    res.MS / n,
				browser: float64(browser.usage()-b0) / float64(time.Millisecond) / n,
				proxy:   float64(p.usage()-p0) / float64(time.Millisecond) / n,
			}
		}
		for _, name := range names {
			block(name) // warm-up: first contexts, first connections
		}
		got := rounds(blocks, names, block)
		for _, p := range proxies {
			p.stop()
		}
		browser.stop()
		reportSteady(b, kind, strings.TrimSuffix(script, ".mjs"), names, got)
	}
}

// steadyBlock is what one block measured, each per loop, in ms.
type steadyBlock struct{ wall, browser, proxy float64 }

// startSteadyBrowser starts the browser the loop runs against, measured,
// and returns it with its http:// endpoint.
func startSteadyBrowser(b *testing.B, kind string) (*measured, string) {
	b.Helper()
	switch kind {
	case "chromium":
		m, err := startMeasured(b, "chromium", chromiumCommand(b))
		if err != nil {
			b.Fatal(err)
		}
		ep, err := m.await(regexp.MustCompile(`DevTools listening on ws://([^/\s]+)/`), 30*time.Second)
		if err != nil {
			m.stop()
			b.Fatal(err)
		}
		return m, "http://" + ep
	case "lightpanda":
		port := freePort(b)
		m, err := startMeasured(b, "lightpanda", []string{lightpandaBin(b), "serve", "--host", "127.0.0.1", "--port", port}, "LIGHTPANDA_DISABLE_TELEMETRY=true")
		if err != nil {
			b.Fatal(err)
		}
		ep := "http://127.0.0.1:" + port
		if err := awaitHTTP(ep+"/json/version", 30*time.Second); err != nil {
			m.stop()
			b.Fatal(err)
		}
		return m, ep
	}
	b.Fatalf("STEADY_BROWSER=%q: want chromium or lightpanda", kind)
	return nil, ""
}

// usage is the CPU time the process and its descendants used so far; 0
// for a nil one (the direct run's proxy) or where no cgroup counts it.
func (m *measured) usage() time.Duration {
	if m == nil || m.group == "" {
		return 0
	}
	d, _ := cpuGroupUsage(m.group, m.v2)
	return d
}

// reportSteady prints each run's figures, median [interquartile range],
// and its ratios against the floor and the direct connection, median
// (95% bootstrap interval), block by block within each round.
func reportSteady(b *testing.B, kind, script string, names []string, got map[string][]steadyBlock) {
	figures := []struct {
		name string
		of   func(steadyBlock) float64
	}{{"wall", func(s steadyBlock) float64 { return s.wall }}, {kind + " CPU", func(s steadyBlock) float64 { return s.browser }}, {"proxy CPU", func(s steadyBlock) float64 { return s.proxy }}}
	var out strings.Builder
	fmt.Fprintf(&out, "%s %s, %d blocks a run, ms each (a loop, or a message): median [IQR]; ratios: median (95%% bootstrap interval), load average %s\n", kind, script, len(got[names[0]]), loadAverage())
	for _, name := range names {
		fmt.Fprintf(&out, "  %-10s", name)
		for _, f := range figures {
			v := mapBlocks(got[name], f.of)
			q1, med, q3 := quantile(v, 0.25), quantile(v, 0.5), quantile(v, 0.75)
			fmt.Fprintf(&out, "  %s %.3f [%.3f–%.3f]", f.name, med, q1, q3)
			b.ReportMetric(med, name+"-"+strings.ReplaceAll(f.name, " ", "-")+"-ms")
		}
		out.WriteString("\n")
		for _, base := range append([]string{"floor", "direct"}, strings.Split(os.Getenv("STEADY_VS"), ",")...) {
			if base == "" || name == base || got[base] == nil {
				continue
			}
			fmt.Fprintf(&out, "  %-10s ÷ %-6s", "", base)
			for _, f := range figures {
				if f.name == "proxy CPU" && (base == "direct" || name == "direct") {
					continue // the direct connection has none
				}
				r := ratios(mapBlocks(got[name], f.of), mapBlocks(got[base], f.of))
				lo, med, hi := bootstrapMedian(r)
				fmt.Fprintf(&out, "  %s %.3f (%.3f–%.3f)", f.name, med, lo, hi)
				b.ReportMetric(med, name+"/"+base+"-"+strings.ReplaceAll(f.name, " ", "-"))
			}
			out.WriteString("\n")
		}
	}
	fmt.Fprint(os.Stderr, out.String())
	b.Log("\n" + out.String())
}

func mapBlocks(v []steadyBlock, f func(steadyBlock) float64) []float64 {
	out := make([]float64, len(v))
	for i, s := range v {
		out[i] = f(s)
	}
	return out
}

// quantile is the p-quantile of v, interpolated between its nearest
// values.
func quantile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	x := p * float64(len(s)-1)
	i := int(x)
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	return s[i] + (x-float64(i))*(s[i+1]-s[i])
}

// bootstrapMedian returns v's median and the 95% interval of medians of
// 2,000 resamples of v (with a fixed seed: the same v, the same interval).
func bootstrapMedian(v []float64) (lo, med, hi float64) {
	med = quantile(v, 0.5)
	if len(v) < 2 {
		return med, med, med
	}
	rng := rand.New(rand.NewPCG(47, 1))
	meds := make([]float64, 2000)
	re := make([]float64, len(v))
	for i := range meds {
		for j := range re {
			re[j] = v[rng.IntN(len(v))]
		}
		meds[i] = quantile(re, 0.5)
	}
	return quantile(meds, 0.025), med, quantile(meds, 0.975)
}

// envInt is the whole number in the environment variable name, def when
// unset.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a whole number ≥ 1", name, v)
	}
	return n
}
