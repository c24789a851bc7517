// Package simulate replays the limiter on a simulated clock: navigations
// issued back to back against one host, each a page-load time after the one
// before started, in phases separated by idle time. It prints the schedule
// as the tables of the limiter's published measurement (package report) or
// as CSV, and never sleeps. It knows the limiter, not the relay or CDP.
package simulate

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/report"
)

// Options is what a replay runs.
type Options struct {
	Limiter     limiter.Config
	Navigations int           // per phase
	Load        time.Duration // from a navigation's start to the next request
	Phases      int
	Idle        time.Duration // between phases
	CSV         bool          // one row per navigation instead of the tables
}

// Check reports what is wrong with o, naming the flag that sets it.
func (o Options) Check() error {
	switch {
	case o.Navigations < 1 || o.Navigations > 10_000_000:
		return fmt.Errorf("--navigations %d: want 1 to 10000000", o.Navigations)
	case o.Phases < 1 || o.Phases > 1000:
		return fmt.Errorf("--phases %d: want 1 to 1000", o.Phases)
	case o.Load < 0:
		return fmt.Errorf("--load %v: want a duration ≥ 0", o.Load)
	case o.Idle < 0:
		return fmt.Errorf("--idle %v: want a duration ≥ 0", o.Idle)
	}
	return nil
}

// Nav is one simulated navigation. Times count from the run's first navigation.
type Nav struct {
	Phase, Nav int
	Start      time.Duration
	Wait       time.Duration // from the request to the start
	Spacing    time.Duration
	Pressure   int
}

// Replay replays navigations issued back to back against one host: each
// is requested o.Load after the previous one started. It runs the real
// limiter on a simulated clock and never sleeps.
func Replay(o Options) []Nav {
	l := limiter.New(o.Limiter)
	const host = "example.com"
	origin := time.Now()
	var navs []Nav
	var t time.Duration // simulated time of the next request
	for p := 1; p <= o.Phases; p++ {
		if p > 1 {
			t += o.Idle
		}
		for i := 1; i <= o.Navigations; i++ {
			r := l.Reserve(host, origin.Add(t))
			start := r.Start.Sub(origin)
			navs = append(navs, Nav{Phase: p, Nav: i, Start: start, Wait: start - t, Spacing: r.Spacing, Pressure: r.Pressure})
			t = start + o.Load
		}
	}
	return navs
}

// Run replays o and prints the tables, or the CSV, to stdout.
func Run(o Options, stdout io.Writer) error {
	w := bufio.NewWriter(stdout)
	if o.CSV {
		writeSimCSV(w, Replay(o))
	} else {
		fmt.Fprintf(w, "%d navigations per phase to one host, each requested %v after the previous one started; burst %d\n\n",
			o.Navigations, o.Load, max(o.Limiter.Burst, 1))
		report.Write(w, Report(o))
	}
	return w.Flush()
}

// Report replays o and returns the schedule as package report reads it.
func Report(o Options) report.Run {
	phases := make([][]time.Duration, o.Phases)
	var booked []report.Booking
	for _, n := range Replay(o) {
		phases[n.Phase-1] = append(phases[n.Phase-1], n.Start)
		if n.Phase == 1 {
			booked = append(booked, report.Booking{Start: n.Start, Waited: n.Wait > 0})
		}
	}
	return report.Run{Mode: o.Limiter.Name(), Quantum: o.Limiter.Quantum(), Phases: phases, Booked: booked}
}

func writeSimCSV(w io.Writer, navs []Nav) {
	fmt.Fprintln(w, "phase,nav,start_ms,gap_ms,wait_ms,spacing_ms,pressure")
	var prev time.Duration
	for i, n := range navs {
		gap := time.Duration(0)
		if n.Nav > 1 && i > 0 {
			gap = n.Start - prev
		}
		prev = n.Start
		fmt.Fprintf(w, "%d,%d,%.3f,%.3f,%.3f,%.3f,%d\n", n.Phase, n.Nav, limiter.Millis(n.Start), limiter.Millis(gap), limiter.Millis(n.Wait), limiter.Millis(n.Spacing), n.Pressure)
	}
}
