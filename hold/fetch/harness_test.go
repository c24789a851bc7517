package fetch

// A Holder armed on the fake browser the way relay.Proxy arms it (Start,
// then Arm with the browser's endpoint), without the relay: for the tests
// of holding that play against the relay's own connections (net and
// pages) and dial no client. The tests that need clients dialling through
// a relay are relay's.

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
	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/session"
	"github.com/cdp-throttle/cdp-throttle/hold/stream"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testHolder is a Holder holding on one fake browser.
type testHolder struct {
	hd     *hold.Holder
	b      hold.Browser     // what Arm returned
	lim    *limiter.Limiter // under the Holder's Limiter
	logs   *fakebrowser.Logs
	fed    atomic.Int64 // answers fed back to the limiter (Metrics.Feedback)
	booked atomic.Int64 // navigations booked (Metrics.Navigation, NavBooked)
	unheld atomic.Int64 // navigations that reached the network unheld (Metrics.AddUnheld)
	close  func()       // closes the Holder as relay.Proxy.Close does; once
}

// holdOn starts a Holder for fb with a limiter for cfg, with the
// browser-level backup on (HoldBackup) and every page counting as a
// client's (EveryPage), as relay's tests of holding run it; opts adjust
// it before it starts. It is closed when the test ends.
func holdOn(t *testing.T, fb *fakebrowser.Browser, cfg limiter.Config, opts ...func(*hold.Holder)) *testHolder {
	t.Helper()
	th := &testHolder{lim: limiter.New(cfg), logs: &fakebrowser.Logs{}}
	log := zerolog.New(th.logs).Level(zerolog.DebugLevel)
	th.hd = &hold.Holder{
		Limiter:      policy.New(policy.Config{Default: cfg}, th.lim),
		Ways:         hold.Ways{Fetch: New, Session: session.New, Stream: stream.New},
		HoldBackup:   true,
		EveryPage:    true,
		Log:          &log,
		Metrics:      counter{th: th},
		WriteTimeout: 30 * time.Second, // relay.DefaultWriteTimeout
		PingInterval: 30 * time.Second, // relay.DefaultPingInterval
		StartTimeout: 5 * time.Second,
	}
	for _, o := range opts {
		o(th.hd)
	}
	if !th.hd.Start() {
		t.Fatal("Holder.Start: it holds nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), fakebrowser.WaitFor)
	defer cancel()
	bg, stop := context.WithCancel(context.Background())
	var done sync.WaitGroup
	b, err := th.hd.Arm(ctx, bg, fakeUpstream{fb}, browserName(t, fb), nil, &done)
	if err != nil {
		stop()
		done.Wait()
		t.Fatalf("Holder.Arm: %v", err)
	}
	th.b = b
	th.close = sync.OnceFunc(func() {
		th.hd.Close()
		stop()
		done.Wait()
		th.hd.Wait()
	})
	t.Cleanup(func() {
		th.close()
		if t.Failed() {
			t.Logf("holding's log:\n%s", th.logs)
		}
	})
	return th
}

// fixed is a fixed interval of one navigation per host.
func fixed(interval time.Duration) limiter.Config {
	return limiter.Config{Mode: limiter.Fixed, Interval: interval, Burst: 1}
}

// browserName is the browser as fb's /json/version names it, which the
// relay hands to Arm.
func browserName(t *testing.T, fb *fakebrowser.Browser) string {
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

// fakeUpstream is the fake browser as the relay hands it to holding.
type fakeUpstream struct{ fb *fakebrowser.Browser }

func (u fakeUpstream) Name() string { return u.fb.URL() }
func (u fakeUpstream) Dial(ctx context.Context) (*websocket.Conn, error) {
	c, _, err := websocket.DefaultDialer.DialContext(ctx, u.fb.WSURL(), nil)
	return c, err
}

// counter counts in th what the tests wait for, and nothing else.
type counter struct {
	hold.NoMetrics
	th *testHolder
}

func (c counter) Navigation(outcome hold.NavOutcome, _ time.Duration) {
	if outcome == hold.NavBooked {
		c.th.booked.Add(1)
	}
}
func (c counter) Feedback(limiter.Effect) { c.th.fed.Add(1) }
func (c counter) AddUnheld(n int)         { c.th.unheld.Add(int64(n)) }

// waitFeedback waits until holding fed n answers back to the limiter.
func waitFeedback(t *testing.T, th *testHolder, n int) {
	t.Helper()
	deadline := time.Now().Add(fakebrowser.WaitFor)
	for th.fed.Load() < int64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("holding fed %d answers back, want %d", th.fed.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
	th.hd.Wait() // Observe runs on a goroutine of its own
}
