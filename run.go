package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/cdp-throttle/cdp-throttle/guardian"
	"github.com/cdp-throttle/cdp-throttle/launcher"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/redact"
	"github.com/cdp-throttle/cdp-throttle/relay"
	"github.com/cdp-throttle/cdp-throttle/store"
)

// runRelay serves the relay until ctx ends; in front of a browser it did
// not start, as the child of a guardian process (guarded), unless told not
// to.
func runRelay(ctx context.Context, cfg relayConfig) error {
	log := cfg.log
	if sock := os.Getenv(guardian.EnvSocket); sock != "" {
		cfg.proxy.Guardian = sock // the child of a guardian
	} else if cfg.guardian && len(cfg.upstreams) > 0 && mayReExec(ctx) {
		return guarded(ctx, cfg)
	}
	local := limiter.New(cfg.policy.Default)
	start := log.Info().Str("mode", cfg.policy.Default.Name()).Int("burst", local.Burst()).Str("listen", cfg.listen).
		Int("rules", len(cfg.policy.Rules)).Str("bucket", cfg.policy.Bucket.String()).Str("robots", cfg.policy.RobotsUse.String())
	if cfg.policy.Addrs != nil {
		start = start.Str("bucket_ip_source", cfg.policy.Addrs.Source.String()).Bool("host_resolver_rules", cfg.policy.Addrs.Rules != nil)
	}
	if cfg.policy.Concurrency > 0 {
		start = start.Int("concurrency", cfg.policy.Concurrency)
	}
	if !cfg.policy.Default.Overload.IsDefault() {
		start = start.Str("overload_status", cfg.policy.Default.Overload.String())
	}
	if cfg.policy.LatencyBackoff > 0 {
		start = start.Float64("latency_backoff", cfg.policy.LatencyBackoff)
	}
	if len(cfg.upstreams) == 1 { // a token or password in them stays out of the log
		start = start.Str("upstream", redact.URL(cfg.upstreams[0]))
	} else if len(cfg.upstreams) > 1 {
		start = start.Strs("upstreams", redact.Args(cfg.upstreams))
	}
	if cfg.store != "" {
		start = start.Str("store", redact.URL(cfg.store))
	}
	start.Msg("cdp-throttle starting")
	if cfg.ipNote != "" {
		log.Warn().Msg(cfg.ipNote)
	}

	var book policy.Booker = local
	if cfg.store != "" {
		storeLog := log.With().Str("store", redact.URL(cfg.store)).Logger()
		cfg.storeOpts.Log = &storeLog
		ctx, cancel := context.WithTimeout(ctx, cfg.proxy.StartTimeout)
		s, err := store.NewRedis(ctx, cfg.store, cfg.policy.Default, cfg.storeOpts)
		cancel()
		if err != nil {
			return err
		}
		defer s.Close()
		book = s
		if cfg.policy.HostErrors.On() {
			cfg.policy.Breakers = s.Breaker(cfg.policy.HostErrors, nil) // the fleet's
		}
	}
	cfg.policy.Log = &log
	lim := policy.New(cfg.policy, book)
	defer lim.Close()

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer ln.Close()

	p := cfg.proxy
	p.Limiter, p.Metrics, p.Log, p.Hurry = lim, relay.NewMetrics(book, lim), &log, hurryOf(ctx)
	if len(cfg.browserCmd) > 0 {
		g, err := launcher.StartGroup(ctx, cfg.browserCmd, launcher.Options{Count: cfg.browsers, Log: log, StartTimeout: p.StartTimeout, TimeoutFlag: "--start-timeout"})
		if err != nil {
			return quit(ctx, err)
		}
		defer g.Stop()
		for _, b := range g.Browsers {
			p.Browsers = append(p.Browsers, b)
		}
		var cancel context.CancelFunc
		ctx, cancel = g.Bind(ctx) // ends, with the browser's error, when one is given up on
		defer cancel()
	}
	if len(cfg.upstreams) > 0 { // given with --upstream: the relay fronts those, not what it launched
		p.Upstream, p.Upstreams, p.Browsers = cfg.upstreams[0], cfg.upstreams[1:], nil
	}
	if len(cfg.browserCmd) == 0 || len(cfg.upstreams) > 0 {
		p.StartHint = startHint(p.Upstream)
	}
	if err := p.Start(ctx); err != nil {
		if p.StartHint != "" && ctx.Err() == nil {
			err = fmt.Errorf("%w; %s", err, p.StartHint)
		}
		return quit(ctx, err)
	}
	return quit(ctx, p.Serve(ctx, ln))
}

// guarded runs the relay command again as a child of this process, which
// then only guards it (package guardian), until it exits.
func guarded(ctx context.Context, cfg relayConfig) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("guardian: %w", err)
	}
	profileCPU(".guardian") // the relay's profile is the file named, not both at once
	log := cfg.log.With().Str("process", "guardian").Logger()
	s := &guardian.Supervisor{Path: exe, Args: os.Args[1:], Env: os.Environ(), Guardian: &guardian.Guardian{Log: &log},
		Stop: ctx.Done(), Hurry: hurryOf(ctx)}
	return s.Run()
}

// quit is what the relay command returns: nil when it was interrupted,
// the browser's error when the browser was given up on, else err.
func quit(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// startHint says how to have a browser answer at upstream: start one there,
// or let the relay start one.
func startHint(upstream string) string {
	port := "9222"
	if u, err := url.Parse(upstream); err == nil && u.Port() != "" {
		port = u.Port()
	}
	return fmt.Sprintf("start Chrome with --remote-debugging-port=%s (or lightpanda serve --port %s), "+
		"or put a browser command after -- for the relay to start: cdp-throttle [flags] -- chromium --headless --remote-debugging-port=%s",
		port, port, port)
}
