package cmdline

import (
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// LimiterFlags are the policy's flags the relay and simulate share, with
// their environment variables from env.
func LimiterFlags(env func(string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "http-nav-delay", Category: CatPace, DefaultText: "adaptive", Usage: "spacing of navigations to one host: 0 = off, a `DURATION` = fixed (100ms, 1.5s, 100), unset = adaptive", EnvVars: env("HTTP_NAV_DELAY")},
		&cli.StringFlag{Name: "http-nav-burst", Category: CatPace, Value: strconv.Itoa(limiter.DefaultBurst), Usage: "navigations an idle host absorbs at once, a whole number `N` ≥ 0 (0 acts as 1)", EnvVars: env("HTTP_NAV_BURST")},
		&cli.GenericFlag{Name: "rule", Category: CatPace, Value: &Repeated{}, Usage: "hosts matching the glob (loopback too, when it matches) get SETTING: adaptive, fixed:DURATION, off or exempt, and burst:N, concurrency:N, overload:403+429+503, overload-header:NAME=VALUE, retry-after-max:D, ratelimit-headers:ignore, jitter:F, robots:ignore|crawl-delay|obey (repeatable: `PATTERN=SETTING`)", EnvVars: env("RULE")},
		&cli.StringFlag{Name: "rules", Category: CatPerSite, Usage: "a `FILE` of rules, one a line (# comments), after the --rule ones", EnvVars: env("RULES")},
		&cli.StringFlag{Name: "bucket", Category: CatPerSite, Value: "host", Usage: "which hosts share one schedule (and cap): host, site (www.example.com and example.com share one) or ip (the hosts on one server address share one)", EnvVars: env("BUCKET")},
		&cli.StringSliceFlag{Name: "exempt-host", Category: CatPerSite, Usage: "a host `GLOB` never spaced, besides localhost, 127.0.0.1 and [::1] unless a rule names them (repeatable)", EnvVars: env("EXEMPT_HOST")},
		&cli.StringFlag{Name: "http-nav-concurrency", Category: CatPerSite, Value: "0", Usage: "at most `N` navigations of one host (or site) in flight, from their release to their answer; the others wait in arrival order (0: no cap)", EnvVars: env("HTTP_NAV_CONCURRENCY")},
		&cli.StringFlag{Name: "jitter", Category: CatPerSite, Value: "0", Usage: "move each held navigation's slot by a random amount up to `F` × its spacing either way (0.5: gaps of 0.5 to 1.5 spacings), the mean rate unchanged; F from 0 (none) up to 1, 1 excluded", EnvVars: env("JITTER")},
	}
}

// AnswerFlags are the relay's flags of what an answer does, and of how far
// ahead a slot may lie, which simulate replays too (with NoEnv): the
// overload statuses and headers, --max-wait, the longest Retry-After and
// the server's RateLimit headers.
func AnswerFlags(env func(string) []string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "overload-status", Category: CatPerSite, Value: "429,503", Usage: "answer `STATUSES` that add the overload pressure and whose Retry-After is honoured: 403,429,503, or none; other 5xx add the failure pressure (a rule says overload:403+429+503)", EnvVars: env("OVERLOAD_STATUS")},
		&cli.GenericFlag{Name: "overload-header", Category: CatPerSite, Value: &Repeated{}, Usage: "a document answer carrying this header counts as overload whatever its status, its Retry-After honoured: with any value when =VALUE is left out, name and value whatever their case, such as cf-mitigated=challenge (repeatable: `NAME[=VALUE]`; a rule says overload-header:NAME=VALUE)", EnvVars: env("OVERLOAD_HEADER")},
		DurationFlag(CatPerSite, "max-wait", "0", "a navigation whose slot is further ahead than this, or whose host's breaker is open, is answered at once with the relay's own 429 and a Retry-After, never reaching the site; 25s keeps under the clients' 30 s timeouts; 0 waits for every slot", env("MAX_WAIT")...),
		DurationFlag(CatPerSite, "retry-after-max", "60s", "longest Retry-After honoured, seconds or an HTTP-date; a longer one waits this long; from 1s to 1h (a rule says retry-after-max:5m)", env("RETRY_AFTER_MAX")...),
		&cli.StringFlag{Name: "ratelimit-headers", Category: CatPerSite, Value: "obey", Usage: "what a document answer's RateLimit-Policy, RateLimit and X-RateLimit-Remaining/-Reset headers do, `MODE`: obey (the server's policy is its host's least spacing for an hour after it was last sent; a spent quota holds the host until its reset) or ignore (a rule says ratelimit-headers:ignore)", EnvVars: env("RATELIMIT_HEADERS")},
	}
}

// Policy reads the policy's flags; those a command lacks read as unset.
func Policy(c *cli.Context) (policy.Config, error) {
	cfg, err := policy.FromFlags(policy.Flags{Delay: c.String("http-nav-delay"), Burst: c.String("http-nav-burst"),
		Rules: Values(c, "rule"), RulesFile: c.String("rules"), Bucket: c.String("bucket"), IPSource: SetOnly(c, "bucket-ip-source"), ExemptHosts: c.StringSlice("exempt-host"),
		Robots: c.String("robots"), RobotsAgent: c.String("robots-user-agent"), CrawlDelay: c.String("crawl-delay"),
		Concurrency: c.String("http-nav-concurrency"), ConcurrencyBound: c.String("http-nav-concurrency-bound"),
		Overload: c.String("overload-status"), LatencyBackoff: c.String("latency-backoff"), Jitter: c.String("jitter"),
		RetryAfterMax: SetOnly(c, "retry-after-max"), OverloadHeaders: Values(c, "overload-header"), MaxWait: SetOnly(c, "max-wait"), HostErrors: SetOnly(c, "host-errors"),
		RateLimitHeaders: c.String("ratelimit-headers")})
	if err != nil {
		return cfg, UsageError{err}
	}
	return cfg, nil
}
