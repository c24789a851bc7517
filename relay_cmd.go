package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/store"
)

const (
	defaultListen   = "127.0.0.1:9322"
	defaultUpstream = "http://127.0.0.1:9222"
)

// relayConfig is what the relay runs with.
type relayConfig struct {
	listen       string
	upstreams    []string
	upstreamSet  bool   // --upstream was given, not defaulted
	store        string // redis://HOST:PORT/DB, "" for in-process
	storeOpts    store.Options
	limiter      limiter.Config
	intercept    relay.Intercept
	allowOrigins []string
	allowHosts   []string
	token        string
	maxMessage   int64
	startTimeout time.Duration
	browserCmd   []string // after --: a browser the relay starts and stops
	log          zerolog.Logger
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
	}
}

func relayConfigFrom(c *cli.Context, stderr io.Writer) (relayConfig, error) {
	var cfg relayConfig
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
	cfg.upstreams, cfg.upstreamSet = c.StringSlice("upstream"), c.IsSet("upstream")
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
	if cfg.intercept, err = relay.ParseIntercept(c.String("intercept")); err != nil {
		return cfg, usagef("--intercept %q: want auto, fetch or navigate", c.String("intercept"))
	}
	cfg.allowOrigins = c.StringSlice("allow-origin")
	cfg.allowHosts = c.StringSlice("allow-host")
	cfg.token = c.String("token")
	if !loopbackListen(cfg.listen) && cfg.token == "" && !c.Bool("insecure-listen") {
		return cfg, usagef("--listen %s is reachable from other machines, and whoever reaches the relay drives the browser "+
			"(runs scripts in its pages, reads its cookies and files): set --token, or --insecure-listen if the network is yours", cfg.listen)
	}
	if cfg.maxMessage = c.Int64("max-message-size"); cfg.maxMessage < 1<<10 {
		return cfg, usagef("--max-message-size %d: want at least 1024 bytes", cfg.maxMessage)
	}
	if cfg.startTimeout = c.Duration("start-timeout"); cfg.startTimeout <= 0 {
		return cfg, usagef("--start-timeout %v: want a duration > 0", cfg.startTimeout)
	}
	cfg.browserCmd = c.Args().Slice()
	if len(cfg.browserCmd) > 0 && !cfg.upstreamSet {
		cfg.upstreams = []string{upstreamOf(cfg.browserCmd, defaultUpstream)}
	}
	return cfg, nil
}

// runRelay serves the relay until ctx ends.
func runRelay(ctx context.Context, cfg relayConfig) error {
	log := cfg.log
	local := limiter.New(cfg.limiter)
	start := log.Info().Str("mode", modeName(cfg.limiter)).Int("burst", local.Burst()).Str("listen", cfg.listen)
	shown := make([]string, len(cfg.upstreams)) // a token or password in them stays out of the log
	for i, u := range cfg.upstreams {
		shown[i] = relay.RedactURL(u)
	}
	if len(shown) == 1 {
		start = start.Str("upstream", shown[0])
	} else {
		start = start.Strs("upstreams", shown)
	}
	if cfg.store != "" {
		start = start.Str("store", redactURL(cfg.store))
	}
	start.Msg("cdp-throttle starting")

	var lim relay.Limiter = local
	if cfg.store != "" {
		storeLog := log.With().Str("store", redactURL(cfg.store)).Logger()
		cfg.storeOpts.Log = &storeLog
		redis.SetLogger(quietRedis{})
		ctx, cancel := context.WithTimeout(ctx, cfg.startTimeout)
		s, err := store.NewRedis(ctx, cfg.store, cfg.limiter, cfg.storeOpts)
		cancel()
		if err != nil {
			return err
		}
		defer s.Close()
		lim = s
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer ln.Close()

	var browser *launched
	if len(cfg.browserCmd) > 0 {
		if browser, err = launch(cfg.browserCmd, log); err != nil {
			return err
		}
		defer browser.stop()
	}

	p := &relay.Proxy{
		Upstream:       cfg.upstreams[0],
		Upstreams:      cfg.upstreams[1:],
		Limiter:        lim,
		Metrics:        relay.NewMetrics(lim),
		Intercept:      cfg.intercept,
		Log:            &log,
		MaxMessageSize: cfg.maxMessage,
		StartTimeout:   cfg.startTimeout,
		AllowOrigins:   cfg.allowOrigins,
		AllowHosts:     cfg.allowHosts,
		Token:          cfg.token,
	}
	startCtx, cancelStart := context.WithCancelCause(ctx)
	defer cancelStart(nil)
	if browser != nil {
		go func() {
			select {
			case <-browser.exited:
				cancelStart(browser.exitError())
			case <-startCtx.Done():
			}
		}()
	}
	if err := p.Start(startCtx); err != nil {
		if cause := context.Cause(startCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		if ctx.Err() != nil {
			return nil // interrupted while waiting
		}
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info().Str("listen", "http://"+ln.Addr().String()).Msg("relay ready")

	var exited <-chan struct{}
	if browser != nil {
		exited = browser.exited
	}
	select {
	case <-ctx.Done():
		log.Info().Msg("shutting down")
	case err = <-serveErr:
	case <-exited:
		err = browser.exitError()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdownCtx)
	p.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// loopbackListen reports whether a listen address is reachable only from
// this machine.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// redactURL drops the password of a URL before it is logged.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// quietRedis drops go-redis's own logging (a line per failed dial while
// Redis is down); the store logs each outage once.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
