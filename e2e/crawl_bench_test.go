//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// BenchmarkCrawl is BENCHMARKS.md's row n: what holding costs the browser
// when a crawl runs many pages at once. CRAWL_CLIENTS (100) Puppeteer
// clients at once, a page each, each loading CRAWL_LOADS (5) pages of a
// site on 127.0.0.2 with four subresources each, in front of a fresh
// Chromium per run, through each of CRAWL_RUNS in turn, CRAWL_ROUNDS (3)
// rounds whose order turns:
//
//   - direct: the clients straight at Chromium, no proxy between;
//   - floor: a process that only copies bytes (floor_test.go);
//   - off, or a name starting with off: the relay with nothing held
//     (--http-nav-delay 0);
//   - hold: the relay holding every navigation (--http-nav-delay 1ms
//     --http-nav-burst 1);
//   - any other name: hold with the flags CRAWL_FLAGS_<NAME> adds (for
//     instance CRAWL_FLAGS_FETCH="--intercept fetch").
//
// CRAWL_ENV_<NAME> adds to the relay's environment, CRAWL_BIN runs a
// build of the relay of one's own instead of the tree's, and CRAWL_BIN_<NAME>
// runs another build of the relay (to compare one commit with another in
// the same rounds). CRAWL_INTERCEPT=1 makes every client intercept its
// page's requests (Puppeteer's setRequestInterception: images aborted, the
// rest continued). CRAWL_WARMUP=1 crawls through the floor once first,
// unreported: the first crawl of a benchmark runs on cold caches (a floor
// 30% slower than the next seen).
//
// Each run reports the crawl's wall time, the CPU that Chromium (all its
// processes) and the proxy (floor or relay) used, each ÷ the floor's and
// the direct connection's of the same round (when those run); the figures
// are medians over the rounds, each ratio with its 95% bootstrap interval
// (the margin a difference must clear). Each run also
// says what the site saw: the lowest gaps between its navigations as the
// site's kernel stamped their arrival (crawl_site_test.go), and fails when
// a run with a fixed spacing of more than exactSlack and a burst of 1
// (CRAWL_FLAGS_SITE="--http-nav-delay 100ms") let two reach the site
// closer than the spacing less exactSlack.
func BenchmarkCrawl(b *testing.B) {
	names := strings.Split(envOr("CRAWL_RUNS", "floor,off,hold"), ",")
	rounds := envInt(b, "CRAWL_ROUNDS", 3)
	clients, loads := envOr("CRAWL_CLIENTS", "100"), envOr("CRAWL_LOADS", "5")
	bin := crawlBinary(b)
	s := startSiteProcess(b, "-")
	if os.Getenv("CRAWL_WARMUP") == "1" {
		cr := crawlOnce(b, bin, "floor", crawlPage(s, 0, "warmup"), clients, loads)
		fmt.Fprintf(os.Stderr, "warm-up floor wall %6.1f s (not reported)\n", cr.wall.Seconds())
	}
	for range b.N {
		crawlRounds(b, s, names, rounds, "chromium", func(name, page string) crawlRun {
			return crawlOnce(b, bin, name, page, clients, loads)
		})
	}
}

// crawlBinary is CRAWL_BIN, a build of the relay of one's own, or else
// the tree's.
func crawlBinary(b *testing.B) string {
	if bin := os.Getenv("CRAWL_BIN"); bin != "" {
		return bin
	}
	return buildBinary(b)
}

// crawlRounds crawls s through each of names once per round, in an order
// that turns with the round (once crawls page through name), logs each
// run with what the site saw of it, and reports them all; browser names
// the browser's CPU.
func crawlRounds(b *testing.B, s *remoteSite, names []string, rounds int, browser string, once func(name, page string) crawlRun) {
	got := map[string][]crawlRun{}
	for r := range rounds {
		for k := range names {
			name := names[(r+k)%len(names)]
			cr := once(name, crawlPage(s, r+1, name))
			site := checkSite(b, name, siteArrivals(b, s, r+1, name), cr)
			byType := ""
			if cr.byType != nil {
				byType = "  " + byTypeString(cr.byType)
			}
			fmt.Fprintf(os.Stderr, "round %d %-12s wall %6.1f s  %s %6.1f s  proxy %5.2f s  loads %d  failed %d  unheld %d%s  %s\n",
				r+1, name, cr.wall.Seconds(), browser, cr.browser.Seconds(), cr.proxy.Seconds(), cr.ok, cr.failed, cr.unheld, byType, site)
			b.Logf("round %d %-12s wall %6.1f s  %s %6.1f s  proxy %5.2f s  loads %d  failed %d  unheld %d  load avg %s  %s",
				r+1, name, cr.wall.Seconds(), browser, cr.browser.Seconds(), cr.proxy.Seconds(), cr.ok, cr.failed, cr.unheld, loadAverage(), site)
			got[name] = append(got[name], cr)
		}
	}
	reportCrawl(b, names, got, browser)
}

// reportCrawl reports each run's medians over the rounds in got, and each
// one's ratios to the floor's and the direct connection's of the same
// round, each median with its 95% bootstrap interval (the margin a
// difference must clear); browser names the browser's CPU in the metrics.
func reportCrawl(b *testing.B, names []string, got map[string][]crawlRun, browser string) {
	of := map[string]func(crawlRun) float64{
		"wall":                func(c crawlRun) float64 { return c.wall.Seconds() },
		browser + " CPU":      func(c crawlRun) float64 { return c.browser.Seconds() },
		"proxy CPU":           func(c crawlRun) float64 { return c.proxy.Seconds() },
		browser + " CPU/load": func(c crawlRun) float64 { return c.browser.Seconds() / float64(max(c.ok, 1)) },
	}
	order := []string{"wall", browser + " CPU", "proxy CPU"}
	for _, name := range names {
		runs := got[name]
		b.ReportMetric(median(mapRuns(runs, of["wall"])), name+"-wall-s")
		b.ReportMetric(median(mapRuns(runs, of[browser+" CPU"])), name+"-"+browser+"-cpu-s")
		b.ReportMetric(median(mapRuns(runs, of["proxy CPU"])), name+"-proxy-cpu-s")
		for _, base := range []string{"floor", "direct"} {
			if name == base || len(got[base]) == 0 {
				continue
			}
			line := fmt.Sprintf("%-12s ÷ %-6s medians of %d rounds (95%% bootstrap interval):", name, base, len(runs))
			for _, f := range order {
				if f == "proxy CPU" && base == "direct" {
					continue // the direct connection has none
				}
				lo, med, hi := bootstrapMedian(ratios(mapRuns(runs, of[f]), mapRuns(got[base], of[f])))
				line += fmt.Sprintf("  %s %.3f (%.3f–%.3f)", f, med, lo, hi)
				b.ReportMetric(med, name+"/"+base+"-"+strings.ReplaceAll(f, " ", "-"))
			}
			b.Log(line)
			fmt.Fprintln(os.Stderr, line)
		}
	}
}

// crawlRun is what one run of BenchmarkCrawl measured.
type crawlRun struct {
	wall, browser, proxy time.Duration // browser: the CPU of Chromium, or of the Lightpanda processes
	ok, failed, unheld   int
	booked               int                      // navigations the relay booked (passed or delayed)
	late                 int                      // held navigations that left late, moving their schedule
	pushed               time.Duration            // by how much, in all
	overtook             int                      // let go before the one before them left, after pace's bound
	byType               map[string]time.Duration // Chromium's CPU by process type, sampled
}

func mapRuns(runs []crawlRun, f func(crawlRun) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// crawlOnce runs the crawl once through the proxy name, in front of a
// fresh Chromium.
func crawlOnce(b *testing.B, bin, name, page, clients, loads string) crawlRun {
	b.Helper()
	chrome, err := startMeasured(b, "chromium", chromiumCommand(b))
	if err != nil {
		b.Fatal(err)
	}
	endpoint, err := chrome.await(regexp.MustCompile(`DevTools listening on ws://([^/\s]+)/`), 30*time.Second)
	if err != nil {
		chrome.stop()
		b.Fatal(err)
	}
	var proxy *measured
	url := "http://" + endpoint // direct: no proxy between
	if name != "direct" {
		if proxy, url, err = startCrawlProxy(b, bin, name, []string{url}); err != nil {
			chrome.stop()
			b.Fatalf("%s: %v", name, err)
		}
	}
	sampler := chrome.sampleByType()
	cr := runCrawl(b, name, proxy, "CDP_URL="+url, "SITE_URL="+page, "CLIENTS="+clients, "LOADS="+loads)
	cr.byType = sampler()
	if proxy != nil {
		cr.proxy = proxy.stop()
	}
	cr.browser = chrome.stop()
	return cr
}

// startCrawlProxy starts the proxy a crawl run goes through: floor (one
// byte-copying process in front of upstreams, each connection to the next
// in turn) or the relay in front of them, nothing held (off) or holding
// every navigation with the flags CRAWL_FLAGS_<NAME> adds. It returns the
// proxy's http:// address.
func startCrawlProxy(b *testing.B, bin, name string, upstreams []string) (*measured, string, error) {
	var proxy *measured
	var url string
	var err error
	switch name {
	case "floor":
		proxy, err = startMeasured(b, "floor", []string{os.Args[0], "-test.run=^$"}, floorProcessEnv+"="+strings.Join(upstreams, ","))
		if err == nil {
			var addr string
			addr, err = proxy.await(regexp.MustCompile(`^floor listening on (\S+)`), 10*time.Second)
			url = "http://" + addr
		}
	default:
		port := freePort(b)
		exe := bin
		if b := os.Getenv("CRAWL_BIN_" + strings.ToUpper(name)); b != "" {
			exe = b
		}
		args := []string{exe, "--listen", "127.0.0.1:" + port, "--log-level", "warn", "--log-format", "json"}
		for _, u := range upstreams {
			args = append(args, "--upstream", u)
		}
		args = append(args, holdArgs(name)...)
		proxy, err = startMeasured(b, "relay", args, strings.Fields(os.Getenv("CRAWL_ENV_"+strings.ToUpper(name)))...)
		url = "http://127.0.0.1:" + port
		if err == nil {
			err = awaitHTTP(url+"/json/version", 30*time.Second)
		}
	}
	if err != nil && proxy != nil {
		proxy.stop()
	}
	return proxy, url, err
}

// holdArgs are the relay's flags for the crawl's run name: nothing held
// for a name starting with off, else every navigation held (1 ms, a burst
// of 1) with what CRAWL_FLAGS_<NAME> adds, the last of a flag winning.
func holdArgs(name string) []string {
	if strings.HasPrefix(name, "off") {
		return []string{"--http-nav-delay", "0"}
	}
	return append([]string{"--http-nav-delay", "1ms", "--http-nav-burst", "1"}, strings.Fields(os.Getenv("CRAWL_FLAGS_"+strings.ToUpper(name)))...)
}

// runCrawl runs bench-crawl.mjs with env through proxy, the run name, and
// returns its wall time, its loads and the relay's unheld count; the
// proxy goes on.
func runCrawl(b *testing.B, name string, proxy *measured, env ...string) crawlRun {
	out := runNode(b, 20*time.Minute, "bench-crawl.mjs", env...)
	var res struct {
		MS     float64
		OK     int
		Failed int
		Errors []string
	}
	if err := json.Unmarshal(lastLineOf(out), &res); err != nil {
		b.Fatalf("bench-crawl output %q: %v", out, err)
	}
	cr := crawlRun{wall: time.Duration(res.MS * float64(time.Millisecond)), ok: res.OK, failed: res.Failed}
	relayed := name != "floor" && name != "direct"
	if relayed {
		for _, e := range env {
			if u, ok := strings.CutPrefix(e, "CDP_URL="); ok {
				if m, err := httpGet(u + "/metrics"); err == nil {
					cr.unheld = int(metricValue(string(m), `cdp_throttle_navigations_total{outcome="unheld"`))
					cr.booked = int(metricValue(string(m), `cdp_throttle_navigations_total{outcome="passed"`) + metricValue(string(m), `cdp_throttle_navigations_total{outcome="delayed"`))
					cr.late = int(metricValue(string(m), "cdp_throttle_late_departures_total"))
					cr.pushed = time.Duration(metricValue(string(m), "cdp_throttle_schedule_pushed_seconds_total") * float64(time.Second))
					cr.overtook = int(metricValue(string(m), "cdp_throttle_departure_waits_expired_total"))
				}
			}
		}
	}
	said := func(n int) string {
		if proxy == nil {
			return "(no proxy)"
		}
		return proxy.name + " said:\n" + lastLines(proxy.stderr.String(), n)
	}
	if os.Getenv("CRAWL_SHOW_PROXY") != "" {
		fmt.Fprintf(os.Stderr, "%s: %s\n", name, said(60))
	}
	if res.Failed > 0 {
		b.Errorf("%s: %d loads failed: %v\n%s", name, res.Failed, res.Errors, said(30))
	}
	if cr.unheld > 0 {
		b.Errorf("%s: %d navigations unheld", name, cr.unheld)
	}
	// A run of the breakdown with the pauses switched off holds nothing.
	runEnv := os.Getenv("CRAWL_ENV_" + strings.ToUpper(name))
	pausesOff := strings.Contains(runEnv, "CDP_THROTTLE_PARTS_OFF=") && strings.Contains(runEnv, "pauses")
	if relayed && !strings.HasPrefix(name, "off") && !pausesOff && cr.booked < cr.ok {
		b.Errorf("%s: %d navigations booked, %d loads: want every load held", name, cr.booked, cr.ok)
	}
	return cr
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// metricValue sums the samples of a metric in a Prometheus text page
// whose line starts with name (a metric's name, or its name and the start
// of its labels).
func metricValue(page, name string) float64 {
	sum := 0.0
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := strings.TrimPrefix(line, name)
		if !strings.Contains(name, "{") && rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// chromiumCommand is a headless Chromium with a fresh profile, on a port
// it chooses.
func chromiumCommand(b *testing.B) []string {
	bin, err := findChromium()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	return append(append([]string{bin}, ChromiumFlags...), "--user-data-dir="+dir, "--remote-debugging-port=0", "about:blank")
}

// awaitHTTP waits until url answers.
func awaitHTTP(url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		_, err := httpGet(url)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within %s: %w", url, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// measured is a process whose CPU time, and that of every process it
// starts, is counted: in a cgroup of its own where the machine has one
// (cgroup v1 cpuacct or v2), else from what waiting for it reports
// (which counts only the descendants it waited for).
type measured struct {
	name   string
	cmd    *exec.Cmd
	group  string // the cgroup's directory, "" without one
	v2     bool
	lines  chan string
	stderr *fakebrowser.Logs
}

// startMeasured starts args as a process of its own, with env added.
func startMeasured(b *testing.B, name string, args []string, env ...string) (*measured, error) {
	m := &measured{name: name, lines: make(chan string, 64), stderr: &fakebrowser.Logs{}}
	m.group, m.v2 = newCPUGroup(name)
	argv := args
	if m.group != "" {
		// The shell joins the group, then becomes the process: whatever it
		// starts is in the group from its first instruction.
		argv = append([]string{"/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, m.group}, args...)
	}
	m.cmd = exec.Command(argv[0], argv[1:]...)
	m.cmd.Env = append(os.Environ(), env...)
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := m.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	for _, r := range []io.Reader{stdout, stderr} {
		go func() {
			sc := bufio.NewScanner(r)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				m.stderr.Write(append(sc.Bytes(), '\n'))
				select {
				case m.lines <- sc.Text():
				default:
				}
			}
		}()
	}
	return m, nil
}

// await waits for a line matching re and returns its first group.
func (m *measured) await(re *regexp.Regexp, within time.Duration) (string, error) {
	t := time.NewTimer(within)
	defer t.Stop()
	for {
		select {
		case l := <-m.lines:
			if g := re.FindStringSubmatch(l); g != nil {
				return g[1], nil
			}
		case <-t.C:
			return "", fmt.Errorf("%s did not say %q within %s; it said:\n%s", m.name, re, within, m.stderr.String())
		}
	}
}

// stop ends the process (SIGTERM, then SIGKILL to its group after 15 s)
// and returns the CPU time it and its descendants used.
func (m *measured) stop() time.Duration {
	m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	if m.group != "" {
		d, err := cpuGroupUsage(m.group, m.v2)
		// Whatever is left in the group (a child that outlived its parent).
		if procs, _ := os.ReadFile(filepath.Join(m.group, "cgroup.procs")); len(procs) > 0 {
			for _, f := range strings.Fields(string(procs)) {
				if pid, _ := strconv.Atoi(f); pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		os.Remove(m.group)
		if err == nil {
			return d
		}
	}
	if ru, ok := m.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return 0
}

var groupSeq int

// newCPUGroup makes a cgroup that counts CPU time, and returns its
// directory ("" where the machine has none this process may make) and
// whether it is cgroup v2.
func newCPUGroup(name string) (string, bool) {
	groupSeq++
	leaf := fmt.Sprintf("cdp-bench-%d-%s-%d", os.Getpid(), name, groupSeq)
	for _, c := range []struct {
		root string
		v2   bool
	}{{"/sys/fs/cgroup/cpuacct", false}, {"/sys/fs/cgroup/unified", true}, {"/sys/fs/cgroup", true}} {
		if c.v2 {
			if _, err := os.Stat(filepath.Join(c.root, "cgroup.controllers")); err != nil {
				continue
			}
		} else if _, err := os.Stat(filepath.Join(c.root, "cpuacct.usage")); err != nil {
			continue
		}
		dir := filepath.Join(c.root, leaf)
		if os.Mkdir(dir, 0o755) != nil {
			continue
		}
		if _, err := cpuGroupUsage(dir, c.v2); err != nil {
			os.Remove(dir)
			continue
		}
		return dir, c.v2
	}
	return "", false
}

func cpuGroupUsage(dir string, v2 bool) (time.Duration, error) {
	if !v2 {
		b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns), err
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err
		}
	}
	return 0, errors.New("no usage_usec in cpu.stat")
}

// floorProcessEnv, set to host:port (several, comma-separated, each
// connection to the next in turn), makes the test binary a floor in
// front of it (floorProcessMain): a process of its own, whose CPU time is
// counted apart from the test's.
const floorProcessEnv = "CDP_E2E_FLOOR_PROCESS"

// floorProcessMain serves a floor in front of upstream and says where on
// its first line.
func floorProcessMain(upstream string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor process:", err)
		os.Exit(1)
	}
	f := &floor{ln: ln}
	for _, u := range strings.Split(upstream, ",") {
		u = strings.TrimPrefix(u, "http://")
		f.ups = append(f.ups, u)
	}
	fmt.Println("floor listening on", ln.Addr().String())
	f.wg.Add(1)
	f.serve()
	os.Exit(0)
}

// fourSubresources is the crawl's page: an image, a script, a style sheet
// and another image, each of the page's own host.
func fourSubresources(s *site) {
	s.handle("/four", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		q := r.URL.RawQuery
		fmt.Fprintf(w, `<!doctype html><title>%[1]s</title><link rel="stylesheet" href="/style?%[1]s"><body><h1>crawl</h1>`+
			`<img src="/img?%[1]s&i=0"><script src="/script?%[1]s"></script><img src="/img?%[1]s&i=1"></body>`, q)
	})
	s.handle("/style", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		fmt.Fprint(w, "h1 { color: #333; }")
	})
}

// sampleByType samples, twice a second, the CPU time of each process in
// the measured process's group, and returns a function that stops and
// returns the last sample of each, summed by process type (Chromium's
// --type=, "browser" without one). A process's time after its last
// sample is not counted.
func (m *measured) sampleByType() func() map[string]time.Duration {
	if m.group == "" {
		return func() map[string]time.Duration { return nil }
	}
	stop := make(chan struct{})
	done := make(chan map[string]time.Duration)
	go func() {
		last := map[int]time.Duration{}
		kind := map[int]string{}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			procs, _ := os.ReadFile(filepath.Join(m.group, "cgroup.procs"))
			for _, f := range strings.Fields(string(procs)) {
				pid, _ := strconv.Atoi(f)
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				if err != nil {
					continue
				}
				// utime and stime are fields 14 and 15, after the ")" of the name.
				rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
				fs := strings.Fields(rest)
				if len(fs) < 13 {
					continue
				}
				ut, _ := strconv.ParseInt(fs[11], 10, 64)
				st, _ := strconv.ParseInt(fs[12], 10, 64)
				last[pid] = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ 100
				if _, ok := kind[pid]; !ok {
					cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
					k := "browser"
					for _, a := range strings.Fields(strings.ReplaceAll(string(cmd), "\x00", " ")) {
						if t, ok := strings.CutPrefix(a, "--type="); ok {
							k = t
						}
						if t, ok := strings.CutPrefix(a, "--utility-sub-type="); ok {
							k = "utility:" + t[strings.LastIndexByte(t, '.')+1:]
						}
					}
					kind[pid] = k
				}
			}
			select {
			case <-stop:
				out := map[string]time.Duration{}
				for pid, d := range last {
					out[kind[pid]] += d
				}
				done <- out
				return
			case <-tick.C:
			}
		}
	}()
	return func() map[string]time.Duration { close(stop); return <-done }
}

func byTypeString(m map[string]time.Duration) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %.1f", k, m[k].Seconds()))
	}
	return strings.Join(out, ", ")
}
