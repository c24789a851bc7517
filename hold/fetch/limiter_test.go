package fetch

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// plainLimiter is a Limiter with nothing a Limiter may add (Capper,
// Refuser, Pusher, Bucketer, Exempter): policy's three methods alone.
type plainLimiter struct {
	p        *policy.Policy
	reserves *atomic.Int64 // Reserve calls, when set
}

func (l plainLimiter) Mode() limiter.Mode { return l.p.Mode() }
func (l plainLimiter) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	if l.reserves != nil {
		l.reserves.Add(1)
	}
	return l.p.Reserve(ctx, host, rawURL, now)
}
func (l plainLimiter) Observe(host string, o limiter.Outcome, now time.Time) limiter.Effect {
	return l.p.Observe(host, o, now)
}

// TestPlainLimiter checks that a Limiter with none of the features a
// Limiter may add still holds: a navigation waits for its slot, its
// answer is fed back, and loopback is exempt (limiter.Exempt, as
// Exempter's doc says).
func TestPlainLimiter(t *testing.T) {
	var l hold.Limiter = plainLimiter{}
	if _, ok := l.(hold.Exempter); ok {
		t.Fatal("plainLimiter is an Exempter: the test shows nothing")
	}
	if _, ok := l.(hold.Pusher); ok {
		t.Fatal("plainLimiter is a Pusher: the test shows nothing")
	}
	cfg := holdtest.Fixed(300 * time.Millisecond)
	lim := limiter.New(cfg)
	var reserves atomic.Int64
	fb, th, _, _ := connected(t, cfg, func(hd *hold.Holder) {
		hd.Limiter = plainLimiter{policy.New(policy.Config{Default: cfg}, lim), &reserves}
	})
	th.Lim = lim
	first := fb.Navigate(t, fb.FetchRec.Chain(t, "/page?first"))
	second := fb.Navigate(t, fb.FetchRec.Chain(t, "/page?first"))
	if waited := second[0].Continued.Sub(first[0].Paused); waited < 300*time.Millisecond {
		t.Errorf("second navigation released %v after the first was paused, want at least 300ms", waited)
	}
	th.WaitFeedback(t, 2)
	booked := reserves.Load()
	chain := fb.FetchRec.Chain(t, "/page?first")
	var local [][]byte
	for _, msg := range chain {
		local = append(local, bytes.ReplaceAll(msg, []byte("http://a.test:"), []byte("http://127.0.0.1:")))
	}
	fb.Navigate(t, local)
	th.Holder.Wait()
	if n := reserves.Load() - booked; n != 0 {
		t.Errorf("a loopback navigation asked the Limiter %d times, want never", n)
	}
}
