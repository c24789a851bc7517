package breaker

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// sweepEvery is how often, at most, Local forgets the buckets it no longer
// needs (idle).
const sweepEvery = time.Minute

// Local keeps the breakers of this process, in memory. It is safe for
// concurrent use. Create it with NewLocal; a Local whose Config is off
// lets everything go and remembers nothing.
//
// A bucket is forgotten once its breaker is closed with no failure in the
// window, or Max after its breaker last could have let a probe go: a
// bucket that came back after that opens with the first pause again. The
// store's keys expire at the same moments.
type Local struct {
	cfg  Config
	rand Rand

	mu      sync.Mutex
	buckets map[string]*record // guarded by mu
	swept   time.Time          // guarded by mu

	opened, probes, deferred atomic.Uint64
}

// record is one bucket's breaker.
type record struct {
	fails []time.Time   // Closed: the failures within the window, oldest first
	until time.Time     // zero while Closed; the end of the pause otherwise
	pause time.Duration // the pause it opened for last; 0 while Closed
	probe time.Time     // when the probe went; zero when none is out
}

// NewLocal returns breakers with cfg (normalized), drawing the jitter from
// r; nil r draws from math/rand/v2's global source.
func NewLocal(cfg Config, r Rand) *Local {
	return &Local{cfg: cfg.Normalized(), rand: r, buckets: map[string]*record{}}
}

// Config reports the setting the breakers follow, normalized.
func (l *Local) Config() Config { return l.cfg }

// Allow says whether a navigation of bucket, asked for at now, may go
// (Breaker).
func (l *Local) Allow(bucket string, now time.Time) Decision {
	if !l.cfg.On() {
		return Decision{Go: true}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	r := l.buckets[bucket]
	if r == nil {
		return Decision{Go: true}
	}
	d := r.allow(l.cfg, now)
	l.count(d)
	return d
}

// count counts a decision.
func (l *Local) count(d Decision) {
	switch {
	case d.Probe:
		l.probes.Add(1)
	case !d.Go && !d.Retry:
		l.deferred.Add(1)
	}
}

// Observe tells the answer to a navigation of bucket, received at now
// (Breaker).
func (l *Local) Observe(bucket string, a Answer, now time.Time) {
	if !l.cfg.On() || !a.Failed && !a.Probe {
		return
	}
	u := 0.0
	if a.Failed {
		u = uniform(l.rand) // one draw per failure, as the store draws
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweepLocked(now)
	r := l.buckets[bucket]
	if r == nil {
		if !a.Failed {
			return
		}
		r = &record{}
		l.buckets[bucket] = r
	}
	if r.observe(l.cfg, a, u, now) {
		l.opened.Add(1)
	}
}

// State reports bucket's breaker at now (Breaker).
func (l *Local) State(bucket string, now time.Time) State {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.buckets[bucket]
	if r == nil {
		return State{}
	}
	return r.state(l.cfg, now)
}

// Counts reports what the breakers did (Breaker).
func (l *Local) Counts() Counts {
	return Counts{Opened: l.opened.Load(), Probes: l.probes.Load(), Deferred: l.deferred.Load()}
}

// sweepLocked forgets the buckets idle at now, at most once per sweepEvery.
func (l *Local) sweepLocked(now time.Time) {
	if now.Sub(l.swept) < sweepEvery {
		return
	}
	l.swept = now
	for b, r := range l.buckets {
		if r.idle(l.cfg, now) {
			delete(l.buckets, b)
		}
	}
}

// The rule, one bucket at a time. store/breaker.lua is the same, step for
// step, in microseconds.

// phase reports r's phase at now.
func (r *record) phase(now time.Time) Phase {
	switch {
	case r.until.IsZero():
		return Closed
	case now.Before(r.until):
		return Open
	}
	return HalfOpen
}

// probeOut reports whether a probe is out at now: it went, and its bound
// has not passed.
func (r *record) probeOut(cfg Config, now time.Time) bool {
	return !r.probe.IsZero() && now.Before(r.probe.Add(cfg.ProbeBound))
}

func (r *record) allow(cfg Config, now time.Time) Decision {
	switch r.phase(now) {
	case Open:
		return Decision{Until: r.until}
	case HalfOpen:
		if r.probeOut(cfg, now) {
			return Decision{Until: r.probe.Add(cfg.ProbeBound)}
		}
		r.probe = now
		return Decision{Go: true, Probe: true}
	}
	return Decision{Go: true}
}

// observe applies an answer, with the jitter's draw u, and reports whether
// it opened the breaker.
func (r *record) observe(cfg Config, a Answer, u float64, now time.Time) (opened bool) {
	switch r.phase(now) {
	case Closed:
		if !a.Failed {
			return false
		}
		r.fails = append(r.dropOld(cfg, now), now)
		if len(r.fails) < cfg.Failures {
			return false
		}
		r.open(cfg, cfg.First, a.RetryAfter, u, now)
		return true
	case Open:
		// Answers of navigations that went before it opened: only a
		// Retry-After further than its end is heard.
		if a.Failed && now.Add(a.RetryAfter).After(r.until) {
			r.until = now.Add(a.RetryAfter)
		}
		return false
	}
	// HalfOpen: only the probe's answer counts. Once its bound has passed
	// it still does: it is still what the host answered.
	if !a.Probe || r.probe.IsZero() {
		return false
	}
	switch {
	case a.Lost:
		r.probe = time.Time{}
		return false
	case a.Failed:
		r.open(cfg, min(2*r.pause, cfg.Max), a.RetryAfter, u, now)
		return true
	}
	*r = record{fails: r.fails[:0]}
	return false
}

// open opens the breaker for pause, lengthened by the jitter's draw u, or
// until a longer Retry-After ends.
func (r *record) open(cfg Config, pause, retryAfter time.Duration, u float64, now time.Time) {
	r.pause = pause
	r.until = now.Add(pause + Lengthen(pause, cfg.Jitter, u))
	if end := now.Add(retryAfter); end.After(r.until) {
		r.until = end
	}
	r.probe = time.Time{}
	r.fails = r.fails[:0]
}

// dropOld drops the failures that are out of the window at now.
func (r *record) dropOld(cfg Config, now time.Time) []time.Time {
	from := now.Add(-cfg.Window)
	i := 0
	for i < len(r.fails) && !r.fails[i].After(from) {
		i++
	}
	return slices.Delete(r.fails, 0, i)
}

func (r *record) state(cfg Config, now time.Time) State {
	s := State{Phase: r.phase(now), Pause: r.pause}
	switch s.Phase {
	case Closed:
		for _, f := range r.fails {
			if f.After(now.Add(-cfg.Window)) {
				s.Failures++
			}
		}
	case Open:
		s.Until = r.until
	case HalfOpen:
		if r.probeOut(cfg, now) {
			s.ProbeOut, s.Until = true, r.probe.Add(cfg.ProbeBound)
		}
	}
	return s
}

// idle reports whether r may be forgotten at now: closed with no failure
// in the window, or Max past the moment it last could let a probe go.
func (r *record) idle(cfg Config, now time.Time) bool {
	if r.until.IsZero() {
		return len(r.fails) == 0 || !r.fails[len(r.fails)-1].After(now.Add(-cfg.Window))
	}
	end := r.until
	if !r.probe.IsZero() {
		end = later(end, r.probe.Add(cfg.ProbeBound))
	}
	return now.After(end.Add(cfg.Max))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
