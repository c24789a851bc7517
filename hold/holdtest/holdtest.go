// Package holdtest runs package hold against the fake browser for the
// tests of holding, as httptest runs a handler: a Holder armed on the
// browser the way relay.Proxy arms it, and, for the tests that need
// clients, a small relay of its own that hands every client message to
// the holding at the moments package relay does (hold.Conn). It knows
// none of the ways of holding: each test hands over the ones it holds
// with (hold.Ways).
package holdtest

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// Holder is a hold.Holder holding on one fake browser.
type Holder struct {
	Holder  *hold.Holder
	Browser hold.Browser     // what Arm returned
	Lim     *limiter.Limiter // under the Holder's Limiter
	Logs    *fakebrowser.Logs
	Counts  *Counts // what the Holder counted (its Metrics)
	close   func()  // closes the Holder as relay.Proxy.Close does; once
}

// Fixed is a fixed interval of one navigation per host.
func Fixed(interval time.Duration) limiter.Config {
	return limiter.Config{Mode: limiter.Fixed, Interval: interval, Burst: 1}
}

// Arm starts a Holder for fb with a limiter for cfg, holding with ways,
// with the browser-level backup on (HoldBackup), as most tests of the
// Fetch way play against; opts adjust it before it starts. It is closed
// when the test ends.
func Arm(t *testing.T, fb *fakebrowser.Browser, cfg limiter.Config, ways hold.Ways, opts ...func(*hold.Holder)) *Holder {
	t.Helper()
	th := &Holder{Lim: limiter.New(cfg), Logs: &fakebrowser.Logs{}, Counts: &Counts{}}
	log := zerolog.New(th.Logs).Level(zerolog.DebugLevel)
	th.Holder = &hold.Holder{
		Limiter:      policy.New(policy.Config{Default: cfg}, th.Lim),
		Ways:         ways,
		HoldBackup:   true,
		Log:          &log,
		Metrics:      th.Counts,
		WriteTimeout: 30 * time.Second, // relay.DefaultWriteTimeout
		PingInterval: 30 * time.Second, // relay.DefaultPingInterval
		StartTimeout: 5 * time.Second,
	}
	for _, o := range opts {
		o(th.Holder)
	}
	if !th.Holder.Start() {
		t.Fatal("Holder.Start: it holds nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), fakebrowser.WaitFor)
	defer cancel()
	bg, stop := context.WithCancel(context.Background())
	var done sync.WaitGroup
	b, err := th.Holder.Arm(ctx, bg, Upstream{fb}, BrowserName(t, fb), nil, &done)
	if err != nil {
		stop()
		done.Wait()
		t.Fatalf("Holder.Arm: %v", err)
	}
	th.Browser = b
	th.close = sync.OnceFunc(func() {
		th.Holder.Close()
		stop()
		done.Wait()
		th.Holder.Wait()
	})
	t.Cleanup(func() {
		th.close()
		if t.Failed() {
			t.Logf("holding's log:\n%s", th.Logs)
		}
	})
	return th
}

// Close closes the Holder as relay.Proxy.Close does: its own connections
// end, and what is on its way to the limiter is waited for.
func (th *Holder) Close() { th.close() }

// Claim makes a page the relay's clients', as a client that drives it
// does (a command in a session attached to it): the Fetch way holds only
// such pages.
func (th *Holder) Claim(target string) {
	th.Browser.(*hold.BrowserHold).Claims().Claim(target)
}

// WaitFeedback waits until the Holder fed n answers back to the limiter,
// and until they are in it.
func (th *Holder) WaitFeedback(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(fakebrowser.WaitFor)
	for th.Counts.Fed.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("holding fed %d answers back, want %d", th.Counts.Fed.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	th.Holder.Wait() // Observe runs on a goroutine of its own
}

// BrowserName is the browser as fb's /json/version names it, which the
// relay hands to Arm.
func BrowserName(t *testing.T, fb *fakebrowser.Browser) string {
	t.Helper()
	resp, err := http.Get(fb.URL() + "/json/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Browser string }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v.Browser
}

// Upstream is the fake browser as the relay hands it to holding.
type Upstream struct{ FB *fakebrowser.Browser }

// Name names the browser by its address.
func (u Upstream) Name() string { return u.FB.URL() }

// Dial opens a connection to the browser endpoint.
func (u Upstream) Dial(ctx context.Context) (*websocket.Conn, error) {
	c, _, err := websocket.DefaultDialer.DialContext(ctx, u.FB.WSURL(), nil)
	return c, err
}

// Counts is a hold.Metrics that counts what holding does, for the tests
// to wait for and check.
type Counts struct {
	Booked, Exempt, Untracked, Foreign, Disallowed, Deferred, Stopped atomic.Int64 // Navigation, by outcome
	Fed, Unheld, Waits, Pushes, Overtakes, Panics                     atomic.Int64
}

// Navigation counts a navigation by its outcome.
func (c *Counts) Navigation(outcome hold.NavOutcome, _ time.Duration) {
	switch outcome {
	case hold.NavBooked:
		c.Booked.Add(1)
	case hold.NavExempt:
		c.Exempt.Add(1)
	case hold.NavUntracked:
		c.Untracked.Add(1)
	case hold.NavForeign:
		c.Foreign.Add(1)
	case hold.NavDisallowed:
		c.Disallowed.Add(1)
	case hold.NavDeferred:
		c.Deferred.Add(1)
	case hold.NavStopped:
		c.Stopped.Add(1)
	}
}

// Waited counts a wait for a place in flight.
func (c *Counts) Waited(time.Duration) { c.Waits.Add(1) }

// Feedback counts an answer fed back.
func (c *Counts) Feedback(limiter.Effect) { c.Fed.Add(1) }

// Pushed counts a late departure that moved its schedule.
func (c *Counts) Pushed(time.Duration) { c.Pushes.Add(1) }

// Overtook counts a navigation let go before the one before it left.
func (c *Counts) Overtook() { c.Overtakes.Add(1) }

// AddUnheld counts navigations that reached the network unheld.
func (c *Counts) AddUnheld(n int) { c.Unheld.Add(int64(n)) }

// Panicked counts a panic recovered in holding a navigation.
func (c *Counts) Panicked() { c.Panics.Add(1) }

// EveryPage makes every page of the browser count as one of the relay's
// clients' (Claims.ClaimAll), as the tests of the Fetch way that play
// pauses of pages no client drives need: it wraps ways.Fetch.
func EveryPage(ways hold.Ways) hold.Ways {
	if newFetch := ways.Fetch; newFetch != nil {
		ways.Fetch = func(c hold.FetchCore) hold.FetchWay {
			c.Claims().ClaimAll()
			return newFetch(c)
		}
	}
	return ways
}
