package store

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// The breakers of the buckets (package breaker), fleet-wide: Breaker
// implements breaker.Breaker in Redis, one hash per bucket
// (Options.Prefix + "breaker:" + bucket) that one atomic script step reads
// and writes, on Redis's clock. A breaker one relay opens is open for
// every relay at its next Allow, one round trip later, and only one
// navigation of the whole fleet goes as its probe. A bucket's key lives
// while it counts failures within the window, and, once opened, Max past
// the moment it last could let a probe go; then it expires by itself.
//
// While Redis does not answer, the fallback decides, as for bookings: by
// default each relay keeps its own breakers (breaker.Local) until Redis is
// back (what it learned meanwhile is not carried back); with
// FallbackClosed nothing goes: Allow returns a hold (Decision.Retry).
// Every call answered so counts in Fallbacks.

//go:embed breaker.lua
var breakerSource string

var breakerStep = script(breakerSource)

// breakerInfix follows the prefix in the keys of the breakers, which no
// host's key can start with.
const breakerInfix = "breaker:"

// Breaker keeps a breaker per bucket in the store's Redis, shared by every
// relay on it (breaker.Breaker). It is safe for concurrent use. Create it
// with Redis.Breaker; it ends with its store.
type Breaker struct {
	s     *Redis
	cfg   breaker.Config // normalized
	rand  breaker.Rand
	local *breaker.Local // the fallback in FallbackLocal mode

	opened, probes, deferred atomic.Uint64
}

// Breaker returns the breakers with cfg (normalized) kept in s's Redis,
// drawing their jitter from r (nil: math/rand/v2's global source). A cfg
// that is off lets everything go without asking Redis. The setting travels
// with each step, so give every relay the same.
func (s *Redis) Breaker(cfg breaker.Config, r breaker.Rand) *Breaker {
	if r == nil {
		r = (*limiter.Rand)(nil) // which draws from math/rand/v2's global source
	}
	return &Breaker{s: s, cfg: cfg.Normalized(), rand: r, local: breaker.NewLocal(cfg, r)}
}

// Config reports the setting the breakers follow, normalized.
func (b *Breaker) Config() breaker.Config { return b.cfg }

// Allow says whether a navigation of bucket, asked for at now, may go
// (breaker.Breaker): one call to Redis. Until is in the caller's clock,
// counted from when Redis's answer is in, so it is never early.
func (b *Breaker) Allow(bucket string, now time.Time) breaker.Decision {
	if !b.cfg.On() {
		return breaker.Decision{Go: true}
	}
	entered := time.Now()
	s := b.s
	if o := s.outageOf(s.breakerKey(bucket)); s.tryRedis(o) {
		v, err := b.run("a", bucket, now, 0, breaker.Answer{})
		if err == nil {
			s.answered(o)
			switch v[0] {
			case 1:
				return breaker.Decision{Go: true}
			case 2:
				b.probes.Add(1)
				return breaker.Decision{Go: true, Probe: true}
			}
			b.deferred.Add(1)
			return breaker.Decision{Until: b.at(now, entered).Add(time.Duration(v[3]) * time.Microsecond)}
		}
		s.failed(o, err)
	}
	s.fallbacks.Add(1)
	if s.holds {
		return breaker.Decision{Retry: true, Until: now.Add(s.hold)}
	}
	return b.local.Allow(bucket, now)
}

// Observe tells the answer to a navigation of bucket, received at now
// (breaker.Breaker). Answers that change nothing (neither a failure nor a
// probe's) never reach Redis.
func (b *Breaker) Observe(bucket string, a breaker.Answer, now time.Time) {
	if !b.cfg.On() || !a.Failed && !a.Probe {
		return
	}
	s := b.s
	if o := s.outageOf(s.breakerKey(bucket)); s.tryRedis(o) {
		u := 0.0
		if a.Failed {
			u = b.rand.Uniform() // one draw per failure, as breaker.Local draws
		}
		v, err := b.run("o", bucket, now, u, a)
		if err == nil {
			s.answered(o)
			if v[0] == 1 {
				b.opened.Add(1)
			}
			return
		}
		s.failed(o, err)
	}
	s.fallbacks.Add(1)
	if !s.holds {
		b.local.Observe(bucket, a, now)
	}
}

// State reports bucket's breaker at now, changing nothing
// (breaker.Breaker); while Redis does not answer, what this relay's
// fallback knows.
func (b *Breaker) State(bucket string, now time.Time) breaker.State {
	if !b.cfg.On() {
		return breaker.State{}
	}
	entered := time.Now()
	if !b.s.outageOf(b.s.breakerKey(bucket)).down.Load() {
		if v, err := b.run("s", bucket, now, 0, breaker.Answer{}); err == nil {
			st := breaker.State{Phase: breaker.Phase(v[1]), Pause: time.Duration(v[4]) * time.Microsecond, Failures: int(v[5]), ProbeOut: v[6] == 1}
			if v[2] == 1 {
				st.Until = b.at(now, entered).Add(time.Duration(v[3]) * time.Microsecond)
			}
			return st
		}
	}
	return b.local.State(bucket, now)
}

// Counts reports what this relay's breakers did (breaker.Breaker), in
// Redis and in the fallback.
func (b *Breaker) Counts() breaker.Counts {
	l := b.local.Counts()
	return breaker.Counts{
		Opened:   b.opened.Load() + l.Opened,
		Probes:   b.probes.Load() + l.Probes,
		Deferred: b.deferred.Load() + l.Deferred,
	}
}

// at is the caller's now at which Redis's answer is in: an until counted
// from it is never early (as ReserveWith counts a slot).
func (b *Breaker) at(now, entered time.Time) time.Time {
	if b.s.callerClock {
		return now
	}
	return now.Add(time.Since(entered))
}

// breakerValues is how many values the script returns.
const breakerValues = 7

// run runs one step of the breaker's script for bucket.
func (b *Breaker) run(op, bucket string, now time.Time, u float64, a breaker.Answer) ([]int64, error) {
	s := b.s
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	nowArg := ""
	if s.callerClock {
		nowArg = strconv.FormatInt(now.UnixMicro(), 10)
	}
	c := b.cfg
	v, err := breakerStep.Run(ctx, s.client, []string{s.breakerKey(bucket)}, op, nowArg,
		c.Failures, c.Window.Microseconds(), c.First.Microseconds(), c.Max.Microseconds(),
		strconv.FormatFloat(c.Jitter, 'g', -1, 64), c.ProbeBound.Microseconds(),
		strconv.FormatFloat(u, 'g', -1, 64), flag(a.Failed), max(a.RetryAfter.Microseconds(), 0), flag(a.Probe), flag(a.Lost),
	).Int64Slice()
	if err == nil && len(v) != breakerValues {
		err = fmt.Errorf("breaker script returned %d values, want %d", len(v), breakerValues)
	}
	return v, err
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (s *Redis) breakerKey(bucket string) string { return s.prefix + breakerInfix + bucket }
