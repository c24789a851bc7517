package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/limiter/limitertest"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial to stderr; the outages here are on
	// purpose, and the store logs them itself.
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// patient is for tests of the rule itself: Redis gets all the time it
// needs, so a slow machine never turns a step into a fallback.
const patient = 10 * time.Second

var prefixes atomic.Int64

// newStore returns a store on srv that no other store of the test run
// shares unless opts.Prefix says so, closed when t ends.
func newStore(t *testing.T, srv *server, cfg limiter.Config, opts Options) *Redis {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("test%d:", prefixes.Add(1))
	}
	s, err := NewRedis(context.Background(), srv.URL(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// simulated returns a store whose steps run on the caller's clock, for the
// rule's tables.
func simulated(t *testing.T, srv *server, cfg limiter.Config) *Redis {
	s := newStore(t, srv, cfg, Options{Timeout: patient})
	s.callerClock = true
	t.Cleanup(func() {
		if n := s.Fallbacks(); n != 0 {
			t.Errorf("%d calls fell back to the local limiter, want every one answered by Redis", n)
		}
	})
	return s
}

// TestSharedRule runs the in-process limiter's tables and the seed's golden
// numbers against the store on a simulated clock: every step must give what
// limiter.Limiter gives.
func TestSharedRule(t *testing.T) {
	srv := startRedis(t)
	limitertest.Run(t, func(t *testing.T, cfg limiter.Config) limitertest.Subject {
		s := simulated(t, srv, cfg)
		return limitertest.Subject{
			Limiter: s,
			PressureAt: func(host string, now time.Time) (int, bool) {
				p, ok, err := s.peek(host, now)
				if err != nil {
					t.Fatalf("peek %s: %v", host, err)
				}
				return p, ok
			},
		}
	})
}

// TestSameAsLimiterAtRandomSteps drives the store and limiter.Limiter with
// the same mixed stream of calls to a few hosts and compares every answer.
func TestSameAsLimiterAtRandomSteps(t *testing.T) {
	srv := startRedis(t)
	outcomes := []limiter.Outcome{
		{Status: 200}, {Status: 429}, {Status: 503, RetryAfter: "1"}, {Status: 500}, {NoAnswer: true},
		{Status: 429, RetryAfter: "120"}, {Status: 404},
		{Status: 200, Server: ratelimit.Limits{Spacing: 150 * time.Millisecond}}, {Status: 200, Server: ratelimit.Limits{Wait: time.Second}},
		{Status: 429, RetryAfter: "2", Server: ratelimit.Limits{Spacing: 50 * time.Millisecond, Wait: 500 * time.Millisecond}},
	}
	for _, cfg := range []limiter.Config{{}, {Burst: 1}, {Burst: 3}, {Mode: limiter.Fixed, Interval: 70 * time.Millisecond, Burst: 2}} {
		t.Run(fmt.Sprintf("%v burst %d", cfg.Mode, cfg.Burst), func(t *testing.T) {
			s, l := simulated(t, srv, cfg), limiter.New(cfg)
			now := limitertest.T0
			x := uint32(1)
			next := func(n uint32) uint32 { // xorshift: the same stream every run
				x ^= x << 13
				x ^= x >> 17
				x ^= x << 5
				return x % n
			}
			for i := range 3000 {
				now = now.Add(time.Duration(next(40_000)) * time.Microsecond)
				host := fmt.Sprintf("h%d.example", next(3))
				if next(5) == 0 {
					o := outcomes[next(uint32(len(outcomes)))]
					s.Observe(host, o, now)
					l.Observe(host, o, now)
					continue
				}
				got, want := s.Reserve(host, now), l.Reserve(host, now)
				if !got.Shared || sameBut(got, want) != want {
					t.Fatalf("call %d, Reserve(%s, +%v): got %+v, want %+v", i, host, now.Sub(limitertest.T0), got, want)
				}
			}
		})
	}
}

// TestTwoStoresNeverOverlap books one host from many goroutines through two
// stores with clients of their own, as two relay processes would: with a
// fixed interval and burst 1 every slot is a distinct multiple of the interval.
func TestTwoStoresNeverOverlap(t *testing.T) {
	srv := startRedis(t)
	const interval = 10 * time.Millisecond
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: interval, Burst: 1}
	a := newStore(t, srv, cfg, Options{Prefix: "shared:", Timeout: patient})
	b := newStore(t, srv, cfg, Options{Prefix: "shared:", Timeout: patient})
	a.callerClock, b.callerClock = true, true
	const workers, perWorker = 16, 100 // per store
	var mu sync.Mutex
	var starts []time.Duration
	var wg sync.WaitGroup
	for _, s := range []*Redis{a, b} {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for range perWorker {
					r := s.Reserve("example.com", limitertest.T0)
					mine = append(mine, r.Start.Sub(limitertest.T0))
				}
				mu.Lock()
				starts = append(starts, mine...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if a.Fallbacks()+b.Fallbacks() != 0 {
		t.Fatalf("fallbacks: %d and %d, want every booking made in Redis", a.Fallbacks(), b.Fallbacks())
	}
	seen := make(map[time.Duration]bool, len(starts))
	for _, d := range starts {
		if d%interval != 0 || seen[d] {
			t.Fatalf("slot at %v collides or is off the %v grid", d, interval)
		}
		seen[d] = true
	}
	for i := range len(starts) {
		if !seen[time.Duration(i)*interval] {
			t.Fatalf("%d bookings but no slot at %v", len(starts), time.Duration(i)*interval)
		}
	}
}

// TestServerLimitsShared: what one relay's answer says of the server's
// own limits spaces the bookings another relay makes on the same Redis:
// its policy, until it lapses, and its spent quota.
func TestServerLimitsShared(t *testing.T) {
	srv := startRedis(t)
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: 20 * time.Millisecond, Burst: 1}
	a := newStore(t, srv, cfg, Options{Prefix: "shared:", Timeout: patient})
	b := newStore(t, srv, cfg, Options{Prefix: "shared:", Timeout: patient})
	a.callerClock, b.callerClock = true, true
	const host = "example.com"
	hour := float64(limiter.ServerPolicyLife / time.Millisecond)
	for i, s := range []struct {
		by        *Redis
		atMS      float64
		server    ratelimit.Limits // observed when not zero
		wantStart float64
	}{
		{by: a, atMS: 0, wantStart: 0},
		{by: a, atMS: 10, server: ratelimit.Limits{Spacing: 200 * time.Millisecond}},
		{by: b, atMS: 10, wantStart: 200}, // the policy's spacing after the one at 0 (issue 47), though the rule's tat says 20
		{by: b, atMS: 10, wantStart: 400},
		{by: a, atMS: 10, wantStart: 600},
		{by: a, atMS: 500, server: ratelimit.Limits{Wait: 3 * time.Second}},
		{by: b, atMS: 510, wantStart: 3500},
		{by: b, atMS: 510, wantStart: 3700},
		{by: b, atMS: hour + 10, wantStart: hour + 10}, // the policy lapsed: the rule's 20 ms
		{by: a, atMS: hour + 10, wantStart: hour + 30},
	} {
		if s.server != (ratelimit.Limits{}) {
			s.by.Observe(host, limiter.Outcome{Status: 200, Server: s.server}, limitertest.At(s.atMS))
			continue
		}
		if r := s.by.Reserve(host, limitertest.At(s.atMS)); r.Start != limitertest.At(s.wantStart) {
			t.Errorf("step %d: Reserve at %vms: got start %v, want %vms", i, s.atMS, r.Start.Sub(limitertest.T0), s.wantStart)
		}
	}
	if a.Fallbacks()+b.Fallbacks() != 0 {
		t.Fatalf("fallbacks: %d and %d, want every step made in Redis", a.Fallbacks(), b.Fallbacks())
	}
	// A host under a policy is kept while the policy lasts, idle or not.
	a.Observe("quiet.example", limiter.Outcome{Status: 200, Server: ratelimit.Limits{Spacing: time.Second}}, limitertest.At(0))
	if ttl, err := a.client.PTTL(context.Background(), "shared:quiet.example").Result(); err != nil || ttl < limiter.ServerPolicyLife {
		t.Errorf("a host under a policy expires in %v (%v), want at least %v", ttl, err, limiter.ServerPolicyLife)
	}
}

// TestRedisClock checks that a step reads Redis's clock and hands the
// start back in the caller's: a relay whose clock is an hour off books on
// the same schedule as one whose clock is right.
func TestRedisClock(t *testing.T) {
	srv := startRedis(t)
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: time.Minute, Burst: 1}
	a := newStore(t, srv, cfg, Options{Prefix: "clock:", Timeout: patient})
	b := newStore(t, srv, cfg, Options{Prefix: "clock:", Timeout: patient})
	// A slot is told from when Redis's answer is in, so that the call's
	// way to Redis never makes it start early: at once is now plus the
	// call.
	now := time.Now()
	if r := a.Reserve("example.com", now); r.Start.Before(now) || r.Start.After(now.Add(time.Since(now))) {
		t.Fatalf("first booking: starts %v after now, want at once (once Redis answered)", r.Start.Sub(now))
	}
	// b's clock is an hour behind; its slot is still a minute after a's,
	// told in b's clock.
	skewed := time.Now().Add(-time.Hour)
	sent := time.Now()
	r := b.Reserve("example.com", skewed)
	if d := r.Start.Sub(skewed); d <= 50*time.Second || d > time.Minute+time.Since(sent) {
		t.Fatalf("second booking from a clock an hour behind: starts %v after its now, want about a minute", d)
	}
}

// TestSlowWayNeverEarly: a booking whose call takes long to reach Redis
// starts no sooner than a whole spacing after the slot before it, as Redis
// counted them. Counted from when the call was made, it would start early
// by the call's way there.
func TestSlowWayNeverEarly(t *testing.T) {
	srv := startRedis(t)
	const delay = 60 * time.Millisecond
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: 200 * time.Millisecond, Burst: 1}
	quick := newStore(t, srv, cfg, Options{Prefix: "slow:", Timeout: patient})
	slow, err := NewRedis(context.Background(), srv.slowWay(t, delay), cfg, Options{Prefix: "slow:", Timeout: patient})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	asked := time.Now()
	first := quick.Reserve("example.com", asked)
	// The quick store tells its slot late by its answer's way back (never
	// early): at most this round trip, well under the delay the test is about.
	way := time.Since(asked)
	second := slow.Reserve("example.com", time.Now())
	if gap := second.Start.Sub(first.Start); gap < cfg.Interval-way {
		t.Fatalf("a booking %v on its way to Redis starts %v after the one before (told %v late at most), want at least %v",
			delay, gap, way, cfg.Interval)
	}
}

// TestFallbackLocal kills Redis, and pauses it, under a running store: it
// keeps booking in the local limiter, logs the outage once, counts the
// calls, and books in Redis again once Redis is back.
func TestFallbackLocal(t *testing.T) {
	srv := startRedis(t)
	var logs fakebrowser.Logs
	log := zerolog.New(&logs)
	// A timeout long enough that a loaded machine does not look like an
	// outage, short enough that a paused server is noticed at once.
	s := newStore(t, srv, limiter.Config{}, Options{Prefix: "fb:", Timeout: time.Second / 2, ProbeInterval: 20 * time.Millisecond, Log: &log})
	rc := srv.client()
	ctx := context.Background()

	if r := s.Reserve("example.com", time.Now()); !r.Tracked || s.Fallbacks() != 0 {
		t.Fatalf("with Redis up: got %+v and %d fallbacks, want a booking made in Redis", r, s.Fallbacks())
	}
	for _, outage := range []struct {
		name      string
		down, up  func()
		wantError string
	}{
		{"killed", srv.stop, srv.start, "connection refused"},
		{"paused", srv.pause, srv.resume, "i/o timeout"},
	} {
		t.Run(outage.name, func(t *testing.T) {
			host := outage.name + ".example" // new to the local limiter
			before, outages := s.Fallbacks(), s.Outages()
			outage.down()
			// Bookings go on, from the local limiter: a fresh host there, so
			// the first ten go at once and the eleventh waits.
			now := time.Now()
			for i := range 11 {
				r := s.Reserve(host, now)
				if !r.Tracked {
					t.Fatalf("Reserve %d with Redis %s: got %+v, want a booking", i+1, outage.name, r)
				}
				if wait := r.Start.Sub(now); (i < 10) != (wait == 0) {
					t.Fatalf("Reserve %d with Redis %s: waits %v", i+1, outage.name, wait)
				}
			}
			s.Observe(host, limiter.Outcome{Status: 503}, now)
			if got := s.Fallbacks() - before; got < 12 {
				t.Fatalf("fallbacks after 12 calls with Redis %s: got %d more, want 12", outage.name, got)
			}
			if got := s.Outages() - outages; got != 1 {
				t.Fatalf("outages: got %d more, want 1", got)
			}
			if got := strings.Count(logs.String(), `"level":"warn"`); got != int(s.Outages()) {
				t.Fatalf("warnings: got %d for %d outages:\n%s", got, s.Outages(), logs.String())
			}
			if !strings.Contains(logs.String(), outage.wantError) {
				t.Errorf("log does not name the cause %q:\n%s", outage.wantError, logs.String())
			}

			outage.up()
			// Within a few probe intervals a booking is made in Redis again.
			rc.Del(ctx, "fb:"+host)
			deadline := time.Now().Add(10 * time.Second)
			for {
				s.Reserve(host, time.Now())
				if n, _ := rc.Exists(ctx, "fb:"+host).Result(); n == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis back for 10 s but no booking reached it; %d fallbacks", s.Fallbacks())
				}
				time.Sleep(5 * time.Millisecond)
			}
			back := s.Fallbacks()
			for range 20 {
				if r := s.Reserve(host, time.Now()); !r.Tracked {
					t.Fatalf("after Redis came back: got %+v, want a booking", r)
				}
			}
			if s.Fallbacks() != back {
				t.Fatalf("fallbacks after Redis came back: went from %d to %d, want no more", back, s.Fallbacks())
			}
			if !strings.Contains(logs.String(), "redis answers again") {
				t.Errorf("no log of Redis coming back:\n%s", logs.String())
			}
			if got := s.Outages() - outages; got != 1 {
				t.Fatalf("outages after Redis came back: got %d more, want 1", got)
			}
		})
	}
}

// TestFallbackClosed kills Redis under a store that holds navigations
// while it cannot book them: Reserve answers with holds, Wait blocks, and
// both book again once Redis is back.
func TestFallbackClosed(t *testing.T) {
	srv := startRedis(t)
	const hold = 30 * time.Millisecond
	s := newStore(t, srv, limiter.Config{}, Options{Fallback: FallbackClosed, Timeout: time.Second / 2, Hold: hold, ProbeInterval: 20 * time.Millisecond})
	const host = "example.com"
	now := time.Now()
	if r := s.Reserve(host, now); !r.Tracked || r.Retry {
		t.Fatalf("with Redis up: got %+v, want a booking", r)
	}

	srv.stop()
	for i := range 3 {
		now := time.Now()
		r := s.Reserve(host, now)
		if !r.Retry || r.Tracked || r.Start.Sub(now) != hold {
			t.Fatalf("Reserve %d with Redis down: got %+v (held %v), want a hold until now+%v", i+1, r, r.Retry, hold)
		}
	}
	s.Observe(host, limiter.Outcome{Status: 429, RetryAfter: "5"}, time.Now()) // dropped
	if s.Fallbacks() < 4 || s.Outages() != 1 {
		t.Fatalf("fallbacks %d, outages %d: want at least 4 and 1", s.Fallbacks(), s.Outages())
	}
	// Exempt hosts are never held.
	if r := s.Reserve("localhost", now); r.Retry || !r.Start.Equal(now) {
		t.Fatalf("exempt host with Redis down: got %+v, want to go at once", r)
	}

	// Wait keeps asking while Redis is down.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		r   limiter.Reservation
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := s.Wait(ctx, host)
		done <- result{r, err}
	}()
	time.Sleep(10 * hold)
	select {
	case res := <-done:
		t.Fatalf("Wait returned with Redis down: %+v, %v", res.r, res.err)
	default:
	}
	srv.start()
	res := <-done
	if res.err != nil || !res.r.Tracked {
		t.Fatalf("Wait after Redis came back: got %+v, %v, want a booking", res.r, res.err)
	}

	// A cancelled Wait returns ctx's error.
	srv.stop()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*hold)
	defer cancel2()
	if _, err := s.Wait(ctx2, host); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait cancelled while held: got %v, want context.DeadlineExceeded", err)
	}
}

// TestHeldNeverForLimiter: the in-process limiter never holds, so callers
// may test Retry on every reservation.
func TestHeldNeverForLimiter(t *testing.T) {
	l := limiter.New(limiter.Config{Burst: 1})
	now := time.Now()
	for _, host := range []string{"example.com", "example.com", "localhost"} {
		if r := l.Reserve(host, now); r.Retry {
			t.Fatalf("limiter.Limiter's %+v for %s is held", r, host)
		}
	}
	off := limiter.New(limiter.Config{Mode: limiter.Off})
	if r := off.Reserve("example.com", now); r.Retry {
		t.Fatalf("an Off limiter's %+v is held", r)
	}
}

// TestKeysExpire checks that a host's key lives until the host is idle,
// its booked slots run out and its pressure drained, and no longer.
func TestKeysExpire(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client()
	ctx := context.Background()
	margin := expiryMargin
	tests := []struct {
		name  string
		cfg   limiter.Config
		steps func(l *Redis, host string)
		ttl   time.Duration // without the margin; 0: no key at all
	}{
		{"one booking: pressure 1 drains in 100 ms", limiter.Config{}, func(l *Redis, host string) {
			l.Reserve(host, limitertest.At(0))
		}, 100 * time.Millisecond},
		{"a 503: pressure 51 drains in 5.1 s", limiter.Config{}, func(l *Redis, host string) {
			l.Reserve(host, limitertest.At(0))
			l.Observe(host, limiter.Outcome{Status: 503}, limitertest.At(0))
		}, 5100 * time.Millisecond},
		{"Retry-After 30 on an unknown host: booked 30 s + tau ahead", limiter.Config{}, func(l *Redis, host string) {
			l.Observe(host, limiter.Outcome{Status: 429, RetryAfter: "30"}, limitertest.At(0))
		}, 30_180 * time.Millisecond},
		{"fixed: three slots booked", limiter.Config{Mode: limiter.Fixed, Interval: 400 * time.Millisecond, Burst: 1}, func(l *Redis, host string) {
			for range 3 {
				l.Reserve(host, limitertest.At(0))
			}
		}, 1200 * time.Millisecond},
		{"a 200 leaves no key", limiter.Config{}, func(l *Redis, host string) {
			l.Observe(host, limiter.Outcome{Status: 200}, limitertest.At(0))
		}, 0},
		{"off leaves no key", limiter.Config{Mode: limiter.Off}, func(l *Redis, host string) {
			l.Reserve(host, limitertest.At(0))
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := simulated(t, srv, tt.cfg)
			tt.steps(s, "example.com")
			got, err := rc.PTTL(ctx, s.prefix+"example.com").Result()
			if err != nil {
				t.Fatal(err)
			}
			if tt.ttl == 0 {
				if got != -2*time.Nanosecond && got != -2*time.Millisecond {
					t.Fatalf("PTTL: got %v, want no key", got)
				}
				return
			}
			// The TTL counts down in real time from the last step.
			if want := tt.ttl + margin; got > want || got < want-time.Second/4 {
				t.Fatalf("PTTL: got %v, want %v (%v and the margin)", got, want, tt.ttl)
			}
		})
	}

	// On Redis's clock the key really goes.
	s := newStore(t, srv, limiter.Config{}, Options{Timeout: patient})
	s.Reserve("gone.example", time.Now())
	key := s.prefix + "gone.example"
	if n, _ := rc.Exists(ctx, key).Result(); n != 1 {
		t.Fatal("no key after a booking")
	}
	deadline := time.Now().Add(margin + 10*time.Second)
	for {
		n, err := rc.Exists(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key of a drained host still there after %v", margin+10*time.Second)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNoScript checks that a store survives Redis losing its script cache.
func TestNoScript(t *testing.T) {
	srv := startRedis(t)
	s := simulated(t, srv, limiter.Config{Burst: 1})
	s.Reserve("example.com", limitertest.At(0))
	if err := srv.client().ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if r := s.Reserve("example.com", limitertest.At(0)); r.Start.Sub(limitertest.T0) != 20*time.Millisecond {
		t.Fatalf("after SCRIPT FLUSH: got start %v, want 20ms", r.Start.Sub(limitertest.T0))
	}
}

// TestServerErrorFailsOneCall: a key Redis refuses to step (here one of
// the wrong type) falls back for that call only, without an outage.
func TestServerErrorFailsOneCall(t *testing.T) {
	srv := startRedis(t)
	var logs fakebrowser.Logs
	log := zerolog.New(&logs)
	s := newStore(t, srv, limiter.Config{}, Options{Timeout: patient, Log: &log})
	rc := srv.client()
	rc.Set(context.Background(), s.prefix+"bad.example", "x", 0)
	if r := s.Reserve("bad.example", time.Now()); !r.Tracked {
		t.Fatalf("Reserve on a broken key: got %+v, want a booking from the fallback", r)
	}
	if s.Fallbacks() != 1 || s.Outages() != 0 {
		t.Fatalf("fallbacks %d, outages %d: want 1 and 0", s.Fallbacks(), s.Outages())
	}
	if !strings.Contains(logs.String(), "WRONGTYPE") {
		t.Errorf("the error is not logged:\n%s", logs.String())
	}
	if r := s.Reserve("good.example", time.Now()); !r.Tracked || s.Fallbacks() != 1 {
		t.Fatalf("Reserve on another host: got %+v with %d fallbacks, want a booking in Redis", r, s.Fallbacks())
	}
}

func TestNewRedisErrors(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	// A port nothing listens on: the one of a server stopped for good.
	gone := startRedis(t)
	gone.stop()
	tests := []struct {
		name, url string
		opts      Options
		want      string
	}{
		{"bad URL", "http://127.0.0.1/", Options{}, "store: redis URL"},
		{"nothing listens", strings.Replace(gone.URL(), "redis://", "redis://:secret@", 1), Options{}, "store: redis at 127.0.0.1:"},
		{"bad fallback", srv.URL(), Options{Fallback: "open"}, `fallback "open"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewRedis(ctx, tt.url, limiter.Config{}, tt.opts)
			if err == nil {
				s.Close()
				t.Fatal("got no error")
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
				t.Fatalf("got %q, want it to name %q and no password", err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	srv := startRedis(t)
	s, err := NewRedis(context.Background(), srv.URL(), limiter.Config{Mode: limiter.Fixed, Interval: 250 * time.Millisecond, Burst: -2}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.prefix != DefaultPrefix || s.timeout != DefaultTimeout || s.probe != DefaultProbeInterval || s.hold != DefaultHold || s.holds {
		t.Fatalf("zero Options: got prefix %q, timeout %v, probe %v, hold %v, holds %v", s.prefix, s.timeout, s.probe, s.hold, s.holds)
	}
	if s.Mode() != limiter.Fixed || s.Interval() != 250*time.Millisecond || s.Burst() != 1 {
		t.Fatalf("got mode %v, interval %v, burst %d, want fixed, 250ms, 1", s.Mode(), s.Interval(), s.Burst())
	}
	// The default prefix, on a store patient enough for a loaded machine.
	p, err := NewRedis(context.Background(), srv.URL(), limiter.Config{}, Options{Timeout: patient})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Reserve("example.com", time.Now())
	if n, _ := srv.client().Exists(context.Background(), "cdp-throttle:example.com").Result(); n != 1 {
		t.Fatal(`no key "cdp-throttle:example.com" after a booking`)
	}
}

// TestBusiest: the status page reads the same hosts, pressures and next
// slots from Redis as the in-process limiter keeps.
func TestBusiest(t *testing.T) {
	srv := startRedis(t)
	s := newStore(t, srv, limiter.Config{Burst: 1}, Options{})
	l := limiter.New(limiter.Config{Burst: 1})
	now := time.Now()
	for _, b := range []interface {
		Reserve(string, time.Time) limiter.Reservation
		Observe(string, limiter.Outcome, time.Time)
	}{s, l} {
		b.Reserve("quiet.example", now)
		for range 3 {
			b.Reserve("busy.example", now)
		}
		b.Observe("pushed.example", limiter.Outcome{Status: 503}, now)
	}
	got, want := s.Busiest(now, 2), l.Busiest(now, 2)
	if len(got) != 2 || got[0].Host != want[0].Host || got[1].Host != want[1].Host || got[0].Pressure != want[0].Pressure || got[1].Pressure != want[1].Pressure {
		t.Fatalf("Busiest(2): got %+v, want %+v", got, want)
	}
	// Redis's clock runs on while the test does: next free within 50 ms of the limiter's.
	if d := got[1].NextFree - want[1].NextFree; d > 0 || d < -50*time.Millisecond || got[1].Spacing != want[1].Spacing {
		t.Errorf("busy.example: got next free %v, spacing %v; the limiter says %v, %v", got[1].NextFree, got[1].Spacing, want[1].NextFree, want[1].Spacing)
	}
}

// TestBusiestShowsServer: the status page reads a host's server policy,
// how long it holds and its spent quota's reset from Redis as the
// in-process limiter keeps them, on the simulated clock, and the spacing
// and next slot as booked under them; an hour after the last answer that
// sent it, the policy is gone. A booking under it says so.
func TestBusiestShowsServer(t *testing.T) {
	srv := startRedis(t)
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: 20 * time.Millisecond}
	s, l := simulated(t, srv, cfg), limiter.New(cfg)
	at := limitertest.At
	const host = "api.example"
	of := func(b interface {
		Busiest(time.Time, int) []limiter.HostState
	}, now time.Time) limiter.HostState {
		for _, h := range b.Busiest(now, 10) {
			if h.Host == host {
				return h
			}
		}
		return limiter.HostState{}
	}
	hour := float64(limiter.ServerPolicyLife / time.Millisecond)
	steps := []struct {
		atMS    float64
		outcome *limiter.Outcome // nil: a booking
	}{
		{0, nil},
		{100, &limiter.Outcome{Status: 200, Server: ratelimit.Limits{Spacing: 200 * time.Millisecond}}},
		{100, nil},
		{150, &limiter.Outcome{}}, // nothing: Busiest is read here
		{1000, &limiter.Outcome{Status: 200, Server: ratelimit.Limits{Spacing: 200 * time.Millisecond, Wait: 3 * time.Second}}},
		{2000, &limiter.Outcome{}},
		{4000, &limiter.Outcome{}},
		{1000 + hour - 1, &limiter.Outcome{}},
		{1000 + hour, nil},
	}
	for _, st := range steps {
		now := at(st.atMS)
		if st.outcome != nil {
			s.Observe(host, *st.outcome, now)
			l.Observe(host, *st.outcome, now)
		} else if got, want := s.Reserve(host, now), l.Reserve(host, now); !got.Shared || sameBut(got, want) != want {
			t.Fatalf("Reserve at %vms: got %+v, want %+v, booked in Redis", st.atMS, got, want)
		}
		got, want := of(s, now), of(l, now)
		if got != want {
			t.Errorf("Busiest at %vms: got %+v, want %+v", st.atMS, got, want)
		}
		t.Logf("at %vms: server %v for %v, reset in %v, spacing %v, next free in %v", st.atMS, got.Server, got.ServerEnds, got.ServerReset, got.Spacing, got.NextFree)
	}
	if h := of(s, at(2000)); h.Server != 200*time.Millisecond || h.ServerEnds != limiter.ServerPolicyLife-time.Second || h.ServerReset != 2*time.Second {
		t.Errorf("at 2 s: got server %v for %v, reset in %v; want 200ms for an hour less 1s, reset in 2s", h.Server, h.ServerEnds, h.ServerReset)
	}
}

// TestBusiestAfterRestart: /hosts still reads the hosts after Redis
// restarted with its keys (an append-only file) but without its script
// cache, before any booking ran the script again: the status page's
// pipelined peeks load the script rather than come back empty (NOSCRIPT).
func TestBusiestAfterRestart(t *testing.T) {
	srv := startPersistentRedis(t)
	s := newStore(t, srv, limiter.Config{Burst: 1}, Options{Timeout: patient})
	now := time.Now()
	s.Reserve("kept.example", now)
	s.Observe("kept.example", limiter.Outcome{Status: 503}, now) // pressure 51: kept for 5 s
	srv.stop()
	srv.start()
	var got []limiter.HostState
	for i := 0; len(got) == 0 && i < 20; i++ { // the first calls find the old connections gone
		time.Sleep(50 * time.Millisecond)
		got = s.Busiest(time.Now(), 10)
	}
	if len(got) != 1 || got[0].Host != "kept.example" || got[0].Pressure < 40 {
		t.Fatalf("Busiest after a restart: got %+v, want kept.example with its pressure", got)
	}
}

// TestPushedShared: a late departure's push, told to one relay's store,
// is what another relay's store reads as the bucket's pushes in all
// (Pushed), and what a booking made after it says (Reservation.Pushed,
// Shared): the navigations booked before it wait it out too (hold).
func TestPushedShared(t *testing.T) {
	srv := startRedis(t)
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1}
	a := newStore(t, srv, cfg, Options{Prefix: "pushed:", Timeout: patient})
	b := newStore(t, srv, cfg, Options{Prefix: "pushed:", Timeout: patient})
	const host = "example.com"
	if got, ok := b.Pushed(host); !ok || got != 0 {
		t.Fatalf("a host never booked: pushed %v, %v; want 0, true", got, ok)
	}
	now := time.Now()
	if r := a.Reserve(host, now); r.Pushed != 0 || !r.Shared {
		t.Errorf("the first booking: pushed %v, shared %v; want 0, true", r.Pushed, r.Shared)
	}
	a.Push(host, 30*time.Millisecond, now)
	a.Push(host, 20*time.Millisecond, now)
	if got, ok := b.Pushed(host); !ok || got != 50*time.Millisecond {
		t.Errorf("after two pushes through another relay: pushed %v, %v; want 50ms, true", got, ok)
	}
	if r := b.Reserve(host, now); r.Pushed != 50*time.Millisecond || !r.Shared {
		t.Errorf("a booking after them: pushed %v, shared %v; want 50ms, true", r.Pushed, r.Shared)
	}
}

// sameBut is r with what only a shared booking says (Shared, Pushed) as
// the in-process limiter's want says it.
func sameBut(r, want limiter.Reservation) limiter.Reservation {
	r.Shared, r.Pushed = want.Shared, want.Pushed
	return r
}
