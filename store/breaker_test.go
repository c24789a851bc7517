package store

import (
	"context"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/breaker/breakertest"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestBreakerRule runs the breaker's tables against the store on a
// simulated clock: every step must decide what breaker.Local decides.
func TestBreakerRule(t *testing.T) {
	srv := startRedis(t)
	breakertest.Run(t, func(t *testing.T, cfg breaker.Config, r breaker.Rand) breaker.Breaker {
		return simulated(t, srv, limiter.Config{}).Breaker(cfg, r)
	})
}

// relays returns n stores on one Redis sharing a prefix, each a relay of
// one fleet, on the caller's clock.
func relays(t *testing.T, srv *server, prefix string, n int) []*Redis {
	var out []*Redis
	for range n {
		s := newStore(t, srv, limiter.Config{}, Options{Prefix: prefix, Timeout: patient})
		s.callerClock = true
		out = append(out, s)
	}
	return out
}

// TestBreakerTwoRelays: a breaker that one relay opens is open for the
// other at its next Allow, until the same instant; when the pause ends,
// one probe goes across both, the other relay's navigations wait for its
// answer, and the answer told to one closes or reopens it for both.
func TestBreakerTwoRelays(t *testing.T) {
	srv := startRedis(t)
	rs := relays(t, srv, "two:", 2)
	cfg := breaker.Config{Failures: 5, Window: time.Minute}
	a, b := rs[0].Breaker(cfg, breakertest.NoJitter), rs[1].Breaker(cfg, breakertest.NoJitter)
	at := func(sec float64) time.Time { return breakertest.T0.Add(time.Duration(sec * float64(time.Second))) }
	const host = "down.example"

	for i := range 4 {
		a.Observe(host, breaker.Answer{Failed: true}, at(float64(i)))
	}
	if d := b.Allow(host, at(3.5)); !d.Go {
		t.Fatalf("after four failures, the other relay: %+v, want to go", d)
	}
	b.Observe(host, breaker.Answer{Failed: true}, at(4)) // the fifth, seen by the other relay
	for _, r := range []*Breaker{a, b} {
		if d := r.Allow(host, at(5)); d.Go || d.Retry || !d.Until.Equal(at(34)) {
			t.Fatalf("after five failures across two relays: %+v, want deferred until +34s", d)
		}
	}
	if got := a.Counts().Opened + b.Counts().Opened; got != 1 {
		t.Errorf("opened %d times, want once", got)
	}

	// At the end of a pause, 32 navigations across both at once: one
	// probe (on one.example, a setting of its own).
	breakertest.OneProbe(t,
		func(_ *testing.T, cfg breaker.Config, r breaker.Rand) breaker.Breaker { return rs[0].Breaker(cfg, r) },
		func(_ *testing.T, cfg breaker.Config, r breaker.Rand) breaker.Breaker { return rs[1].Breaker(cfg, r) })
	if d := b.Allow(host, at(34)); !d.Probe {
		t.Fatalf("at the end of the pause: %+v, want the probe", d)
	}
	if d := a.Allow(host, at(34)); d.Go {
		t.Fatalf("the other relay while the probe is out: %+v, want deferred", d)
	}
	b.Observe(host, breaker.Answer{Failed: true, Probe: true}, at(35))
	if d := a.Allow(host, at(94)); d.Go || !d.Until.Equal(at(95)) {
		t.Fatalf("after the probe failed on the other relay: %+v, want deferred until +95s (60 s)", d)
	}
	if d := a.Allow(host, at(95)); !d.Probe {
		t.Fatalf("at the end of the second pause: %+v, want the probe", d)
	}
	a.Observe(host, breaker.Answer{Probe: true}, at(96))
	for _, r := range []*Breaker{a, b} {
		if d := r.Allow(host, at(96)); !d.Go || d.Probe {
			t.Fatalf("after the probe's success: %+v, want to go", d)
		}
		if st := r.State(host, at(96)); st != (breaker.State{}) {
			t.Errorf("after the probe's success: %+v, want closed", st)
		}
	}
	if n := rs[0].Fallbacks() + rs[1].Fallbacks(); n != 0 {
		t.Errorf("%d calls fell back, want none", n)
	}
}

// TestBreakerRedisClock: on Redis's own clock, a breaker opened now is
// deferred for its pause in the caller's clock, never less, and its key
// expires by itself: Max after the pause, or at once when it closes.
func TestBreakerRedisClock(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv, limiter.Config{}, Options{Prefix: "clock:", Timeout: patient})
	b := s.Breaker(breaker.Config{Failures: 2, Window: time.Minute, First: 2 * time.Second, Max: 4 * time.Second}, limiter.NewRand(1))
	const host = "clock.example"
	b.Observe(host, breaker.Answer{Failed: true}, time.Now())
	key := s.breakerKey(host)
	if ttl := srv.client().PTTL(context.Background(), key).Val(); ttl <= 59*time.Second || ttl > time.Minute+expiryMargin {
		t.Errorf("a failure's key lives %v, want the window, 1m", ttl)
	}
	before := time.Now()
	b.Observe(host, breaker.Answer{Failed: true}, before)
	d := b.Allow(host, time.Now())
	if d.Go {
		t.Fatalf("after two failures: %+v, want deferred", d)
	}
	if wait := d.Until.Sub(before); wait < 2*time.Second || wait > 2*time.Second*12/10+time.Second {
		t.Errorf("deferred for %v after the failure, want 2 to 2.4 s", wait)
	}
	if ttl := srv.client().PTTL(context.Background(), key).Val(); ttl < 5*time.Second || ttl > 7*time.Second+expiryMargin {
		t.Errorf("an open breaker's key lives %v, want its pause and Max (4 s) more", ttl)
	}
	if got := s.Busiest(time.Now(), 10); len(got) != 0 {
		t.Errorf("Busiest reads breakers as hosts: %+v", got)
	}
	time.Sleep(time.Until(d.Until))
	p := b.Allow(host, time.Now())
	if !p.Probe {
		t.Fatalf("at the end of the pause: %+v, want the probe", p)
	}
	b.Observe(host, breaker.Answer{Probe: true}, time.Now())
	if n := srv.client().Exists(context.Background(), key).Val(); n != 0 {
		t.Errorf("a closed breaker with no failure is still kept")
	}
}

// TestBreakerFallback: with Redis down, a store in its local fallback
// keeps breakers of its own; one in its closed fallback lets nothing go
// and says so (Retry), without counting it deferred; both count it.
func TestBreakerFallback(t *testing.T) {
	srv := startRedis(t)
	opts := Options{Timeout: 200 * time.Millisecond, ProbeInterval: time.Hour, Hold: 50 * time.Millisecond}
	local := newStore(t, srv, limiter.Config{}, opts)
	opts.Fallback = FallbackClosed
	closed := newStore(t, srv, limiter.Config{}, opts)
	cfg := breaker.Config{Failures: 1, Window: time.Minute}
	lb, cb := local.Breaker(cfg, breakertest.NoJitter), closed.Breaker(cfg, breakertest.NoJitter)
	now := time.Now()
	if !lb.Allow("f.example", now).Go || !cb.Allow("f.example", now).Go {
		t.Fatal("a closed breaker with Redis up does not let go")
	}
	srv.stop()

	if d := lb.Allow("f.example", now); !d.Go {
		t.Errorf("local fallback, nothing failed: %+v, want to go", d)
	}
	lb.Observe("f.example", breaker.Answer{Failed: true}, now)
	if d := lb.Allow("f.example", now); d.Go || d.Retry || !d.Until.Equal(now.Add(30*time.Second)) {
		t.Errorf("local fallback, after a failure: %+v, want deferred 30 s", d)
	}
	if st := lb.State("f.example", now); st.Phase != breaker.Open {
		t.Errorf("local fallback: state %+v, want open", st)
	}
	if local.Fallbacks() != 3 || lb.Counts() != (breaker.Counts{Opened: 1, Deferred: 1}) {
		t.Errorf("local fallback: %d fallbacks, counts %+v; want 3, one opened, one deferred", local.Fallbacks(), lb.Counts())
	}

	if d := cb.Allow("f.example", now); d.Go || !d.Retry || !d.Until.Equal(now.Add(50*time.Millisecond)) {
		t.Errorf("closed fallback: %+v, want a hold (Retry) for Options.Hold", d)
	}
	cb.Observe("f.example", breaker.Answer{Failed: true}, now) // dropped
	if closed.Fallbacks() != 2 || cb.Counts() != (breaker.Counts{}) {
		t.Errorf("closed fallback: %d fallbacks, counts %+v; want 2 and none", closed.Fallbacks(), cb.Counts())
	}
}
