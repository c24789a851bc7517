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
// (phase 1 of each run), a line per phase with span, rate and gap
// percentiles, and the gaps at the start of each phase.
func Write(w io.Writer, runs ...Run) {
	for _, r := range runs {
		if len(r.Phases) == 0 || len(r.Phases[0]) == 0 {
			return
		}
	}
	for _, r := range runs {
		if len(r.Booked) == 0 {
			continue
		}
		if len(runs) > 1 {
			fmt.Fprintf(w, "%s, as the limiter let navigations go:\n", r.Mode)
		}
		writeFirstAt(w, r.Quantum, r.Booked)
		fmt.Fprintln(w)
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

// writeFirstAt prints at which navigation each enforced gap first appears
// and how long after the first navigation. Only a navigation the limiter
// held has an enforced gap, read in whole quanta; the first row is the run
// of navigations that went at load speed.
func writeFirstAt(w io.Writer, quantum time.Duration, navs []Booking) {
	fmt.Fprintf(w, "%-13s %-20s %s\n", "enforced gap", "first at navigation", "after")
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
	first := "1"
	if free > 1 {
		first = "1 to " + strconv.Itoa(free)
	}
	fmt.Fprintf(w, "%-13s %-20s %s\n", "0ms", first, "0s")
	var top time.Duration
	note := -1 // the first row whose gap was rounded
	for i := free; i < len(navs); i++ {
		if l := level(i); l > top {
			top = l
			fmt.Fprintf(w, "%-13s %-20d %.2fs\n", strconv.FormatInt(l.Milliseconds(), 10)+"ms", i+1, (navs[i].Start - navs[0].Start).Seconds())
			if gap := navs[i].Start - navs[i-1].Start; note < 0 && (gap-l).Abs() >= 50*time.Microsecond {
				note = i
			}
		}
	}
	if note >= 0 {
		// The gap rows below show the gap as measured; say why one differs.
		fmt.Fprintf(w, "(gaps are counted in whole %v steps: navigation %d waited for its slot but came %.1fms after navigation %d, which went later than its own slot, when the crawl asked for it; that counts as %v)\n",
			quantum, note+1, limiter.Millis(navs[note].Start-navs[note-1].Start), note, level(note))
	}
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
