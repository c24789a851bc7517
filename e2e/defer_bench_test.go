//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// BenchmarkDeferredGoto is BENCHMARKS.md's figure for issue 40's "every
// client goto returns at once (under 100 ms)": how long Puppeteer's goto
// of a navigation the relay defers (--max-wait, answered with its own
// 429) takes, next to the same browser's goto of a page the site itself
// answers 429, straight to the browser, in the same run. Rounds of
// deferGotos gotos of each, in turn, on Chromium and on Lightpanda; it
// reports the medians, 90th percentiles and the most of each, and the
// median of the rounds' relay ÷ direct.
func BenchmarkDeferredGoto(b *testing.B) {
	for _, br := range deferBrowsers {
		b.Run(br.name, func(b *testing.B) {
			upstream, s, host := openDeferBrowser(b, br.lp)
			// Every goto after the first waits five minutes for its slot,
			// over the 2 s --max-wait: deferred.
			r := startRelayTo(b, upstream, limiter.Config{}, withPolicy(b, policy.Flags{Delay: "5m", Burst: "1", MaxWait: "2s"}))
			run := runID()
			gotos := func(url, path string, first bool) []deferGoto {
				env := []string{"RELAYS=" + url, "BASE=" + s.url(host, ""), "PATH_QUERY=" + path,
					"INTERVAL=0", "DURATION=60000", "GOTOS=" + strconv.Itoa(deferGotos)}
				if first {
					env = append(env, "FIRST=/page?run="+run+"&first=1")
				}
				if br.lp {
					env = append(env, "LP=1")
				}
				var out []deferGoto
				if err := json.Unmarshal(runNode(b, 2*time.Minute, "pptr-defer.mjs", env...), &out); err != nil {
					b.Fatal(err)
				}
				return out
			}
			for range b.N {
				gotos(r.url, "/page?run="+run, true) // the slot taken, and the browser warm
				took := map[string][]float64{}
				var rounds []float64
				for k := range deferRounds {
					order := []string{"direct", "relay"}
					if k%2 == 1 { // neither always first
						slices.Reverse(order)
					}
					med := map[string]float64{}
					for _, name := range order {
						url, path := upstream, "/status?code=429&ra=60&run="+run
						if name == "relay" {
							url, path = r.url, "/page?run="+run
						}
						var ms []float64
						for _, g := range gotos(url, path, false) {
							if g.Status != 429 || (name == "relay") != (g.Throttle != "") {
								b.Fatalf("%s: %v, want the %s's 429", name, g, map[bool]string{true: "relay", false: "site"}[name == "relay"])
							}
							ms = append(ms, g.Took)
						}
						took[name] = append(took[name], ms...)
						med[name] = median(ms)
					}
					rounds = append(rounds, med["relay"]/med["direct"])
				}
				b.Logf("load average %s; %d gotos of each: straight to the site's 429 %s; the relay's 429 %s; relay ÷ direct by round %s",
					loadAverage(), len(took["relay"]), medianMostMs(took["direct"]), medianMostMs(took["relay"]), fmtRatios(rounds))
				b.ReportMetric(median(took["direct"]), "direct-ms/goto")
				b.ReportMetric(median(took["relay"]), "relay-ms/goto")
				b.ReportMetric(slices.Sorted(slices.Values(took["relay"]))[len(took["relay"])*9/10], "relay-p90-ms")
				b.ReportMetric(median(rounds), "relay/direct")
			}
		})
	}
}

// deferRounds and deferGotos size BenchmarkDeferredGoto: rounds of gotos
// of each kind.
const deferRounds, deferGotos = 6, 20

// openDeferBrowser is deferBrowsers' open, for a benchmark.
func openDeferBrowser(b *testing.B, lp bool) (upstream string, s *site, host string) {
	if lp {
		return startLightpanda(b), newSiteAt(b, lpHost), lpHost
	}
	return browser.http, newSite(b), "defer.test"
}

func medianMostMs(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	v = slices.Sorted(slices.Values(v))
	return fmt.Sprintf("%.1f ms (median; 90th percentile %.1f, most %.1f)", median(v), v[len(v)*9/10], v[len(v)-1])
}

func fmtRatios(v []float64) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.2f", x)
	}
	return s
}
