package main

import (
	"io"
	"net"
	"os"
	"strings"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/launcher"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/redact"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/store"
)

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
	guardian   bool     // beside a guardian process (--guardian)
	log        zerolog.Logger
	proxy      *relay.Proxy // the flags that are the relay's own fields
}

func relayFlags() []cli.Flag {
	answers := cmdline.AnswerFlags(cmdline.Env) // kept in the order help lists them: host-errors after max-wait
	flags := []cli.Flag{
		&cli.StringFlag{Name: "bucket-ip-source", Category: cmdline.CatPerSite, Value: "both", DefaultText: "both, or resolver for a browser the relay sees is behind a proxy", Usage: "with --bucket ip, where a host's address comes from: both (the browser's answers, and the system resolver for a host it has not answered for yet), browser, or resolver (for a browser behind an HTTP proxy)", EnvVars: cmdline.Env("BUCKET_IP_SOURCE")},
		&cli.StringFlag{Name: "robots", Category: cmdline.CatPerSite, Value: "ignore", Usage: "what each site's robots.txt is read for, `MODE`: ignore; crawl-delay (its Crawl-delay is the site's least spacing); obey (that, and a navigation it disallows is refused: net::ERR_BLOCKED_BY_CLIENT); a rule says robots:MODE", EnvVars: cmdline.Env("ROBOTS")},
		&cli.StringFlag{Name: "robots-user-agent", Category: cmdline.CatPerSite, DefaultText: "the browser's product token, such as HeadlessChrome", Usage: "whose robots.txt group to read: a product `TOKEN`", EnvVars: cmdline.Env("ROBOTS_USER_AGENT")},
		cmdline.DurationFlag(cmdline.CatPerSite, "http-nav-concurrency-bound", inflight.DefaultBound.String(), "longest a navigation keeps its place among its host's navigations in flight when its end is never seen", cmdline.Env("HTTP_NAV_CONCURRENCY_BOUND")...),
	}
	flags = append(flags, answers[:3]...)
	flags = append(flags, &cli.StringFlag{Name: "host-errors", Category: cmdline.CatPerSite, Value: "off", Usage: "a breaker per host: `N/WINDOW` failures of its documents (5xx, the overload statuses, no answer) pause it for 30 s, doubling up to 10 min while its one probe fails; its navigations are answered at once meanwhile (the relay's 429); such as 5/1m, or off; fleet-wide with --store", EnvVars: cmdline.Env("HOST_ERRORS")})
	flags = append(flags, answers[3:]...)
	return append(flags, []cli.Flag{
		&cli.StringFlag{Name: "latency-backoff", Category: cmdline.CatPerSite, Value: "0", Usage: "an answer slower than `FACTOR` times its host's baseline (its fastest of the last 10 minutes) and than 50ms adds the failure pressure, as a 5xx does (0: off)", EnvVars: cmdline.Env("LATENCY_BACKOFF")},
		&cli.StringFlag{Name: "listen", Category: cmdline.CatRelay, Value: defaultListen, Usage: "the `HOST:PORT` the relay serves; clients connect here instead of to the browser", EnvVars: cmdline.Env("LISTEN")},
		&cli.StringSliceFlag{Name: "upstream", Category: cmdline.CatRelay, DefaultText: defaultUpstream + ", or the browser started after --", Usage: "the browser's CDP endpoint, http://HOST:PORT or a ws:// `URL` (repeatable)", EnvVars: cmdline.Env("UPSTREAM")},
		&cli.IntFlag{Name: "browsers", Category: cmdline.CatRelay, Value: 1, Usage: "start `N` browsers from the command after -- ({port} in it: a free port for each, {i}: its number)", EnvVars: cmdline.Env("BROWSERS")},
		cmdline.DurationFlag(cmdline.CatRelay, "start-timeout", relay.DefaultStartTimeout.String(), "how long to wait for the browser at start", cmdline.Env("START_TIMEOUT")...),
		&cli.BoolFlag{Name: "guardian", Category: cmdline.CatRelay, Value: true, Usage: "in front of a browser the relay did not start (--upstream), the relay is two processes: itself, and a guardian that outlives it and, if the relay dies without a stop (SIGKILL, the OOM killer, a crash), answers what it held with its 429 and closes its clients' pages; --guardian=false runs one process, and such a death then lets the browser send every navigation the relay held at once", EnvVars: cmdline.Env("GUARDIAN")},
		&cli.BoolFlag{Name: "hold-backup", Category: cmdline.CatRelay, Usage: "on Chromium, keep a browser-level interception behind the relay's own, so that losing the relay's page connection hands held navigations over instead of letting them go (counted unheld); costs every request of the browser an interception, about 5% of its CPU in a crawl", EnvVars: cmdline.Env("HOLD_BACKUP")},
		&cli.StringFlag{Name: "intercept", Category: cmdline.CatRelay, Value: "auto", Usage: "how navigations are held: auto, fetch (Chromium's way), session (Lightpanda's) or navigate (commands only)", EnvVars: cmdline.Env("INTERCEPT")},
		cmdline.DurationFlag(cmdline.CatRelay, "drain-timeout", relay.DefaultDrainTimeout.String(), "on SIGTERM or SIGINT, how long the relay goes on letting held navigations go at their slots, taking no new clients, before it answers the rest with its own 429 (reason=stopping), closes the pages its clients created and exits; 0 answers them at once; a second signal ends the drain at once", cmdline.Env("DRAIN_TIMEOUT")...),
		cmdline.DurationFlag(cmdline.CatRelay, "orphan-timeout", relay.DefaultOrphanTimeout.String(), "close the pages and browser contexts a client created once it has been gone this long, unless another client took them over; 0 keeps them", cmdline.Env("ORPHAN_TIMEOUT")...),
		&cli.BoolFlag{Name: "allow-browser-close", Category: cmdline.CatRelay, Usage: "let a client's Browser.close (and Browser.crash) end the browser for every client; unset, it closes only that client's pages and contexts", EnvVars: cmdline.Env("ALLOW_BROWSER_CLOSE")},
		&cli.IntFlag{Name: "max-clients", Category: cmdline.CatQueue, Usage: "client connections relayed at once, over all browsers (0: no bound but the browsers')", EnvVars: cmdline.Env("MAX_CLIENTS")},
		&cli.IntFlag{Name: "clients-per-browser", Category: cmdline.CatQueue, Usage: "client connections each browser takes at once, for browsers that do not say (a launched lightpanda serve does: --cdp-max-connections) or when less (0: no bound)", EnvVars: cmdline.Env("CLIENTS_PER_BROWSER")},
		&cli.IntFlag{Name: "queue", Category: cmdline.CatQueue, Usage: "clients over capacity that may wait for a place, their websocket upgrade answered when one frees; one more is answered 429 (0: none wait)", EnvVars: cmdline.Env("QUEUE")},
		cmdline.DurationFlag(cmdline.CatQueue, "queue-timeout", "60s", "how long a client waits for a place before it is answered 503", cmdline.Env("QUEUE_TIMEOUT")...),
		&cli.StringFlag{Name: "store", Category: cmdline.CatStore, DefaultText: "in process", Usage: "share the limiter's state between relays: redis://HOST:PORT/DB, a Sentinel's redis://S1:26379/DB?master_name=NAME&addr=S2:26379, or redis-cluster://N1:7000?addr=N2:7001", EnvVars: cmdline.Env("STORE")},
		&cli.StringFlag{Name: "store-prefix", Category: cmdline.CatStore, Value: store.DefaultPrefix, Usage: "prefix of the Redis keys", EnvVars: cmdline.Env("STORE_PREFIX")},
		&cli.StringFlag{Name: "store-fallback", Category: cmdline.CatStore, Value: "local", Usage: "while Redis does not answer: local (book in process) or closed (hold navigations until it is back)", EnvVars: cmdline.Env("STORE_FALLBACK")},
		cmdline.DurationFlag(cmdline.CatStore, "store-timeout", "100ms", "longest wait for one Redis call before falling back", cmdline.Env("STORE_TIMEOUT")...),
		&cli.StringFlag{Name: "token", Category: cmdline.CatSecurity, Usage: "require this `TOKEN` on every request (Authorization: Bearer TOKEN or ?token=TOKEN)", EnvVars: cmdline.Env("TOKEN")},
		&cli.BoolFlag{Name: "insecure-listen", Category: cmdline.CatSecurity, Usage: "allow listening on a non-loopback address without --token", EnvVars: cmdline.Env("INSECURE_LISTEN")},
		&cli.StringSliceFlag{Name: "allow-origin", Category: cmdline.CatSecurity, Usage: "an `ORIGIN` a websocket upgrade may carry, like Chrome's --remote-allow-origins (repeatable)", EnvVars: cmdline.Env("ALLOW_ORIGIN")},
		&cli.StringSliceFlag{Name: "allow-host", Category: cmdline.CatSecurity, Usage: "a `NAME` a request's Host header may carry besides IP addresses and localhost (repeatable)", EnvVars: cmdline.Env("ALLOW_HOST")},
		&cli.Int64Flag{Name: "max-message-size", Category: cmdline.CatSecurity, Value: relay.DefaultMaxMessageSize, Usage: "largest message read from either side, in `BYTES`; its sender gets a close (1009), the other side's connection ends", EnvVars: cmdline.Env("MAX_MESSAGE_SIZE")},
	}...)
}

func relayConfigFrom(c *cli.Context, stderr io.Writer) (relayConfig, error) {
	cfg := relayConfig{proxy: &relay.Proxy{}}
	var err error
	if cfg.policy, err = cmdline.Policy(c); err != nil {
		return cfg, err
	}
	if cfg.log, err = loggerFrom(c, stderr); err != nil {
		return cfg, err
	}
	if err := cmdline.Durations(c, true, "store-timeout", &cfg.storeOpts.Timeout, "start-timeout", &cfg.proxy.StartTimeout,
		"queue-timeout", &cfg.proxy.QueueTimeout); err != nil {
		return cfg, err
	}
	if err := cmdline.Durations(c, false, "orphan-timeout", &cfg.proxy.OrphanTimeout, "drain-timeout", &cfg.proxy.DrainTimeout); err != nil {
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
			return cfg, cmdline.Usagef("--%s %d: want a whole number ≥ 0", f.name, *f.to)
		}
	}
	cfg.listen = c.String("listen")
	if _, _, err := net.SplitHostPort(cfg.listen); err != nil {
		return cfg, cmdline.Usagef("--listen %q: want host:port", cfg.listen)
	}
	cfg.upstreams = c.StringSlice("upstream")
	if len(cfg.upstreams) == 0 {
		cfg.upstreams = []string{defaultUpstream}
	}
	for _, u := range cfg.upstreams {
		if !strings.Contains(u, "://") {
			return cfg, cmdline.Usagef("--upstream %q: want http://host:port or a ws:// URL", u)
		}
	}
	cfg.store = c.String("store")
	if cfg.store != "" {
		if _, err := store.ParseKind(cfg.store); err != nil {
			return cfg, cmdline.Usagef("--store %q: want redis://HOST:PORT/DB, a Sentinel's redis://S1:26379/DB?master_name=NAME&addr=S2:26379, "+
				"or redis-cluster://N1:7000?addr=N2:7001 (%v)", redact.URL(cfg.store), err)
		}
	}
	cfg.storeOpts.Prefix = c.String("store-prefix")
	if cfg.storeOpts.Fallback, err = store.ParseFallback(c.String("store-fallback")); err != nil {
		return cfg, cmdline.Usage(err)
	}
	cfg.proxy.HoldBackup = c.Bool("hold-backup")
	cfg.guardian = c.Bool("guardian")
	if cfg.proxy.Intercept, err = hold.ParseIntercept(c.String("intercept")); err != nil {
		return cfg, cmdline.Usagef("--intercept %q: want auto, fetch, session or navigate", c.String("intercept"))
	}
	cfg.proxy.AllowOrigins = c.StringSlice("allow-origin")
	cfg.proxy.AllowHosts = c.StringSlice("allow-host")
	cfg.proxy.Token = c.String("token")
	if !relay.Loopback(cfg.listen) && cfg.proxy.Token == "" && !c.Bool("insecure-listen") {
		return cfg, cmdline.Usagef("--listen %s is reachable from other machines, and whoever reaches the relay drives the browser "+
			"(runs scripts in its pages, reads its cookies and files): set --token, or --insecure-listen if the network is yours", cfg.listen)
	}
	if cfg.proxy.MaxMessageSize = c.Int64("max-message-size"); cfg.proxy.MaxMessageSize < 1<<10 {
		return cfg, cmdline.Usagef("--max-message-size %d: want at least 1024 bytes", cfg.proxy.MaxMessageSize)
	}
	if c.Args().Present() {
		return cfg, cmdline.UnknownCommand(c)
	}
	cfg.browserCmd, cfg.browsers = cmdline.BrowserCommand(c), c.Int("browsers")
	if err := launcher.Check(cfg.browserCmd, cfg.browsers); err != nil {
		return cfg, cmdline.Usage(err)
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
		return cmdline.Usagef("--bucket ip reads the browser's --host-resolver-rules: %v", err)
	}
	cfg.ipNote = note
	return nil
}

func logFlags(stderr io.Writer) []cli.Flag {
	format := map[bool]string{true: "console", false: "json"}[cmdline.IsTerminal(stderr)]
	return []cli.Flag{
		&cli.StringFlag{Name: "log-level", Category: cmdline.CatLog, Usage: "debug, info, warn or error", Value: "info", EnvVars: cmdline.Env("LOG_LEVEL")},
		&cli.StringFlag{Name: "log-format", Category: cmdline.CatLog, Usage: "console or json", Value: format, DefaultText: "console on a terminal, else json", EnvVars: cmdline.Env("LOG_FORMAT")},
	}
}

// loggerFrom builds the process logger from --log-level and --log-format.
func loggerFrom(c *cli.Context, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(c.String("log-level")))
	if err != nil || level == zerolog.NoLevel {
		return zerolog.Logger{}, cmdline.Usagef("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00" // milliseconds, in JSON and for the console to read back
	switch strings.ToLower(c.String("log-format")) {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !cmdline.IsTerminal(w)}
	default:
		return zerolog.Logger{}, cmdline.Usagef("--log-format %q: want console or json", c.String("log-format"))
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}
