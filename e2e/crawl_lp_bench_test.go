//go:build e2e

package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkCrawlLightpanda is BenchmarkCrawl in front of Lightpanda:
// CRAWL_SERVES (4) lightpanda serve processes, CRAWL_CLIENTS (16)
// Puppeteer clients for each at once, each loading CRAWL_LOADS (5) pages
// of the site on 127.0.0.2 with four subresources, fresh processes per
// run, through each of CRAWL_RUNS (floor,hold) in turn, CRAWL_ROUNDS (3)
// rounds whose order turns:
//
//   - floor: one byte-copying process in front of all four, each client's
//     connection to the next in turn (Lightpanda names its own address in
//     /json/version, so the clients connect to the floor's ws:// URL);
//   - off, hold and any other name: the relay in front of all four, as in
//     BenchmarkCrawl (hold holds every navigation, in each client's own
//     page session: the session strategy Lightpanda gets).
//
// Each run reports the crawl's wall time (the floor's ÷ it is the
// throughput ratio), the CPU that the Lightpanda processes and the proxy
// used, each ÷ the floor's of the same round, as medians over the rounds.
func BenchmarkCrawlLightpanda(b *testing.B) {
	names := strings.Split(envOr("CRAWL_RUNS", "floor,hold"), ",")
	rounds := envInt(b, "CRAWL_ROUNDS", 3)
	serves := envInt(b, "CRAWL_SERVES", 4)
	perServe := envInt(b, "CRAWL_CLIENTS", 16)
	loads := envOr("CRAWL_LOADS", "5")
	bin := crawlBinary(b)
	lp := lightpandaBin(b)
	s := startSiteProcess(b, "-")
	for range b.N {
		crawlRounds(b, s, names, rounds, "lightpanda", func(name, page string) crawlRun {
			return crawlLightpandaOnce(b, lp, bin, name, page, serves, perServe, loads)
		})
	}
}

// crawlLightpandaOnce runs the crawl once through the proxy name, in
// front of serves fresh lightpanda serve processes counted as one (their
// CPU in crawlRun.browser).
func crawlLightpandaOnce(b *testing.B, lp, bin, name, page string, serves, perServe int, loads string) crawlRun {
	b.Helper()
	var ports, upstreams []string
	for range serves {
		p := freePort(b)
		ports = append(ports, p)
		upstreams = append(upstreams, "http://127.0.0.1:"+p)
	}
	// One shell starts them all and, told to stop, stops them all.
	script := `trap 'kill $(jobs -p) 2>/dev/null; wait; exit 0' TERM
lp=$1; shift
for p; do "$lp" serve --host 127.0.0.1 --port "$p" --cdp-max-connections ` + strconv.Itoa(2*perServe) + ` & done
wait`
	browsers, err := startMeasured(b, "lightpanda", append([]string{"/bin/sh", "-c", script, "sh", lp}, ports...), "LIGHTPANDA_DISABLE_TELEMETRY=true")
	if err != nil {
		b.Fatal(err)
	}
	for _, u := range upstreams {
		if err := awaitHTTP(u+"/json/version", 30*time.Second); err != nil {
			browsers.stop()
			b.Fatalf("lightpanda: %v; it said:\n%s", err, browsers.stderr.String())
		}
	}
	proxy, url, err := startCrawlProxy(b, bin, name, upstreams)
	if err != nil {
		browsers.stop()
		b.Fatalf("%s: %v", name, err)
	}
	env := append(connectEnv(url, name, true), "SITE_URL="+page, "CLIENTS="+strconv.Itoa(serves*perServe), "LOADS="+loads)
	cr := runCrawl(b, name, proxy, env...)
	cr.proxy = proxy.stop()
	cr.browser = browsers.stop()
	return cr
}
