// Package cmdline is how cdp-throttle reads a command line, besides what
// urfave/cli does: a browser command comes only after --, so that a typo of
// a command (simulat) or a stray word is an unknown command, not a browser
// the relay tries to start; every parse error says, on one line, which
// flag, with two dashes, and where to look; and a bad command line is a
// UsageError, which the process exits 2 for. The root package's commands
// (the relay, simulate, demo) read their flags with it.
package cmdline

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"
)

// UsageError is a bad command line: the process prints it on one line and
// exits 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage makes err a UsageError.
func Usage(err error) error { return UsageError{err} }

// Usagef formats a UsageError.
func Usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// OnUsage is a command's OnUsageError: the parse error explained, as a
// UsageError.
func OnUsage(c *cli.Context, err error, _ bool) error { return UsageError{Explain(c, err)} }

// ExitCode is the process's exit status for what a command returned: 0, 2
// for a bad command line (urfave/cli's help command returns an ExitCoder
// for a topic it does not know), 1 for anything else.
func ExitCode(err error) int {
	var ue UsageError
	var ec cli.ExitCoder
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), errors.As(err, &ec):
		return 2
	}
	return 1
}

// browserKey is where Run leaves the browser command for the relay, in
// the app's Metadata.
const browserKey = "browser command"

// Run runs app on args (args[0] is the program name). What follows the
// first -- is the browser command (BrowserCommand): urfave/cli never sees
// it, so nothing before -- can be taken for one.
func Run(ctx context.Context, app *cli.App, args []string) error {
	var browser []string
	if i := slices.Index(args, "--"); i > 0 {
		args, browser = args[:i], args[i+1:]
	}
	app.Metadata = map[string]any{browserKey: browser}
	return app.RunContext(ctx, args)
}

// BrowserCommand is what came after --, nil when nothing did.
func BrowserCommand(c *cli.Context) []string {
	cmd, _ := c.App.Metadata[browserKey].([]string)
	return cmd
}

// NoArgs refuses arguments to a command that takes none, and a browser
// command after -- to one that starts no relay.
func NoArgs(c *cli.Context) error {
	if c.Args().Present() {
		return Usagef("%s takes no arguments, got %q (see %s --help)", c.Command.Name, c.Args().First(), c.Command.HelpName)
	}
	if cmd := BrowserCommand(c); len(cmd) > 0 {
		return Usagef("%s starts no browser, got -- %s (a browser command goes after the relay's flags: cdp-throttle [flags] -- BROWSER ...)", c.Command.Name, strings.Join(cmd, " "))
	}
	return nil
}

// UnknownCommand is the error for a word where the relay takes flags: a
// command misspelt, or a browser command without the -- before it.
func UnknownCommand(c *cli.Context) error {
	word := c.Args().First()
	var names []string
	for _, cmd := range c.App.VisibleCommands() {
		names = append(names, cmd.Name)
	}
	fix := "the commands are " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	if near := Nearest(word, names); near != "" {
		fix = "did you mean " + near + "?"
	}
	more := ""
	if c.Args().Len() > 1 {
		more = " ..."
	}
	return Usagef("unknown command %q (%s); to start a browser, put its command after --: cdp-throttle [flags] -- %s%s", word, fix, word, more)
}

// Go's flag package's errors, which urfave/cli passes on.
var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	missingValue  = regexp.MustCompile(`^flag needs an argument: -+(.+)$`)
	invalidValue  = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-+([^:]+): `)
	invalidEnv    = regexp.MustCompile(`^could not parse (".*") (?:as [a-z0-9 ]+ value )?from environment variable "([^"]+)" (?:as value )?for flag ([^:]+): `)
)

// Explain rewrites a parse error of urfave/cli (Go's flag package's words)
// as one line naming the flag with two dashes and where to look.
func Explain(c *cli.Context, err error) error {
	help := "see " + c.Command.HelpName + " --help"
	msg := err.Error()
	if m := undefinedFlag.FindStringSubmatch(msg); m != nil {
		var names []string
		for _, f := range c.Command.VisibleFlags() {
			names = append(names, f.Names()...)
		}
		if near := Nearest(m[1], names); near != "" {
			return fmt.Errorf("unknown flag --%s: did you mean --%s? (%s)", m[1], near, help)
		}
		return fmt.Errorf("unknown flag --%s (%s)", m[1], help)
	}
	if m := missingValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s needs a value (%s)", m[1], help)
	}
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("--%s %s: %s (%s)", m[2], m[1], wantFor(c, m[2]), help)
	}
	if m := invalidEnv.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s=%s (--%s): %s", m[2], m[1], m[3], wantFor(c, m[3]))
	}
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%v (%s)", err, help)
}

// wantFor says what the flag named takes, for the flag types whose values
// urfave/cli parses itself.
func wantFor(c *cli.Context, name string) string {
	for _, f := range c.Command.Flags {
		if !slices.Contains(f.Names(), name) {
			continue
		}
		switch f.(type) {
		case *cli.BoolFlag:
			return "want true or false"
		case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
			return "want a whole number"
		}
	}
	return "not a value it takes"
}

// Nearest is the name closest to typed, or "" when none is close: typed
// is a typo of it by urfave/cli's own measure (Jaro-Winkler, with the
// parameters of its SuggestFlag, which always names some flag, however
// far), or a part of one name only (delay: http-nav-delay).
func Nearest(typed string, names []string) string {
	const close = 0.8 // simulat, versoin, http-nav-dealy, upsteam pass; chromium, run, headless do not
	best, score := "", close
	for _, n := range names {
		if s := smetrics.JaroWinkler(n, typed, 0.7, 4); s >= score && len(n) > 1 {
			best, score = n, s
		}
	}
	if best != "" {
		return best
	}
	var parts []string
	for _, n := range names {
		if slices.Contains(strings.Split(n, "-"), typed) {
			parts = append(parts, n)
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return ""
}
