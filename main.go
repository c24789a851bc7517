// Command cdp-throttle is a Chrome DevTools Protocol relay that spaces out
// top-level navigations to the same host with an adaptive per-host limiter.
//
// This package is only the command line: flags.go turns flags into
// configuration, run.go wires the relay command together; the simulate and
// demo commands are packages simulate and demo. Nothing here knows CDP or
// how a navigation is held.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdp-throttle: %v\n", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run runs the command line args (args[0] is the program name) until it is
// done or ctx is cancelled.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return newApp(stdout, stderr).RunContext(ctx, args)
}
