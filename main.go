// Command cdp-throttle is a Chrome DevTools Protocol relay that spaces out
// top-level navigations to the same host with an adaptive per-host limiter.
//
// This package is only the command line, each file above the ones it
// uses: main.go the process (its exit status, a CPU profile), cmdline.go
// the app and its commands, run.go the relay command wired together,
// flags.go the relay's flags turned into its configuration, signals.go
// the stop signals. How a command line is read (the browser command after
// --, unknown commands and flags explained, the flags the relay and
// simulate share) is package cmdline's; the simulate and demo
// commands are packages simulate and demo. Nothing here knows CDP or how
// a navigation is held.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/cdp-throttle/cdp-throttle/cmdline"
	"github.com/cdp-throttle/cdp-throttle/guardian"
)

func main() {
	ctx := stopSignals()
	// For the benchmarks (BENCHMARKS.md): the relay's own CPU profile,
	// written when it exits.
	profileCPU("")
	code := runMain(ctx, os.Args, os.Stdout, os.Stderr)
	pprof.StopCPUProfile()
	os.Exit(code)
}

// runMain runs the command line and returns the exit status: 0, 2 for a
// bad command line (its reason printed on one line), 1 for any other
// failure.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout, stderr)
	var child guardian.ChildExit
	if errors.As(err, &child) {
		return child.Code // the relay's own process said why
	}
	if err != nil {
		fmt.Fprintf(stderr, "cdp-throttle: %v\n", err)
	}
	return cmdline.ExitCode(err)
}
