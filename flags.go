package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/demo"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/launcher"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/redact"
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

// env names a relay flag's environment variable. simulate takes the
// limiter's flags without them (noEnv): a replay must not change because
// the shell is set up for a relay.
func env(name string) []string { return []string{envPrefix + name} }

func noEnv(string) []string { return nil }

// The relay's flag categories. urfave/cli lists categories by name, so the
// names sort in the order a newcomer reads them: the three flags most
// crawls set, the per-site policy, where the relay listens and what it
// fronts, logs, how many clients it takes, access, then several relays
// sharing Redis. Every flag of
// the relay has one (an uncategorised flag would be listed first; a test
// checks it): a new flag joins the category it belongs to. simulate's own
// flags come before the limiter's.
const (
	catPace     = "Crawl pace"
	catPerSite  = "Crawl pace per site"
	catRelay    = "Listening and browsers"
	catLog      = "Logging"
	catQueue    = "Queue: clients over capacity"
	catSecurity = "Security"
	catStore    = "Sharing one schedule between relays (Redis)"
	catReplay   = "Clock, navigations and output"
)

// durationFlag is a duration flag read by policy.ParseDuration (a Go
// duration, or a bare number of milliseconds), through durations.
func durationFlag(category, name, value, usage string, envVars ...string) cli.Flag {
	return &cli.StringFlag{Name: name, Category: category, Value: value, Usage: usage + " (a `DURATION`: 100ms, 1.5s, or a number of ms)", EnvVars: envVars}
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

// oneWay makes help show every default the same way, (default: VALUE):
// urfave quotes a string flag's value, and prints false for a bool.
func oneWay(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.StringFlag:
			if f.DefaultText == "" {
				f.DefaultText = f.Value
			}
		case *cli.BoolFlag:
			f.DisableDefaultText = true
		}
	}
	return flags
}

const appHelp = `{{template "helpNameTemplate" .}}

USAGE:
   {{wrap .UsageText 3}}{{if .Version}}

VERSION:
   {{.Version}}{{end}}

COMMANDS:{{template "visibleCommandCategoryTemplate" .}}

OPTIONS:{{template "visibleFlagCategoryTemplate" .}}
   Every flag also reads an environment variable: --http-nav-delay reads
   CDP_THROTTLE_HTTP_NAV_DELAY, --listen CDP_THROTTLE_LISTEN, and so on.
   Each flag in full: docs/flags.md.

ENDPOINTS (on the --listen address):
   /json/version, /json/list, /json/new, /devtools/...   the browser's, as Chrome serves them: point clients here
   /                                                     the relay's own page: each host being spaced, live (open it in a browser)
   /hosts?n=50                                           the busiest hosts: pressure, spacing, next free slot, rule (JSON)
   /status, /healthz, /metrics                           the page's data, 200 while a browser answers, Prometheus metrics

EXAMPLES:
   # start a headless Chromium and relay to it; clients connect to http://127.0.0.1:9322
   cdp-throttle -- chromium --headless --remote-debugging-port=9222 --user-data-dir=/tmp/profile

   # in front of a Chrome already started with --remote-debugging-port=9222, 300 ms between navigations to a host
   cdp-throttle --http-nav-delay 300ms

   # adaptive for every host, a second apart on one site, four Lightpanda processes on one schedule
   cdp-throttle --rule '*.slow.example=fixed:1s' --browsers 4 -- lightpanda serve --port {port}

   # what the limiter does with 400 navigations 38 ms apart, on a simulated clock
   cdp-throttle simulate --load 38ms
`

// Help names the environment variables once, in a sentence, rather than at
// the end of every line: urfave/cli's FlagEnvHinter would be the hook, but
// v2 does not call it, so its FlagStringer drops the hint.
func init() {
	stringer := cli.FlagStringer
	envHint := regexp.MustCompile(` \[\$[A-Z0-9_, $]+\]$`)
	cli.FlagStringer = func(f cli.Flag) string { return envHint.ReplaceAllString(stringer(f), "") }
}

func newApp(stdout, stderr io.Writer) *cli.App {
	onUsage := func(c *cli.Context, err error, _ bool) error { return usageError{explain(c, err)} }
	return &cli.App{
		Name:  "cdp-throttle",
		Usage: "a CDP relay that spaces out top-level navigations per host, with the rate limiter designed for Lightpanda",
		UsageText: "cdp-throttle [flags]                             relay to the browser at --upstream\n" +
			"cdp-throttle [flags] -- BROWSER COMMAND [ARGS]   start the browser, relay to it, stop it on exit\n" +
			"cdp-throttle simulate [flags]                    replay the limiter on a simulated clock\n" +
			"cdp-throttle demo [flags]                        measure it through a real Chromium or Lightpanda\n" +
			"cdp-throttle version                             print the version\n" +
			"cdp-throttle help [COMMAND]                      print this, or a command's help",
		Version:               version(),
		CustomAppHelpTemplate: appHelp,
		Writer:                stdout,
		ErrWriter:             stderr,
		Flags:                 oneWay(append(limiterFlags(env), append(relayFlags(), logFlags(stderr)...)...)),
		Action: func(c *cli.Context) error {
			cfg, err := relayConfigFrom(c, stderr)
			if err != nil {
				return err
			}
			return runRelay(c.Context, cfg)
		},
		Commands: []*cli.Command{
			{
				Name:         "simulate",
				Usage:        "replay the limiter on a simulated clock and print the schedule",
				UsageText:    simulateUsage,
				Description:  simulateDescription,
				Flags:        oneWay(append(simulateFlags(), append(limiterFlags(noEnv), answerFlags(noEnv)...)...)),
				OnUsageError: onUsage,
				Action:       func(c *cli.Context) error { return runSimulate(c, stdout) },
			},
			{
				Name:         "demo",
				Usage:        "measure the limiter through a real Chromium or Lightpanda as its published measurement did (lightpanda-io/browser#3266), and chart it",
				UsageText:    "cdp-throttle demo [--navigations N] [--phases P] [--idle D] [--fixed D] [--browser chromium|lightpanda|PATH] [--site IP] [--out demo.html]",
				Flags:        oneWay(demoFlags()),
				OnUsageError: onUsage,
				Action:       func(c *cli.Context) error { return runDemo(c, stdout, stderr) },
			},
			{
				Name:      "version",
				Usage:     "print the version (as --version does)",
				UsageText: "cdp-throttle version",
				Action: func(c *cli.Context) error {
					if err := noArgs(c); err != nil {
						return err
					}
					cli.ShowVersion(c)
					return nil
				},
			},
		},
		OnUsageError:   onUsage,
		Suggest:        true,                         // for help TOPIC; run explains the other mistakes itself
		ExitErrHandler: func(*cli.Context, error) {}, // run returns errors; only main exits
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
	ipNote     string   // what --bucket ip made of the browser's proxy, for the log
	guardian   bool     // run beside a guardian process (--guardian)
	log        zerolog.Logger
	proxy      *relay.Proxy // the flags that are the relay's own fields
}

func relayFlags() []cli.Flag {
	answers := answerFlags(env) // kept in the order help lists them: host-errors after max-wait
	flags := []cli.Flag{
		&cli.StringFlag{Name: "bucket-ip-source", Category: catPerSite, Value: "both", DefaultText: "both, or resolver for a browser the relay sees is behind a proxy", Usage: "with --bucket ip, where a host's address comes from: both (the browser's answers, and the system resolver for a host it has not answered for yet), browser, or resolver (for a browser behind an HTTP proxy)", EnvVars: env("BUCKET_IP_SOURCE")},
		&cli.StringFlag{Name: "robots", Category: catPerSite, Value: "ignore", Usage: "what each site's robots.txt is read for, `MODE`: ignore; crawl-delay (its Crawl-delay is the site's least spacing); obey (that, and a navigation it disallows is refused: net::ERR_BLOCKED_BY_CLIENT); a rule says robots:MODE", EnvVars: env("ROBOTS")},
		&cli.StringFlag{Name: "robots-user-agent", Category: catPerSite, DefaultText: "the browser's product token, such as HeadlessChrome", Usage: "whose robots.txt group to read: a product `TOKEN`", EnvVars: env("ROBOTS_USER_AGENT")},
		durationFlag(catPerSite, "http-nav-concurrency-bound", inflight.DefaultBound.String(), "longest a navigation keeps its place among its host's navigations in flight when its end is never seen", env("HTTP_NAV_CONCURRENCY_BOUND")...),
	}
	flags = append(flags, answers[:3]...)
	flags = append(flags, &cli.StringFlag{Name: "host-errors", Category: catPerSite, Value: "off", Usage: "a breaker per host: `N/WINDOW` failures of its documents (5xx, the overload statuses, no answer) pause it for 30 s, doubling up to 10 min while its one probe fails; its navigations are answered at once meanwhile (the relay's 429); such as 5/1m, or off; fleet-wide with --store", EnvVars: env("HOST_ERRORS")})
	flags = append(flags, answers[3:]...)
	return append(flags, []cli.Flag{
		&cli.StringFlag{Name: "latency-backoff", Category: catPerSite, Value: "0", Usage: "an answer slower than `FACTOR` times its host's baseline (its fastest of the last 10 minutes) and than 50ms adds the failure pressure, as a 5xx does (0: off)", EnvVars: env("LATENCY_BACKOFF")},
		&cli.StringFlag{Name: "listen", Category: catRelay, Value: defaultListen, Usage: "the `HOST:PORT` the relay serves; clients connect here instead of to the browser", EnvVars: env("LISTEN")},
		&cli.StringSliceFlag{Name: "upstream", Category: catRelay, DefaultText: defaultUpstream + ", or the browser started after --", Usage: "the browser's CDP endpoint, http://HOST:PORT or a ws:// `URL` (repeatable)", EnvVars: env("UPSTREAM")},
		&cli.IntFlag{Name: "browsers", Category: catRelay, Value: 1, Usage: "start `N` browsers from the command after -- ({port} in it: a free port for each, {i}: its number)", EnvVars: env("BROWSERS")},
		durationFlag(catRelay, "start-timeout", relay.DefaultStartTimeout.String(), "how long to wait for the browser at start", env("START_TIMEOUT")...),
		&cli.BoolFlag{Name: "guardian", Category: catRelay, Value: true, Usage: "in front of a browser the relay did not start (--upstream), run as two processes: the relay, and a guardian that outlives it and, if the relay dies without a stop (SIGKILL, the OOM killer, a crash), answers what it held with its 429 and closes its clients' pages; --guardian=false runs one process, and such a death then lets the browser send every navigation the relay held at once", EnvVars: env("GUARDIAN")},
		&cli.BoolFlag{Name: "hold-backup", Category: catRelay, Usage: "on Chromium, keep a browser-level interception behind the relay's own, so that losing the relay's page connection hands held navigations over instead of letting them go (counted unheld); costs every request of the browser an interception, about 5% of its CPU in a crawl", EnvVars: env("HOLD_BACKUP")},
		&cli.StringFlag{Name: "intercept", Category: catRelay, Value: "auto", Usage: "how navigations are held: auto, fetch (Chromium's way), session (Lightpanda's) or navigate (commands only)", EnvVars: env("INTERCEPT")},
		durationFlag(catRelay, "drain-timeout", relay.DefaultDrainTimeout.String(), "on SIGTERM or SIGINT, how long the relay goes on letting held navigations go at their slots, taking no new clients, before it answers the rest with its own 429 (reason=stopping), closes the pages its clients created and exits; 0 answers them at once; a second signal ends the drain at once", env("DRAIN_TIMEOUT")...),
		durationFlag(catRelay, "orphan-timeout", relay.DefaultOrphanTimeout.String(), "close the pages and browser contexts a client created once it has been gone this long, unless another client took them over; 0 keeps them", env("ORPHAN_TIMEOUT")...),
		&cli.BoolFlag{Name: "allow-browser-close", Category: catRelay, Usage: "let a client's Browser.close (and Browser.crash) end the browser for every client; unset, it closes only that client's pages and contexts", EnvVars: env("ALLOW_BROWSER_CLOSE")},
		&cli.IntFlag{Name: "max-clients", Category: catQueue, Usage: "client connections relayed at once, over all browsers (0: no bound but the browsers')", EnvVars: env("MAX_CLIENTS")},
		&cli.IntFlag{Name: "clients-per-browser", Category: catQueue, Usage: "client connections each browser takes at once, for browsers that do not say (a launched lightpanda serve does: --cdp-max-connections) or when less (0: no bound)", EnvVars: env("CLIENTS_PER_BROWSER")},
		&cli.IntFlag{Name: "queue", Category: catQueue, Usage: "clients over capacity that may wait for a place, their websocket upgrade answered when one frees; one more is answered 429 (0: none wait)", EnvVars: env("QUEUE")},
		durationFlag(catQueue, "queue-timeout", "60s", "how long a client waits for a place before it is answered 503", env("QUEUE_TIMEOUT")...),
		&cli.StringFlag{Name: "store", Category: catStore, DefaultText: "in process", Usage: "share the limiter's state between relays: redis://HOST:PORT/DB, a Sentinel's redis://S1:26379/DB?master_name=NAME&addr=S2:26379, or redis-cluster://N1:7000?addr=N2:7001", EnvVars: env("STORE")},
		&cli.StringFlag{Name: "store-prefix", Category: catStore, Value: store.DefaultPrefix, Usage: "prefix of the Redis keys", EnvVars: env("STORE_PREFIX")},
		&cli.StringFlag{Name: "store-fallback", Category: catStore, Value: "local", Usage: "while Redis does not answer: local (book in process) or closed (hold navigations until it is back)", EnvVars: env("STORE_FALLBACK")},
		durationFlag(catStore, "store-timeout", "100ms", "longest wait for one Redis call before falling back", env("STORE_TIMEOUT")...),
		&cli.StringFlag{Name: "token", Category: catSecurity, Usage: "require this `TOKEN` on every request (Authorization: Bearer TOKEN or ?token=TOKEN)", EnvVars: env("TOKEN")},
		&cli.BoolFlag{Name: "insecure-listen", Category: catSecurity, Usage: "allow listening on a non-loopback address without --token", EnvVars: env("INSECURE_LISTEN")},
		&cli.StringSliceFlag{Name: "allow-origin", Category: catSecurity, Usage: "an `ORIGIN` a websocket upgrade may carry, like Chrome's --remote-allow-origins (repeatable)", EnvVars: env("ALLOW_ORIGIN")},
		&cli.StringSliceFlag{Name: "allow-host", Category: catSecurity, Usage: "a `NAME` a request's Host header may carry besides IP addresses and localhost (repeatable)", EnvVars: env("ALLOW_HOST")},
		&cli.Int64Flag{Name: "max-message-size", Category: catSecurity, Value: relay.DefaultMaxMessageSize, Usage: "largest message read from either side, in `BYTES`; its sender gets a close (1009), the other side's connection ends", EnvVars: env("MAX_MESSAGE_SIZE")},
	}...)
}

// answerFlags are the relay's flags of what an answer does, and of how far
// ahead a slot may lie, which simulate replays too (with noEnv): the
// overload statuses and headers, --max-wait, the longest Retry-After and
// the server's RateLimit headers.
func answerFlags(env func(string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "overload-status", Category: catPerSite, Value: "429,503", Usage: "answer `STATUSES` that add the overload pressure and whose Retry-After is honoured: 403,429,503, or none; other 5xx add the failure pressure (a rule says overload:403+429+503)", EnvVars: env("OVERLOAD_STATUS")},
		&cli.GenericFlag{Name: "overload-header", Category: catPerSite, Value: &repeated{}, Usage: "a document answer carrying this header counts as overload whatever its status, its Retry-After honoured: with any value when =VALUE is left out, name and value whatever their case, such as cf-mitigated=challenge (repeatable: `NAME[=VALUE]`; a rule says overload-header:NAME=VALUE)", EnvVars: env("OVERLOAD_HEADER")},
		durationFlag(catPerSite, "max-wait", "0", "a navigation whose slot is further ahead than this, or whose host's breaker is open, is answered at once with the relay's own 429 and a Retry-After, never reaching the site; 25s keeps under the clients' 30 s timeouts; 0 waits for every slot", env("MAX_WAIT")...),
		durationFlag(catPerSite, "retry-after-max", "60s", "longest Retry-After honoured, seconds or an HTTP-date; a longer one waits this long; from 1s to 1h (a rule says retry-after-max:5m)", env("RETRY_AFTER_MAX")...),
		&cli.StringFlag{Name: "ratelimit-headers", Category: catPerSite, Value: "obey", Usage: "what a document answer's RateLimit-Policy, RateLimit and X-RateLimit-Remaining/-Reset headers do, `MODE`: obey (the server's policy is its host's least spacing for an hour after it was last sent; a spent quota holds the host until its reset) or ignore (a rule says ratelimit-headers:ignore)", EnvVars: env("RATELIMIT_HEADERS")},
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
	if err := durations(c, true, "store-timeout", &cfg.storeOpts.Timeout, "start-timeout", &cfg.proxy.StartTimeout,
		"queue-timeout", &cfg.proxy.QueueTimeout); err != nil {
		return cfg, err
	}
	if err := durations(c, false, "orphan-timeout", &cfg.proxy.OrphanTimeout, "drain-timeout", &cfg.proxy.DrainTimeout); err != nil {
		return cfg, err
	}
	if cfg.proxy.OrphanTimeout == 0 {
		cfg.proxy.OrphanTimeout = -1 // 0 keeps them; the Proxy's zero is its default
	}
	if cfg.proxy.DrainTimeout == 0 {
		cfg.proxy.DrainTimeout = -1 // 0 answers at once; the Proxy's zero is its default
	}
	cfg.proxy.AllowBrowserClose = c.Bool("allow-browser-close")
	for _, f := range []struct {
		name string
		to   *int
	}{{"max-clients", &cfg.proxy.MaxClients}, {"clients-per-browser", &cfg.proxy.ClientsPerBrowser}, {"queue", &cfg.proxy.Queue}} {
		if *f.to = c.Int(f.name); *f.to < 0 {
			return cfg, usagef("--%s %d: want a whole number ≥ 0", f.name, *f.to)
		}
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
	if cfg.store != "" {
		if _, err := store.ParseKind(cfg.store); err != nil {
			return cfg, usagef("--store %q: want redis://HOST:PORT/DB, a Sentinel's redis://S1:26379/DB?master_name=NAME&addr=S2:26379, "+
				"or redis-cluster://N1:7000?addr=N2:7001 (%v)", redact.URL(cfg.store), err)
		}
	}
	cfg.storeOpts.Prefix = c.String("store-prefix")
	if cfg.storeOpts.Fallback, err = store.ParseFallback(c.String("store-fallback")); err != nil {
		return cfg, usageError{err}
	}
	cfg.proxy.HoldBackup = c.Bool("hold-backup")
	cfg.guardian = c.Bool("guardian")
	if cfg.proxy.Intercept, err = hold.ParseIntercept(c.String("intercept")); err != nil {
		return cfg, usagef("--intercept %q: want auto, fetch, session or navigate", c.String("intercept"))
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
	if c.Args().Present() {
		return cfg, unknownCommand(c)
	}
	cfg.browserCmd, cfg.browsers = browserCommand(c), c.Int("browsers")
	if err := launcher.Check(cfg.browserCmd, cfg.browsers); err != nil {
		return cfg, usageError{err}
	}
	if len(cfg.browserCmd) > 0 && !c.IsSet("upstream") {
		cfg.upstreams = nil // the relay fronts the browsers it starts, where they say they serve
	}
	if cfg.policy.Addrs != nil {
		if err := addrsFromBrowser(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// addrsFromBrowser fits --bucket ip to the browser the relay starts
// (resolve.Cache.FitBrowser): its --host-resolver-rules map names for the
// relay too, and behind a proxy (its flags, or the environment it
// inherits from the relay) addresses come from the resolver alone unless
// --bucket-ip-source says otherwise (cfg.ipNote says so in the log).
func addrsFromBrowser(cfg *relayConfig) error {
	if len(cfg.browserCmd) == 0 {
		return nil
	}
	note, err := cfg.policy.Addrs.FitBrowser(cfg.browserCmd, os.Getenv)
	if err != nil {
		return usagef("--bucket ip reads the browser's --host-resolver-rules: %v", err)
	}
	cfg.ipNote = note
	return nil
}

// limiterFlags are the policy's flags the relay and simulate share, with
// their environment variables from env.
func limiterFlags(env func(string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http-nav-delay", Category: catPace, DefaultText: "adaptive", Usage: "spacing of navigations to one host: 0 = off, a `DURATION` = fixed (100ms, 1.5s, 100), unset = adaptive", EnvVars: env("HTTP_NAV_DELAY")},
		&cli.StringFlag{Name: "http-nav-burst", Category: catPace, Value: strconv.Itoa(limiter.DefaultBurst), Usage: "navigations an idle host absorbs at once, a whole number `N` ≥ 0 (0 acts as 1)", EnvVars: env("HTTP_NAV_BURST")},
		&cli.GenericFlag{Name: "rule", Category: catPace, Value: &repeated{}, Usage: "hosts matching the glob (loopback too, when it matches) get SETTING: adaptive, fixed:DURATION, off or exempt, and burst:N, concurrency:N, overload:403+429+503, overload-header:NAME=VALUE, retry-after-max:D, ratelimit-headers:ignore, jitter:F, robots:ignore|crawl-delay|obey (repeatable: `PATTERN=SETTING`)", EnvVars: env("RULE")},
		&cli.StringFlag{Name: "rules", Category: catPerSite, Usage: "a `FILE` of rules, one a line (# comments), after the --rule ones", EnvVars: env("RULES")},
		&cli.StringFlag{Name: "bucket", Category: catPerSite, Value: "host", Usage: "which hosts share one schedule (and cap): host, site (www.example.com and example.com share one) or ip (the hosts on one server address share one)", EnvVars: env("BUCKET")},
		&cli.StringSliceFlag{Name: "exempt-host", Category: catPerSite, Usage: "a host `GLOB` never spaced, besides localhost, 127.0.0.1 and [::1] unless a rule names them (repeatable)", EnvVars: env("EXEMPT_HOST")},
		&cli.StringFlag{Name: "http-nav-concurrency", Category: catPerSite, Value: "0", Usage: "at most `N` navigations of one host (or site) in flight, from their release to their answer; the others wait in arrival order (0: no cap)", EnvVars: env("HTTP_NAV_CONCURRENCY")},
		&cli.StringFlag{Name: "jitter", Category: catPerSite, Value: "0", Usage: "move each held navigation's slot by a random amount up to `F` × its spacing either way (0.5: gaps of 0.5 to 1.5 spacings), the mean rate unchanged; F from 0 (none) up to 1, 1 excluded", EnvVars: env("JITTER")},
	}
}

// policyFrom reads the policy's flags; those a command lacks read as unset.
func policyFrom(c *cli.Context) (policy.Config, error) {
	var rules, headers []string
	if r, ok := c.Generic("rule").(*repeated); ok {
		rules = *r
	}
	if h, ok := c.Generic("overload-header").(*repeated); ok {
		headers = *h
	}
	cfg, err := policy.FromFlags(policy.Flags{Delay: c.String("http-nav-delay"), Burst: c.String("http-nav-burst"),
		Rules: rules, RulesFile: c.String("rules"), Bucket: c.String("bucket"), IPSource: setOnly(c, "bucket-ip-source"), ExemptHosts: c.StringSlice("exempt-host"),
		Robots: c.String("robots"), RobotsAgent: c.String("robots-user-agent"), CrawlDelay: c.String("crawl-delay"),
		Concurrency: c.String("http-nav-concurrency"), ConcurrencyBound: c.String("http-nav-concurrency-bound"),
		Overload: c.String("overload-status"), LatencyBackoff: c.String("latency-backoff"), Jitter: c.String("jitter"),
		RetryAfterMax: setOnly(c, "retry-after-max"), OverloadHeaders: headers, MaxWait: setOnly(c, "max-wait"), HostErrors: setOnly(c, "host-errors"),
		RateLimitHeaders: c.String("ratelimit-headers")})
	if err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// setOnly is a flag's value when the command line or the environment set
// it, "" otherwise: a flag whose default only matters with another.
func setOnly(c *cli.Context, name string) string {
	if !c.IsSet(name) {
		return ""
	}
	return c.String(name)
}

func logFlags(stderr io.Writer) []cli.Flag {
	format := map[bool]string{true: "console", false: "json"}[isTerminal(stderr)]
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Category: catLog, Usage: "debug, info, warn or error", Value: "info", EnvVars: env("LOG_LEVEL")},
		&cli.StringFlag{Name: "log-format", Category: catLog, Usage: "console or json", Value: format, DefaultText: "console on a terminal, else json", EnvVars: env("LOG_FORMAT")},
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

// simulateUsage lists every flag simulate's examples (in README and
// docs/) use.
const simulateUsage = "cdp-throttle simulate [--navigations N] [--load D] [--phases P] [--idle D] [--csv]\n" +
	"                      [--http-nav-delay D] [--http-nav-burst N] [--rule PATTERN=SETTING]... [--rules FILE]\n" +
	"                      [--bucket host|site] [--exempt-host GLOB]... [--host H]... [--crawl-delay D]\n" +
	"                      [--pages P] [--http-nav-concurrency N] [--jitter F] [--seed N]\n" +
	"                      [--answer FROM-TO=STATUS[;NAME: VALUE]...]... [--down FROM-TO]... [--max-wait D]\n" +
	"                      [--overload-status LIST] [--overload-header NAME[=VALUE]]... [--retry-after-max D]\n" +
	"                      [--ratelimit-headers obey|ignore] [--host-errors N/WINDOW]"

const simulateDescription = `Replays the limiter's rule on a simulated clock: navigations back to back to
one host (or to each --host in turn), each --load after the one before may go,
and prints when each enforced gap first appears, span, rate and gaps per
phase. It takes the limiter's flags as the relay does, but reads no
CDP_THROTTLE_* environment variables: those set up a relay, and a replay
says what it replays on its command line.

cdp-throttle simulate                          # 400 navigations, 4.5 ms page load: the published run
cdp-throttle simulate --load 38ms              # a slower crawl: nothing waits before navigation 39
cdp-throttle simulate --phases 2 --idle 8s     # a second phase after 8 s idle
cdp-throttle simulate --http-nav-delay 100ms   # fixed spacing
cdp-throttle simulate --csv > schedule.csv     # one row per navigation
cdp-throttle simulate --navigations 24 --pages 8 --load 800ms --http-nav-concurrency 2
                                               # eight pages, 800 ms answers, two in flight at once
cdp-throttle simulate --host-errors 5/1m --down 0s-90s --navigations 100 --load 1s
                                               # a site down for 90 s, a request a second: the breaker
cdp-throttle simulate --max-wait 2s --answer '10s-11s=429;Retry-After: 10' --navigations 60 --load 500ms
                                               # a 429 asking for 10 s: what is asked for meanwhile is deferred
cdp-throttle simulate --http-nav-delay 20ms --answer '0s-1h=200;RateLimit-Policy: "p";q=5;w=1' --navigations 30 --load 10ms
                                               # the server's policy, 5 a second, spaces its pages 200 ms apart

Each document is answered --load after it went: a 200, or what the first
--answer whose span holds that instant says (--down FROM-TO is
--answer FROM-TO=503). The answer goes back to the limiter as the relay
feeds a real one back: its status, Retry-After (seconds, or an HTTP-date
counted from the replay's start, Thu, 01 Jan 2026 00:00:00 GMT), the
server's RateLimit-Policy, RateLimit and X-RateLimit-Remaining/-Reset
(--ratelimit-headers), the --overload-status and --overload-header it
matches. A ';' starts a header only when a NAME and a colon follow it, so
RateLimit-Policy: "p";q=5;w=1 is one header. With --max-wait, a
navigation whose slot lies further ahead is deferred: answered at once
with the relay's 429 (Retry-After the seconds until its slot, rounded
up), it never reaches the site and books nothing, and its page asks for
its next navigation --load later, as a crawler that keeps going would.
The tables count the navigations that reached the site; under them, what
the site answered and how many were deferred, per phase (--csv: the
status, deferred and retry_after_s columns).`

func simulateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Category: catReplay, Value: 400, Usage: "`N` navigations per phase"},
		durationFlag(catReplay, "load", "4.5ms", "page load time: from a navigation's start to the next request"),
		&cli.IntFlag{Name: "phases", Category: catReplay, Value: 1, Usage: "`P` phases of navigations, separated by --idle"},
		&cli.IntFlag{Name: "pages", Category: catReplay, Value: 1, Usage: "`P` pages navigating at once, each asking for its next navigation when its last one is answered (--load after it started)"},
		durationFlag(catReplay, "idle", "8s", "time without navigations between phases"),
		&cli.StringSliceFlag{Name: "host", Category: catReplay, DefaultText: "example.com", Usage: "a `HOST` navigated to, in turn when repeated"},
		&cli.BoolFlag{Name: "csv", Category: catReplay, Usage: "print one row per navigation instead of the tables"},
		&cli.Uint64Flag{Name: "seed", Category: catReplay, Value: 1, Usage: "seed `N` of the --jitter's randomness: the same seed replays the same slots"},
		durationFlag(catPerSite, "crawl-delay", "0", "a robots.txt Crawl-delay every host asks for: the least spacing"),
		&cli.StringFlag{Name: "host-errors", Category: catPerSite, Value: "off", Usage: "replay the host's breaker instead of its spacing: `N/WINDOW` failures open it (with --down or --answer), such as 5/1m"},
		&cli.GenericFlag{Name: "answer", Category: catReplay, Value: &repeated{}, Usage: "the site answers each document it answers from FROM up to TO after the run's start with STATUS and these headers, which the limiter reads as the relay's answers (Retry-After, RateLimit-Policy, RateLimit, X-RateLimit-Remaining/-Reset, --overload-header); the first whose span holds it counts, else a 200 (repeatable: `" + simulate.AnswerSyntax + "`, such as '10s-11s=429;Retry-After: 10')"},
		&cli.StringSliceFlag{Name: "down", Category: catReplay, Usage: "the site fails every answer from FROM up to TO after the run's start, as --answer FROM-TO=503 does; with --host-errors, what opens the breaker (repeatable: `FROM-TO`, such as 0s-90s)"},
	}
}

// downSpans reads simulate's --down spans.
func downSpans(values []string) ([]simulate.Span, error) {
	var out []simulate.Span
	for _, v := range values {
		s, err := simulate.ParseSpan(v)
		if err != nil {
			return nil, usagef("--down %q: %v", v, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// answersOf reads simulate's --answer values.
func answersOf(c *cli.Context) ([]simulate.Answer, error) {
	var out []simulate.Answer
	if r, ok := c.Generic("answer").(*repeated); ok {
		for _, v := range *r {
			a, err := simulate.ParseAnswer(v)
			if err != nil {
				return nil, usageError{err}
			}
			out = append(out, a)
		}
	}
	return out, nil
}

func runSimulate(c *cli.Context, stdout io.Writer) error {
	o := simulate.Options{Navigations: c.Int("navigations"), Phases: c.Int("phases"), Pages: c.Int("pages"), Hosts: c.StringSlice("host"), CSV: c.Bool("csv"), Seed: c.Uint64("seed")}
	var err error
	if o.Policy, err = policyFrom(c); err != nil {
		return err
	}
	if o.Answers, err = answersOf(c); err != nil {
		return err
	}
	if o.Policy.HostErrors.On() {
		return replayBreaker(c, o, stdout)
	}
	down, err := downSpans(c.StringSlice("down"))
	if err != nil {
		return err
	}
	for _, s := range down { // after --answer's: the first that holds an answer counts
		o.Answers = append(o.Answers, simulate.Answer{Span: s, Status: 503})
	}
	if o.Policy.Bucket == policy.ByIP {
		return usagef("--bucket ip: simulate has no browser or network to learn addresses from; replay hosts on one address as one --host")
	}
	if err := durations(c, false, "load", &o.Load, "idle", &o.Idle); err != nil {
		return err
	}
	if err := noArgs(c); err != nil {
		return err
	}
	if err := o.Check(); err != nil {
		return usageError{err}
	}
	return simulate.Run(o, stdout)
}

// replayBreaker replays a host's breaker (simulate --host-errors): a page
// asking every --load, each answer --load after its start, the site
// failing within the --down spans, and answering as --answer says.
func replayBreaker(c *cli.Context, o simulate.Options, stdout io.Writer) error {
	down, err := downSpans(c.StringSlice("down"))
	if err != nil {
		return err
	}
	if len(down) == 0 && len(o.Answers) == 0 {
		return usagef("--host-errors: simulate replays the breaker against a site that fails: give --down FROM-TO or --answer " + simulate.AnswerSyntax)
	}
	if err := durations(c, false, "load", &o.Load); err != nil {
		return err
	}
	if o.Load <= 0 {
		return usagef("--load: with --host-errors, the time between two requests: want a duration > 0")
	}
	if err := noArgs(c); err != nil {
		return err
	}
	cfg := o.Policy.HostErrors
	fails := ""
	if len(down) > 0 {
		fails = "; the site fails every answer within " + spansText(down)
	}
	fmt.Fprintf(stdout, "%d requests to one host, one every %v, each answered %v after it went%s; --host-errors %s\n",
		o.Navigations, o.Load, o.Load, fails, c.String("host-errors"))
	for _, a := range o.Answers {
		fmt.Fprintf(stdout, "the site answers %s after the start\n", a)
	}
	fmt.Fprintln(stdout)
	simulate.WriteBreaker(stdout, simulate.ReplayBreaker(simulate.BreakerOptions{Breaker: cfg, Navigations: o.Navigations, Every: o.Load, Load: o.Load,
		Down: down, Answers: o.Answers, Policy: o.Policy, Seed: o.Seed}))
	return nil
}

// spansText writes --down's spans as they were given.
func spansText(spans []simulate.Span) string {
	var parts []string
	for _, s := range spans {
		parts = append(parts, s.From.String()+" to "+s.To.String())
	}
	return strings.Join(parts, ", ")
}

func demoFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Value: 200, Usage: "`N` navigations per phase (400 is the published measurement's run)"},
		&cli.IntFlag{Name: "phases", Value: 2, Usage: "`P` phases per mode, separated by --idle"},
		durationFlag("", "idle", "8s", "time without navigations between phases"),
		durationFlag("", "fixed", "100ms", "spacing of the fixed mode"),
		&cli.StringFlag{Name: "browser", DefaultText: "chromium", Usage: "the browser to run: chromium (on PATH), lightpanda (from .venv, $LIGHTPANDA or PATH) or a `PATH`; also from CDP_THROTTLE_BROWSER", EnvVars: env("BROWSER")},
		&cli.StringFlag{Name: "site", Value: "127.0.0.2", Usage: "the non-exempt loopback `IP` the demo site listens on"},
		&cli.StringFlag{Name: "out", Value: "demo.html", Usage: "the `FILE` to write the chart to"},
	}
}

func runDemo(c *cli.Context, stdout, stderr io.Writer) error {
	o, err := demoOptions(c, stderr)
	if err != nil {
		return err
	}
	if o.Browser, err = launcher.FindBrowser(o.Browser); err != nil { // chromium, lightpanda or a path
		return err
	}
	return demo.Run(c.Context, o, stdout, stderr)
}

// demoOptions reads the demo's flags.
func demoOptions(c *cli.Context, stderr io.Writer) (demo.Options, error) {
	o := demo.Options{Navigations: c.Int("navigations"), Phases: c.Int("phases"), Browser: c.String("browser"),
		SiteIP: c.String("site"), Out: c.String("out"), Live: isTerminal(stderr)}
	if err := durations(c, false, "idle", &o.Idle, "fixed", &o.Fixed); err != nil {
		return o, err
	}
	if err := noArgs(c); err != nil {
		return o, err
	}
	if err := o.Check(); err != nil {
		return o, usageError{err}
	}
	return o, nil
}
