package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

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
