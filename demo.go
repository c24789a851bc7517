package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// demoOptions is what `cdp-throttle demo` runs.
type demoOptions struct {
	navigations int
	phases      int
	idle        time.Duration
	fixed       time.Duration
	browser     string
	siteIP      string
	out         string
}

func demoFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Value: 200, Usage: "navigations per phase (400 reproduces the seed's run)"},
		&cli.IntFlag{Name: "phases", Value: 2, Usage: "phases per mode, separated by --idle"},
		&cli.DurationFlag{Name: "idle", Value: 8 * time.Second, Usage: "time without navigations between phases"},
		&cli.DurationFlag{Name: "fixed", Value: 100 * time.Millisecond, Usage: "spacing of the fixed mode"},
		&cli.StringFlag{Name: "browser", Usage: "Chromium to run (default: chromium on PATH)", EnvVars: env("BROWSER")},
		&cli.StringFlag{Name: "site", Value: "127.0.0.2", Usage: "non-exempt loopback address the demo site listens on"},
		&cli.StringFlag{Name: "out", Value: "demo.html", Usage: "where to write the chart"},
	}
}

func demoOptionsFrom(c *cli.Context) (demoOptions, error) {
	o := demoOptions{
		navigations: c.Int("navigations"),
		phases:      c.Int("phases"),
		idle:        c.Duration("idle"),
		fixed:       c.Duration("fixed"),
		browser:     c.String("browser"),
		siteIP:      c.String("site"),
		out:         c.String("out"),
	}
	switch {
	case o.navigations < 2 || o.navigations > 100_000:
		return o, usagef("--navigations %d: want 2 to 100000", o.navigations)
	case o.phases < 1 || o.phases > 100:
		return o, usagef("--phases %d: want 1 to 100", o.phases)
	case o.idle < 0:
		return o, usagef("--idle %v: want a duration ≥ 0", o.idle)
	case o.fixed < time.Millisecond:
		return o, usagef("--fixed %v: want at least 1ms", o.fixed)
	case net.ParseIP(o.siteIP) == nil:
		return o, usagef("--site %q: want an IP address", o.siteIP)
	case limiter.Exempt(o.siteIP):
		return o, usagef("--site %s is exempt from the limiter; use another loopback address such as 127.0.0.2", o.siteIP)
	case c.NArg() > 0:
		return o, usagef("demo takes no arguments, got %q", c.Args().First())
	}
	if o.browser == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				o.browser = p
				break
			}
		}
		if o.browser == "" {
			return o, errors.New("demo: no Chromium on PATH: install it (apt-get install chromium) or pass --browser PATH")
		}
	}
	return o, nil
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

// runDemo runs the three modes against a real Chromium through in-process
// relays and prints what the server saw.
func runDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	site, err := startDemoSite(o.siteIP)
	if err != nil {
		return err
	}
	defer site.srv.Close()

	port, err := freeLoopbackPort()
	if err != nil {
		return err
	}
	profile, err := os.MkdirTemp("", "cdp-throttle-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	argv := append([]string{o.browser}, headlessFlags()...)
	argv = append(argv, "--user-data-dir="+profile, "--remote-debugging-port="+port, "about:blank")
	quiet := zerolog.New(io.Discard)
	browser, err := launch(argv, quiet)
	if err != nil {
		return err
	}
	defer browser.stop()

	modes := []struct {
		name string
		cfg  limiter.Config
	}{
		{"off", limiter.Config{Mode: limiter.Off}},
		{"fixed" + strconv.FormatInt(o.fixed.Milliseconds(), 10), limiter.Config{Mode: limiter.Fixed, Interval: o.fixed}},
		{"adaptive", limiter.Config{}},
	}
	fmt.Fprintf(stdout, "%d navigations per phase, %d phases %v apart, to %s through Chromium (%s) and the relay\n\n",
		o.navigations, o.phases, o.idle, site.url, o.browser)
	var runs []modeRun
	for _, m := range modes {
		run, err := demoMode(ctx, "http://127.0.0.1:"+port, m.name, m.cfg, site, o, stderr)
		if err != nil {
			fmt.Fprintln(stderr)
			return err
		}
		runs = append(runs, run)
	}
	if isTerminal(stderr) {
		fmt.Fprintf(stderr, "\r%60s\r", "")
	}
	writeReport(stdout, runs...)
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		writeChart(f, runs, o)
		if err := f.Close(); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		fmt.Fprintf(stdout, "\nchart: %s\n", o.out)
	}
	return nil
}

// demoMode runs the phases of one mode through a relay of its own.
func demoMode(ctx context.Context, upstream, name string, cfg limiter.Config, site *demoSite, o demoOptions, stderr io.Writer) (modeRun, error) {
	run := modeRun{mode: name, quantum: quantumFor(cfg)}
	quiet := zerolog.New(io.Discard)
	lim := &bookings{Limiter: limiter.New(cfg)}
	p := &relay.Proxy{Upstream: upstream, Limiter: lim, Log: &quiet}
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
	for phase := 1; phase <= o.phases; phase++ {
		if phase > 1 {
			progress(stderr, "%-9s idle %v before phase %d", name, o.idle, phase)
			select {
			case <-time.After(o.idle):
			case <-ctx.Done():
				return run, ctx.Err()
			}
		}
		lim.reset()
		at, err := demoPhase(ctx, tab, site, o.navigations, func(n int) {
			if n == o.navigations || isTerminal(stderr) {
				progress(stderr, "%-9s phase %d: %d/%d navigations", name, phase, n, o.navigations)
			}
		})
		if err != nil {
			return run, err
		}
		starts := make([]time.Duration, len(at))
		for i, t := range at {
			starts[i] = t.Sub(at[0])
		}
		run.phases = append(run.phases, starts)
		if phase == 1 {
			run.booked = lim.since()
		}
	}
	return run, nil
}

// bookings is the demo's limiter: the real one, noting when it let each
// navigation go, so the first-at table shows what the limiter enforced
// rather than page-load noise.
type bookings struct {
	*limiter.Limiter
	mu   sync.Mutex
	navs []bookedAt // guarded by mu
}

type bookedAt struct {
	start  time.Time
	waited bool
}

func (b *bookings) Reserve(host string, now time.Time) limiter.Reservation {
	r := b.Limiter.Reserve(host, now)
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
func (b *bookings) since() []booking {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]booking, len(b.navs))
	for i, n := range b.navs {
		out[i] = booking{start: n.start.Sub(b.navs[0].start), waited: n.waited}
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

// headlessFlags are what Chromium needs to run headless on a server, as
// root too, without calling out to Google's services.
func headlessFlags() []string {
	return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"}
}

func freeLoopbackPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}

// progress shows what the demo is doing: one line rewritten in place on a
// terminal, a line each otherwise.
func progress(w io.Writer, format string, args ...any) {
	if isTerminal(w) {
		fmt.Fprintf(w, "\r%-60s", fmt.Sprintf(format, args...))
		return
	}
	fmt.Fprintf(w, format+"\n", args...)
}
