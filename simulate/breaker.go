package simulate

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// BreakerOptions is a replay of one bucket's circuit breaker (package
// breaker): one page asks for a navigation every Every; each that the
// breaker lets go reaches the site and is answered Load later, a failure
// while the site is down. It replays the breaker alone, not the spacing:
// in the relay the breaker is asked before the navigation is booked, so a
// deferred navigation books nothing.
type BreakerOptions struct {
	Breaker     breaker.Config // --host-errors; off opens nothing
	Navigations int
	Every       time.Duration // between two requests of the page
	Load        time.Duration // from a navigation's start to its answer
	// Down are the spans of time, from the run's start, in which the site
	// fails every answer (a 503, say).
	Down []Span
	// Seed seeds the breaker's jitter, so a replay is the same each time.
	Seed uint64
}

// Span is [From, To) from the run's start.
type Span struct{ From, To time.Duration }

// BreakerNav is one request of a breaker replay.
type BreakerNav struct {
	At time.Duration // when it was asked for, from the run's start
	// Went says it reached the site, Probe as its bucket's probe; Failed
	// that the site failed it.
	Went, Probe, Failed bool
	// Until is, for one that did not go, when the breaker would let one
	// go: the Retry-After the relay answers it with counts to it.
	Until time.Duration
}

// ReplayBreaker replays o on a simulated clock, never sleeping.
func ReplayBreaker(o BreakerOptions) []BreakerNav {
	b := breaker.NewLocal(o.Breaker, limiter.NewRand(o.Seed))
	origin := time.Now()
	const bucket = DefaultHost
	type answer struct {
		at         time.Duration
		failed, pr bool
	}
	var pending []answer // soonest first
	var out []BreakerNav
	down := func(t time.Duration) bool {
		return slices.ContainsFunc(o.Down, func(s Span) bool { return s.From <= t && t < s.To })
	}
	for i := range o.Navigations {
		at := time.Duration(i) * o.Every
		for len(pending) > 0 && pending[0].at <= at {
			a := pending[0]
			pending = pending[1:]
			b.Observe(bucket, breaker.Answer{Failed: a.failed, Probe: a.pr}, origin.Add(a.at))
		}
		d := b.Allow(bucket, origin.Add(at))
		n := BreakerNav{At: at, Went: d.Go, Probe: d.Probe}
		if d.Go {
			end := at + o.Load
			n.Failed = down(end)
			k, _ := slices.BinarySearchFunc(pending, end, func(a answer, t time.Duration) int { return int(a.at - t) })
			pending = slices.Insert(pending, k, answer{end, n.Failed, d.Probe})
		} else {
			n.Until = d.Until.Sub(origin)
		}
		out = append(out, n)
	}
	return out
}

// WriteBreaker writes a replay as runs of requests alike: those that went
// (and how they were answered), the probes, and those deferred (until
// when).
func WriteBreaker(w io.Writer, navs []BreakerNav) {
	for i := 0; i < len(navs); {
		j := i + 1
		for j < len(navs) && navs[j].Went == navs[i].Went && !navs[j].Probe && !navs[i].Probe &&
			navs[j].Failed == navs[i].Failed && navs[j].Until == navs[i].Until {
			j++
		}
		n := navs[i]
		span := secs(n.At)
		if j-i > 1 {
			span = secs(n.At) + " to " + secs(navs[j-1].At)
		}
		what := "deferred until " + secs(n.Until)
		switch {
		case n.Probe && n.Failed:
			what = "went as the probe, failed"
		case n.Probe:
			what = "went as the probe, answered"
		case n.Went && n.Failed:
			what = "went, failed"
		case n.Went:
			what = "went, answered"
		}
		fmt.Fprintf(w, "%-20s %3d  %s\n", span, j-i, what)
		i = j
	}
}

// secs writes d in seconds to the tenth, as short as it reads: 95.1s.
func secs(d time.Duration) string {
	return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + "s"
}
