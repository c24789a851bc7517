package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"github.com/cdp-throttle/cdp-throttle/demo"
	"github.com/urfave/cli/v2"
)

// TestCommandLine runs command lines as main does and checks the exit
// status and the first line printed (stdout, else stderr): typos of
// commands and flags, browser commands with and without --, --version.
// A line is matched whole; a pattern between slashes is a regexp.
func TestCommandLine(t *testing.T) {
	const version = `/^cdp-throttle \S+(, commit [0-9a-f]{40}( of \S+)?( with local changes)?)?, built with go1\.\d+\S* \w+/\w+$/`
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		line string // the first line printed
		last string // for a relay that started and failed: the last line
	}{
		// A word where flags go is a command, never a browser.
		{name: "typo of a command", args: []string{"simulat"}, code: 2,
			line: `cdp-throttle: unknown command "simulat" (did you mean simulate?); to start a browser, put its command after --: cdp-throttle [flags] -- simulat`},
		{name: "typo of version", args: []string{"versoin"}, code: 2,
			line: `cdp-throttle: unknown command "versoin" (did you mean version?); to start a browser, put its command after --: cdp-throttle [flags] -- versoin`},
		{name: "browser without --", args: []string{"chromium", "--headless", "--remote-debugging-port=9222"}, code: 2,
			line: `cdp-throttle: unknown command "chromium" (the commands are simulate, demo, version and help); to start a browser, put its command after --: cdp-throttle [flags] -- chromium ...`},
		{name: "browser after flags without --", args: []string{"--http-nav-delay", "100", "lightpanda", "serve"}, code: 2,
			line: `cdp-throttle: unknown command "lightpanda" (the commands are simulate, demo, version and help); to start a browser, put its command after --: cdp-throttle [flags] -- lightpanda ...`},
		{name: "word before --", args: []string{"chromium", "--", "--headless"}, code: 2,
			line: `cdp-throttle: unknown command "chromium" (the commands are simulate, demo, version and help); to start a browser, put its command after --: cdp-throttle [flags] -- chromium`},

		// Unknown flags: two dashes, the nearest flag, where to look.
		{name: "typo of a flag", args: []string{"--http-nav-dealy", "100"}, code: 2,
			line: `cdp-throttle: unknown flag --http-nav-dealy: did you mean --http-nav-delay? (see cdp-throttle --help)`},
		{name: "typo with one dash", args: []string{"-http-nav-dealy", "100"}, code: 2,
			line: `cdp-throttle: unknown flag --http-nav-dealy: did you mean --http-nav-delay? (see cdp-throttle --help)`},
		{name: "part of a flag", args: []string{"--burst", "1"}, code: 2,
			line: `cdp-throttle: unknown flag --burst: did you mean --http-nav-burst? (see cdp-throttle --help)`},
		{name: "nothing near", args: []string{"--no-such-flag"}, code: 2,
			line: `cdp-throttle: unknown flag --no-such-flag (see cdp-throttle --help)`},
		{name: "a browser's flag", args: []string{"--headless"}, code: 2,
			line: `cdp-throttle: unknown flag --headless (see cdp-throttle --help)`},
		{name: "simulate's flags", args: []string{"simulate", "--nav", "3"}, code: 2,
			line: `cdp-throttle: unknown flag --nav: did you mean --navigations? (see cdp-throttle simulate --help)`},
		{name: "the relay's flag to simulate", args: []string{"simulate", "--listen", "127.0.0.1:1"}, code: 2,
			line: `cdp-throttle: unknown flag --listen (see cdp-throttle simulate --help)`},
		{name: "no value", args: []string{"--listen"}, code: 2,
			line: `cdp-throttle: --listen needs a value (see cdp-throttle --help)`},
		{name: "not a number", args: []string{"simulate", "--navigations", "ten"}, code: 2,
			line: `cdp-throttle: --navigations "ten": want a whole number (see cdp-throttle simulate --help)`},
		{name: "not a bool", args: []string{"simulate", "--csv=maybe"}, code: 2,
			line: `cdp-throttle: --csv "maybe": want true or false (see cdp-throttle simulate --help)`},
		{name: "bad environment variable", args: nil, env: map[string]string{"CDP_THROTTLE_BROWSERS": "abc"}, code: 2,
			line: `cdp-throttle: CDP_THROTTLE_BROWSERS="abc" (--browsers): want a whole number`},
		{name: "bad value", args: []string{"--intercept", "magic"}, code: 2,
			line: `cdp-throttle: --intercept "magic": want auto, fetch, session or navigate`},

		// The browser command after --.
		{name: "-- with a bad flag before it", args: []string{"--browsers", "0", "--", "chromium"}, code: 2,
			line: `cdp-throttle: --browsers 0: want 1 or more`},
		{name: "-- with Lightpanda's own limiter on", args: []string{"--", "lightpanda", "serve", "--http-nav-delay", "100"}, code: 2,
			line: `/^cdp-throttle: .*--http-nav-delay 100.* give it to the relay instead/`},
		{name: "-- to a command that starts no browser", args: []string{"simulate", "--", "chromium"}, code: 2,
			line: `cdp-throttle: simulate starts no browser, got -- chromium (a browser command goes after the relay's flags: cdp-throttle [flags] -- BROWSER ...)`},
		{name: "-- and a browser that is not there", args: []string{"--listen", "127.0.0.1:0", "--log-format", "json", "--", "/no/such/browser", "--headless"}, code: 1,
			line: `/^\{"level":"info",.*"message":"cdp-throttle starting"\}$/`,
			last: `cdp-throttle: launcher: starting browser: fork/exec /no/such/browser: no such file or directory`},
		{name: "no browser answering", args: []string{"--listen", "127.0.0.1:0", "--log-format", "json", "--upstream", "http://127.0.0.1:1", "--start-timeout", "100ms"}, code: 1,
			line: `/^\{"level":"info",.*"message":"cdp-throttle starting"\}$/`,
			last: `/^cdp-throttle: relay: browser http://127.0.0.1:1 did not answer within 100ms \(--start-timeout\): .*; start Chrome with --remote-debugging-port=1 \(or lightpanda serve --port 1\), or put a browser command after -- for the relay to start: cdp-throttle \[flags\] -- chromium --headless --remote-debugging-port=1$/`},
		{name: "simulate's arguments", args: []string{"simulate", "fast"}, code: 2,
			line: `cdp-throttle: simulate takes no arguments, got "fast" (see cdp-throttle simulate --help)`},

		// Version and help.
		{name: "--version", args: []string{"--version"}, line: version},
		{name: "-v", args: []string{"-v"}, line: version},
		{name: "version", args: []string{"version"}, line: version},
		{name: "version with arguments", args: []string{"version", "now"}, code: 2,
			line: `cdp-throttle: version takes no arguments, got "now" (see cdp-throttle version --help)`},
		{name: "--help", args: []string{"--help"}, line: `/^cdp-throttle - a CDP relay that spaces out top-level navigations per host/`},
		{name: "help", args: []string{"help"}, line: `/^cdp-throttle - a CDP relay that spaces out top-level navigations per host/`},
		{name: "help simulate", args: []string{"help", "simulate"}, line: `NAME:`},
		{name: "help for a typo", args: []string{"help", "simulat"}, code: 2,
			line: `cdp-throttle: No help topic for 'simulat'. Did you mean "simulate"?`},
		{name: "simulate", args: []string{"simulate", "--navigations", "3"},
			line: `3 navigations per phase to one host, each requested 4.5ms after the previous one started; burst 10`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := runMain(context.Background(), append([]string{"cdp-throttle"}, tt.args...), &stdout, &stderr)
			out := stdout.String()
			if out == "" {
				out = stderr.String()
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if code != tt.code {
				t.Errorf("exit status %d, want %d\n%s", code, tt.code, out)
			}
			if !matches(tt.line, lines[0]) {
				t.Errorf("first line:\n got %s\nwant %s", lines[0], tt.line)
			}
			if tt.last != "" && !matches(tt.last, lines[len(lines)-1]) {
				t.Errorf("last line:\n got %s\nwant %s", lines[len(lines)-1], tt.last)
			}
			if tt.code == 2 && (len(lines) != 1 || stdout.Len() > 0) {
				t.Errorf("printed %q and %q, want one line on stderr", stdout.String(), stderr.String())
			}
		})
	}
}

func matches(want, got string) bool {
	if len(want) > 1 && strings.HasPrefix(want, "/") && strings.HasSuffix(want, "/") {
		return regexp.MustCompile(want[1 : len(want)-1]).MatchString(got)
	}
	return got == want
}

// TestHelp: the relay's --help lists the three flags most crawls set
// first (every flag has a category, or urfave/cli would list it before
// them), shows defaults one way, names its endpoints and gives examples;
// the error for a bad --intercept and the help name every strategy.
func TestHelp(t *testing.T) {
	for _, f := range newApp(io.Discard, io.Discard).Flags {
		if cf, ok := f.(cli.CategorizableFlag); !ok || cf.GetCategory() == "" {
			t.Errorf("--%s has no category: help would list it before the flags most crawls need", f.Names()[0])
		}
	}
	out, _, err := runCLI(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "--") && f[0] != "--help," && f[0] != "--version," {
			flags = append(flags, f[0])
		}
	}
	if len(flags) < 3 || strings.Join(flags[:3], " ") != "--http-nav-burst --http-nav-delay --rule" {
		t.Errorf("first flags listed: %q, want --http-nav-burst, --http-nav-delay and --rule", flags)
	}
	for _, want := range []string{"ENDPOINTS", "/json/version", "the relay's own page", "/hosts?n=50", "/metrics", "/healthz", "EXAMPLES", "cdp-throttle -- chromium",
		"(default: 127.0.0.1:9322)", "(default: adaptive)", "(default: 10)", "session (Lightpanda's)", "CDP_THROTTLE_HTTP_NAV_DELAY"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	for _, args := range [][]string{{"--help"}, {"simulate", "--help"}, {"demo", "--help"}} {
		out, _, _ := runCLI(t, args...)
		for _, bad := range []string{`(default: "`, "(default: false)", "[$CDP_THROTTLE_"} {
			if strings.Contains(out, bad) {
				t.Errorf("%s shows %q: defaults one way, (default: VALUE), environment variables in one sentence", strings.Join(args, " "), bad)
			}
		}
	}
}

// TestSimulateUsage: simulate's usage line lists every flag it has, so
// every flag its examples (in its help, README.md and docs/) use.
func TestSimulateUsage(t *testing.T) {
	var sim *cli.Command
	for _, c := range newApp(io.Discard, io.Discard).Commands {
		if c.Name == "simulate" {
			sim = c
		}
	}
	for _, f := range sim.Flags {
		if !strings.Contains(sim.UsageText, "--"+f.Names()[0]+" ") && !strings.Contains(sim.UsageText, "--"+f.Names()[0]+"]") {
			t.Errorf("simulate's usage line lacks --%s", f.Names()[0])
		}
	}
	examples := sim.Description
	for _, line := range documentedCommands(t) {
		examples += "\n" + strings.Join(line.args, " ")
	}
	for _, f := range regexp.MustCompile(`cdp-throttle simulate[^\n]*`).FindAllString(examples, -1) {
		for _, flag := range regexp.MustCompile(`--[a-z-]+`).FindAllString(f, -1) {
			if !strings.Contains(sim.UsageText, flag) {
				t.Errorf("an example uses %s, which simulate's usage line does not list: %s", flag, f)
			}
		}
	}
}

// documented is a command line from a sh block of README.md or docs/.
type documented struct {
	where string
	env   map[string]string // NAME=VALUE before the command
	args  []string          // after the program name
}

// documentedCommands returns the cdp-throttle command lines in the sh
// blocks of README.md and docs/*.md, and the ARGS of make run and make
// demo, as a shell would split them; what follows -- of a browser command
// is kept, a comment, a redirection or a & is not. Lines with a
// placeholder ([...], ...) are skipped.
func documentedCommands(t *testing.T) []documented {
	t.Helper()
	files, _ := filepath.Glob("docs/*.md")
	files = append([]string{"README.md"}, files...)
	var out []documented
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inSh := false
		for i, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "```sh"):
				inSh = true
				continue
			case strings.HasPrefix(line, "```"):
				inSh = false
				continue
			}
			if !inSh || strings.Contains(line, "[") || strings.Contains(line, " ...") || strings.Contains(line, "…") {
				continue
			}
			words := shellWords(line)
			env := map[string]string{}
			for len(words) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(words[0]) {
				k, v, _ := strings.Cut(words[0], "=")
				env[k], words = v, words[1:]
			}
			var args []string
			switch {
			case len(words) > 0 && (words[0] == "./cdp-throttle" || words[0] == "cdp-throttle"):
				args = words[1:]
			case len(words) > 2 && words[0] == "make" && (words[1] == "run" || words[1] == "demo") && strings.HasPrefix(words[2], "ARGS="):
				args = shellWords(strings.TrimPrefix(words[2], "ARGS="))
				if words[1] == "demo" {
					args = append([]string{"demo"}, args...)
				} else {
					args = append(args, "--", "chromium", "--remote-debugging-port=9222")
				}
			default:
				continue
			}
			out = append(out, documented{fmt.Sprintf("%s:%d", file, i+1), env, args})
		}
	}
	return out
}

// shellWords splits a line as sh does, for the lines of the docs: quotes,
// and the end at a comment, a redirection or a &.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		case !in && (r == '#' || r == '>' || r == '&' || r == '|'):
			return words
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// TestDocumentedCommands reads every command line in README.md and docs/
// as the command would, without running a relay or a demo: each parses,
// and a browser command comes after --.
func TestDocumentedCommands(t *testing.T) {
	lines := documentedCommands(t)
	if len(lines) < 20 {
		t.Fatalf("found %d command lines in README.md and docs/, want the 20 and more they have", len(lines))
	}
	for _, d := range lines {
		t.Run(d.where, func(t *testing.T) {
			for k, v := range d.env {
				t.Setenv(k, v)
			}
			app := newApp(io.Discard, io.Discard)
			app.Action = func(c *cli.Context) error {
				_, err := relayConfigFrom(c, io.Discard)
				return err
			}
			for _, c := range app.Commands {
				if c.Name == "demo" {
					c.Action = func(c *cli.Context) error {
						_, err := demo.OptionsFrom(c, false)
						return err
					}
				}
			}
			if err := cmdline.Run(context.Background(), app, append([]string{"cdp-throttle"}, d.args...)); err != nil {
				t.Errorf("%q: %v", d.args, err)
			}
		})
	}
}
