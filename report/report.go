// Package report prints the tables of the limiter's published measurement
// (the rate limiter designed for Lightpanda): when each enforced gap first
// appears, span, rate and gap percentiles per phase, and the gaps at the
// start of each phase. It reads schedules, simulated or measured at a web
// server, and knows nothing of how they were made: not the relay, not CDP.
package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Run is what one limiter mode did: for each phase, when each navigation
// started (simulated) or reached the server (measured).
type Run struct {
	Mode    string        // off, fixed100, adaptive
	Quantum time.Duration // the unit enforced gaps are read in: the limiter's base interval
	Phases  [][]time.Duration
	// Booked is when the limiter let phase 1's navigations go, which the
	// first-at table is read from; nil when nothing was booked (off).
	Booked []Booking
}

// Booking is one navigation as the limiter let it go.
type Booking struct {
	Start  time.Duration // from the phase's first navigation
	Waited bool          // it was held: its gap is the limiter's, not the page load's
}

// Write prints the tables for runs: when each enforced gap first appears
// (phase 1 of each run, WriteBookings), then a line per phase with span,
// rate and gap percentiles, and the gaps at the start of each phase
// (WriteArrivals).
func Write(w io.Writer, runs ...Run) {
	if !complete(runs) {
		return
	}
	WriteBookings(w, runs...)
	WriteArrivals(w, runs...)
}

func complete(runs []Run) bool {
	for _, r := range runs {
		if len(r.Phases) == 0 || len(r.Phases[0]) == 0 {
			return false
		}
	}
	return true
}

// WriteBookings prints, for each run that booked anything, when each
// enforced gap first appeared in phase 1, as the limiter let navigations
// go; titled with the run's mode when there are several.
func WriteBookings(w io.Writer, runs ...Run) {
	for _, r := range runs {
		if len(r.Booked) == 0 {
			continue
		}
		if len(runs) > 1 {
			fmt.Fprintf(w, "%s:\n", r.Mode)
		}
		writeFirstAt(w, r.Quantum, r.Booked)
		fmt.Fprintln(w)
	}
}

// WriteArrivals prints a line per phase of each run with span, rate and
// gap percentiles, and the gaps before navigations 2 to 14 of each phase.
func WriteArrivals(w io.Writer, runs ...Run) {
	if !complete(runs) {
		return
	}
	fmt.Fprintf(w, "%-9s %5s %5s %9s %6s %8s %8s %8s\n", "mode", "phase", "reqs", "span (s)", "req/s", "gap p50", "gap p95", "gap max")
	for _, r := range runs {
		for i, starts := range r.Phases {
			name := r.Mode
			if i > 0 {
				name = ""
			}
			s := phaseStats(starts)
			fmt.Fprintf(w, "%-9s %5d %5d %9.2f %6.1f %8.1f %8.1f %8.1f\n", name, i+1, len(starts), s.span.Seconds(), s.rate, limiter.Millis(s.p50), limiter.Millis(s.p95), limiter.Millis(s.max))
		}
	}
	fmt.Fprintln(w)
	writeStartGaps(w, runs)
}

// Span is how long a phase took, from its first navigation to its last.
func Span(starts []time.Duration) time.Duration { return phaseStats(starts).span }

type stats struct {
	span          time.Duration
	rate          float64 // navigations per second after the first
	p50, p95, max time.Duration
}

func phaseStats(starts []time.Duration) stats {
	var s stats
	if len(starts) < 2 {
		return s
	}
	gaps := make([]time.Duration, 0, len(starts)-1)
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i]-starts[i-1])
	}
	slices.Sort(gaps)
	s.span = starts[len(starts)-1] - starts[0]
	if s.span > 0 {
		s.rate = float64(len(gaps)) / s.span.Seconds()
	}
	s.p50, s.p95, s.max = Percentile(gaps, 0.50), Percentile(gaps, 0.95), gaps[len(gaps)-1]
	return s
}

// Percentile is the nearest-rank percentile of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Step is where an enforced gap first reached Gap: at navigation Nav
// (counted from 1), After the first. Measured is that navigation's own
// gap, which can be larger (the crawl asked later than its slot) and is
// rounded to whole quanta to read it.
type Step struct {
	Gap      time.Duration
	Nav      int
	After    time.Duration
	Measured time.Duration
}

// Steps reads navs (a phase as the limiter let its navigations go) in
// whole quanta: first the run of navigations that went at once (Gap 0,
// Nav how many), then a step for every larger gap enforced, at the first
// navigation held that long after the one before; up to ladder quanta a
// step for each quantum, at the first navigation held at least that long.
// Only a navigation the limiter held has an enforced gap.
func Steps(quantum time.Duration, navs []Booking) []Step {
	if len(navs) == 0 || quantum <= 0 {
		return nil
	}
	level := func(i int) time.Duration {
		if !navs[i].Waited {
			return 0
		}
		q := math.Round(float64(navs[i].Start-navs[i-1].Start) / float64(quantum))
		return time.Duration(q) * quantum
	}
	free := 1
	for free < len(navs) && level(free) == 0 {
		free++
	}
	steps := []Step{{Nav: free}}
	var top time.Duration
	for i := free; i < len(navs); i++ {
		l := level(i)
		if l <= top {
			continue
		}
		if l > ladder*quantum { // a Crawl-delay, or an answer's push: one row
			top = l - quantum
		}
		for top < l {
			top += quantum
			steps = append(steps, Step{Gap: top, Nav: i + 1, After: navs[i].Start - navs[0].Start, Measured: navs[i].Start - navs[i-1].Start})
		}
	}
	return steps
}

// ladder is how many quanta the published table has a row for each of
// (20 to 100 ms, where the adaptive rule settles under a crawl back to
// back): a step that skips one of them still gets its row.
const ladder = 5

// writeFirstAt prints at which navigation each enforced gap first appears
// and how long after the first navigation (Steps), with a note under the
// table where a row reads otherwise than it looks.
func writeFirstAt(w io.Writer, quantum time.Duration, navs []Booking) {
	steps := Steps(quantum, navs)
	fmt.Fprintf(w, "%-13s %-20s %s\n", "enforced gap", "first at navigation", "after")
	first := "1"
	if steps[0].Nav > 1 {
		first = "1 to " + strconv.Itoa(steps[0].Nav)
	}
	fmt.Fprintf(w, "%-13s %-20s %s\n", "0ms", first, "0s")
	for _, s := range steps[1:] {
		fmt.Fprintf(w, "%-13s %-20d %.2fs\n", strconv.FormatInt(s.Gap.Milliseconds(), 10)+"ms", s.Nav, s.After.Seconds())
	}
	// The gap rows below the table show each gap as measured; say why one
	// differs from its row.
	skipped := 0 // the navigation of the first row a step skipped, said once
	for i, s := range steps[1:] {
		if i+2 < len(steps) && steps[i+2].Nav == s.Nav {
			note(w, fmt.Sprintf("(no gap of %v was enforced: navigation %d, held, came %.1fms after navigation %d; a row is the first gap of at least its size)",
				s.Gap, s.Nav, limiter.Millis(s.Measured), s.Nav-1))
			skipped = s.Nav
			break
		}
	}
	for _, s := range steps[1:] {
		// A quarter of a step off is more than a browser's jitter.
		if s.Nav != skipped && (s.Measured-s.Gap).Abs() >= quantum/4 && (s.Measured+quantum/2)/quantum*quantum == s.Gap {
			note(w, fmt.Sprintf("(gaps are counted in whole %v steps: navigation %d waited for its slot but came %.1fms after navigation %d, "+
				"which went later than its own slot, when the crawl asked for it; that counts as %v)", quantum, s.Nav, limiter.Millis(s.Measured), s.Nav-1, s.Gap))
			break
		}
	}
}

// noteWidth is where a note under a table wraps, to fit a terminal and the
// demo's chart page.
const noteWidth = 78

// note prints text wrapped at noteWidth.
func note(w io.Writer, text string) {
	line := 0
	for i, word := range strings.Fields(text) {
		switch {
		case i == 0:
		case line+1+len(word) > noteWidth:
			fmt.Fprintln(w)
			line = 0
		default:
			fmt.Fprint(w, " ")
			line++
		}
		fmt.Fprint(w, word)
		line += len(word)
	}
	fmt.Fprintln(w)
}

// writeStartGaps prints the gaps before navigations 2 to 14 of each phase.
func writeStartGaps(w io.Writer, runs []Run) {
	const last = 14
	var head strings.Builder
	fmt.Fprintf(&head, "%-14s", "nav")
	for n := 2; n <= min(last, len(runs[0].Phases[0])); n++ {
		fmt.Fprintf(&head, " %6d", n)
	}
	fmt.Fprintln(w, head.String())
	for _, r := range runs {
		for p, starts := range r.Phases {
			label := fmt.Sprintf("gap (ms) ph %d", p+1)
			if len(runs) > 1 {
				label = fmt.Sprintf("%s ph %d", r.Mode, p+1)
			}
			var row strings.Builder
			fmt.Fprintf(&row, "%-14s", label)
			for n := 2; n <= min(last, len(starts)); n++ {
				fmt.Fprintf(&row, " %6.1f", limiter.Millis(starts[n-1]-starts[n-2]))
			}
			fmt.Fprintln(w, row.String())
		}
	}
}
