package main

import (
	"context"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"github.com/cdp-throttle/cdp-throttle/demo"
	"github.com/cdp-throttle/cdp-throttle/simulate"
)

// run runs the command line args (args[0] is the program name) until it is
// done or ctx is cancelled: the relay (its flags in flags.go, its run in
// run.go), simulate, demo or version. How a command line is read, its
// errors explained and a browser command after -- set apart, is package
// cmdline's.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cmdline.Run(ctx, newApp(stdout, stderr), args)
}

func newApp(stdout, stderr io.Writer) *cli.App {
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
		Flags:                 cmdline.OneWay(append(cmdline.LimiterFlags(cmdline.Env), append(relayFlags(), logFlags(stderr)...)...)),
		Action: func(c *cli.Context) error {
			cfg, err := relayConfigFrom(c, stderr)
			if err != nil {
				return err
			}
			return runRelay(c.Context, cfg)
		},
		Commands: []*cli.Command{
			simulate.Command(stdout),
			demo.Command(stdout, stderr),
			{
				Name:      "version",
				Usage:     "print the version (as --version does)",
				UsageText: "cdp-throttle version",
				Action: func(c *cli.Context) error {
					if err := cmdline.NoArgs(c); err != nil {
						return err
					}
					cli.ShowVersion(c)
					return nil
				},
			},
		},
		OnUsageError:   cmdline.OnUsage,
		Suggest:        true,                         // for help TOPIC; run explains the other mistakes itself
		ExitErrHandler: func(*cli.Context, error) {}, // run returns errors; only main exits
	}
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
