// Command cdp-throttle is a Chrome DevTools Protocol relay that spaces out
// top-level navigations to the same host with an adaptive per-host limiter.
//
// This package is only the command line: flags.go turns flags into
// configuration, cmdline.go reads the words around them (the browser
// command after --, unknown commands and flags), run.go wires the relay
// command together; the simulate and demo commands are packages simulate
// and demo. Nothing here knows CDP or how a navigation is held.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// For the benchmarks (BENCHMARKS.md): the relay's own CPU profile,
	// written when it exits.
	if f := os.Getenv("CDP_THROTTLE_CPUPROFILE"); f != "" {
		if out, err := os.Create(f); err == nil {
			pprof.StartCPUProfile(out)
		}
	}
	code := runMain(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	pprof.StopCPUProfile()
	os.Exit(code)
}

// runMain runs the command line and returns the exit status: 0, 2 for a
// bad command line (its reason printed on one line), 1 for any other
// failure.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := run(ctx, args, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "cdp-throttle: %v\n", err)
	}
	return exitCode(err)
}
