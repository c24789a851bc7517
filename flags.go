package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/limiter"
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
				Usage:        "reproduce the seed's measurement against a real Chromium and chart it",
				UsageText:    "cdp-throttle demo [--navigations N] [--phases P] [--idle D] [--browser PATH] [--out demo.html]",
				Flags:        demoFlags(),
				OnUsageError: onUsage,
				Action: func(c *cli.Context) error {
					opts, err := demoOptionsFrom(c)
					if err != nil {
						return err
					}
					return runDemo(c.Context, opts, stdout, stderr)
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
					return runSimulate(opts, stdout)
				},
			},
		},
		OnUsageError:    onUsage,
		ExitErrHandler:  func(*cli.Context, error) {}, // run returns errors; only main exits
		HideHelpCommand: true,
	}
}

func limiterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "http-nav-delay",
			Usage:   "spacing of top-level navigations per host in ms: unset = adaptive, 0 = off, N = fixed N ms",
			EnvVars: env("HTTP_NAV_DELAY"),
		},
		&cli.StringFlag{
			Name:    "http-nav-burst",
			Usage:   "navigations an idle host absorbs at once (values < 1 act as 1)",
			Value:   strconv.Itoa(limiter.DefaultBurst),
			EnvVars: env("HTTP_NAV_BURST"),
		},
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

// modeName names a limiter configuration the way the seed's tables do:
// off, fixed100, adaptive.
func modeName(cfg limiter.Config) string {
	if cfg.Mode == limiter.Fixed {
		return "fixed" + strconv.FormatInt(cfg.Interval.Milliseconds(), 10)
	}
	return cfg.Mode.String()
}

func logFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{
			Name:    "log-level",
			Usage:   "debug, info, warn or error",
			Value:   "info",
			EnvVars: env("LOG_LEVEL"),
		},
		&cli.StringFlag{
			Name:        "log-format",
			Usage:       "console or json",
			DefaultText: "console on a terminal, else json",
			EnvVars:     env("LOG_FORMAT"),
		},
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
