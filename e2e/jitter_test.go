//go:build e2e

package e2e

// --jitter: the gaps a site sees spread around the spacing, as Scrapy's
// RANDOMIZE_DOWNLOAD_DELAY spreads them, while the span of a crawl stays
// the schedule's; without it the site sees the spacing to the millisecond.

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/policy"
)

// jitterPages is how many pages TestJitter navigates at once, each to a
// page alone: a browser busy with eight pages, or with two of /six,
// sends late often enough (each moving the schedule) to spread the gaps
// of a run without jitter by itself (stdev 20.6 and 6.6 ms measured).
const jitterPages = 1

// TestJitter: fixed 200 ms, burst 1, 100 navigations over jitterPages
// pages (exactRun), as they reach the site: with --jitter 0.5 every gap
// is 100 to 300 ms, less what the network adds (exactSlack) and more what
// a late departure added (the relay's pushes of the schedule), they spread
// (stdev at least 40 ms) around a mean of 200 ms within 5%; without it
// they are the spacing (stdev under 5 ms). The stdev and the mean are of
// the gaps less what late departures added, of the navigations the relay
// held (one the client asked for after its slot went at once, later than
// the schedule said): one navigation 70 ms late under a whole-suite run
// took a run without jitter from 2 ms to 8, one asked for 57 ms late
// under load to 6.
func TestJitter(t *testing.T) {
	const spacing, n = 200 * time.Millisecond, 100
	s := startSiteProcess(t, robotsOf())
	for _, tt := range []struct {
		jitter           string
		lo, hi           time.Duration // every gap within, less exactSlack; hi 0: no bound
		minStdev, maxStd float64       // ms
	}{
		{"0.5", spacing / 2, spacing * 3 / 2, 40, math.Inf(1)},
		{"0", spacing, 0, 0, 5},
	} {
		t.Run("jitter "+tt.jitter, func(t *testing.T) {
			r := startRelay(t, fixed(spacing, 1), withPolicy(t, policy.Flags{Delay: "200ms", Burst: "1", Jitter: tt.jitter}))
			host := "jitter" + tt.jitter + ".test"
			gaps := exactRun(t, r, s, host, "/page/jitter", n, jitterPages)
			at := arrivals(byArrival(t, host, s.hitsOf(func(h hit) bool { return h.Host == host && h.Path == "/page/jitter" })))
			pushes, booked := pushesOf(r), bookings(r, host)
			// What the schedule gave, as far as the site can tell: each gap
			// less what the later navigation's late departure added to it.
			// The relay pushes the schedule by that once it learns the
			// departure, after the request reached the site and before the
			// next one did. A navigation the client asked for after its
			// slot went at once: its gap is the client's, not the
			// schedule's (one page loading late on a busy machine).
			var own []time.Duration
			for i, g := range gaps {
				until := time.Now()
				if i+2 < len(at) {
					until = at[i+2]
				}
				late := pushedBetween(pushes, at[i+1], until)
				if g < tt.lo-exactSlack {
					t.Errorf("navigations %d and %d reached the site %.1f ms apart, want at least %v less %v", i+1, i+2, ms(g), tt.lo, exactSlack)
				}
				if wentAtOnce(booked, at[i], at[i+1]) {
					continue
				}
				own = append(own, g-late)
				// Longer than the jitter's bound only by what the browser
				// added.
				if tt.hi > 0 && g > tt.hi+exactSlack+late {
					t.Errorf("navigations %d and %d reached the site %.1f ms apart, want at most %v, more %v and the %.1f ms the second left late", i+1, i+2, ms(g), tt.hi, exactSlack, ms(late))
				}
			}
			var span time.Duration
			for _, g := range gaps {
				span += g
			}
			mean, raw := spread(gaps)
			ownMean, sd := spread(own)
			t.Logf("--jitter %s: %d gaps at the site: min %.1f ms, max %.1f ms, mean %.1f ms, stdev %.1f ms; span %.2f s; the %d held as booked, less what late departures added: mean %.1f ms, stdev %.1f ms",
				tt.jitter, len(gaps), ms(slices.Min(gaps)), ms(slices.Max(gaps)), mean, raw, span.Seconds(), len(own), ownMean, sd)
			if len(own) < len(gaps)*3/4 {
				t.Errorf("only %d of %d navigations were held as booked: the client asked for the others after their slots", len(own), len(gaps))
			}
			if sd < tt.minStdev || sd >= tt.maxStd {
				t.Errorf("stdev of the gaps less what late departures added: %.1f ms, want at least %v and under %v", sd, tt.minStdev, tt.maxStd)
			}
			// The rate stays the schedule's: jitter moves slots, not
			// their mean.
			if want := ms(spacing); math.Abs(ownMean-want) > 0.05*want {
				t.Errorf("mean gap less what late departures added: %.1f ms, want %.0f ms within 5%%", ownMean, want)
			}
		})
	}
}

// spread is the mean and the standard deviation of gaps, in ms.
func spread(gaps []time.Duration) (mean, stdev float64) {
	for _, g := range gaps {
		mean += ms(g)
	}
	mean /= float64(len(gaps))
	for _, g := range gaps {
		stdev += (ms(g) - mean) * (ms(g) - mean)
	}
	return mean, math.Sqrt(stdev / float64(len(gaps)))
}

// push is a move of a bucket's schedule the relay logged: when, and by
// how much (a navigation that left the browser late).
type push struct {
	at time.Time
	by time.Duration
}

// pushesOf returns the pushes of r's schedules, in the order logged.
func pushesOf(r *relayed) []push {
	var out []push
	for _, line := range strings.Split(r.logs.String(), "\n") {
		var l struct {
			Message string
			By      float64 `json:"by_ms"`
			AtNs    int64   `json:"at_ns"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Message == "a navigation left the browser late: its schedule moves" {
			out = append(out, push{at: time.Unix(0, l.AtNs), by: time.Duration(l.By * float64(time.Millisecond))})
		}
	}
	return out
}

// pushedBetween is how far pushes moved the schedule from from, until to.
func pushedBetween(pushes []push, from, to time.Time) time.Duration {
	var d time.Duration
	for _, p := range pushes {
		if !p.at.Before(from) && p.at.Before(to) {
			d += p.by
		}
	}
	return d
}

// wentAtOnce reports whether a navigation of booked was let go at once
// between from and to: with one page, the one that reached the site at to.
func wentAtOnce(booked []booking, from, to time.Time) bool {
	for _, b := range booked {
		if b.atOnce && !b.at.Before(from) && b.at.Before(to) {
			return true
		}
	}
	return false
}
