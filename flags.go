package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/demo"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/launcher"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/simulate"
	"github.com/cdp-throttle/cdp-throttle/store"
)

// usageError is a bad command line: main prints it on one line and exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

const envPrefix = "CDP_THROTTLE_"

func env(name string) []string { return []string{envPrefix + name} }

// durationFlag is a duration flag read by policy.ParseDuration (a Go
// duration, or a bare number of milliseconds), through durations.
func durationFlag(name, value, usage string, envVars ...string) cli.Flag {
	return &cli.StringFlag{Name: name, Value: value, Usage: usage + " (100ms, 1.5s, or a number of ms)", EnvVars: envVars}
}

// durations reads the duration flags named in pairs with where to put
// them, durations(c, false, "load", &o.Load, …); positive refuses 0.
func durations(c *cli.Context, positive bool, pairs ...any) error {
	for i := 0; i < len(pairs); i += 2 {
		d, err := policy.FlagDuration(pairs[i].(string), c.String(pairs[i].(string)), positive)
		if err != nil {
			return usageError{err}
		}
		*pairs[i+1].(*time.Duration) = d
	}
	return nil
}

// repeated is a repeatable flag whose values may hold commas (a rule's
// burst:N), which urfave's StringSliceFlag would split; an environment
// variable holds one value a line.
type repeated []string

func (r *repeated) Set(v string) error { *r = append(*r, strings.Split(v, "\n")...); return nil }
func (r *repeated) String() string     { return strings.Join(*r, "\n") }

func newApp(stdout, stderr io.Writer) *cli.App {
	onUsage := func(_ *cli.Context, err error, _ bool) error { return usageError{err} }
	return &cli.App{
		Name:      "cdp-throttle",
		Usage:     "a CDP relay that spaces out top-level navigations per host, with the rate limiter designed for Lightpanda",
		UsageText: "cdp-throttle [flags] [-- BROWSER COMMAND ...]\ncdp-throttle simulate [flags]\ncdp-throttle demo [flags]",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     append(relayFlags(), append(limiterFlags(), logFlags(stderr)...)...),
		Action: func(c *cli.Context) error {
			cfg, err := relayConfigFrom(c, stderr)
			if err != nil {
				return err
			}
			return runRelay(c.Context, cfg)
		},
		Commands: []*cli.Command{
			{
				Name:         "demo",
				Usage:        "reproduce the limiter's published measurement (the rate limiter designed for Lightpanda) against a real Chromium or Lightpanda, and chart it",
				UsageText:    "cdp-throttle demo [--navigations N] [--phases P] [--idle D] [--browser PATH] [--out demo.html]",
				Flags:        demoFlags(),
				OnUsageError: onUsage,
				Action:       func(c *cli.Context) error { return runDemo(c, stdout, stderr) },
			},
			{
				Name:         "simulate",
				Usage:        "replay the limiter on a simulated clock and print the schedule",
				UsageText:    "cdp-throttle simulate [--navigations N] [--load D] [--pages P] [--http-nav-concurrency N] [--phases P] [--idle D] [--host H]... [--rule R]... [--bucket B] [--crawl-delay D] [--csv]",
				Flags:        append(simulateFlags(), limiterFlags()...),
				OnUsageError: onUsage,
				Action:       func(c *cli.Context) error { return runSimulate(c, stdout) },
			},
		},
		OnUsageError:    onUsage,
		ExitErrHandler:  func(*cli.Context, error) {}, // run returns errors; only main exits
		HideHelpCommand: true,
	}
}

const (
	defaultListen   = "127.0.0.1:9322"
	defaultUpstream = "http://127.0.0.1:9222"
)

// relayConfig is what the relay runs with.
type relayConfig struct {
	listen     string
	upstreams  []string
	store      string // redis://HOST:PORT/DB, "" for in-process
	storeOpts  store.Options
	policy     policy.Config
	browsers   int      // how many it starts from browserCmd
	browserCmd []string // after --: a browser the relay starts and stops
	log        zerolog.Logger
	proxy      *relay.Proxy // the flags that are the relay's own fields
}

func relayFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: defaultListen, Usage: "address the relay serves", EnvVars: env("LISTEN")},
		&cli.StringSliceFlag{Name: "upstream", Usage: "browser CDP endpoint: http://host:port or a ws:// URL; repeat it for several browsers (default " + defaultUpstream + ")", EnvVars: env("UPSTREAM")},
		&cli.StringFlag{Name: "store", Usage: "share the limiter's state between relays in Redis: redis://HOST:PORT/DB (default: in process)", EnvVars: env("STORE")},
		&cli.StringFlag{Name: "store-prefix", Value: store.DefaultPrefix, Usage: "prefix of the Redis keys", EnvVars: env("STORE_PREFIX")},
		&cli.StringFlag{Name: "store-fallback", Value: "local", Usage: "while Redis does not answer: local (book in process) or closed (hold navigations until it is back)", EnvVars: env("STORE_FALLBACK")},
		durationFlag("store-timeout", "100ms", "longest wait for one Redis call before falling back", env("STORE_TIMEOUT")...),
		&cli.StringFlag{Name: "intercept", Value: "auto", Usage: "how navigations are caught: auto, fetch (browser-level Fetch) or navigate (hold Page.navigate in client streams)", EnvVars: env("INTERCEPT")},
		&cli.StringSliceFlag{Name: "allow-origin", Usage: "Origin a websocket upgrade may carry, like Chrome's --remote-allow-origins (repeatable; * allows any)", EnvVars: env("ALLOW_ORIGIN")},
		&cli.StringSliceFlag{Name: "allow-host", Usage: "name a request's Host header may carry besides IP addresses and localhost (repeatable)", EnvVars: env("ALLOW_HOST")},
		&cli.StringFlag{Name: "token", Usage: "require this token on every request (Authorization: Bearer TOKEN or ?token=TOKEN)", EnvVars: env("TOKEN")},
		&cli.BoolFlag{Name: "insecure-listen", Usage: "allow listening on a non-loopback address without --token", EnvVars: env("INSECURE_LISTEN")},
		&cli.Int64Flag{Name: "max-message-size", Value: relay.DefaultMaxMessageSize, Usage: "largest message in bytes read from a client or the browser; bigger ones close the connection with 1009", EnvVars: env("MAX_MESSAGE_SIZE")},
		durationFlag("start-timeout", relay.DefaultStartTimeout.String(), "how long to wait for the browser at start", env("START_TIMEOUT")...),
		&cli.IntFlag{Name: "browsers", Value: 1, Usage: "how many browsers to start from the command after -- ({port} in it: a free port for each, {i}: its number)", EnvVars: env("BROWSERS")},
		&cli.StringFlag{Name: "robots", Value: "ignore", Usage: "ignore, or crawl-delay: take each site's robots.txt Crawl-delay as the least spacing of its navigations", EnvVars: env("ROBOTS")},
		&cli.StringFlag{Name: "robots-user-agent", Usage: "whose robots.txt group to read (default: the browser's product token, such as HeadlessChrome)", EnvVars: env("ROBOTS_USER_AGENT")},
		durationFlag("http-nav-concurrency-bound", inflight.DefaultBound.String(), "longest a navigation keeps its place among its host's navigations in flight, when its end is never seen", env("HTTP_NAV_CONCURRENCY_BOUND")...),
		&cli.StringFlag{Name: "overload-status", Value: "429,503", Usage: "answer statuses that add the overload pressure (100 ms more at once) and whose Retry-After is honoured, such as 403,429,503 (none for no status); other 5xx add the failure pressure. A rule says overload:403+429+503", EnvVars: env("OVERLOAD_STATUS")},
		&cli.StringFlag{Name: "latency-backoff", Value: "0", Usage: "FACTOR: an answer slower than FACTOR times its host's baseline (its fastest in the last 10 minutes), and than 50ms, adds the failure pressure, as a 5xx does; 0 is off", EnvVars: env("LATENCY_BACKOFF")},
	}
}

func relayConfigFrom(c *cli.Context, stderr io.Writer) (relayConfig, error) {
	cfg := relayConfig{proxy: &relay.Proxy{}}
	var err error
	if cfg.policy, err = policyFrom(c); err != nil {
		return cfg, err
	}
	if cfg.log, err = loggerFrom(c, stderr); err != nil {
		return cfg, err
	}
	if err := durations(c, true, "store-timeout", &cfg.storeOpts.Timeout, "start-timeout", &cfg.proxy.StartTimeout); err != nil {
		return cfg, err
	}
	cfg.listen = c.String("listen")
	if _, _, err := net.SplitHostPort(cfg.listen); err != nil {
		return cfg, usagef("--listen %q: want host:port", cfg.listen)
	}
	cfg.upstreams = c.StringSlice("upstream")
	if len(cfg.upstreams) == 0 {
		cfg.upstreams = []string{defaultUpstream}
	}
	for _, u := range cfg.upstreams {
		if !strings.Contains(u, "://") {
			return cfg, usagef("--upstream %q: want http://host:port or a ws:// URL", u)
		}
	}
	cfg.store = c.String("store")
	if cfg.store != "" && !strings.HasPrefix(cfg.store, "redis://") && !strings.HasPrefix(cfg.store, "rediss://") {
		return cfg, usagef("--store %q: want redis://HOST:PORT/DB", cfg.store)
	}
	cfg.storeOpts.Prefix = c.String("store-prefix")
	if cfg.storeOpts.Fallback, err = store.ParseFallback(c.String("store-fallback")); err != nil {
		return cfg, usageError{err}
	}
	if cfg.proxy.Intercept, err = relay.ParseIntercept(c.String("intercept")); err != nil {
		return cfg, usagef("--intercept %q: want auto, fetch or navigate", c.String("intercept"))
	}
	cfg.proxy.AllowOrigins = c.StringSlice("allow-origin")
	cfg.proxy.AllowHosts = c.StringSlice("allow-host")
	cfg.proxy.Token = c.String("token")
	if !relay.Loopback(cfg.listen) && cfg.proxy.Token == "" && !c.Bool("insecure-listen") {
		return cfg, usagef("--listen %s is reachable from other machines, and whoever reaches the relay drives the browser "+
			"(runs scripts in its pages, reads its cookies and files): set --token, or --insecure-listen if the network is yours", cfg.listen)
	}
	if cfg.proxy.MaxMessageSize = c.Int64("max-message-size"); cfg.proxy.MaxMessageSize < 1<<10 {
		return cfg, usagef("--max-message-size %d: want at least 1024 bytes", cfg.proxy.MaxMessageSize)
	}
	cfg.browserCmd, cfg.browsers = c.Args().Slice(), c.Int("browsers")
	if err := launcher.Check(cfg.browserCmd, cfg.browsers); err != nil {
		return cfg, usageError{err}
	}
	if len(cfg.browserCmd) > 0 && !c.IsSet("upstream") {
		cfg.upstreams = nil // the relay fronts the browsers it starts, where they say they serve
	}
	return cfg, nil
}

// limiterFlags are the policy's flags the relay and simulate share.
func limiterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http-nav-delay", Usage: "spacing of top-level navigations per host: unset = adaptive, 0 = off, else fixed (100ms, 1.5s, or a number of ms)", EnvVars: env("HTTP_NAV_DELAY")},
		&cli.StringFlag{Name: "http-nav-burst", Usage: "navigations an idle host absorbs at once, a whole number ≥ 0 (0 acts as 1)", Value: strconv.Itoa(limiter.DefaultBurst), EnvVars: env("HTTP_NAV_BURST")},
		&cli.StringFlag{Name: "http-nav-concurrency", Value: "0", Usage: "at most N top-level navigations of one host (or site) in flight, from their release to their answer; the others wait in arrival order (0 = no cap)", EnvVars: env("HTTP_NAV_CONCURRENCY")},
		&cli.GenericFlag{Name: "rule", Value: &repeated{}, Usage: "PATTERN=SETTING: hosts matching the glob PATTERN (loopback too, when it matches) get SETTING, adaptive, fixed:DURATION, off or exempt, optionally with burst:N, concurrency:N and overload:STATUSES (403+429+503), after a comma or a space (repeatable; the first match wins)", EnvVars: env("RULE")},
		&cli.StringFlag{Name: "rules", Usage: "file of rules, one a line (# comments), after the --rule ones", EnvVars: env("RULES")},
		&cli.StringFlag{Name: "bucket", Value: "host", Usage: "which hosts share one schedule: host, or site (the registrable domain: www.example.com and example.com share one)", EnvVars: env("BUCKET")},
		&cli.StringSliceFlag{Name: "exempt-host", Usage: "host glob never spaced, besides loopback without a rule (repeatable)", EnvVars: env("EXEMPT_HOST")},
	}
}

// policyFrom reads the policy's flags; those a command lacks read as unset.
func policyFrom(c *cli.Context) (policy.Config, error) {
	var rules []string
	if r, ok := c.Generic("rule").(*repeated); ok {
		rules = *r
	}
	cfg, err := policy.FromFlags(policy.Flags{Delay: c.String("http-nav-delay"), Burst: c.String("http-nav-burst"),
		Rules: rules, RulesFile: c.String("rules"), Bucket: c.String("bucket"), ExemptHosts: c.StringSlice("exempt-host"),
		Robots: c.String("robots"), RobotsAgent: c.String("robots-user-agent"), CrawlDelay: c.String("crawl-delay"),
		Concurrency: c.String("http-nav-concurrency"), ConcurrencyBound: c.String("http-nav-concurrency-bound"),
		Overload: c.String("overload-status"), LatencyBackoff: c.String("latency-backoff")})
	if err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

func logFlags(stderr io.Writer) []cli.Flag {
	format := map[bool]string{true: "console", false: "json"}[isTerminal(stderr)]
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "info", EnvVars: env("LOG_LEVEL")},
		&cli.StringFlag{Name: "log-format", Usage: "console or json", Value: format, DefaultText: "console on a terminal, else json", EnvVars: env("LOG_FORMAT")},
	}
}

// loggerFrom builds the process logger from --log-level and --log-format.
func loggerFrom(c *cli.Context, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(c.String("log-level")))
	if err != nil || level == zerolog.NoLevel {
		return zerolog.Logger{}, usagef("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00" // milliseconds, in JSON and for the console to read back
	switch strings.ToLower(c.String("log-format")) {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !isTerminal(w)}
	default:
		return zerolog.Logger{}, usagef("--log-format %q: want console or json", c.String("log-format"))
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func simulateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Value: 400, Usage: "navigations per phase"},
		durationFlag("load", "4.5ms", "page load time: from a navigation's start to the next request"),
		&cli.IntFlag{Name: "phases", Value: 1, Usage: "phases of navigations, separated by --idle"},
		&cli.IntFlag{Name: "pages", Value: 1, Usage: "pages navigating at once, each asking for its next navigation when its last one is answered (--load after it started)"},
		durationFlag("idle", "8s", "time without navigations between phases"),
		&cli.StringSliceFlag{Name: "host", Usage: "host navigated to, in turn when repeated (default example.com)"},
		durationFlag("crawl-delay", "0", "a robots.txt Crawl-delay every host asks for: the least spacing"),
		&cli.BoolFlag{Name: "csv", Usage: "print one row per navigation instead of the tables"},
	}
}

func runSimulate(c *cli.Context, stdout io.Writer) error {
	o := simulate.Options{Navigations: c.Int("navigations"), Phases: c.Int("phases"), Pages: c.Int("pages"), Hosts: c.StringSlice("host"), CSV: c.Bool("csv")}
	var err error
	if o.Policy, err = policyFrom(c); err != nil {
		return err
	}
	if err := durations(c, false, "load", &o.Load, "idle", &o.Idle); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usagef("simulate takes no arguments, got %q", c.Args().First())
	}
	if err := o.Check(); err != nil {
		return usageError{err}
	}
	return simulate.Run(o, stdout)
}

func demoFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Value: 200, Usage: "navigations per phase (400 is the published measurement's run)"},
		&cli.IntFlag{Name: "phases", Value: 2, Usage: "phases per mode, separated by --idle"},
		durationFlag("idle", "8s", "time without navigations between phases"),
		durationFlag("fixed", "100ms", "spacing of the fixed mode"),
		&cli.StringFlag{Name: "browser", Usage: "the browser to run: chromium (on PATH), lightpanda (from .venv, $LIGHTPANDA or PATH) or a path", EnvVars: env("BROWSER")},
		&cli.StringFlag{Name: "site", Value: "127.0.0.2", Usage: "non-exempt loopback address the demo site listens on"},
		&cli.StringFlag{Name: "out", Value: "demo.html", Usage: "where to write the chart"},
	}
}

func runDemo(c *cli.Context, stdout, stderr io.Writer) error {
	o := demo.Options{Navigations: c.Int("navigations"), Phases: c.Int("phases"), Browser: c.String("browser"),
		SiteIP: c.String("site"), Out: c.String("out"), Live: isTerminal(stderr)}
	if err := durations(c, false, "idle", &o.Idle, "fixed", &o.Fixed); err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usagef("demo takes no arguments, got %q", c.Args().First())
	}
	if err := o.Check(); err != nil {
		return usageError{err}
	}
	var err error
	if o.Browser, err = launcher.FindBrowser(o.Browser); err != nil { // chromium, lightpanda or a path
		return err
	}
	return demo.Run(c.Context, o, stdout, stderr)
}
