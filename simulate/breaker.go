package simulate

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
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
	// Answers say how the site answers within spans of time (--answer),
	// the first whose span holds an answer, before Down's 503s; a 200
	// otherwise. Policy reads each answer as the relay's policy tells its
	// breaker of it: a failure is a 5xx, an overload status or header
	// (--overload-status, --overload-header); an overload's Retry-After
	// longer than the pause lengthens it.
	Answers []Answer
	Policy  policy.Config
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
	origin := Origin
	const bucket = DefaultHost
	answers := slices.Clone(o.Answers)
	for _, s := range o.Down {
		answers = append(answers, Answer{Span: s, Status: 503})
	}
	pol := policy.New(o.Policy, nil) // reads answers; books nothing
	set, _, _ := pol.Setting(bucket)
	var pending []breakerAnswer // soonest first
	var out []BreakerNav
	for i := range o.Navigations {
		at := time.Duration(i) * o.Every
		for len(pending) > 0 && pending[0].at <= at {
			a := pending[0]
			pending = pending[1:]
			b.Observe(bucket, a.Answer, origin.Add(a.at))
		}
		d := b.Allow(bucket, origin.Add(at))
		n := BreakerNav{At: at, Went: d.Go, Probe: d.Probe}
		if d.Go {
			end := at + o.Load
			got := Answer{Status: 200}
			if i := answerAt(answers, end); i > 0 {
				got = answers[i-1]
			}
			a := failure(pol, set, got, o.Load, origin.Add(end))
			a.Probe, n.Failed = d.Probe, a.Failed
			k, _ := slices.BinarySearchFunc(pending, end, func(a breakerAnswer, t time.Duration) int { return int(a.at - t) })
			pending = slices.Insert(pending, k, breakerAnswer{end, a})
		} else {
			n.Until = d.Until.Sub(origin)
		}
		out = append(out, n)
	}
	return out
}

// breakerAnswer is an answer on its way to the breaker, at from the
// run's start.
type breakerAnswer struct {
	at time.Duration
	breaker.Answer
}

// failure is what the site's answer a, received at now, tells the
// breaker, as policy.Policy tells it of an answer: a failure when the
// setting reads it as overload or failure (limiter.Config.Effect), with
// an overload's Retry-After.
func failure(pol *policy.Policy, set limiter.Config, a Answer, took time.Duration, now time.Time) breaker.Answer {
	o := outcome(pol, DefaultHost, a, took, now)
	e := set.Effect(o)
	b := breaker.Answer{Failed: e == limiter.Overload || e == limiter.Failure}
	if e == limiter.Overload {
		b.RetryAfter, _ = set.RetryAfter(o, now)
	}
	return b
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
