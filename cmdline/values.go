package cmdline

import (
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cdp-throttle/cdp-throttle/policy"
)

// EnvPrefix starts every flag's environment variable.
const EnvPrefix = "CDP_THROTTLE_"

// Env names a relay flag's environment variable. simulate takes the
// limiter's flags without them (NoEnv): a replay must not change because
// the shell is set up for a relay.
func Env(name string) []string { return []string{EnvPrefix + name} }

// NoEnv gives a flag no environment variable.
func NoEnv(string) []string { return nil }

// The relay's flag categories. urfave/cli lists categories by name, so the
// names sort in the order a newcomer reads them: the three flags most
// crawls set, the per-site policy, where the relay listens and what it
// fronts, logs, how many clients it takes, access, then several relays
// sharing Redis. Every flag of
// the relay has one (an uncategorised flag would be listed first; a test
// checks it): a new flag joins the category it belongs to. simulate's own
// flags come before the limiter's.
const (
	CatPace     = "Crawl pace"
	CatPerSite  = "Crawl pace per site"
	CatRelay    = "Listening and browsers"
	CatLog      = "Logging"
	CatQueue    = "Queue: clients over capacity"
	CatSecurity = "Security"
	CatStore    = "Sharing one schedule between relays (Redis)"
	CatReplay   = "Clock, navigations and output"
)

// DurationFlag is a duration flag read by policy.ParseDuration (a Go
// duration, or a bare number of milliseconds), through Durations.
func DurationFlag(category, name, value, usage string, envVars ...string) cli.Flag {
	return &cli.StringFlag{Name: name, Category: category, Value: value, Usage: usage + " (a `DURATION`: 100ms, 1.5s, or a number of ms)", EnvVars: envVars}
}

// Durations reads the duration flags named in pairs with where to put
// them, Durations(c, false, "load", &o.Load, …); positive refuses 0.
func Durations(c *cli.Context, positive bool, pairs ...any) error {
	for i := 0; i < len(pairs); i += 2 {
		d, err := policy.FlagDuration(pairs[i].(string), c.String(pairs[i].(string)), positive)
		if err != nil {
			return UsageError{err}
		}
		*pairs[i+1].(*time.Duration) = d
	}
	return nil
}

// Repeated is a repeatable flag whose values may hold commas (a rule's
// burst:N), which urfave's StringSliceFlag would split; an environment
// variable holds one value a line. Read it with Values.
type Repeated []string

func (r *Repeated) Set(v string) error { *r = append(*r, strings.Split(v, "\n")...); return nil }
func (r *Repeated) String() string     { return strings.Join(*r, "\n") }

// Values are the values of the Repeated flag named, none when the command
// has no such flag.
func Values(c *cli.Context, name string) []string {
	if r, ok := c.Generic(name).(*Repeated); ok {
		return *r
	}
	return nil
}

// SetOnly is a flag's value when the command line or the environment set
// it, "" otherwise: a flag whose default only matters with another.
func SetOnly(c *cli.Context, name string) string {
	if !c.IsSet(name) {
		return ""
	}
	return c.String(name)
}

// OneWay makes help show every default the same way, (default: VALUE):
// urfave quotes a string flag's value, and prints false for a bool.
func OneWay(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.StringFlag:
			if f.DefaultText == "" {
				f.DefaultText = f.Value
			}
		case *cli.BoolFlag:
			f.DisableDefaultText = true
		}
	}
	return flags
}

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Help names the environment variables once, in a sentence, rather than at
// the end of every line: urfave/cli's FlagEnvHinter would be the hook, but
// v2 does not call it, so its FlagStringer drops the hint.
func init() {
	stringer := cli.FlagStringer
	envHint := regexp.MustCompile(` \[\$[A-Z0-9_, $]+\]$`)
	cli.FlagStringer = func(f cli.Flag) string { return envHint.ReplaceAllString(stringer(f), "") }
}
