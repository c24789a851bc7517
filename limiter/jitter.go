package limiter

import (
	"math"
	"math/rand/v2"
	"sync"
)

// Jitter spreads the slots of a host around its schedule, as Scrapy's
// RANDOMIZE_DOWNLOAD_DELAY and Colly's RandomDelay do, so that a site does
// not see a perfectly regular beat. The schedule itself (tat) is booked as
// without jitter, so the mean rate is the rule's; only where each held
// navigation starts moves, to a point uniform over where it may go:
//
//	from max(now, grid − F × spacing, last + max((1 − F) × spacing, floor))
//	to   min(grid + F × spacing, last + (1 + F) × spacing)
//
// grid is the start the rule gives (max(now, tat − tau)), last the start
// of the host's booking before, as jitter moved it. The slot is then
// within F × spacing of the grid, so the span of n navigations differs
// from the rule's by at most 2F spacings however long the crawl, and
// every gap within (1 ± F) × spacing: at F = 0.5 and 200 ms, gaps of 100
// to 300 ms with a standard deviation of about 53 ms, none at either end
// more often than elsewhere. (Drawing around the grid and clamping to the
// gap bounds instead spreads them more, 66 ms, but puts one gap in nine at
// exactly 100 ms and one in nine at exactly 300 ms: a beat of its own.)
// When the two ranges do not meet (the navigation before was pushed late,
// a Retry-After, a Crawl-delay), the slot is the earliest the gap allows.
// A Crawl-delay (floor) stays a floor. Only navigations the schedule holds
// (grid later than now) move: an idle host's burst, or a navigation asked
// for after its slot, goes when asked, as without jitter.

// noLast is a host's last start when it has none: a host an answer
// created, which no bound comes from.
const noLast = math.MinInt64

// jitter is Jitter as the rule reads it: 0 unless in (0, 1).
func (c Config) jitter() float64 {
	if c.Jitter > 0 && c.Jitter < 1 {
		return c.Jitter
	}
	return 0
}

// jittered is the start of a held navigation whose unjittered start is
// grid, at now, spaced by spacing from a host whose last navigation
// started at last, with the floor floor, jitter f and u in [−1, 1), all
// times in one unit. The Redis store's step.lua computes the same in
// microseconds.
func jittered(grid, now, last, spacing, floor int64, f, u float64) int64 {
	d := int64(f * float64(spacing)) // the most a slot moves
	lo, hi := max(now, grid-d), grid+d
	if last != noLast {
		lo = max(lo, last+max(spacing-d, floor))
		hi = min(hi, last+spacing+d)
	}
	if lo >= hi {
		return lo
	}
	return lo + int64((u+1)/2*float64(hi-lo))
}

// Rand is the randomness jitter is drawn from. It is safe for concurrent
// use; a nil *Rand, or the zero Rand, draws from math/rand/v2's global
// source.
type Rand struct {
	mu sync.Mutex
	r  *rand.Rand // guarded by mu
}

// NewRand returns a Rand seeded with seed: the same seed draws the same
// numbers, so a replay or a test is the same each time.
func NewRand(seed uint64) *Rand {
	return &Rand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Uniform returns a number uniform in [−1, 1).
func (r *Rand) Uniform() float64 {
	if r == nil {
		return 2*rand.Float64() - 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.r == nil {
		return 2*rand.Float64() - 1
	}
	return 2*r.r.Float64() - 1
}

// SetRand makes the limiter draw its jitter from r (NewRand) instead of
// math/rand/v2's global source. Call it before the limiter books anything.
func (l *Limiter) SetRand(r *Rand) { l.rand = r }
