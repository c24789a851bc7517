// Package breaker keeps a circuit breaker per bucket (a host, a site or a
// server address, as the caller buckets navigations): a bucket whose
// documents keep failing is paused, and only one navigation, a probe, goes
// when the pause ends. It is what nutch's fetcher.max.exceptions.per.queue
// and StormCrawler's backoff do for a queue, with the pause of a circuit
// breaker: N failures within a window open the breaker for a pause that
// starts at 30 s and doubles, up to 10 minutes, each time a probe fails.
//
// The life of one bucket's breaker:
//
//	closed ──N failures within Window──▶ open until now + pause (+ jitter, or a longer Retry-After)
//	open ──its end passes──▶ half-open: the first Allow goes as the probe, the others are deferred
//	half-open ──the probe's answer is not a failure──▶ closed, the pause back to First
//	half-open ──the probe fails──▶ open for twice the pause (at most Max)
//	half-open ──no answer within ProbeBound, or Answer.Lost──▶ another probe may go
//
// The package decides nothing about what a failure is: the caller does
// (5xx, the overload statuses, network errors, timeouts) and says so with
// Answer.Failed. It knows nothing of CDP, the relay, rules or Redis; Local
// keeps breakers in this process, and package store keeps them in Redis
// for every relay of a fleet, behind the same Breaker interface and with
// the same rule (breakertest holds both to it).
//
// # How a caller uses it
//
// Before booking a navigation of bucket b, the caller asks
// Allow(b, now). When Decision.Go is false, the navigation does not go:
// the caller answers it at once (a 429 whose Retry-After is
// Decision.Until − now) and counts it deferred, or, when Decision.Retry is
// set (a store that could not be asked and holds navigations meanwhile),
// holds it and asks again at Until. When Go is true it books the
// navigation as usual; when Decision.Probe is also set, it remembers that
// the navigation is its bucket's probe. When the navigation's document is
// answered, or fails, the caller tells Observe with Answer.Failed and the
// Retry-After it read, and Answer.Probe for the probe. A probe that ends
// without an answer (its page closed, its client gone) is told with
// Answer.Lost, so that another probe may go at once rather than after
// ProbeBound. Answers that are neither failures nor a probe's change
// nothing and may be left untold.
//
// All times come from the caller (now); nothing here reads the clock.
package breaker

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Defaults for the zero values of Config's fields. First ≤ Max.
const (
	// DefaultFirst is the pause the breaker first opens for.
	DefaultFirst = 30 * time.Second
	// DefaultMax is the longest pause doubling reaches: 30 s doubled
	// four times is 8 min, the fifth time reaches it.
	DefaultMax = 10 * time.Minute
	// DefaultJitter is how much longer than its pause a breaker may stay
	// open, as a fraction of the pause: 30 s opens for 30 to 36 s.
	DefaultJitter = 0.2
	// DefaultProbeBound is how long a probe's answer is waited for before
	// another probe may go: that of a navigation in flight
	// (inflight.DefaultBound).
	DefaultProbeBound = 30 * time.Second
	// MaxFailures bounds Config.Failures: the failures in the window are
	// kept one by one.
	MaxFailures = 1000
	// MaxWindow bounds Config.Window.
	MaxWindow = 24 * time.Hour
)

// Config is a breaker's setting, the same for every bucket. The zero
// Config is off: Failures 0 never opens a breaker.
type Config struct {
	// Failures within Window open a bucket's breaker (--host-errors
	// N/WINDOW). Zero is off.
	Failures int
	Window   time.Duration
	// First is the first pause; zero means DefaultFirst.
	First time.Duration
	// Max is the longest pause; zero means DefaultMax, and one under
	// First means First.
	Max time.Duration
	// Jitter is how much longer than its pause an opened breaker stays
	// open at most, as a fraction of the pause, drawn each time it opens:
	// the pause is a floor, never shortened, and relays whose breakers
	// are their own (no store, or a store's local fallback) do not all
	// probe at once. Zero means DefaultJitter, a negative value none, and
	// more than 1 means 1.
	Jitter float64
	// ProbeBound is how long a probe's answer is waited for before
	// another navigation may go as a probe; zero means DefaultProbeBound.
	ProbeBound time.Duration
}

// On reports whether the setting opens breakers at all.
func (c Config) On() bool { return c.Failures > 0 && c.Window > 0 }

// Normalized returns c with its zero values replaced by the defaults and
// its bounds applied: the setting the breakers really follow.
func (c Config) Normalized() Config {
	if c.First <= 0 {
		c.First = DefaultFirst
	}
	if c.Max <= 0 {
		c.Max = DefaultMax
	}
	c.Max = max(c.Max, c.First)
	switch {
	case c.Jitter == 0:
		c.Jitter = DefaultJitter
	case c.Jitter < 0:
		c.Jitter = 0
	case c.Jitter > 1:
		c.Jitter = 1
	}
	if c.ProbeBound <= 0 {
		c.ProbeBound = DefaultProbeBound
	}
	return c
}

// String writes the setting as --host-errors reads it: 5/1m0s, or off.
func (c Config) String() string {
	if !c.On() {
		return "off"
	}
	return strconv.Itoa(c.Failures) + "/" + c.Window.String()
}

// Parse reads --host-errors: N/WINDOW, N failures within the duration
// WINDOW (5/1m), or "off" (also ""), which returns the zero Config. The
// other fields are left zero, for their defaults.
func Parse(s string) (Config, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "off") {
		return Config{}, nil
	}
	bad := func(why string) (Config, error) {
		return Config{}, fmt.Errorf("--host-errors %q: %s; want N/WINDOW, N failures within WINDOW, such as 5/1m, or off", s, why)
	}
	n, w, ok := strings.Cut(s, "/")
	if !ok {
		return bad("no /WINDOW")
	}
	failures, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil {
		return bad(fmt.Sprintf("N %q is not a whole number", n))
	}
	if failures < 1 || failures > MaxFailures {
		return bad(fmt.Sprintf("N %d is not within 1 to %d", failures, MaxFailures))
	}
	window, err := time.ParseDuration(strings.TrimSpace(w))
	if err != nil {
		return bad(fmt.Sprintf("WINDOW %q is not a duration (1m, 30s)", w))
	}
	if window <= 0 || window > MaxWindow {
		return bad(fmt.Sprintf("WINDOW %v is not within 1ns to %v", window, MaxWindow))
	}
	return Config{Failures: failures, Window: window}, nil
}

// Phase is where a bucket's breaker is in its life.
type Phase int

const (
	// Closed lets navigations go and counts their failures.
	Closed Phase = iota
	// Open defers every navigation until its end.
	Open
	// HalfOpen lets one navigation go as a probe and defers the others
	// until the probe's answer.
	HalfOpen
)

func (p Phase) String() string {
	switch p {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// Decision is Allow's answer for one navigation.
type Decision struct {
	// Go says the navigation may go: the caller books it as usual.
	Go bool
	// Probe says it goes as its bucket's probe: the caller tells its
	// answer with Answer.Probe (or Answer.Lost).
	Probe bool
	// Until is, when the navigation may not go, the earliest a navigation
	// of its bucket may: the end of the open breaker, or, while a probe is
	// out, when another may go unless its answer comes first. Zero when Go.
	Until time.Time
	// Retry says the navigation may not go because the breaker could not
	// be asked (a store in its closed fallback), not because the host
	// failed: the caller holds it and asks again at Until.
	Retry bool
}

// Answer is what became of a navigation that went.
type Answer struct {
	// Failed is the caller's judgement: a 5xx, an overload status, a
	// network error, a timeout.
	Failed bool
	// RetryAfter is the wait the answer asked for (0 for none), already
	// bounded by the caller: the breaker opens for at least that long.
	RetryAfter time.Duration
	// Probe says the navigation went as its bucket's probe
	// (Decision.Probe): its answer closes the breaker, or opens it for
	// twice as long.
	Probe bool
	// Lost says a probe ended with no answer (its page closed, its client
	// gone), which says nothing of the host: another probe may go at once.
	Lost bool
}

// State is a bucket's breaker as the status page shows it.
type State struct {
	Phase Phase
	// Failures counts the failures within the window (Closed).
	Failures int
	// Until is when Open ends; in HalfOpen with a probe out, when another
	// probe may go; zero otherwise.
	Until time.Time
	// Pause is the pause it opened for last, without the jitter (0 while
	// Closed): a failed probe doubles it.
	Pause time.Duration
	// ProbeOut says a probe went and its answer has not come.
	ProbeOut bool
}

// Counts are what one process's breakers did, for metrics: with a store,
// each relay counts its own calls.
type Counts struct {
	Opened   uint64 // a breaker opened: N failures, or a probe failed
	Probes   uint64 // navigations let go as probes
	Deferred uint64 // navigations not let go (Decision.Go false, Retry false)
}

// Breaker is a breaker per bucket, all with one Config. Implementations
// are safe for concurrent use.
type Breaker interface {
	// Allow says whether a navigation of bucket, asked for at now, may go.
	Allow(bucket string, now time.Time) Decision
	// Observe tells the answer to a navigation of bucket that went,
	// received at now.
	Observe(bucket string, a Answer, now time.Time)
	// State reports bucket's breaker at now, changing nothing.
	State(bucket string, now time.Time) State
	// Counts reports what this process's breakers did.
	Counts() Counts
}

// Rand is the randomness the jitter is drawn from: Uniform returns a
// number uniform in [−1, 1). *limiter.Rand is one (limiter.NewRand, seeded,
// makes a replay or a test the same each time).
type Rand interface {
	Uniform() float64
}

// uniform draws from r, or from math/rand/v2's global source when r is nil.
func uniform(r Rand) float64 {
	if r == nil {
		return 2*rand.Float64() - 1
	}
	return r.Uniform()
}

// Lengthen is how much longer than pause a breaker opened with the draw u
// (in [−1, 1)) and jitter j stays open: uniform in [0, j × pause), in
// whole microseconds, computed as the store's script computes it.
func Lengthen(pause time.Duration, j, u float64) time.Duration {
	us := float64(pause.Microseconds()) * j * (u + 1) / 2
	return time.Duration(int64(us)) * time.Microsecond
}
