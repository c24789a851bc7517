package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/resolve"
)

// Flags are the policy's command-line values as the user typed them (or
// their environment variables gave them); FromFlags reads them. Empty
// means unset.
type Flags struct {
	Delay       string   // --http-nav-delay: unset adaptive, 0 off, else fixed
	Burst       string   // --http-nav-burst
	Rules       []string // --rule, in order
	RulesFile   string   // --rules
	Bucket      string   // --bucket: host, site or ip
	IPSource    string   // --bucket-ip-source: both, browser or resolver
	ExemptHosts []string // --exempt-host
	Robots      string   // --robots: ignore, crawl-delay or obey
	RobotsAgent string   // --robots-user-agent
	CrawlDelay  string   // simulate's --crawl-delay

	Concurrency      string   // --http-nav-concurrency: 0 or unset, no cap
	ConcurrencyBound string   // --http-nav-concurrency-bound
	Overload         string   // --overload-status
	LatencyBackoff   string   // --latency-backoff: 0 or unset, off
	Jitter           string   // --jitter: 0 or unset, none
	RetryAfterMax    string   // --retry-after-max: unset, limiter.DefaultRetryAfterMax
	OverloadHeaders  []string // --overload-header, each NAME or NAME=VALUE
	MaxWait          string   // --max-wait: 0 or unset, no bound
	HostErrors       string   // --host-errors N/WINDOW: unset or off, no breaker
	RateLimitHeaders string   // --ratelimit-headers: obey or unset, ignore
}

// FromFlags reads f into a Config. Its errors name the flag, with two
// dashes, and what it accepts; one about a rule quotes the rule.
func FromFlags(f Flags) (Config, error) {
	var c Config
	var err error
	if c.Default, err = ParseLimiter(f.Delay, f.Burst); err != nil {
		return c, err
	}
	if v := strings.TrimSpace(f.Jitter); v != "" {
		if c.Default.Jitter, err = ParseJitter(v); err != nil {
			return c, fmt.Errorf("--jitter %q: %w", f.Jitter, err)
		}
	}
	if v := strings.TrimSpace(f.Overload); v != "" {
		if c.Default.Overload, err = ParseStatuses(v); err != nil {
			return c, fmt.Errorf("--overload-status %q: %w", f.Overload, err)
		}
	}
	if v := strings.TrimSpace(f.RetryAfterMax); v != "" {
		if c.Default.RetryAfterMax, err = ParseRetryAfterMax(v); err != nil {
			return c, fmt.Errorf("--retry-after-max %q: %w", f.RetryAfterMax, err)
		}
	}
	if c.Default.OverloadHeaders, err = overloadHeaders(f.OverloadHeaders); err != nil {
		return c, err
	}
	if f.MaxWait != "" {
		if c.Default.MaxWait, err = FlagDuration("max-wait", f.MaxWait, false); err != nil {
			return c, err
		}
		if c.Default.MaxWait > time.Hour {
			return c, fmt.Errorf("--max-wait %q: at most an hour (0 for no bound)", f.MaxWait)
		}
	}
	if c.HostErrors, err = breaker.Parse(f.HostErrors); err != nil {
		return c, err // it names the flag
	}
	if v := strings.TrimSpace(f.RateLimitHeaders); v != "" {
		if c.Default.IgnoreServer, err = ParseRateLimitHeaders(v); err != nil {
			return c, fmt.Errorf("--ratelimit-headers %q: %w", f.RateLimitHeaders, err)
		}
	}
	if v := strings.TrimSpace(f.Concurrency); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxConcurrency {
			return c, fmt.Errorf("--http-nav-concurrency %q: want a whole number of navigations from 0 (no cap) to %d", f.Concurrency, MaxConcurrency)
		}
		c.Concurrency = n
	}
	if f.ConcurrencyBound != "" {
		if c.ConcurrencyBound, err = FlagDuration("http-nav-concurrency-bound", f.ConcurrencyBound, true); err != nil {
			return c, err
		}
		if c.ConcurrencyBound > time.Hour {
			return c, fmt.Errorf("--http-nav-concurrency-bound %q: at most an hour", f.ConcurrencyBound)
		}
	}
	if v := strings.TrimSpace(f.LatencyBackoff); v != "" {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !isPlainNumber(v) || x != 0 && (x <= 1 || x > 100) {
			return c, fmt.Errorf("--latency-backoff %q: want a factor over 1 and at most 100, such as 3 (an answer 3 times slower than the host's baseline backs off), or 0 for off", f.LatencyBackoff)
		}
		c.LatencyBackoff = x
	}
	for _, s := range f.Rules {
		r, err := ParseRule(s, c.Default, c.Concurrency)
		if err != nil {
			return c, fmt.Errorf("--rule %q: %w", s, err)
		}
		c.Rules = append(c.Rules, r)
	}
	if f.RulesFile != "" {
		rules, err := ReadRules(f.RulesFile, c.Default, c.Concurrency)
		if err != nil {
			return c, err
		}
		c.Rules = append(c.Rules, rules...)
	}
	if len(c.Rules) > maxRules {
		return c, fmt.Errorf("--rule and --rules: more than %d rules", maxRules)
	}
	if c.Bucket, err = ParseBucket(f.Bucket); err != nil {
		return c, err
	}
	src, err := resolve.ParseSource(f.IPSource)
	switch {
	case err != nil:
		return c, err
	case c.Bucket == ByIP:
		c.Addrs = &resolve.Cache{Source: src, SourceSet: strings.TrimSpace(f.IPSource) != ""}
	case strings.TrimSpace(f.IPSource) != "":
		return c, fmt.Errorf("--bucket-ip-source %q: needs --bucket ip", f.IPSource)
	}
	for _, g := range f.ExemptHosts {
		p, err := ParsePattern(g)
		if err != nil {
			return c, fmt.Errorf("--exempt-host %q: %w", g, err)
		}
		c.Exempt = append(c.Exempt, p)
	}
	c.RobotsUse = RobotsIgnore
	if strings.TrimSpace(f.Robots) != "" {
		if c.RobotsUse, err = ParseRobotsUse(f.Robots); err != nil {
			return c, fmt.Errorf("--robots %q: %w", f.Robots, err)
		}
	}
	reads := c.RobotsUse != RobotsIgnore
	for _, r := range c.Rules {
		reads = reads || r.Robots == RobotsCrawlDelay || r.Robots == RobotsObey
	}
	agent := strings.TrimSpace(f.RobotsAgent)
	switch {
	case !reads && f.RobotsAgent != "":
		return c, fmt.Errorf("--robots-user-agent %q: needs --robots crawl-delay or obey", f.RobotsAgent)
	case agent != "" && agent != "*" && !isToken(agent):
		return c, fmt.Errorf("--robots-user-agent %q: want a product token (letters, digits, _ and -) or *", f.RobotsAgent)
	case reads:
		c.Robots = &Robots{UserAgent: agent}
	}
	if f.CrawlDelay != "" {
		if c.CrawlDelay, err = FlagDuration("crawl-delay", f.CrawlDelay, false); err != nil {
			return c, err
		}
		if c.CrawlDelay > MaxCrawlDelay {
			return c, fmt.Errorf("--crawl-delay %q: at most %v, as a robots.txt's is read", f.CrawlDelay, MaxCrawlDelay)
		}
	}
	return c, nil
}

// ParseJitter reads a jitter, as --jitter and a rule's jitter: take it: a
// fraction F from 0 up to, not including, 1, by which each held slot may
// move either way, in spacings (limiter.Config.Jitter).
func ParseJitter(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !isPlainNumber(strings.TrimSpace(s)) || f < 0 || f >= 1 {
		return 0, errors.New("want a fraction F from 0 up to 1, 1 excluded, such as 0.5 (each slot moves by up to half its spacing either way; 0: none)")
	}
	return f, nil
}

// ParseLimiter reads --http-nav-delay and --http-nav-burst. delay unset
// ("") is adaptive, 0 off, anything else a fixed spacing, read as
// ParseDuration reads it; burst is a whole number ≥ 0, 0 acting as 1.
func ParseLimiter(delay, burst string) (limiter.Config, error) {
	var c limiter.Config
	if v := strings.TrimSpace(delay); v != "" {
		d, err := ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("--http-nav-delay %q: %w (0 turns the limiter off; leave it unset for adaptive)", delay, err)
		}
		switch {
		case d > time.Hour:
			return c, fmt.Errorf("--http-nav-delay %q: longer than an hour", delay)
		case d == 0:
			c.Mode = limiter.Off
		default:
			c.Mode, c.Interval = limiter.Fixed, d
		}
	}
	if v := strings.TrimSpace(burst); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000 {
			return c, fmt.Errorf("--http-nav-burst %q: want a whole number of navigations ≥ 0 (0 acts as 1)", burst)
		}
		c.Burst = max(n, 1) // 0 acts as 1, not as the Config default
	}
	return c, nil
}
