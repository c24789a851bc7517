// Package demo reproduces the limiter's published measurement (the rate
// limiter designed for Lightpanda: 400 navigations back to back against one
// host, off, fixed 100 ms and adaptive, two phases 8 s apart) through a real
// Chromium or `lightpanda serve` and in-process relays, and charts what a
// web server saw, beside what package simulate computes for the page-load
// time it measured. It owns the demo's site, its chromedp driver and its
// chart; the tables are package report's.
package demo

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/launcher"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/report"
	"github.com/cdp-throttle/cdp-throttle/simulate"
)

// Options is what a demo runs.
type Options struct {
	Navigations int           // per phase
	Phases      int           // per mode
	Idle        time.Duration // between phases
	Fixed       time.Duration // spacing of the fixed mode
	Browser     string        // the Chromium or Lightpanda to run (launcher.IsLightpanda tells which)
	SiteIP      string        // non-exempt loopback address the site listens on
	Out         string        // where the chart goes; "" for none
	// Live rewrites the progress line in place, for a terminal.
	Live bool
}

// Check reports what is wrong with o, naming the flag that sets it.
func (o Options) Check() error {
	switch {
	case o.Navigations < 2 || o.Navigations > 100_000:
		return fmt.Errorf("--navigations %d: want 2 to 100000", o.Navigations)
	case o.Phases < 1 || o.Phases > 100:
		return fmt.Errorf("--phases %d: want 1 to 100", o.Phases)
	case o.Idle < 0:
		return fmt.Errorf("--idle %v: want a duration ≥ 0", o.Idle)
	case o.Fixed < time.Millisecond:
		return fmt.Errorf("--fixed %v: want at least 1ms", o.Fixed)
	case net.ParseIP(o.SiteIP) == nil:
		return fmt.Errorf("--site %q: want an IP address", o.SiteIP)
	case limiter.Exempt(o.SiteIP):
		return fmt.Errorf("--site %s is exempt from the limiter; use another loopback address such as 127.0.0.2", o.SiteIP)
	}
	return nil
}

// demoSite serves the pages the demo navigates to and records when each
// request arrived.
type demoSite struct {
	url string // http://IP:PORT
	srv *http.Server

	mu     sync.Mutex
	prefix string        // guarded by mu; the path of the run being recorded
	hits   []time.Time   // guarded by mu
	arrive chan struct{} // guarded by mu; one send per recorded hit
}

func startDemoSite(ip string) (*demoSite, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, fmt.Errorf("demo: serving the site on %s: %w (Linux routes all of 127.0.0.0/8 to loopback; elsewhere add the address, e.g. sudo ifconfig lo0 alias %s)", ip, err, ip)
	}
	s := &demoSite{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *demoSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	if s.prefix != "" && strings.HasPrefix(r.URL.Path, s.prefix) {
		s.hits = append(s.hits, now)
		select {
		case s.arrive <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html")
	fmt.Fprintf(w, "<!doctype html><title>%s</title><p>%s</p>", r.URL.Path, r.URL.Path)
}

// record starts recording the requests under prefix.
func (s *demoSite) record(prefix string, n int) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prefix, s.hits, s.arrive = prefix, make([]time.Time, 0, n), make(chan struct{}, n)
	return s.arrive
}

func (s *demoSite) recorded() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prefix = ""
	return s.hits
}

// Run runs the three modes against a real Chromium through in-process
// relays and prints what the server saw.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	site, err := startDemoSite(o.SiteIP)
	if err != nil {
		return err
	}
	defer site.srv.Close()

	// Each on a port it chooses and announces. lightpanda serve's own
	// navigation limiter stays off (the launcher sees to it): the relay's
	// schedule is the one measured.
	name := "Chromium"
	argv := []string{o.Browser, "serve", "--host", "127.0.0.1", "--port", "0"}
	if launcher.IsLightpanda(o.Browser) {
		name = "Lightpanda"
	} else {
		profile, err := os.MkdirTemp("", "cdp-throttle-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(profile)
		argv = append([]string{o.Browser}, launcher.HeadlessChromium...)
		argv = append(argv, "--user-data-dir="+profile, "--remote-debugging-port=0", "about:blank")
	}
	g, err := launcher.StartGroup(ctx, argv, launcher.Options{Log: zerolog.New(io.Discard)})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer g.Stop()

	modes := []limiter.Config{{Mode: limiter.Off}, {Mode: limiter.Fixed, Interval: o.Fixed}, {}}
	fmt.Fprintf(stdout, "%d navigations per phase, %d phases %v apart, to %s through %s (%s) and the relay, in each mode:\n"+
		"off (--http-nav-delay 0: nothing held), fixed%d (--http-nav-delay %v) and adaptive (the default)\n\n",
		o.Navigations, o.Phases, o.Idle, site.url, name, o.Browser, o.Fixed.Milliseconds(), o.Fixed)
	var runs []report.Run
	for _, cfg := range modes {
		run, err := demoMode(ctx, g.Browsers[0], cfg, site, o, stderr)
		if err != nil {
			fmt.Fprintln(stderr)
			return err
		}
		runs = append(runs, run)
	}
	if o.Live {
		fmt.Fprintf(stderr, "\r%60s\r", "")
	}
	fmt.Fprint(stdout, "When the limiter let navigations go (phase 1):\n\n")
	report.WriteBookings(stdout, runs...)
	fmt.Fprint(stdout, "What the server saw:\n\n")
	report.WriteArrivals(stdout, runs...)
	// The same rule on a simulated clock, with the page load this browser
	// showed when nothing held it.
	load := medianGap(runs[0].Phases[0])
	fmt.Fprintf(stdout, "\nsimulated for the page load measured here (the off run's median gap, %.1fms):\n"+
		"./cdp-throttle simulate --navigations %d --phases %d --idle %v --load %v [--http-nav-delay 0 | %d]\n\n",
		limiter.Millis(load), o.Navigations, o.Phases, o.Idle, load.Round(100*time.Microsecond), o.Fixed.Milliseconds())
	var sims []report.Run
	for _, cfg := range modes {
		sims = append(sims, simulate.Report(simulate.Options{Policy: policy.Config{Default: cfg}, Navigations: o.Navigations, Load: load, Phases: o.Phases, Idle: o.Idle}))
	}
	report.Write(stdout, sims...)
	short := conclusion(runs, o)
	fmt.Fprintf(stdout, "\n%s\n", short)
	if o.Out != "" {
		f, err := os.Create(o.Out)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		writeChart(f, runs, o, name, short)
		if err := f.Close(); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		fmt.Fprintf(stdout, "chart: %s\n", o.Out)
	}
	return nil
}

// conclusion says in one line what the run showed: how the adaptive mode
// spaced the navigations, against off and fixed. runs are off, fixed and
// adaptive, in that order.
func conclusion(runs []report.Run, o Options) string {
	off, fixed, adaptive := runs[0], runs[1], runs[2]
	span := func(r report.Run, phase int) string {
		return fmt.Sprintf("%.2fs", report.Span(r.Phases[phase]).Seconds())
	}
	var b strings.Builder
	steps := report.Steps(adaptive.Quantum, adaptive.Booked)
	switch {
	case len(steps) == 0:
		fmt.Fprintf(&b, "In short: adaptive held none of the %d navigations", o.Navigations)
	case len(steps) == 1:
		fmt.Fprintf(&b, "In short: adaptive let all %d navigations go at once (an idle host's burst)", o.Navigations)
	default:
		fmt.Fprintf(&b, "In short: adaptive let the first %d of %d navigations go at once, then spaced them %v more at a time up to %v",
			steps[0].Nav, o.Navigations, adaptive.Quantum, steps[len(steps)-1].Gap)
	}
	fmt.Fprintf(&b, "; they took %s, against %s with nothing held (off) and %s at a fixed %v", span(adaptive, 0), span(off, 0), span(fixed, 0), o.Fixed)
	if o.Phases > 1 {
		fmt.Fprintf(&b, ". After %v idle, phase 2 took %s", o.Idle, span(adaptive, 1))
	}
	b.WriteString(".")
	return b.String()
}

// demoMode runs the phases of one mode through a relay of its own.
func demoMode(ctx context.Context, browser relay.Endpoint, cfg limiter.Config, site *demoSite, o Options, stderr io.Writer) (report.Run, error) {
	name := cfg.Name()
	run := report.Run{Mode: name, Quantum: cfg.Quantum()}
	quiet := zerolog.New(io.Discard)
	lim := &bookings{Limiter: policy.New(policy.Config{Default: cfg}, limiter.New(cfg))}
	p := &relay.Proxy{Browsers: []relay.Endpoint{browser}, Limiter: lim, Log: &quiet}
	if err := p.Start(ctx); err != nil {
		return run, err
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return run, err
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln)
	defer srv.Close()

	allocCtx, cancelAlloc := remote.NewAllocator(ctx, "http://"+ln.Addr().String())
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	if err := chromedp.Do(tab); err != nil {
		return run, fmt.Errorf("demo: opening a tab through the relay: %w", err)
	}
	for phase := 1; phase <= o.Phases; phase++ {
		if phase > 1 {
			progress(stderr, o.Live, "%-9s idle %v before phase %d", name, o.Idle, phase)
			select {
			case <-time.After(o.Idle):
			case <-ctx.Done():
				return run, ctx.Err()
			}
		}
		lim.reset()
		at, err := demoPhase(ctx, tab, site, o.Navigations, func(n int) {
			if n == o.Navigations || o.Live {
				progress(stderr, o.Live, "%-9s phase %d: %d/%d navigations", name, phase, n, o.Navigations)
			}
		})
		if err != nil {
			return run, err
		}
		starts := make([]time.Duration, len(at))
		for i, t := range at {
			starts[i] = t.Sub(at[0])
		}
		run.Phases = append(run.Phases, starts)
		if phase == 1 {
			run.Booked = lim.since()
		}
	}
	return run, nil
}

// bookings is the demo's limiter: the real one, noting when it let each
// navigation go, so the first-at table shows what the limiter enforced
// rather than page-load noise.
type bookings struct {
	hold.Limiter
	mu   sync.Mutex
	navs []bookedAt // guarded by mu
}

type bookedAt struct {
	start  time.Time
	waited bool
}

func (b *bookings) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	r := b.Limiter.Reserve(ctx, host, rawURL, now)
	b.mu.Lock()
	b.navs = append(b.navs, bookedAt{r.Start, r.Start.After(now)})
	b.mu.Unlock()
	return r
}

func (b *bookings) reset() {
	b.mu.Lock()
	b.navs = nil
	b.mu.Unlock()
}

// since returns the starts booked since reset, from the first.
func (b *bookings) since() []report.Booking {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]report.Booking, len(b.navs))
	for i, n := range b.navs {
		out[i] = report.Booking{Start: n.start.Sub(b.navs[0].start), Waited: n.waited}
	}
	return out
}

// demoPhase drives n navigations in tab, back to back: each is issued the
// moment the server sees the one before, and returns when the server saw
// each.
func demoPhase(ctx, tab context.Context, site *demoSite, n int, progress func(int)) ([]time.Time, error) {
	prefix := fmt.Sprintf("/nav/%d/", time.Now().UnixNano())
	arrived := site.record(prefix, n)
	navigate := func(i int) {
		// Page.navigate answers only once the document is in; the next one
		// goes as soon as the server has the request, so do not wait here.
		go chromedp.Call(tab, page.Navigate, page.NavigateParams{URL: site.url + prefix + strconv.Itoa(i)})
	}
	navigate(0)
	for i := 1; i <= n; i++ {
		select {
		case <-arrived:
		case <-time.After(70 * time.Second):
			return nil, fmt.Errorf("demo: navigation %d never reached the server", i)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		progress(i)
		if i < n {
			navigate(i)
		}
	}
	return site.recorded(), nil
}

// medianGap is the median gap between consecutive starts.
func medianGap(starts []time.Duration) time.Duration {
	var gaps []time.Duration
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i]-starts[i-1])
	}
	slices.Sort(gaps)
	return gaps[len(gaps)/2]
}

// progress shows what the demo is doing: one line rewritten in place on a
// terminal, a line each otherwise.
func progress(w io.Writer, live bool, format string, args ...any) {
	if live {
		fmt.Fprintf(w, "\r%-60s", fmt.Sprintf(format, args...))
		return
	}
	fmt.Fprintf(w, format+"\n", args...)
}
