// Package simulate replays the limiter on a simulated clock: navigations
// issued back to back against one host (or several in turn), each a
// page-load time after the one before started, in phases separated by idle
// time, booked through a policy as the relay books them (rules, buckets, a
// Crawl-delay). It prints the schedule as the tables of the limiter's
// published measurement (package report) or as CSV, and never sleeps. It
// knows the limiter and the policy, not the relay or CDP.
package simulate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/report"
)

// DefaultHost is the host navigated to when Options.Hosts is empty.
const DefaultHost = "example.com"

// Options is what a replay runs.
type Options struct {
	// Policy books the navigations. Its Robots is ignored: a replay reads
	// no robots.txt, and CrawlDelay stands in for one.
	Policy      policy.Config
	Hosts       []string      // navigated to in turn; empty means DefaultHost
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
	for _, h := range o.Hosts {
		if k, ok := limiter.Key("http://" + h + "/"); !ok || k != h {
			return fmt.Errorf("--host %q: want a host name, lower-case, such as www.example.com", h)
		}
	}
	return nil
}

func (o Options) hosts() []string {
	if len(o.Hosts) == 0 {
		return []string{DefaultHost}
	}
	return o.Hosts
}

// Nav is one simulated navigation. Times count from the run's first navigation.
type Nav struct {
	Phase, Nav int
	Host       string
	Start      time.Duration
	Wait       time.Duration // from the request to the start
	Spacing    time.Duration
	Pressure   int
}

// Replay replays navigations issued back to back against the hosts in
// turn: each is requested o.Load after the previous one started. It runs
// the real policy and limiter on a simulated clock and never sleeps.
func Replay(o Options) []Nav {
	o.Policy.Robots = nil // never fetched on a simulated clock
	pol := policy.New(o.Policy, limiter.New(o.Policy.Default))
	hosts := o.hosts()
	origin := time.Now()
	var navs []Nav
	var t time.Duration // simulated time of the next request
	for p := 1; p <= o.Phases; p++ {
		if p > 1 {
			t += o.Idle
		}
		for i := 1; i <= o.Navigations; i++ {
			host := hosts[(i-1)%len(hosts)]
			r := pol.Reserve(context.Background(), host, "http://"+host+"/", origin.Add(t))
			start := r.Start.Sub(origin)
			navs = append(navs, Nav{Phase: p, Nav: i, Host: host, Start: start, Wait: start - t, Spacing: r.Spacing, Pressure: r.Pressure})
			t = start + o.Load
		}
	}
	return navs
}

// Run replays o and prints the tables, or the CSV, to stdout.
func Run(o Options, stdout io.Writer) error {
	navs := Replay(o)
	w := bufio.NewWriter(stdout)
	if o.CSV {
		writeSimCSV(w, navs)
	} else {
		// The tables are read in the setting of the first host.
		set, source, _ := policy.New(o.Policy, nil).Setting(o.hosts()[0])
		to := "one host"
		if hosts := o.hosts(); len(hosts) > 1 {
			to = strings.Join(hosts, " and ") + " in turn, bucket " + o.Policy.Bucket.String()
		}
		burst := fmt.Sprintf("burst %d", max(set.Burst, 1))
		if set.Burst == 0 {
			burst = fmt.Sprintf("burst %d", limiter.DefaultBurst)
		}
		if o.Policy.CrawlDelay > 0 {
			burst = fmt.Sprintf("Crawl-delay %v: no burst", o.Policy.CrawlDelay)
		}
		if source != policy.SourceFlags {
			burst += ", by " + source
		}
		fmt.Fprintf(w, "%d navigations per phase to %s, each requested %v after the previous one started; %s\n\n",
			o.Navigations, to, o.Load, burst)
		report.Write(w, report.Run{Mode: set.Name(), Quantum: set.Quantum(), Phases: phases(navs, o.Phases), Booked: booked(navs)})
	}
	return w.Flush()
}

// Report replays o and returns the schedule of its first host as the
// tables read it, to print beside a measured one.
func Report(o Options) report.Run {
	navs := Replay(o)
	set, _, _ := policy.New(o.Policy, nil).Setting(o.hosts()[0])
	return report.Run{Mode: set.Name(), Quantum: set.Quantum(), Phases: phases(navs, o.Phases), Booked: booked(navs)}
}

// phases returns when each navigation of each phase started.
func phases(navs []Nav, n int) [][]time.Duration {
	out := make([][]time.Duration, n)
	for _, nv := range navs {
		out[nv.Phase-1] = append(out[nv.Phase-1], nv.Start)
	}
	return out
}

// booked returns phase 1's navigations as the limiter let them go.
func booked(navs []Nav) []report.Booking {
	var out []report.Booking
	for _, nv := range navs {
		if nv.Phase == 1 {
			out = append(out, report.Booking{Start: nv.Start, Waited: nv.Wait > 0})
		}
	}
	return out
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
