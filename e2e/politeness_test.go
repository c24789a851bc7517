//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// The answers a site really sends and how fast it answers, and loopback by
// rule: --overload-status, --latency-backoff and a rule naming 127.0.0.1,
// through real Chromium.

// TestOverloadStatus403: with --overload-status 403,429,503, three 403s
// slow the host at once: five navigations asked for at once right after
// reach the server at least 90 ms apart. By default a 403 changes nothing:
// the same five go together.
func TestOverloadStatus403(t *testing.T) {
	const together = 5
	s := newSite(t)
	for _, tc := range []struct {
		name   string
		host   string
		flags  policy.Flags
		spaced bool
	}{
		{"default (429,503)", "cdn-default.test", policy.Flags{}, false},
		{"--overload-status 403,429,503", "cdn-403.test", policy.Flags{Overload: "403,429,503"}, true},
	} {
		r := startRelay(t, limiter.Config{}, withPolicy(t, tc.flags))
		rc := dialRaw(t, browserWSVia(t, r))
		tabs := newTabs(t, rc, together)
		run := runID()
		host := tc.host
		warmTabs(rc, s, tabs, host, run)
		time.Sleep(hostForgotten)
		for i := range 3 {
			rc.mustCall(tabs[0], "Page.navigate", map[string]any{"url": s.url(host, fmt.Sprintf("/status?code=403&run=%s&i=%d", run, i))})
		}
		answered := time.Now()
		hits := togetherTo(t, rc, s, tabs, host, func(i int) string {
			return s.url(host, fmt.Sprintf("/status?code=204&run=%s&t=%d", run, i))
		})
		gaps := gapsOf(arrivals(hits))
		held := heldAfter(r, host, answered)
		var spacings []time.Duration
		for _, b := range held {
			spacings = append(spacings, b.spacing)
		}
		t.Logf("%s: after three 403s, five navigations asked for at once reached the server %v apart; the relay held %d, spacing %v",
			tc.name, msList(gaps), len(held), msList(spacings))
		if !tc.spaced {
			if len(held) != 0 {
				t.Errorf("%s: after three 403s the relay held %d of five navigations, want none (a 403 changes nothing)", tc.name, len(held))
			}
			continue
		}
		// The first of the five may go at once; the others wait for the
		// slots the pressure sets: 320 ms apart (pressure over 150: 20 ms
		// × 16). At the server, from the second on, they are that far
		// apart less what a held request can lose leaving the browser, and
		// in any case at least 90 ms.
		if len(held) < together-1 {
			t.Errorf("%s: after three 403s the relay held %d of five navigations, want at least 4", tc.name, len(held))
		}
		for _, g := range gaps[1:] {
			if g < 90*time.Millisecond {
				t.Errorf("%s: gaps %v after three 403s, want every one from the second on at least 90 ms", tc.name, msList(gaps))
				break
			}
		}
		body, _ := httpGet(r.url + "/metrics")
		if want := `cdp_throttle_feedback_total{class="overload"} 3`; tc.spaced != strings.Contains(string(body), want) {
			t.Errorf("%s: /metrics, overload answers:\n%s", tc.name, grepMetric(body, "feedback"))
		}
	}
}

func grepMetric(body []byte, part string) string {
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.Contains(l, part) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// loadSite answers a host's documents in 20 ms plus 30 ms for each
// document of that host it got in the last second (this one included):
// a host that slows down under the crawl.
type loadSite struct {
	*site
	mu      sync.Mutex
	arrived map[string][]time.Time     // guarded by mu; by host, the last second's arrivals
	took    map[string][]time.Duration // guarded by mu; by host, each document's answer time, in arrival order
}

func newLoadSite(t *testing.T) *loadSite {
	ls := &loadSite{site: newSite(t), arrived: map[string][]time.Time{}, took: map[string][]time.Duration{}}
	// Every document of the site is loaded that way, the pages that warm a
	// browser up too (they are not counted in took).
	loaded := func(w http.ResponseWriter, r *http.Request) {
		host := strings.Split(r.Host, ":")[0]
		now := time.Now()
		ls.mu.Lock()
		recent := ls.arrived[host]
		for len(recent) > 0 && now.Sub(recent[0]) >= time.Second {
			recent = recent[1:]
		}
		recent = append(recent, now)
		ls.arrived[host] = recent
		d := 20*time.Millisecond + time.Duration(len(recent))*30*time.Millisecond
		if !strings.Contains(r.URL.RawQuery, "warm=1") {
			ls.took[host] = append(ls.took[host], d)
		}
		ls.mu.Unlock()
		time.Sleep(d)
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!doctype html><title>loaded</title>%s", r.URL.RawQuery)
	}
	ls.handle("/loaded", loaded)
	ls.handle("/page", loaded)
	return ls
}

// answerTimes returns the answer time of each document of host, in the
// order they arrived.
func (ls *loadSite) answerTimes(host string) []time.Duration {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return slices.Clone(ls.took[host])
}

// TestLatencyBackoff: a host whose answer time grows with its load (20 ms
// + 30 ms per document it got in the last second), visited three times
// first, a second apart, then four Puppeteer pages, 160 navigations back
// to back (each page the next when the last is answered), adaptive
// spacing. With --latency-backoff 3, over the last
// third of the run the host's median answer time is at most half of what
// it is in the same run without the flag.
func TestLatencyBackoff(t *testing.T) {
	const n, pages = 160, 4
	ls := newLoadSite(t)
	medians := map[string]time.Duration{}
	for _, tc := range []struct {
		name  string
		host  string
		flags policy.Flags
	}{
		{"without", "slowing.test", policy.Flags{}},
		{"--latency-backoff 3", "backing.test", policy.Flags{LatencyBackoff: "3"}},
	} {
		r := startRelay(t, limiter.Config{}, withPolicy(t, tc.flags))
		// The host's first visits come one at a time, more than a second
		// apart, from a page already open: its unloaded answer time, as a
		// crawl first sees a site before it works through it.
		rc := dialRaw(t, browserWSVia(t, r))
		session := openPage(t, rc)
		rc.mustCall(session, "Page.navigate", map[string]any{"url": ls.url("warm.test", "/page?warm=1")})
		for i := range 3 {
			time.Sleep(1100 * time.Millisecond)
			rc.mustCall(session, "Page.navigate", map[string]any{"url": ls.url(tc.host, fmt.Sprintf("/page?warm=1&first=%d", i))})
		}
		rc.close()
		start := time.Now()
		loopPuppeteer(t, r.url, ls.url(tc.host, "/loaded?x=1"), n, pages, false)
		took := ls.answerTimes(tc.host)
		if len(took) != n {
			t.Fatalf("%s: the server answered %d documents, want %d", tc.name, len(took), n)
		}
		last := slices.Sorted(slices.Values(took[n-n/3:]))
		medians[tc.name] = last[len(last)/2]
		first := slices.Sorted(slices.Values(took[:n/3]))
		line := ""
		if h, ok := hostsLine(t, r.url, tc.host); ok && h.BaselineMS > 0 {
			line = fmt.Sprintf("; /hosts: baseline %.1fms, last answer %.1fms", h.BaselineMS, h.LastAnswerMS)
		}
		var answered []string
		for _, l := range strings.Split(r.logs.String(), "\n") {
			var m struct {
				Message, Host string
				AnswerMS      float64 `json:"answer_ms"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Message == "navigation answered" && m.Host == tc.host && len(answered) < 12 {
				answered = append(answered, fmt.Sprintf("%.0f", m.AnswerMS))
			}
		}
		t.Logf("%s: the relay's first answer times (ms): %v; the server's: %v", tc.name, answered, msList(took[:12]))
		body, _ := httpGet(r.url + "/metrics")
		t.Logf("%s: %d navigations in %.1fs; answer time median %.0fms over the first third, %.0fms over the last third (max %.0fms); %s%s",
			tc.name, n, time.Since(start).Seconds(), ms(first[len(first)/2]), ms(medians[tc.name]), ms(last[len(last)-1]),
			strings.ReplaceAll(grepMetric(body, `feedback_total{class="slow"}`), "\n", " "), line)
	}
	without, with := medians["without"], medians["--latency-backoff 3"]
	t.Logf("median answer time over the last third: %.0fms without the flag, %.0fms with --latency-backoff 3 (%.2f of it)", ms(without), ms(with), float64(with)/float64(without))
	if with > without/2 {
		t.Errorf("with --latency-backoff 3 the host's median answer time over the last third is %v, want at most half of %v (without)", with, without)
	}
}

// TestLoopbackRule: --rule '127.0.0.1=fixed:200ms' spaces navigations to
// 127.0.0.1 at 200 ms (no burst here: --http-nav-burst 1); without it,
// 127.0.0.1 is never spaced, the same flags otherwise.
func TestLoopbackRule(t *testing.T) {
	const n = 15
	s := newSiteAt(t, "127.0.0.1")
	for _, tc := range []struct {
		name  string
		flags policy.Flags
	}{
		{"without a rule", policy.Flags{Burst: "1"}},
		{"--rule 127.0.0.1=fixed:200ms", policy.Flags{Burst: "1", Rules: []string{"127.0.0.1=fixed:200ms"}}},
	} {
		r := startRelay(t, limiter.Config{}, withPolicy(t, tc.flags))
		at := backToBack(t, r, s, "127.0.0.1", n)
		gaps := gapsOf(at)
		held := heldBookings(r, "127.0.0.1")
		p := p50(gaps)
		t.Logf("%s: %d navigations to 127.0.0.1 span %.2fs, gap p50 %.1fms, min %.1fms; the relay held %d", tc.name, n, at[n-1].Sub(at[0]).Seconds(), ms(p), ms(slices.Min(gaps)), len(held))
		if len(tc.flags.Rules) == 0 {
			if len(held) != 0 || p >= 100*time.Millisecond {
				t.Errorf("%s: 127.0.0.1 spaced (gap p50 %v, %d held), want it never spaced", tc.name, p, len(held))
			}
			continue
		}
		if len(held) < n-2 {
			t.Errorf("%s: the relay held %d of %d navigations, want every one after the first", tc.name, len(held), n)
		}
		for i, g := range gaps {
			if g < 200*time.Millisecond-leaveBound {
				t.Errorf("%s: navigations %d and %d reached 127.0.0.1 %v apart, want 200ms (less %v)", tc.name, i+1, i+2, g, leaveBound)
			}
		}
		if span := at[n-1].Sub(at[0]); span < time.Duration(n-1)*200*time.Millisecond-leaveBound {
			t.Errorf("%s: %d navigations span %v, want %v", tc.name, n, span, time.Duration(n-1)*200*time.Millisecond)
		}
	}
}
