package main

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// simulateOptions is what `cdp-throttle simulate` replays.
type simulateOptions struct {
	limiter     limiter.Config
	navigations int           // per phase
	load        time.Duration // from a navigation's start to the next request
	phases      int
	idle        time.Duration // between phases
	csv         bool
}

func simulateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Value: 400, Usage: "navigations per phase"},
		&cli.DurationFlag{Name: "load", Value: 4500 * time.Microsecond, Usage: "page load time: from a navigation's start to the next request"},
		&cli.IntFlag{Name: "phases", Value: 1, Usage: "phases of navigations, separated by --idle"},
		&cli.DurationFlag{Name: "idle", Value: 8 * time.Second, Usage: "time without navigations between phases"},
		&cli.BoolFlag{Name: "csv", Usage: "print one row per navigation instead of the tables"},
	}
}

func simulateOptionsFrom(c *cli.Context) (simulateOptions, error) {
	lc, err := limiterConfigFrom(c)
	if err != nil {
		return simulateOptions{}, err
	}
	o := simulateOptions{
		limiter:     lc,
		navigations: c.Int("navigations"),
		load:        c.Duration("load"),
		phases:      c.Int("phases"),
		idle:        c.Duration("idle"),
		csv:         c.Bool("csv"),
	}
	switch {
	case o.navigations < 1 || o.navigations > 10_000_000:
		return o, usagef("--navigations %d: want 1 to 10000000", o.navigations)
	case o.phases < 1 || o.phases > 1000:
		return o, usagef("--phases %d: want 1 to 1000", o.phases)
	case o.load < 0:
		return o, usagef("--load %v: want a duration ≥ 0", o.load)
	case o.idle < 0:
		return o, usagef("--idle %v: want a duration ≥ 0", o.idle)
	case c.NArg() > 0:
		return o, usagef("simulate takes no arguments, got %q", c.Args().First())
	}
	return o, nil
}

// simNav is one simulated navigation. Times count from the run's first navigation.
type simNav struct {
	phase, nav int
	start      time.Duration
	wait       time.Duration // from the request to the start
	spacing    time.Duration
	pressure   int
}

// simulate replays navigations issued back to back against one host: each
// is requested o.load after the previous one started. It runs the real
// limiter on a simulated clock and never sleeps.
func simulate(o simulateOptions) []simNav {
	l := limiter.New(o.limiter)
	const host = "example.com"
	origin := time.Now()
	var navs []simNav
	var t time.Duration // simulated time of the next request
	for p := 1; p <= o.phases; p++ {
		if p > 1 {
			t += o.idle
		}
		for i := 1; i <= o.navigations; i++ {
			r := l.Reserve(host, origin.Add(t))
			start := r.Start.Sub(origin)
			navs = append(navs, simNav{phase: p, nav: i, start: start, wait: start - t, spacing: r.Spacing, pressure: r.Pressure})
			t = start + o.load
		}
	}
	return navs
}

func runSimulate(o simulateOptions, stdout io.Writer) error {
	navs := simulate(o)
	w := bufio.NewWriter(stdout)
	if o.csv {
		writeSimCSV(w, navs)
	} else {
		phases := make([][]time.Duration, o.phases)
		var booked []booking
		for _, n := range navs {
			phases[n.phase-1] = append(phases[n.phase-1], n.start)
			if n.phase == 1 {
				booked = append(booked, booking{start: n.start, waited: n.wait > 0})
			}
		}
		fmt.Fprintf(w, "%d navigations per phase to one host, each requested %v after the previous one started; burst %d\n\n",
			o.navigations, o.load, max(o.limiter.Burst, 1))
		run := modeRun{mode: modeName(o.limiter), quantum: quantumFor(o.limiter), phases: phases, booked: booked}
		writeReport(w, run)
	}
	return w.Flush()
}

func writeSimCSV(w io.Writer, navs []simNav) {
	fmt.Fprintln(w, "phase,nav,start_ms,gap_ms,wait_ms,spacing_ms,pressure")
	var prev time.Duration
	for i, n := range navs {
		gap := time.Duration(0)
		if n.nav > 1 && i > 0 {
			gap = n.start - prev
		}
		prev = n.start
		fmt.Fprintf(w, "%d,%d,%s,%s,%s,%s,%d\n", n.phase, n.nav, ms(n.start), ms(gap), ms(n.wait), ms(n.spacing), n.pressure)
	}
}

// ms formats d in milliseconds with at least two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond))
}

// quantumFor is the unit enforced gaps are read in: the limiter's base interval.
func quantumFor(cfg limiter.Config) time.Duration {
	if cfg.Mode == limiter.Fixed && cfg.Interval > 0 {
		return cfg.Interval
	}
	return limiter.AdaptiveInterval
}
