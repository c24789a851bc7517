// Package simulate replays the limiter on a simulated clock: navigations
// issued back to back against one host (or several in turn), each a
// page-load time after the one before started, in phases separated by idle
// time, booked through a policy as the relay books them (rules, buckets, a
// Crawl-delay). With several pages at once, each page asks for its next
// navigation when its last one is answered, and a cap on the navigations
// in flight (--http-nav-concurrency, concurrency:N) holds a navigation
// until one of its bucket's is answered, in arrival order, as the relay
// does. Each answer goes back to the policy as the relay's do: a 200, or
// what --answer says the site answers then (statuses, Retry-After, the
// server's RateLimit headers); a navigation whose slot lies beyond
// --max-wait is deferred, answered at once by the relay's 429, and never
// reaches the site. It prints the schedule as the tables of the limiter's
// published measurement (package report) or as CSV, and never sleeps. It
// knows the limiter and the policy, not the relay or CDP.
package simulate

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
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
	Load        time.Duration // from a navigation's start to the next request: its answer time
	Phases      int
	Idle        time.Duration // between phases
	CSV         bool          // one row per navigation instead of the tables
	// Pages is how many pages navigate at once, each asking for its next
	// navigation Load after its last one started (when it is answered).
	// Zero means 1.
	Pages int
	// Seed seeds the jitter (policy's --jitter, jitter:F), so that a replay
	// is the same each time it runs.
	Seed uint64
	// Answers say how the site answers the documents it answers within
	// spans of time (--answer, --down), the first whose span holds an
	// answer; every other document gets a 200. Each answer goes back to
	// the policy Load after its navigation started, as the relay feeds
	// back a document's answer.
	Answers []Answer
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
	case o.Pages < 0 || o.Pages > 10_000:
		return fmt.Errorf("--pages %d: want 1 to 10000", o.Pages)
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
	Page       int // 1 to Options.Pages
	Host       string
	Start      time.Duration
	Wait       time.Duration // from the request to the start
	// PlaceWait is the part of Wait spent waiting for a place among its
	// bucket's navigations in flight, under a cap.
	PlaceWait time.Duration
	Spacing   time.Duration
	Pressure  int
	// Deferred says why the policy deferred it (limiter.Reservation.Deferred,
	// "max-wait"), "" when it went: then it was answered at Start, at once,
	// with the relay's 429, whose Retry-After is RetryAfter, and never
	// reached the site; its page asks for its next navigation Load later.
	Deferred   string
	RetryAfter int // whole seconds until its slot, rounded up
	// Status is what the site answered it, Load after Start; 0 when it
	// was deferred. Answer is which of Options.Answers it was, from 1; 0
	// for a 200 outside them all.
	Status, Answer int
}

// Replay replays navigations issued back to back against the hosts in
// turn: each page asks for its next one o.Load after its last one started,
// when that one is answered. A navigation over its bucket's cap on
// navigations in flight waits, in arrival order, until one of them is
// answered; then it books its slot, after the answers that came in by
// then went back to the policy. One whose slot lies beyond its setting's
// MaxWait is deferred: answered at once, it books nothing, takes no place
// and reaches nothing, and its page asks again o.Load later. It runs the
// real policy and limiter on a simulated clock starting at Origin and
// never sleeps. The navigations are returned in the order they started
// (a deferred one when it was answered).
func Replay(o Options) []Nav {
	o.Policy.Robots = nil // never fetched on a simulated clock
	l := limiter.New(o.Policy.Default)
	l.SetRand(limiter.NewRand(o.Seed))
	pol := policy.New(o.Policy, l)
	hosts := o.hosts()
	origin := Origin
	pages := make([]time.Duration, max(o.Pages, 1)) // when each page asks for its next navigation
	inFlight := map[string][]time.Duration{}        // bucket → when its navigations in flight are answered, soonest first
	type answered struct {
		at   time.Duration
		host string
		a    Answer
	}
	var answers []answered // on their way back to the policy, soonest first
	observe := func(until time.Duration) {
		for len(answers) > 0 && answers[0].at <= until {
			a := answers[0]
			answers = answers[1:]
			pol.Observe(a.host, outcome(pol, a.host, a.a, o.Load, origin.Add(a.at)), origin.Add(a.at))
		}
	}
	var navs []Nav
	for p := 1; p <= o.Phases; p++ {
		if p > 1 {
			t := slices.Max(pages) + o.Idle
			for i := range pages {
				pages[i] = t
			}
		}
		for i := 1; i <= o.Navigations; i++ {
			page := 0 // the page that asks first, in arrival order
			for k := range pages {
				if pages[k] < pages[page] {
					page = k
				}
			}
			t := pages[page]
			host := hosts[(i-1)%len(hosts)]
			placed := t // when it has its place in flight
			bucket, limit := pol.Cap(host)
			if limit > 0 {
				ends := inFlight[bucket]
				for len(ends) > 0 && ends[0] <= t {
					ends = ends[1:]
				}
				if len(ends) >= limit {
					placed, ends = ends[0], ends[1:] // the first place given back is its
				}
				inFlight[bucket] = ends
			}
			observe(placed) // a navigation that follows a 429 books with it, as the relay's awaitAnswers makes it
			r := pol.Reserve(context.Background(), host, "http://"+host+"/", origin.Add(placed))
			if r.Deferred != "" {
				navs = append(navs, Nav{Phase: p, Page: page + 1, Host: host, Start: placed, Wait: placed - t, PlaceWait: placed - t,
					Pressure: r.Pressure, Deferred: r.Deferred, RetryAfter: retryAfter(r.Start.Sub(origin.Add(placed)))})
				pages[page] = placed + o.Load
				continue
			}
			start := r.Start.Sub(origin)
			end := start + o.Load
			if limit > 0 {
				ends := inFlight[bucket]
				k, _ := slices.BinarySearch(ends, end)
				inFlight[bucket] = slices.Insert(ends, k, end)
			}
			which := answerAt(o.Answers, end)
			a := Answer{Status: 200}
			if which > 0 {
				a = o.Answers[which-1]
			}
			k, _ := slices.BinarySearchFunc(answers, end, func(x answered, t time.Duration) int { return cmp.Compare(x.at, t+1) })
			answers = slices.Insert(answers, k, answered{end, host, a}) // after those due at the same instant
			navs = append(navs, Nav{Phase: p, Page: page + 1, Host: host, Start: start, Wait: start - t, PlaceWait: placed - t, Spacing: r.Spacing, Pressure: r.Pressure,
				Status: a.Status, Answer: which})
			pages[page] = end
		}
	}
	slices.SortStableFunc(navs, func(a, b Nav) int { return cmp.Or(cmp.Compare(a.Phase, b.Phase), cmp.Compare(a.Start, b.Start)) })
	n := 0
	for k := range navs {
		if k == 0 || navs[k].Phase != navs[k-1].Phase {
			n = 0
		}
		n++
		navs[k].Nav = n
	}
	return navs
}

// Run replays o and prints the tables, or the CSV, to stdout.
func Run(o Options, stdout io.Writer) error {
	navs := Replay(o)
	w := bufio.NewWriter(stdout)
	_, limit := policy.New(o.Policy, nil).Cap(o.hosts()[0])
	answers := len(o.Answers) > 0 || o.Policy.Default.MaxWait > 0 // columns and lines only they need
	if o.CSV {
		writeSimCSV(w, navs, o.Pages > 1 || limit > 0, answers)
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
		if o.Pages > 1 {
			fmt.Fprintf(w, "%d navigations per phase to %s from %d pages at once, each page asking for its next %v after its last one started (when it is answered); %s\n",
				o.Navigations, to, o.Pages, o.Load, burst)
		} else {
			fmt.Fprintf(w, "%d navigations per phase to %s, each requested %v after the previous one started; %s\n",
				o.Navigations, to, o.Load, burst)
		}
		if answers {
			writeAnswering(w, o)
		}
		fmt.Fprintln(w)
		run := report.Run{Mode: set.Name(), Quantum: set.Quantum(), Phases: phases(navs, o.Phases), Booked: booked(navs)}
		switch {
		case slices.ContainsFunc(run.Phases, func(starts []time.Duration) bool { return len(starts) == 0 }):
			fmt.Fprintf(w, "no table: a phase had no navigation that reached the site\n")
		case set.Jitter > 0:
			// Jittered gaps read in whole steps say little: say how they spread.
			writeJitter(w, navs, set.Jitter, o.Seed)
			report.WriteArrivals(w, run)
		default:
			report.Write(w, run)
		}
		if limit > 0 || o.Pages > 1 {
			writeInFlight(w, navs, o.Load, limit)
		}
		if answers {
			writeAnswered(w, navs, o)
		}
	}
	return w.Flush()
}

// writeAnswering says, under the replay's first line, how the site
// answers and what --max-wait does.
func writeAnswering(w io.Writer, o Options) {
	for _, a := range o.Answers {
		fmt.Fprintf(w, "the site answers %s after the start\n", a)
	}
	if len(o.Answers) > 0 {
		fmt.Fprintf(w, "the site answers 200 otherwise; each answer goes back to the limiter %v after its navigation went\n", o.Load)
	}
	if d := o.Policy.Default.MaxWait; d > 0 {
		fmt.Fprintf(w, "--max-wait %v: a navigation whose slot lies further ahead is answered at once with the relay's 429 and never reaches the site; its page asks again %v later\n", d, o.Load)
	}
}

// writeAnswered says, for each phase, how many navigations reached the
// site and what it answered them (each --answer's, when it answered
// them), and how many were deferred, when and with which Retry-After.
func writeAnswered(w io.Writer, navs []Nav, o Options) {
	when := func(ts []time.Duration) string {
		if len(ts) == 1 {
			return "at " + secs(ts[0])
		}
		return "from " + secs(ts[0]) + " to " + secs(ts[len(ts)-1])
	}
	fmt.Fprintln(w)
	for p := 1; p <= o.Phases; p++ {
		byAnswer := map[int][]time.Duration{} // Nav.Answer → when the site answered them
		var went int
		var deferred []Nav
		for _, n := range navs {
			switch {
			case n.Phase != p:
			case n.Deferred != "":
				deferred = append(deferred, n)
			default:
				went++
				byAnswer[n.Answer] = append(byAnswer[n.Answer], n.Start+o.Load)
			}
		}
		fmt.Fprintf(w, "phase %d: %d of %d reached the site\n", p, went, went+len(deferred))
		if ts := byAnswer[0]; len(ts) > 0 {
			fmt.Fprintf(w, "  %d answered 200\n", len(ts))
		}
		for i, a := range o.Answers {
			if ts := byAnswer[i+1]; len(ts) > 0 {
				a.Span = Span{}
				fmt.Fprintf(w, "  %d answered %s, %s\n", len(ts), a.What(), when(ts))
			}
		}
		if len(deferred) > 0 {
			var asked []time.Duration
			least, most := deferred[0].RetryAfter, deferred[0].RetryAfter
			for _, n := range deferred {
				asked = append(asked, n.Start)
				least, most = min(least, n.RetryAfter), max(most, n.RetryAfter)
			}
			after := strconv.Itoa(least)
			if most != least {
				after += " to " + strconv.Itoa(most)
			}
			fmt.Fprintf(w, "  %d deferred (%s), asked %s, answered at once with the relay's 429, Retry-After %s s\n", len(deferred), deferred[0].Deferred, when(asked), after)
		}
	}
}

// writeJitter says how the gaps before the navigations phase 1 held
// spread under a jitter f.
func writeJitter(w io.Writer, navs []Nav, f float64, seed uint64) {
	var gaps []float64
	navs = wentOnly(navs)
	for k := 1; k < len(navs) && navs[k].Phase == 1; k++ {
		if navs[k].Wait > navs[k].PlaceWait {
			gaps = append(gaps, limiter.Millis(navs[k].Start-navs[k-1].Start))
		}
	}
	if len(gaps) == 0 {
		fmt.Fprintf(w, "jitter %g: no navigation was held, so none moved\n\n", f)
		return
	}
	var sum, sq float64
	for _, g := range gaps {
		sum, sq = sum+g, sq+g*g
	}
	mean := sum / float64(len(gaps))
	fmt.Fprintf(w, "jitter %g (seed %d): the %d held navigations came %.1f to %.1fms after the one before, mean %.1fms, stdev %.1fms\n\n",
		f, seed, len(gaps), slices.Min(gaps), slices.Max(gaps), mean, math.Sqrt(max(0, sq/float64(len(gaps))-mean*mean)))
}

// writeInFlight says how many navigations of one bucket were in flight at
// once (each from its start to its answer, Load later), and how many
// waited for a place and how long.
func writeInFlight(w io.Writer, navs []Nav, load time.Duration, limit int) {
	type edge struct {
		at    time.Duration
		delta int
	}
	byBucket := map[string][]edge{}
	var waits []time.Duration
	for _, n := range navs {
		if n.Deferred == "" {
			byBucket[n.Host] = append(byBucket[n.Host], edge{n.Start, 1}, edge{n.Start + load, -1})
		}
		if n.PlaceWait > 0 {
			waits = append(waits, n.PlaceWait)
		}
	}
	most := 0
	for _, edges := range byBucket {
		// An answer at the instant another starts frees its place first.
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
		in := 0
		for _, e := range edges {
			in += e.delta
			most = max(most, in)
		}
	}
	capped := "no cap"
	if limit > 0 {
		capped = fmt.Sprintf("cap %d", limit)
	}
	fmt.Fprintf(w, "\nin flight at once, per host: at most %d (%s)", most, capped)
	if len(waits) > 0 {
		slices.Sort(waits)
		fmt.Fprintf(w, "; %d of %d navigations waited for a place: p50 %.1fms, max %.1fms", len(waits), len(navs),
			limiter.Millis(report.Percentile(waits, 0.5)), limiter.Millis(waits[len(waits)-1]))
	}
	fmt.Fprintln(w)
}

// Report replays o and returns the schedule of its first host as the
// tables read it, to print beside a measured one.
func Report(o Options) report.Run {
	navs := Replay(o)
	set, _, _ := policy.New(o.Policy, nil).Setting(o.hosts()[0])
	return report.Run{Mode: set.Name(), Quantum: set.Quantum(), Phases: phases(navs, o.Phases), Booked: booked(navs)}
}

// wentOnly returns the navigations of navs that reached the site: not
// those deferred.
func wentOnly(navs []Nav) []Nav {
	if !slices.ContainsFunc(navs, func(n Nav) bool { return n.Deferred != "" }) {
		return navs
	}
	return slices.DeleteFunc(slices.Clone(navs), func(n Nav) bool { return n.Deferred != "" })
}

// phases returns when each navigation of each phase that reached the
// site started.
func phases(navs []Nav, n int) [][]time.Duration {
	out := make([][]time.Duration, n)
	for _, nv := range wentOnly(navs) {
		out[nv.Phase-1] = append(out[nv.Phase-1], nv.Start)
	}
	return out
}

// booked returns phase 1's navigations that reached the site as the
// limiter let them go: held for its slot, not only for a place in flight.
func booked(navs []Nav) []report.Booking {
	var out []report.Booking
	for _, nv := range wentOnly(navs) {
		if nv.Phase == 1 {
			out = append(out, report.Booking{Start: nv.Start, Waited: nv.Wait > nv.PlaceWait})
		}
	}
	return out
}

// writeSimCSV writes one row per navigation; with pages, which page asked
// for it and how long it waited for a place in flight too; with answers,
// what the site answered it (status), or why it was deferred and the
// Retry-After of the relay's 429 (deferred, retry_after_s). A gap is
// from the navigation before it that reached the site; a deferred one
// has none.
func writeSimCSV(w io.Writer, navs []Nav, pages, answers bool) {
	head := "phase,nav,start_ms,gap_ms,wait_ms,spacing_ms,pressure"
	if pages {
		head += ",page,place_wait_ms"
	}
	if answers {
		head += ",status,deferred,retry_after_s"
	}
	fmt.Fprintln(w, head)
	var prev time.Duration
	first := true // no navigation of the phase reached the site yet
	for i, n := range navs {
		if i == 0 || n.Phase != navs[i-1].Phase {
			first = true
		}
		gap := ""
		if n.Deferred == "" {
			if first {
				gap = "0.000"
			} else {
				gap = fmt.Sprintf("%.3f", limiter.Millis(n.Start-prev))
			}
			prev, first = n.Start, false
		}
		fmt.Fprintf(w, "%d,%d,%.3f,%s,%.3f,%.3f,%d", n.Phase, n.Nav, limiter.Millis(n.Start), gap, limiter.Millis(n.Wait), limiter.Millis(n.Spacing), n.Pressure)
		if pages {
			fmt.Fprintf(w, ",%d,%.3f", n.Page, limiter.Millis(n.PlaceWait))
		}
		if answers {
			if n.Deferred != "" {
				fmt.Fprintf(w, ",,%s,%d", n.Deferred, n.RetryAfter)
			} else {
				fmt.Fprintf(w, ",%d,,", n.Status)
			}
		}
		fmt.Fprintln(w)
	}
}
