//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The fleet of TestRollingRestart: three relays sharing one schedule per
// host in Redis, a navigation of a host every 300 ms (burst 1), a short
// drain so that a restart is short.
const (
	rollSpacing  = 300 * time.Millisecond
	rollMinGap   = 294 * time.Millisecond // 98% of the spacing: the goal for the site's least gap
	rollDrain    = 3 * time.Second
	rollExitWait = rollDrain + 2*time.Second // from SIGTERM to the exit: the drain, then closing pages and connections
	rollHost     = "roll.test"
	rollWarmHost = "w.roll.test"     // each new page's first load, a host of its own the test does not time
	rollLead     = 8 * time.Second   // from the first document to the first stop
	rollTail     = 20 * time.Second  // from the last stop to the crawl's end: the clients carry on
	rollPeriod   = 20 * time.Second  // between two stops, at most
	rollSettle   = 3 * time.Second   // from a relay's "relay ready" to the next stop, at least
	rollReady    = 40 * time.Second  // for a relay to log "relay ready"
	rollGrace    = 30 * time.Second  // the script's, for a cut at the crawl's end to carry on
	rollDefault  = 150 * time.Second // E2E_ROLLING's default
	rollProgress = 0.6               // of the documents the schedule allows in the crawl's duration
)

// unheldSample is the sample of /metrics counting navigations of the
// relay's clients that reached the network without a booking.
const unheldSample = `cdp_throttle_navigations_total{outcome="unheld"}`

// TestRollingRestart restarts a fleet of relays in turn while clients
// crawl one host through them (issue 45, rolling restarts): one Redis,
// two Chromiums started on their own, A and B, and three relay processes
// sharing one schedule per host in it (300 ms, burst 1, --drain-timeout
// 3s), relay 1 and relay 3 in front of A, relay 2 in front of B. Six
// Puppeteer clients of rolling-crawl.mjs, two homed on each relay, goto
// pages of roll.test back to back; when a stop cuts a client's loop (its
// connection closes, a goto throws or gets the relay's stopping 429, a
// connection is refused) it reconnects, home first, and carries on.
// Meanwhile the test sends SIGTERM to relay 1, waits for its exit, starts
// it again on the same address, then relay 2, relay 3, and again, about
// every 20 s, until 20 s before the crawl ends (E2E_ROLLING, a Go
// duration, 150s by default: every relay restarted at least twice; the
// issue's run is 10m).
//
// The site sees no two documents of the host closer than half the
// spacing (E2E_ROLLING_MIN_GAP, a fraction of it: the goal is
// 0.98, which a fleet on one schedule misses, below; the old relay let a
// stop's held navigations go 0 ms apart), across every stop and start,
// and the summary counts those under 98%; each document was booked by
// a relay (its debug log's url_hash) and reached the site no earlier than
// its slot, so none was let go unheld; each relay exits 0 within
// its drain and 2 s; before each stop the relay counted no navigation
// unheld, and no relay logged one; every relay was restarted at least
// twice; the crawl made progress (60% of the documents the schedule
// allows); and every loop a stop cut carried on with a goto that reached
// the site. The log says how late after its slot each document reached
// the site, near a stop and away from one: what moves the site's gaps off
// the schedule's, since a relay cannot move the slots other relays booked
// already when one of its navigations leaves the browser late.
//
// E2E_ROLLING_BIN runs the fleet on another binary of the relay (a command
// taking the same flags), to see what an older relay did.
func TestRollingRestart(t *testing.T) {
	d, floor := rollDefault, rollSpacing/2
	if v := os.Getenv("E2E_ROLLING_MIN_GAP"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 || f > 1 {
			t.Fatalf("E2E_ROLLING_MIN_GAP=%q: want a fraction of the spacing, such as 0.98", v)
		}
		floor = time.Duration(f * float64(rollSpacing))
	}
	if v := os.Getenv("E2E_ROLLING"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("E2E_ROLLING=%q: want a Go duration such as 150s or 10m: %v", v, err)
		}
	}
	rs := startRedisServer(t)
	aHTTP, bHTTP := ownChromium(t), ownChromium(t)
	s := newSite(t)
	run, isDoc, first := watchRun(s, rollHost)
	bin := os.Getenv("E2E_ROLLING_BIN") // another build of the relay, to compare with
	if bin == "" {
		bin = buildBinary(t)
	}
	logDir, err := os.MkdirTemp("", "cdp-throttle-rolling-")
	if err != nil {
		t.Fatal(err)
	}

	flags := []string{"--store", rs.url(), "--http-nav-delay", rollSpacing.String(), "--http-nav-burst", "1",
		"--drain-timeout", rollDrain.String(), "--log-format", "json", "--log-level", "debug"}
	relays := []*rollRelay{
		{name: "relay1", upstream: "A", argv: append([]string{"--upstream", aHTTP}, flags...)},
		{name: "relay2", upstream: "B", argv: append([]string{"--upstream", bHTTP}, flags...)},
		{name: "relay3", upstream: "A", argv: append([]string{"--upstream", aHTTP}, flags...)},
	}
	// Cleanups run last first: the relays are stopped, then their logs
	// written and, when the test failed, shown.
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("E2E_RELAY_LOG") == "" {
			os.RemoveAll(logDir)
			return
		}
		for _, rr := range relays {
			rr.report(t)
		}
	})
	for _, rr := range relays {
		rr.bin, rr.listen, rr.logDir = bin, "127.0.0.1:"+freePort(t), logDir
		rr.argv = append([]string{"--listen", rr.listen}, rr.argv...)
		t.Cleanup(func() { rr.kill() })
		rr.start(t)
	}

	var urls, homes []string
	for k, rr := range relays {
		urls = append(urls, "http://"+rr.listen)
		homes = append(homes, strconv.Itoa(k), strconv.Itoa(k))
	}
	crawl := startRollCrawl(t, "RELAYS="+strings.Join(urls, ","), "HOMES="+strings.Join(homes, ","),
		"BASE="+s.url(rollHost, ""), "WARM_BASE="+s.url(rollWarmHost, ""), "RUN="+run,
		"DURATION="+strconv.FormatInt(d.Milliseconds(), 10), "GRACE="+strconv.FormatInt(rollGrace.Milliseconds(), 10))
	crawlEnd := crawl.startAt.Add(d)

	var t0 time.Time
	select {
	case h := <-first:
		t0 = h.reached()
	case <-crawl.exited:
		t.Fatalf("rolling-crawl.mjs ended before any document reached the site: %v\nstdout:\n%s\nstderr:\n%s", crawl.err, crawl.stdout.String(), crawl.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("no document reached the site within 60 s\nstderr:\n%s", crawl.stderr.String())
	}
	rel := func(at time.Time) string { return fmt.Sprintf("%+9.3fs", at.Sub(t0).Seconds()) }

	// The stops: six periods fit between the first and the last, so that
	// each relay is stopped twice even when restarts run late.
	firstStop, lastStop := t0.Add(rollLead), crawlEnd.Add(-rollTail)
	period := min(rollPeriod, lastStop.Sub(firstStop)/6)
	if least := rollExitWait + rollSettle + 2*time.Second; period < least {
		t.Fatalf("E2E_ROLLING=%v is too short: stops would come %v apart, want at least %v (each relay is restarted twice, %v after the first document and %v before the end)",
			d, period, least, rollLead, rollTail)
	}
	var stops []*rollStop
	crawlGone := false
	for k, next := 0, firstStop; !next.After(lastStop); k++ {
		select {
		case <-time.After(time.Until(next)):
		case <-crawl.exited:
			crawlGone = true
		}
		if crawlGone {
			t.Errorf("rolling-crawl.mjs ended %s, before the stops did: %v", rel(time.Now()), crawl.err)
			break
		}
		rr := relays[k%len(relays)]
		st := rr.stop(t)
		stops = append(stops, st)
		if st.exitErr != nil || st.exitAfter() > rollExitWait+10*time.Second {
			break // it is gone or hangs: say so below, do not restart it
		}
		rr.start(t)
		st.readyAt = rr.cur.readyAt
		rr.restarts++
		next = next.Add(period)
		if settled := st.readyAt.Add(rollSettle); next.Before(settled) {
			next = settled
		}
	}

	var out struct {
		Clients   []rollClient `json:"clients"`
		Duration  float64      `json:"duration"`
		Unhandled int          `json:"unhandled"`
	}
	select {
	case <-crawl.exited:
	case <-time.After(time.Until(crawlEnd.Add(rollGrace + 60*time.Second))):
		t.Fatalf("rolling-crawl.mjs still running %v after its duration\nstderr:\n%s", rollGrace+60*time.Second, crawl.stderr.String())
	}
	if crawl.err != nil {
		t.Fatalf("rolling-crawl.mjs: %v\nstderr:\n%s\nstdout:\n%s", crawl.err, crawl.stderr.String(), crawl.stdout.String())
	}
	if err := json.Unmarshal([]byte(crawl.stdout.String()), &out); err != nil {
		t.Fatalf("rolling-crawl.mjs's output: %v\n%s", err, crawl.stdout.String())
	}
	if crawl.stderr.String() != "" && os.Getenv("E2E_TRACE") == "" {
		t.Logf("rolling-crawl.mjs stderr:\n%s", crawl.stderr.String())
	}

	// The last incarnations: their unheld count, and a clean stop once the
	// crawl is over.
	var finals []*rollStop
	for _, rr := range relays {
		if rr.cur != nil && !rr.cur.gone() {
			finals = append(finals, rr.stop(t))
		}
	}

	// The documents, as the site saw them (each one's kernel arrival).
	docs := s.hitsOf(isDoc)
	slices.SortFunc(docs, func(a, b hit) int { return a.reached().Compare(b.reached()) })
	var gaps []time.Duration
	var tooClose, underGoal []int // k: docs[k] came too soon after docs[k-1]: under floor, under rollMinGap
	for k := 1; k < len(docs); k++ {
		g := docs[k].reached().Sub(docs[k-1].reached())
		gaps = append(gaps, g)
		if g < floor {
			tooClose = append(tooClose, k)
		}
		if g < rollMinGap {
			underGoal = append(underGoal, k)
		}
	}
	pct := percentiles(gaps)

	// Each document against the slot a relay booked for it: one no relay
	// booked, or one that reached the site before its slot, was let go
	// unheld. How late after its slot each reached the site (the relay's
	// release, and the browser's send) is what moves the site's gaps off
	// the schedule's.
	booked := bookingsOf(relays)
	var late []time.Duration
	var unbooked, early []hit
	nearStop := func(at time.Time) bool {
		for _, st := range append(slices.Clone(stops), finals...) {
			if !at.Before(st.sigAt.Add(-time.Second)) && !at.After(st.exitAt.Add(3*time.Second)) {
				return true
			}
		}
		return false
	}
	var lateNear, lateAway []time.Duration
	for _, h := range docs {
		slot, ok := slotOf(booked[urlHash(s.url(h.Host, h.Path+"?"+h.Query))])
		if !ok {
			unbooked = append(unbooked, h)
			continue
		}
		l := h.reached().Sub(slot)
		late = append(late, l)
		if nearStop(h.reached()) {
			lateNear = append(lateNear, l)
		} else {
			lateAway = append(lateAway, l)
		}
		// The log's slot is to the millisecond, truncated.
		if l < -2*time.Millisecond {
			early = append(early, h)
		}
	}
	closeNear := 0
	ways := map[string]int{} // the relays of the two documents of each gap too close: "relay3→relay2"
	for _, k := range underGoal {
		if nearStop(docs[k].reached()) || nearStop(docs[k-1].reached()) {
			closeNear++
		}
		ways[relayOf(docs[k-1])+"→"+relayOf(docs[k])]++
	}
	var byWay []string
	for w, n := range ways {
		byWay = append(byWay, fmt.Sprintf("%s %d", w, n))
	}
	slices.Sort(byWay)

	// The summary.
	var sum strings.Builder
	span := time.Duration(0)
	if len(docs) > 1 {
		span = docs[len(docs)-1].reached().Sub(docs[0].reached())
	}
	fmt.Fprintf(&sum, "rolling restarts over %v (crawl %.1f s): %d documents of %s in %.1f s, least gap %.1f ms, 1st percentile %.1f ms, median %.1f ms",
		d, out.Duration/1000, len(docs), rollHost, span.Seconds(), ms(pct(0)), ms(pct(0.01)), ms(pct(0.5)))
	lp, ln, la := percentiles(late), percentiles(lateNear), percentiles(lateAway)
	fmt.Fprintf(&sum, "\nlateness at the site after the booked slot: median %.1f ms, 99th percentile %.1f ms, most %.1f ms (within a stop, from 1 s before SIGTERM to 3 s after the exit: %d documents, median %.1f, 99th %.1f, most %.1f; away from stops: %d, median %.1f, 99th %.1f, most %.1f); documents no relay booked %d, reached before their slot %d",
		ms(lp(0.5)), ms(lp(0.99)), ms(lp(1)), len(lateNear), ms(ln(0.5)), ms(ln(0.99)), ms(ln(1)), len(lateAway), ms(la(0.5)), ms(la(0.99)), ms(la(1)), len(unbooked), len(early))
	fmt.Fprintf(&sum, "\ngaps under %v (98%% of the spacing): %d (%d of them within a stop; through the relays, the earlier → the later: %s)", rollMinGap, len(underGoal), closeNear, strings.Join(byWay, ", "))
	var restarts []string
	for _, rr := range relays {
		restarts = append(restarts, fmt.Sprintf("%s (upstream %s) %d", rr.name, rr.upstream, rr.restarts))
	}
	fmt.Fprintf(&sum, "\nrestarts: %s", strings.Join(restarts, ", "))
	fmt.Fprintf(&sum, "\nstops (relative to the first document):")
	for _, st := range append(slices.Clone(stops), finals...) {
		ready := "not restarted"
		if !st.readyAt.IsZero() {
			ready = fmt.Sprintf("ready again %6.0f ms after the exit", ms(st.readyAt.Sub(st.exitAt)))
		}
		fmt.Fprintf(&sum, "\n  %s SIGTERM %s  exit after %6.0f ms, status %v  %s  (before it: unheld %g, delayed %g)",
			st.relay, rel(st.sigAt), ms(st.exitAfter()), exitStatus(st.exitErr), ready, st.unheld, st.delayed)
	}
	totals := rollClient{}
	fmt.Fprintf(&sum, "\nclients:")
	for _, c := range out.Clients {
		fmt.Fprintf(&sum, "\n  c%d home relay%d: gotos %d, refused (stopping 429) %d, other status %d, errors %d, cuts %d, carried on %d, pending %d, reconnects %d, connect failures %d, connections per relay %v",
			c.Client, c.Home+1, c.Gotos, c.Refused, c.Other, c.Errors, c.Cuts, c.Carried, c.Pending, c.Reconnects, c.ConnectFailures, c.Connects)
		if len(c.Samples) > 0 {
			fmt.Fprintf(&sum, "\n      cuts seen: %s", strings.Join(c.Samples, " | "))
		}
		totals.Gotos += c.Gotos
		totals.Refused += c.Refused
		totals.Other += c.Other
		totals.Errors += c.Errors
		totals.Cuts += c.Cuts
		totals.Carried += c.Carried
		totals.Reconnects += c.Reconnects
	}
	fmt.Fprintf(&sum, "\n  all: gotos %d, refused %d, other %d, errors %d, cuts %d, carried on %d, reconnects %d; promise rejections no one handled %d",
		totals.Gotos, totals.Refused, totals.Other, totals.Errors, totals.Cuts, totals.Carried, totals.Reconnects, out.Unhandled)
	t.Logf("%s", sum.String())

	// No two documents closer than the spacing allows.
	if len(tooClose) > 0 {
		t.Errorf("%d pairs of documents of %s reached the site closer than %v:%s", len(tooClose), rollHost, floor,
			describeClose(docs, tooClose, s, booked, append(slices.Clone(stops), finals...), rel))
	}
	// Every document was booked, and none reached the site before its slot.
	if len(unbooked) > 0 {
		t.Errorf("%d documents of %s reached the site with no booking in any relay's log (let go unheld):%s", len(unbooked), rollHost, describeDocs(unbooked))
	}
	if len(early) > 0 {
		t.Errorf("%d documents of %s reached the site before the slot a relay booked for them (let go unheld):%s", len(early), rollHost,
			func() string {
				var b strings.Builder
				for _, h := range early {
					b.WriteString("\n    " + describeDoc(h, s, booked, rel))
				}
				return b.String()
			}())
	}
	// Progress.
	if want := int(rollProgress * float64(d) / float64(rollSpacing)); len(docs) < want {
		t.Errorf("%d documents reached the site in %v, want at least %d (%.0f%% of one every %v)", len(docs), d, want, 100*rollProgress, rollSpacing)
	}
	// Every relay restarted twice.
	for _, rr := range relays {
		if rr.restarts < 2 {
			t.Errorf("%s was restarted %d times, want at least 2", rr.name, rr.restarts)
		}
	}
	// Each stop: exit 0 within the drain and 2 s, and nothing unheld.
	for _, st := range append(slices.Clone(stops), finals...) {
		if st.exitErr != nil {
			t.Errorf("%s, stopped at %s, exited with %v, want status 0", st.relay, rel(st.sigAt), st.exitErr)
		}
		if st.exitAfter() > rollExitWait {
			t.Errorf("%s, stopped at %s, exited %v after SIGTERM, want within %v (--drain-timeout %v and 2 s)",
				st.relay, rel(st.sigAt), st.exitAfter().Round(time.Millisecond), rollExitWait, rollDrain)
		}
		if st.unheld != 0 {
			t.Errorf("%s, before its stop at %s: %s %g, want 0", st.relay, rel(st.sigAt), unheldSample, st.unheld)
		}
	}
	for _, rr := range relays {
		for i, p := range rr.procs {
			if lines := p.logs.linesOf("reached the network unheld"); len(lines) > 0 {
				t.Errorf("%s (incarnation %d) logged navigations that reached the network unheld:\n  %s", rr.name, i+1, strings.Join(lines, "\n  "))
			}
		}
	}
	// The stops cut the crawl, and every loop they cut carried on.
	if len(out.Clients) != len(homes) {
		t.Errorf("rolling-crawl.mjs reported %d clients, want %d", len(out.Clients), len(homes))
	}
	for _, c := range out.Clients {
		if c.Pending > 0 || c.Carried != c.Cuts {
			t.Errorf("client c%d (home relay%d): %d cuts, %d carried on with a goto that reached the site, %d never carried on", c.Client, c.Home+1, c.Cuts, c.Carried, c.Pending)
		}
		if c.Gotos == 0 {
			t.Errorf("client c%d (home relay%d) reached the site with no goto", c.Client, c.Home+1)
		}
	}
	if totals.Cuts < len(stops) {
		t.Errorf("the clients' loops were cut %d times in %d stops: want the stops to cut the crawl (the clients of a stopping relay at least once each)", totals.Cuts, len(stops))
	}
}

// rollClient is what one client of rolling-crawl.mjs counted.
type rollClient struct {
	Client          int      `json:"client"`
	Home            int      `json:"home"`
	Gotos           int      `json:"gotos"`
	Refused         int      `json:"refused"`
	Other           int      `json:"other"`
	Errors          int      `json:"errors"`
	Cuts            int      `json:"cuts"`
	Carried         int      `json:"carried"`
	Pending         int      `json:"pending"`
	Reconnects      int      `json:"reconnects"`
	ConnectFailures int      `json:"connectFailures"`
	Connects        []int    `json:"connects"`
	Samples         []string `json:"samples"`
}

// rollRelay is one relay of the fleet, on one address through its restarts.
type rollRelay struct {
	name, upstream string
	bin, listen    string
	argv           []string
	logDir         string
	cur            *rollProc   // the incarnation running, or the last
	procs          []*rollProc // every incarnation, in order
	restarts       int
}

// rollProc is one incarnation of a relay.
type rollProc struct {
	*loggedProc
	startAt time.Time
	readyAt time.Time
}

func (p *rollProc) gone() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// rollStop is one SIGTERM to a relay.
type rollStop struct {
	relay           string
	unheld, delayed float64 // its /metrics before the signal
	sigAt, exitAt   time.Time
	exitErr         error
	readyAt         time.Time // of the incarnation started after it; zero if none
}

func (st *rollStop) exitAfter() time.Duration { return st.exitAt.Sub(st.sigAt) }

func exitStatus(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}

// start runs a new incarnation of rr on its address and waits until it is
// ready.
func (rr *rollRelay) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(rr.bin, rr.argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &rollProc{startAt: time.Now()}
	p.loggedProc = startWatched(t, cmd)
	rr.cur = p
	rr.procs = append(rr.procs, p)
	p.logs.waitFor(t, "relay ready", rollReady)
	p.readyAt = time.Now()
}

// stop reads rr's unheld count, sends it SIGTERM and waits for its exit.
func (rr *rollRelay) stop(t *testing.T) *rollStop {
	t.Helper()
	p := rr.cur
	if p.gone() {
		t.Fatalf("%s exited on its own %v after it started: %v", rr.name, p.exitAt.Sub(p.startAt).Round(time.Millisecond), p.exitErr)
	}
	m := &relayProcess{url: "http://" + rr.listen}
	st := &rollStop{relay: rr.name,
		unheld:  m.metric(t, unheldSample),
		delayed: m.metric(t, `cdp_throttle_navigations_total{outcome="delayed"}`),
	}
	st.sigAt = time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to %s: %v", rr.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(rollExitWait + 10*time.Second):
		t.Errorf("%s still running %v after SIGTERM: killed", rr.name, rollExitWait+10*time.Second)
		p.cmd.Process.Kill()
		<-p.exited
	}
	st.exitAt, st.exitErr = p.exitAt, p.exitErr
	return st
}

// kill ends rr's incarnation running, if any, at the test's end.
func (rr *rollRelay) kill() {
	if p := rr.cur; p != nil && !p.gone() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(rollExitWait + 5*time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
	}
	for _, p := range rr.procs {
		p.pr.Close()
	}
}

// report writes each incarnation's log to a file of logDir and shows its
// warnings and errors in the test's log, or all of it with E2E_RELAY_LOG.
func (rr *rollRelay) report(t *testing.T) {
	for i, p := range rr.procs {
		p.logs.mu.Lock()
		raw := p.logs.raw.String()
		p.logs.mu.Unlock()
		path := filepath.Join(rr.logDir, fmt.Sprintf("%s-%02d.log", rr.name, i+1))
		if err := os.WriteFile(path, []byte(raw), 0o644); err != nil {
			t.Logf("writing %s: %v", path, err)
		}
		var warn []string
		for _, l := range strings.Split(raw, "\n") {
			if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) || !strings.HasPrefix(l, "{") && l != "" {
				warn = append(warn, l)
			}
		}
		if os.Getenv("E2E_RELAY_LOG") != "" {
			t.Logf("%s incarnation %d (%s %s), log in %s:\n%s", rr.name, i+1, rr.bin, strings.Join(rr.argv, " "), path, raw)
		} else {
			t.Logf("%s incarnation %d (%s %s), full log (debug) in %s; its warnings and errors:\n%s", rr.name, i+1, rr.bin, strings.Join(rr.argv, " "), path, strings.Join(warn, "\n"))
		}
	}
}

// rollBooking is a relay's log line of a navigation it booked ("navigation
// held", "navigation goes at once") or answered itself.
type rollBooking struct {
	relay string // name#incarnation
	line  map[string]any
	slot  time.Time // zero if the line has none
}

// bookingsOf indexes every incarnation's log lines that name a navigation,
// by the hash of its URL (url_hash).
func bookingsOf(relays []*rollRelay) map[string][]rollBooking {
	booked := map[string][]rollBooking{}
	for _, rr := range relays {
		for i, p := range rr.procs {
			p.logs.mu.Lock()
			for _, m := range p.logs.lines {
				h, ok := m["url_hash"].(string)
				if !ok {
					continue
				}
				b := rollBooking{relay: fmt.Sprintf("%s#%d", rr.name, i+1), line: m}
				if v, ok := m["slot"].(string); ok {
					b.slot, _ = time.Parse(time.RFC3339Nano, v)
				}
				booked[h] = append(booked[h], b)
			}
			p.logs.mu.Unlock()
		}
	}
	return booked
}

// slotOf returns the slot the last booking of bs gave, and whether one did.
func slotOf(bs []rollBooking) (time.Time, bool) {
	for i := len(bs) - 1; i >= 0; i-- {
		if !bs[i].slot.IsZero() {
			return bs[i].slot, true
		}
	}
	return time.Time{}, false
}

// describeDoc tells which client and relay the document h came through,
// what the relays logged of it (the slot booked for it), and how late after
// that slot it reached the site.
func describeDoc(h hit, s *site, booked map[string][]rollBooking, rel func(time.Time) string) string {
	q, _ := url.ParseQuery(h.Query)
	bs := booked[urlHash(s.url(h.Host, h.Path+"?"+h.Query))]
	var b strings.Builder
	fmt.Fprintf(&b, "reached %s  c%s via relay%d k=%s", rel(h.reached()), q.Get("c"), atoi(q.Get("r"))+1, q.Get("k"))
	if slot, ok := slotOf(bs); ok {
		fmt.Fprintf(&b, ", %.1f ms after its slot", ms(h.reached().Sub(slot)))
	}
	for _, bk := range bs {
		fmt.Fprintf(&b, "\n        %s: %v", bk.relay, bk.line["message"])
		for _, key := range []string{"time", "slot", "delay_ms", "skew_ms", "reason"} {
			if v, ok := bk.line[key]; ok {
				fmt.Fprintf(&b, " %s=%v", key, v)
			}
		}
	}
	return b.String()
}

// describeClose tells, for each pair of documents too close (docs[k-1] and
// docs[k], for k in tooClose; at most 40 pairs), which client and relay
// each came through, what the relays logged of it (the slot booked for
// it), how late after that slot it reached the site, and the stops near
// it.
func describeClose(docs []hit, tooClose []int, s *site, booked map[string][]rollBooking, stops []*rollStop, rel func(time.Time) string) string {
	doc := func(h hit) string { return describeDoc(h, s, booked, rel) }
	var b strings.Builder
	for n, k := range tooClose {
		if n == 40 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(tooClose)-n)
			break
		}
		a, c := docs[k-1], docs[k]
		fmt.Fprintf(&b, "\n  %.1f ms apart:\n    %s\n    %s", ms(c.reached().Sub(a.reached())), doc(a), doc(c))
		for _, st := range stops {
			if st.sigAt.Before(c.reached().Add(2*time.Second)) && st.exitAt.After(a.reached().Add(-2*time.Second)) {
				fmt.Fprintf(&b, "\n    near the stop of %s: SIGTERM %s, exit %s", st.relay, rel(st.sigAt), rel(st.exitAt))
			}
		}
	}
	return b.String()
}

// percentiles returns the p-quantile of ds (0: the least, 1: the most).
func percentiles(ds []time.Duration) func(p float64) time.Duration {
	sorted := slices.Sorted(slices.Values(ds))
	return func(p float64) time.Duration {
		if len(sorted) == 0 {
			return 0
		}
		return sorted[min(len(sorted)-1, max(0, int(math.Ceil(p*float64(len(sorted))))-1))]
	}
}

// relayOf returns the name of the relay a document's client was connected
// to (its URL's r, from 0).
func relayOf(h hit) string {
	q, _ := url.ParseQuery(h.Query)
	return fmt.Sprintf("relay%d", atoi(q.Get("r"))+1)
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// startRollCrawl starts rolling-crawl.mjs with env.
func startRollCrawl(t *testing.T, env ...string) *nodeProc {
	t.Helper()
	return startNode(t, "rolling-crawl.mjs", nil, env...)
}
