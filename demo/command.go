package demo

import (
	"io"

	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"github.com/cdp-throttle/cdp-throttle/launcher"
)

// Command is the demo command: it runs the demo (Run) with the options its
// flags give, writing its tables on stdout and its progress on stderr.
func Command(stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:         "demo",
		Usage:        "measure the limiter through a real Chromium or Lightpanda as its published measurement did (lightpanda-io/browser#3266), and chart it",
		UsageText:    "cdp-throttle demo [--navigations N] [--phases P] [--idle D] [--fixed D] [--browser chromium|lightpanda|PATH] [--site IP] [--out demo.html]",
		Flags:        cmdline.OneWay(flags()),
		OnUsageError: cmdline.OnUsage,
		Action: func(c *cli.Context) error {
			o, err := OptionsFrom(c, cmdline.IsTerminal(stderr))
			if err != nil {
				return err
			}
			if o.Browser, err = launcher.FindBrowser(o.Browser); err != nil { // chromium, lightpanda or a path
				return err
			}
			return Run(c.Context, o, stdout, stderr)
		},
	}
}

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Value: 200, Usage: "`N` navigations per phase (400 is the published measurement's run)"},
		&cli.IntFlag{Name: "phases", Value: 2, Usage: "`P` phases per mode, separated by --idle"},
		cmdline.DurationFlag("", "idle", "8s", "time without navigations between phases"),
		cmdline.DurationFlag("", "fixed", "100ms", "spacing of the fixed mode"),
		&cli.StringFlag{Name: "browser", DefaultText: "chromium", Usage: "the browser to run: chromium (on PATH), lightpanda (from .venv, $LIGHTPANDA or PATH) or a `PATH`; also from CDP_THROTTLE_BROWSER", EnvVars: cmdline.Env("BROWSER")},
		&cli.StringFlag{Name: "site", Value: "127.0.0.2", Usage: "the non-exempt loopback `IP` the demo site listens on"},
		&cli.StringFlag{Name: "out", Value: "demo.html", Usage: "the `FILE` to write the chart to"},
	}
}

// OptionsFrom reads the demo command's flags; live draws progress on a
// terminal.
func OptionsFrom(c *cli.Context, live bool) (Options, error) {
	o := Options{Navigations: c.Int("navigations"), Phases: c.Int("phases"), Browser: c.String("browser"),
		SiteIP: c.String("site"), Out: c.String("out"), Live: live}
	if err := cmdline.Durations(c, false, "idle", &o.Idle, "fixed", &o.Fixed); err != nil {
		return o, err
	}
	if err := cmdline.NoArgs(c); err != nil {
		return o, err
	}
	if err := o.Check(); err != nil {
		return o, cmdline.Usage(err)
	}
	return o, nil
}
