package holdtest

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// The cap on navigations in flight, for the tests of each way of holding:
// a Holder that books through a policy with a concurrency rule, and what
// that policy says of a host's places, as the relay's /hosts, /status and
// page show it (Policy.Busiest).

// CapOne is a policy that caps the navigations of every host at 1 in
// flight, with no spacing, and the cap's bound bound (0: the default).
func CapOne(bound time.Duration) policy.Config {
	return policy.Config{Default: limiter.Config{Mode: limiter.Off}, Concurrency: 1, ConcurrencyBound: bound}
}

// Capped makes a Holder book through a policy for cfg, over a limiter of
// its own for cfg.Default (not Holder.Lim), and stores the policy in
// *pol for the test to read its places.
func Capped(cfg policy.Config, pol **policy.Policy) func(*hold.Holder) {
	return func(hd *hold.Holder) {
		*pol = policy.New(cfg, limiter.New(cfg.Default))
		hd.Limiter = *pol
	}
}

// StartCapped starts a relay in front of a new Lightpanda-like fake
// browser, holding with ways (opts adjust the Holder) and booking through
// a policy that caps every host at 1 navigation in flight, with no
// spacing (CapOne(0)), and connects a client: the start of the tests of
// the cap held in the clients' connections (the session and stream
// ways). It returns the policy, the client, and the browser's end of its
// connection.
func StartCapped(t *testing.T, ways hold.Ways, opts ...func(*hold.Holder)) (*policy.Policy, *websocket.Conn, *fakebrowser.Conn) {
	t.Helper()
	var pol *policy.Policy
	_, c, fc := StartLightpanda(t, limiter.Config{Mode: limiter.Off}, ways, append([]func(*hold.Holder){Capped(CapOne(0), &pol)}, opts...)...)
	return pol, c, fc
}

// HostOf returns host's state as pol shows it (Busiest, among the 100
// busiest buckets), and false when pol shows nothing of host.
func HostOf(pol *policy.Policy, host string) (limiter.HostState, bool) {
	for _, h := range pol.Busiest(time.Now(), 100) {
		if h.Host == host {
			return h, true
		}
	}
	return limiter.HostState{}, false
}

// InFlight reports host's navigations in flight and waiting for a place,
// as pol shows them (0 and 0 when it shows nothing of host).
func InFlight(pol *policy.Policy, host string) (inFlight, waiting int) {
	h, _ := HostOf(pol, host)
	return h.InFlight, h.Waiting
}

// AwaitInFlight waits, up to 2 s (a place goes back on a goroutine of its
// own), until host has want navigations in flight and none waiting, and
// fails the test if it never has.
func AwaitInFlight(t *testing.T, pol *policy.Policy, host string, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, w := InFlight(pol, host)
		if n == want && w == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d in flight and %d waiting, want %d and none", host, n, w, want)
		}
		time.Sleep(time.Millisecond)
	}
}
