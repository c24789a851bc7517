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
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/cdp-throttle/cdp-throttle/guardian"
)

func main() {
	ctx := stopSignals()
	// For the benchmarks (BENCHMARKS.md): the relay's own CPU profile,
	// written when it exits.
	if f := os.Getenv("CDP_THROTTLE_CPUPROFILE"); f != "" {
		if out, err := os.Create(f); err == nil {
			pprof.StartCPUProfile(out)
		}
	}
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
	return exitCode(err)
}

// stopSignals returns a context that ends at the first SIGINT or SIGTERM
// (the relay stops, draining what it holds: relay.Proxy.DrainTimeout) and
// carries the hurry channel (hurryOf), closed at the second (the drain
// ends at once, still answering what it holds).
func stopSignals() context.Context {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	hurry := make(chan struct{})
	go func() {
		<-sigs
		cancel()
		<-sigs
		close(hurry)
	}()
	ctx = context.WithValue(ctx, reExecKey{}, true)
	return context.WithValue(ctx, hurryKey{}, (<-chan struct{})(hurry))
}

// reExecKey marks a context of the program's own process (main's), in
// which the relay may run itself again as a guardian's child (os.Args
// are the relay's); a test running the command in its own process has
// none.
type reExecKey struct{}

// mayReExec reports whether ctx is main's (reExecKey).
func mayReExec(ctx context.Context) bool {
	ok, _ := ctx.Value(reExecKey{}).(bool)
	return ok
}

// hurryKey is the context key of the hurry channel.
type hurryKey struct{}

// hurryOf is the channel stopSignals closes at a second signal; nil (never
// closed) for a context it did not make.
func hurryOf(ctx context.Context) <-chan struct{} {
	h, _ := ctx.Value(hurryKey{}).(<-chan struct{})
	return h
}
