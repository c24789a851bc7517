package simulate

import (
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// Command is the simulate command: it replays the limiter's rule with the
// relay's limiter flags (without their environment variables) and prints
// the schedule on stdout.
func Command(stdout io.Writer) *cli.Command {
	return &cli.Command{
		Name:         "simulate",
		Usage:        "replay the limiter on a simulated clock and print the schedule",
		UsageText:    usage,
		Description:  description,
		Flags:        cmdline.OneWay(append(flags(), append(cmdline.LimiterFlags(cmdline.NoEnv), cmdline.AnswerFlags(cmdline.NoEnv)...)...)),
		OnUsageError: cmdline.OnUsage,
		Action:       func(c *cli.Context) error { return runCommand(c, stdout) },
	}
}

// usage lists every flag simulate's examples (in README and
// docs/) use.
const usage = "cdp-throttle simulate [--navigations N] [--load D] [--phases P] [--idle D] [--csv]\n" +
	"                      [--http-nav-delay D] [--http-nav-burst N] [--rule PATTERN=SETTING]... [--rules FILE]\n" +
	"                      [--bucket host|site] [--exempt-host GLOB]... [--host H]... [--crawl-delay D]\n" +
	"                      [--pages P] [--http-nav-concurrency N] [--jitter F] [--seed N]\n" +
	"                      [--answer FROM-TO=STATUS[;NAME: VALUE]...]... [--down FROM-TO]... [--max-wait D]\n" +
	"                      [--overload-status LIST] [--overload-header NAME[=VALUE]]... [--retry-after-max D]\n" +
	"                      [--ratelimit-headers obey|ignore] [--host-errors N/WINDOW]"

const description = `Replays the limiter's rule on a simulated clock: navigations back to back to
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

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "navigations", Category: cmdline.CatReplay, Value: 400, Usage: "`N` navigations per phase"},
		cmdline.DurationFlag(cmdline.CatReplay, "load", "4.5ms", "page load time: from a navigation's start to the next request"),
		&cli.IntFlag{Name: "phases", Category: cmdline.CatReplay, Value: 1, Usage: "`P` phases of navigations, separated by --idle"},
		&cli.IntFlag{Name: "pages", Category: cmdline.CatReplay, Value: 1, Usage: "`P` pages navigating at once, each asking for its next navigation when its last one is answered (--load after it started)"},
		cmdline.DurationFlag(cmdline.CatReplay, "idle", "8s", "time without navigations between phases"),
		&cli.StringSliceFlag{Name: "host", Category: cmdline.CatReplay, DefaultText: "example.com", Usage: "a `HOST` navigated to, in turn when repeated"},
		&cli.BoolFlag{Name: "csv", Category: cmdline.CatReplay, Usage: "print one row per navigation instead of the tables"},
		&cli.Uint64Flag{Name: "seed", Category: cmdline.CatReplay, Value: 1, Usage: "seed `N` of the --jitter's randomness: the same seed replays the same slots"},
		cmdline.DurationFlag(cmdline.CatPerSite, "crawl-delay", "0", "a robots.txt Crawl-delay every host asks for: the least spacing"),
		&cli.StringFlag{Name: "host-errors", Category: cmdline.CatPerSite, Value: "off", Usage: "replay the host's breaker instead of its spacing: `N/WINDOW` failures open it (with --down or --answer), such as 5/1m"},
		&cli.GenericFlag{Name: "answer", Category: cmdline.CatReplay, Value: &cmdline.Repeated{}, Usage: "the site answers each document it answers from FROM up to TO after the run's start with STATUS and these headers, which the limiter reads as the relay's answers (Retry-After, RateLimit-Policy, RateLimit, X-RateLimit-Remaining/-Reset, --overload-header); the first whose span holds it counts, else a 200 (repeatable: `" + AnswerSyntax + "`, such as '10s-11s=429;Retry-After: 10')"},
		&cli.StringSliceFlag{Name: "down", Category: cmdline.CatReplay, Usage: "the site fails every answer from FROM up to TO after the run's start, as --answer FROM-TO=503 does; with --host-errors, what opens the breaker (repeatable: `FROM-TO`, such as 0s-90s)"},
	}
}

// downSpans reads simulate's --down spans.
func downSpans(values []string) ([]Span, error) {
	var out []Span
	for _, v := range values {
		s, err := ParseSpan(v)
		if err != nil {
			return nil, cmdline.Usagef("--down %q: %v", v, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// answersOf reads simulate's --answer values.
func answersOf(c *cli.Context) ([]Answer, error) {
	var out []Answer
	for _, v := range cmdline.Values(c, "answer") {
		a, err := ParseAnswer(v)
		if err != nil {
			return nil, cmdline.Usage(err)
		}
		out = append(out, a)
	}
	return out, nil
}

// runCommand runs simulate: the replay of the schedule, or of the breaker
// with --host-errors.
func runCommand(c *cli.Context, stdout io.Writer) error {
	o := Options{Navigations: c.Int("navigations"), Phases: c.Int("phases"), Pages: c.Int("pages"), Hosts: c.StringSlice("host"), CSV: c.Bool("csv"), Seed: c.Uint64("seed")}
	var err error
	if o.Policy, err = cmdline.Policy(c); err != nil {
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
		o.Answers = append(o.Answers, Answer{Span: s, Status: 503})
	}
	if o.Policy.Bucket == policy.ByIP {
		return cmdline.Usagef("--bucket ip: simulate has no browser or network to learn addresses from; replay hosts on one address as one --host")
	}
	if err := cmdline.Durations(c, false, "load", &o.Load, "idle", &o.Idle); err != nil {
		return err
	}
	if err := cmdline.NoArgs(c); err != nil {
		return err
	}
	if err := o.Check(); err != nil {
		return cmdline.Usage(err)
	}
	return Run(o, stdout)
}

// replayBreaker replays a host's breaker (simulate --host-errors): a page
// asking every --load, each answer --load after its start, the site
// failing within the --down spans, and answering as --answer says.
func replayBreaker(c *cli.Context, o Options, stdout io.Writer) error {
	down, err := downSpans(c.StringSlice("down"))
	if err != nil {
		return err
	}
	if len(down) == 0 && len(o.Answers) == 0 {
		return cmdline.Usagef("--host-errors: simulate replays the breaker against a site that fails: give --down FROM-TO or --answer " + AnswerSyntax)
	}
	if err := cmdline.Durations(c, false, "load", &o.Load); err != nil {
		return err
	}
	if o.Load <= 0 {
		return cmdline.Usagef("--load: with --host-errors, the time between two requests: want a duration > 0")
	}
	if err := cmdline.NoArgs(c); err != nil {
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
	WriteBreaker(stdout, ReplayBreaker(BreakerOptions{Breaker: cfg, Navigations: o.Navigations, Every: o.Load, Load: o.Load,
		Down: down, Answers: o.Answers, Policy: o.Policy, Seed: o.Seed}))
	return nil
}

// spansText writes --down's spans as they were given.
func spansText(spans []Span) string {
	var parts []string
	for _, s := range spans {
		parts = append(parts, s.From.String()+" to "+s.To.String())
	}
	return strings.Join(parts, ", ")
}
