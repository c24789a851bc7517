package policy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/idna"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Rule gives the hosts its pattern matches a setting of their own.
type Rule struct {
	// Pattern is a host glob as path.Match reads it, lower-case and in
	// punycode: "*.example.com" (every subdomain, not example.com itself),
	// "example.org", "10.*". An IPv6 address matches itself, with or
	// without brackets.
	Pattern string
	// Setting is the rule's limiter setting. Its Mode is Off for both off
	// and exempt: neither books anything.
	Setting limiter.Config
	// Exempt is set when the rule says exempt rather than off.
	Exempt bool
	// Concurrency caps the navigations of a bucket in flight at once, 0
	// for no cap: the rule's concurrency:N, else the flag's
	// (--http-nav-concurrency), which the rule starts from.
	Concurrency int
	// OwnConcurrency is set when the rule says concurrency:N itself.
	OwnConcurrency bool
	// Robots is what the hosts' robots.txt is read for (robots:ignore,
	// robots:crawl-delay, robots:obey); RobotsDefault, as --robots says.
	// It reads nothing unless --robots reads some robots.txt.
	Robots RobotsUse
	// Text is the rule as written, and where, for logs and /hosts:
	// "*.slow.test=fixed:300ms", or "… (rules.txt:4)".
	Text string
}

// maxRules bounds a rules file: every navigation tries the rules in turn.
const maxRules = 10_000

// ParseRule reads one rule, PATTERN=SETTING, where SETTING is adaptive,
// fixed:DURATION, off or exempt, optionally with burst:N, concurrency:N,
// overload:STATUSES (429+503, or none), overload-header:NAME[=VALUE]
// (repeatable; the rule's replace the flag's, none drops them),
// retry-after-max:DURATION, ratelimit-headers:obey or
// ratelimit-headers:ignore, jitter:F (0 to 1, 1 excluded) and
// robots:ignore, robots:crawl-delay or robots:obey, each after a comma or
// a space;
// a setting of only those keeps the mode of def. def is the setting of the
// global flags and concurrency their --http-nav-concurrency, which a rule
// starts from.
func ParseRule(s string, def limiter.Config, concurrency int) (Rule, error) {
	pattern, setting, ok := strings.Cut(s, "=")
	if !ok {
		return Rule{}, errors.New("want PATTERN=SETTING, such as *.example.com=fixed:1s")
	}
	r := Rule{Text: strings.TrimSpace(s)}
	var err error
	if r.Pattern, err = ParsePattern(pattern); err != nil {
		return r, err
	}
	var st parsed
	st, err = parseSetting(setting, def, concurrency)
	r.Setting, r.Exempt, r.Concurrency, r.OwnConcurrency, r.Robots = st.set, st.exempt, st.concurrency, st.ownConcurrency, st.robots
	return r, err
}

// ParsePattern reads a host glob: lower-cased, an internationalised name
// turned into punycode as limiter.Key turns hosts, checked for glob syntax.
func ParsePattern(p string) (string, error) {
	p = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(p)), ".")
	switch {
	case p == "":
		return "", errors.New("empty host pattern")
	case strings.ContainsAny(p, "/ \t") || strings.Contains(p, "://"):
		return "", fmt.Errorf("host pattern %q: want a host glob such as *.example.com, not a URL", p)
	}
	if a, err := netip.ParseAddr(strings.Trim(p, "[]")); err == nil && a.Is6() {
		return "[" + a.WithZone("").String() + "]", nil // as limiter.Key writes it; matched exactly
	}
	if strings.Contains(p, ":") {
		return "", fmt.Errorf("host pattern %q: want a host glob without a port", p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] >= 0x80 {
			labels := strings.Split(p, ".")
			for j, l := range labels {
				if strings.ContainsAny(l, "*?[") {
					continue // a glob label stays as written
				}
				a, err := idna.Lookup.ToASCII(l)
				if err != nil {
					return "", fmt.Errorf("host pattern %q: %v", p, err)
				}
				labels[j] = a
			}
			p = strings.Join(labels, ".")
			break
		}
	}
	if _, err := path.Match(p, ""); err != nil {
		return "", fmt.Errorf("host pattern %q: bad glob", p)
	}
	return p, nil
}

// match reports whether the host glob pattern matches host (a bucket as
// limiter.Key returns it).
func match(pattern, host string) bool {
	if pattern == host {
		return true
	}
	if pattern[0] == '[' && pattern[len(pattern)-1] == ']' && !strings.ContainsAny(pattern, "*?") {
		return false // an IPv6 address: exact only, its brackets are not a class
	}
	ok, _ := path.Match(pattern, host)
	return ok
}

const settingWanted = "want adaptive, fixed:DURATION, off or exempt, optionally with burst:N, concurrency:N, overload:STATUSES, overload-header:NAME[=VALUE], retry-after-max:DURATION, ratelimit-headers:obey|ignore, jitter:F or robots:ignore|crawl-delay|obey"

// MaxConcurrency bounds --http-nav-concurrency and concurrency:N.
const MaxConcurrency = 10_000

// parsed is a SETTING as read.
type parsed struct {
	set            limiter.Config
	exempt         bool
	concurrency    int
	ownConcurrency bool
	robots         RobotsUse
}

// once reads arg, the argument of option f of a SETTING, with parse into
// into; form names the option (jitter:F) for a SETTING that gives it
// twice, which seen says, and is set.
func once[T any](f, arg, form string, seen *bool, parse func(string) (T, error), into *T) error {
	v, err := parse(arg)
	if err != nil {
		return fmt.Errorf("%q: %v", f, err)
	}
	if *seen {
		return fmt.Errorf("%q: one %s only", f, form)
	}
	*into, *seen = v, true
	return nil
}

// parseRuleStatuses is ParseStatuses for overload:STATUSES in a rule,
// whose error says how a rule joins them.
func parseRuleStatuses(s string) (limiter.Statuses, error) {
	codes, err := ParseStatuses(s)
	if err != nil {
		return codes, fmt.Errorf("%v (in a rule, join them with +: overload:403+429+503)", err)
	}
	return codes, nil
}

// parseSetting reads SETTING, starting from def and concurrency.
func parseSetting(s string, def limiter.Config, concurrency int) (parsed, error) {
	st := parsed{set: def, concurrency: concurrency}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
	if len(fields) == 0 {
		return st, errors.New("empty setting: " + settingWanted)
	}
	st.set.Floor = 0
	mode, burst, overload, jitter, retryAfterMax, serverLimits, robots := false, false, false, false, false, false, false
	var headers []limiter.Header // the rule's overload-header:s, nil when it names none
	for _, f := range fields {
		name, arg, hasArg := strings.Cut(strings.ToLower(f), ":")
		var err error
		switch {
		case name == "burst" && hasArg:
			n, err := strconv.Atoi(arg)
			if err != nil || n < 0 || n > 1_000_000 {
				return st, fmt.Errorf("%q: want burst:N with N a whole number ≥ 0 (0 acts as 1)", f)
			}
			if burst {
				return st, fmt.Errorf("%q: one burst:N only", f)
			}
			st.set.Burst, burst = max(n, 1), true
		case name == "concurrency" && hasArg:
			n, err := strconv.Atoi(arg)
			if err != nil || n < 0 || n > MaxConcurrency {
				return st, fmt.Errorf("%q: want concurrency:N with N a whole number from 0 (no cap) to %d", f, MaxConcurrency)
			}
			if st.ownConcurrency {
				return st, fmt.Errorf("%q: one concurrency:N only", f)
			}
			st.concurrency, st.ownConcurrency = n, true
		case name == "jitter" && hasArg:
			err = once(f, arg, "jitter:F", &jitter, ParseJitter, &st.set.Jitter)
		case name == "robots" && hasArg:
			err = once(f, arg, "robots:…", &robots, ParseRobotsUse, &st.robots)
		case name == "overload" && hasArg:
			err = once(f, arg, "overload:STATUSES", &overload, parseRuleStatuses, &st.set.Overload)
		case name == "overload-header" && hasArg:
			if strings.EqualFold(strings.TrimSpace(arg), "none") {
				if headers != nil {
					return st, fmt.Errorf("%q: none, or headers, not both", f)
				}
				headers = []limiter.Header{}
				continue
			}
			h, err := ParseOverloadHeader(arg)
			if err != nil {
				return st, fmt.Errorf("%q: %v", f, err)
			}
			if headers != nil && len(headers) == 0 {
				return st, fmt.Errorf("%q: none, or headers, not both", f)
			}
			headers = append(headers, h)
		case name == "retry-after-max" && hasArg:
			err = once(f, arg, "retry-after-max:DURATION", &retryAfterMax, ParseRetryAfterMax, &st.set.RetryAfterMax)
		case name == "ratelimit-headers" && hasArg:
			err = once(f, arg, "ratelimit-headers:…", &serverLimits, ParseRateLimitHeaders, &st.set.IgnoreServer)
		case mode:
			return st, fmt.Errorf("%q: one mode only (%s)", f, settingWanted)
		case name == "adaptive" && !hasArg:
			st.set.Mode, st.set.Interval, mode = limiter.Adaptive, 0, true
		case name == "fixed" && hasArg:
			d, err := ParseDuration(arg)
			if err != nil {
				return st, fmt.Errorf("%q: %v", f, err)
			}
			if d <= 0 || d > time.Hour {
				return st, fmt.Errorf("%q: want a spacing > 0 and at most an hour (off never spaces)", f)
			}
			st.set.Mode, st.set.Interval, mode = limiter.Fixed, d, true
		case (name == "off" || name == "exempt") && !hasArg:
			st.set.Mode, st.set.Interval, st.exempt, mode = limiter.Off, 0, name == "exempt", true
		default:
			return st, fmt.Errorf("%q: %s", f, settingWanted)
		}
		if err != nil {
			return st, err
		}
	}
	if headers != nil {
		st.set.OverloadHeaders = limiter.NewHeaders(headers...)
	}
	switch {
	case st.set.Mode == limiter.Off && burst:
		return st, errors.New("burst:N means nothing for hosts that are never spaced")
	case st.set.Mode == limiter.Off && jitter:
		return st, errors.New("jitter:F means nothing for hosts that are never spaced")
	case st.set.Mode == limiter.Off && serverLimits:
		return st, errors.New("ratelimit-headers:… means nothing for hosts that are never spaced")
	case st.set.Mode != limiter.Adaptive && overload:
		return st, errors.New("overload:STATUSES means nothing for a fixed spacing or hosts never spaced: only the adaptive rule hears answers")
	case st.set.Mode != limiter.Adaptive && headers != nil:
		return st, errors.New("overload-header:NAME means nothing for a fixed spacing or hosts never spaced: only the adaptive rule hears answers")
	case st.set.Mode != limiter.Adaptive && retryAfterMax:
		return st, errors.New("retry-after-max:DURATION means nothing for a fixed spacing or hosts never spaced: only the adaptive rule hears answers")
	case st.exempt && st.robots != RobotsDefault && st.robots != RobotsIgnore:
		return st, errors.New("robots:" + st.robots.String() + " means nothing for exempt hosts, which are never held (off,robots:obey checks without spacing)")
	case st.exempt && st.ownConcurrency && st.concurrency > 0:
		return st, errors.New("concurrency:N means nothing for exempt hosts, which are never held (off,concurrency:N caps without spacing)")
	case st.exempt:
		st.concurrency = 0
	}
	return st, nil
}

// ParseStatuses reads a list of HTTP statuses, as --overload-status and a
// rule's overload: take them: 403,429,503 (commas or +), or none.
func ParseStatuses(s string) (limiter.Statuses, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "none") {
		return limiter.NewStatuses(), nil
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '+' || r == ' ' })
	if len(fields) == 0 {
		return limiter.Statuses{}, errors.New("want HTTP statuses such as 429,503, or none")
	}
	codes := make([]int, 0, len(fields))
	for _, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 100 || n > 599 {
			return limiter.Statuses{}, fmt.Errorf("%q: want HTTP statuses from 100 to 599, such as 429,503, or none", f)
		}
		codes = append(codes, n)
	}
	return limiter.NewStatuses(codes...), nil
}

// ReadRules reads a rules file: one rule a line, blank lines and # comments
// ignored. Each rule's Text names the file and line; an error does too.
// def and concurrency are what the rules start from, as in ParseRule.
func ReadRules(name string, def limiter.Config, concurrency int) ([]Rule, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--rules: %w", err)
	}
	defer f.Close()
	return readRules(f, name, def, concurrency)
}

func readRules(r io.Reader, name string, def limiter.Config, concurrency int) ([]Rule, error) {
	var rules []Rule
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if len(rules) == maxRules {
			return nil, fmt.Errorf("--rules %s: more than %d rules", name, maxRules)
		}
		rule, err := ParseRule(line, def, concurrency)
		if err != nil {
			return nil, fmt.Errorf("--rules %s:%d %q: %w", name, n, line, err)
		}
		rule.Text += fmt.Sprintf(" (%s:%d)", name, n)
		rules = append(rules, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--rules %s: %w", name, err)
	}
	return rules, nil
}
