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
	"github.com/cdp-throttle/cdp-throttle/launcher"
	"github.com/cdp-throttle/cdp-throttle/limiter"
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

func newApp(stdout, stderr io.Writer) *cli.App {
	onUsage := func(_ *cli.Context, err error, _ bool) error { return usageError{err} }
	return &cli.App{
		Name:      "cdp-throttle",
		Usage:     "a CDP relay that spaces out top-level navigations per host",
		UsageText: "cdp-throttle [flags] [-- BROWSER COMMAND ...]\ncdp-throttle simulate [flags]\ncdp-throttle demo [flags]",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     append(relayFlags(), append(limiterFlags(), logFlags()...)...),
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
				Usage:        "reproduce the seed's measurement against a real Chromium or Lightpanda and chart it",
				UsageText:    "cdp-throttle demo [--navigations N] [--phases P] [--idle D] [--browser PATH] [--out demo.html]",
				Flags:        demoFlags(),
				OnUsageError: onUsage,
				Action: func(c *cli.Context) error {
					opts, err := demoOptionsFrom(c, stderr)
					if err != nil {
						return err
					}
					return demo.Run(c.Context, opts, stdout, stderr)
				},
			},
			{
				Name:         "simulate",
				Usage:        "replay the limiter on a simulated clock and print the schedule",
				UsageText:    "cdp-throttle simulate [--navigations N] [--load D] [--phases P] [--idle D] [--csv]",
				Flags:        append(simulateFlags(), limiterFlags()...),
				OnUsageError: onUsage,
				Action: func(c *cli.Context) error {
					opts, err := simulateOptionsFrom(c)
					if err != nil {
						return err
					}
					return simulate.Run(opts, stdout)
				},
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
	limiter    limiter.Config
	browserCmd []string // after --: a browser the relay starts and stops
	browsers   int      // how many it starts from browserCmd
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
		&cli.DurationFlag{Name: "store-timeout", Value: 100 * time.Millisecond, Usage: "longest wait for one Redis call before falling back", EnvVars: env("STORE_TIMEOUT")},
		&cli.StringFlag{Name: "intercept", Value: "auto", Usage: "how navigations are caught: auto, fetch (browser-level Fetch) or navigate (hold Page.navigate in client streams)", EnvVars: env("INTERCEPT")},
		&cli.StringSliceFlag{Name: "allow-origin", Usage: "Origin a websocket upgrade may carry, like Chrome's --remote-allow-origins (repeatable; * allows any)", EnvVars: env("ALLOW_ORIGIN")},
		&cli.StringSliceFlag{Name: "allow-host", Usage: "name a request's Host header may carry besides IP addresses and localhost (repeatable)", EnvVars: env("ALLOW_HOST")},
		&cli.StringFlag{Name: "token", Usage: "require this token on every request (Authorization: Bearer TOKEN or ?token=TOKEN)", EnvVars: env("TOKEN")},
		&cli.BoolFlag{Name: "insecure-listen", Usage: "allow listening on a non-loopback address without --token", EnvVars: env("INSECURE_LISTEN")},
		&cli.Int64Flag{Name: "max-message-size", Value: relay.DefaultMaxMessageSize, Usage: "largest message in bytes read from a client or the browser; bigger ones close the connection with 1009", EnvVars: env("MAX_MESSAGE_SIZE")},
		&cli.DurationFlag{Name: "start-timeout", Value: relay.DefaultStartTimeout, Usage: "how long to wait for the browser at start", EnvVars: env("START_TIMEOUT")},
		&cli.IntFlag{Name: "browsers", Value: 1, Usage: "how many browsers to start from the command after -- ({port} in it: a free port for each, {i}: its number)", EnvVars: env("BROWSERS")},
	}
}

func relayConfigFrom(c *cli.Context, stderr io.Writer) (relayConfig, error) {
	cfg := relayConfig{proxy: &relay.Proxy{}}
	var err error
	if cfg.limiter, err = limiterConfigFrom(c); err != nil {
		return cfg, err
	}
	if cfg.log, err = loggerFrom(c, stderr); err != nil {
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
	cfg.storeOpts = store.Options{Prefix: c.String("store-prefix"), Timeout: c.Duration("store-timeout")}
	switch f := store.Fallback(c.String("store-fallback")); f {
	case store.FallbackLocal, store.FallbackClosed:
		cfg.storeOpts.Fallback = f
	default:
		return cfg, usagef("--store-fallback %q: want local or closed", f)
	}
	if cfg.storeOpts.Timeout <= 0 {
		return cfg, usagef("--store-timeout %v: want a duration > 0", cfg.storeOpts.Timeout)
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
	if cfg.proxy.StartTimeout = c.Duration("start-timeout"); cfg.proxy.StartTimeout <= 0 {
		return cfg, usagef("--start-timeout %v: want a duration > 0", cfg.proxy.StartTimeout)
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

func limiterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http-nav-delay", Usage: "spacing of top-level navigations per host in ms: unset = adaptive, 0 = off, N = fixed N ms", EnvVars: env("HTTP_NAV_DELAY")},
		&cli.StringFlag{Name: "http-nav-burst", Usage: "navigations an idle host absorbs at once (values < 1 act as 1)", Value: strconv.Itoa(limiter.DefaultBurst), EnvVars: env("HTTP_NAV_BURST")},
	}
}

// limiterConfigFrom reads --http-nav-delay and --http-nav-burst.
func limiterConfigFrom(c *cli.Context) (limiter.Config, error) {
	var cfg limiter.Config
	if v := strings.TrimSpace(c.String("http-nav-delay")); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return cfg, usagef("--http-nav-delay %q: want a whole number of milliseconds ≥ 0 (0 turns the limiter off; leave it unset for adaptive)", v)
		}
		if ms > int64(time.Hour/time.Millisecond) {
			return cfg, usagef("--http-nav-delay %q: longer than an hour", v)
		}
		if ms == 0 {
			cfg.Mode = limiter.Off
		} else {
			cfg.Mode, cfg.Interval = limiter.Fixed, time.Duration(ms)*time.Millisecond
		}
	}
	v := strings.TrimSpace(c.String("http-nav-burst"))
	burst, err := strconv.Atoi(v)
	if err != nil || burst < 0 || burst > 1_000_000 {
		return cfg, usagef("--http-nav-burst %q: want a whole number of navigations ≥ 0", v)
	}
	cfg.Burst = max(burst, 1) // 0 acts as 1, not as the Config default
	return cfg, nil
}

func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error", Value: "info", EnvVars: env("LOG_LEVEL")},
		&cli.StringFlag{Name: "log-format", Usage: "console or json", DefaultText: "console on a terminal, else json", EnvVars: env("LOG_FORMAT")},
	}
}

// loggerFrom builds the process logger from --log-level and --log-format.
func loggerFrom(c *cli.Context, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(c.String("log-level")))
	if err != nil || level == zerolog.NoLevel {
		return zerolog.Logger{}, usagef("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	format := strings.ToLower(c.String("log-format"))
	if format == "" {
		format = "json"
		if isTerminal(w) {
			format = "console"
		}
	}
	switch format {
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
		&cli.DurationFlag{Name: "load", Value: 4500 * time.Microsecond, Usage: "page load time: from a navigation's start to the next request"},
		&cli.IntFlag{Name: "phases", Value: 1, Usage: "phases of navigations, separated by --idle"},
		&cli.DurationFlag{Name: "idle", Value: 8 * time.Second, Usage: "time without navigations between phases"},
		&cli.BoolFlag{Name: "csv", Usage: "print one row per navigation instead of the tables"},
	}
}

func simulateOptionsFrom(c *cli.Context) (simulate.Options, error) {
	lc, err := limiterConfigFrom(c)
	if err != nil {
		return simulate.Options{}, err
	}
	o := simulate.Options{
		Limiter:     lc,
		Navigations: c.Int("navigations"),
		Load:        c.Duration("load"),
		Phases:      c.Int("phases"),
		Idle:        c.Duration("idle"),
		CSV:         c.Bool("csv"),
	}
	if c.NArg() > 0 {
		return o, usagef("simulate takes no arguments, got %q", c.Args().First())
	}
	if err := o.Check(); err != nil {
		return o, usageError{err}
	}
	return o, nil
}

func demoFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Value: 200, Usage: "navigations per phase (400 reproduces the seed's run)"},
		&cli.IntFlag{Name: "phases", Value: 2, Usage: "phases per mode, separated by --idle"},
		&cli.DurationFlag{Name: "idle", Value: 8 * time.Second, Usage: "time without navigations between phases"},
		&cli.DurationFlag{Name: "fixed", Value: 100 * time.Millisecond, Usage: "spacing of the fixed mode"},
		&cli.StringFlag{Name: "browser", Usage: "chromium, lightpanda (make lightpanda installs it), or the path of either (default: chromium on PATH)", EnvVars: env("BROWSER")},
		&cli.StringFlag{Name: "site", Value: "127.0.0.2", Usage: "non-exempt loopback address the demo site listens on"},
		&cli.StringFlag{Name: "out", Value: "demo.html", Usage: "where to write the chart"},
	}
}

func demoOptionsFrom(c *cli.Context, stderr io.Writer) (demo.Options, error) {
	o := demo.Options{
		Navigations: c.Int("navigations"),
		Phases:      c.Int("phases"),
		Idle:        c.Duration("idle"),
		Fixed:       c.Duration("fixed"),
		Browser:     c.String("browser"),
		SiteIP:      c.String("site"),
		Out:         c.String("out"),
		Live:        isTerminal(stderr),
	}
	if c.NArg() > 0 {
		return o, usagef("demo takes no arguments, got %q", c.Args().First())
	}
	if err := o.Check(); err != nil {
		return o, usageError{err}
	}
	var err error
	o.Browser, err = launcher.FindBrowser(o.Browser)
	return o, err
}
