package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

func init() { cli.VersionPrinter = printVersion }

// version is the module's version as the go command stamped it: a tag, or
// a pseudo-version from the commit when built from a git checkout
// (v0.0.0-20261201125942-a503fdd12345+dirty), "(devel)" otherwise.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// printVersion prints, on one line, the version, the commit it was built
// from and whether the tree had changes not committed, and the Go that
// built it: what a bug report needs.
func printVersion(c *cli.Context) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", c.App.Name, c.App.Version)
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, at, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			fmt.Fprintf(&b, ", commit %s", rev)
			if at != "" {
				fmt.Fprintf(&b, " of %s", at)
			}
			if modified == "true" {
				b.WriteString(" with local changes")
			}
		}
	}
	fmt.Fprintf(&b, ", built with %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprint(c.App.Writer, b.String())
}
