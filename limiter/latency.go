package limiter

import (
	"sync"
	"time"
)

// The latency baseline: a host whose answers slow down under a crawl is
// asking for less before it starts to fail. Each bucket keeps a baseline
// of its answer times; an answer slower than the factor times it counts as
// a failure (Effect Slow).
//
// The baseline is the fastest 2xx answer of the last LatencySlots ×
// LatencySlot (ten minutes), kept as the fastest of each one-minute slot,
// so that it forgets a minute at a time: a host that has become slower for
// good is read at its new speed at most ten minutes later. A minimum and
// not an average, because the answers a crawl sees are slowed by the crawl
// itself: an average would follow the slowdown it is meant to notice, and
// let the crawl push a little harder every time it had backed off (the
// same reason LEDBAT keeps a ten-minute minimum of its base delay).
// Redirects, error pages and other non-2xx answers are not read: they
// answer at speeds of their own.
const (
	// LatencySlot is how long one slot of the baseline covers.
	LatencySlot = time.Minute
	// LatencySlots is how many slots the baseline remembers.
	LatencySlots = 10
	// DefaultLatencyFloor is the answer time under which no answer is ever
	// slow: a local server's noise (microseconds against a baseline of
	// microseconds) never counts.
	DefaultLatencyFloor = 50 * time.Millisecond
)

// maxBaselines bounds the buckets remembered; past it the older half is
// forgotten, and such a bucket starts a new baseline.
const maxBaselines = 100_000

// Baselines keeps the answer-time baseline of each bucket and says which
// answers are slow. It is safe for concurrent use. Factor must be set
// before use; a zero Floor means DefaultLatencyFloor.
type Baselines struct {
	// Factor: an answer slower than Factor times its bucket's baseline is
	// slow (when it is also slower than Floor). A Factor ≤ 1 reads no answer
	// as slow.
	Factor float64
	// Floor: an answer no slower than this is never slow.
	Floor time.Duration

	mu       sync.Mutex
	cur, old map[string]*baseline // guarded by mu
}

// baseline is one bucket's: the fastest answer of each slot, newest first.
type baseline struct {
	fastest [LatencySlots]time.Duration // 0: no answer in that slot
	slot    int64                       // index of fastest[0]: its start / LatencySlot
	last    time.Duration               // the last answer read
}

// Answer reads an answer to a navigation of bucket with status, which took
// took (release to response headers), received at now. It reports whether
// the answer was slow against the baseline before it, then counts it in
// the baseline. Only 2xx answers with a known time are read; the others are
// never slow.
func (b *Baselines) Answer(bucket string, status int, took time.Duration, now time.Time) (slow bool) {
	if status < 200 || status > 299 || took <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	bl := b.get(bucket)
	if bl == nil {
		bl = &baseline{slot: slotOf(now)}
		if b.cur == nil || len(b.cur) >= maxBaselines/2 {
			b.old, b.cur = b.cur, make(map[string]*baseline)
		}
		b.cur[bucket] = bl
	}
	bl.advance(now)
	if base := bl.base(); base > 0 && b.Factor > 1 {
		slow = took > max(b.floor(), time.Duration(b.Factor*float64(base)))
	}
	bl.last = took
	if bl.fastest[0] == 0 || took < bl.fastest[0] {
		bl.fastest[0] = took
	}
	return slow
}

// State reports the baseline of bucket at now and the last answer time
// read; ok is false when the bucket has none.
func (b *Baselines) State(bucket string, now time.Time) (base, last time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bl := b.get(bucket)
	if bl == nil {
		return 0, 0, false
	}
	c := *bl
	c.advance(now)
	if base = c.base(); base == 0 {
		return 0, c.last, c.last > 0
	}
	return base, c.last, true
}

// get finds a bucket's baseline. Callers hold mu.
func (b *Baselines) get(bucket string) *baseline {
	if bl, ok := b.cur[bucket]; ok {
		return bl
	}
	if bl, ok := b.old[bucket]; ok {
		delete(b.old, bucket)
		if b.cur == nil {
			b.cur = make(map[string]*baseline)
		}
		b.cur[bucket] = bl
		return bl
	}
	return nil
}

func (b *Baselines) floor() time.Duration {
	if b.Floor > 0 {
		return b.Floor
	}
	return DefaultLatencyFloor
}

func slotOf(t time.Time) int64 { return t.UnixNano() / int64(LatencySlot) }

// advance moves the slots on to now's, forgetting those past the window.
func (bl *baseline) advance(now time.Time) {
	k := slotOf(now) - bl.slot
	if k <= 0 {
		return
	}
	bl.slot += k
	if k >= LatencySlots {
		bl.fastest = [LatencySlots]time.Duration{}
		return
	}
	copy(bl.fastest[k:], bl.fastest[:LatencySlots-k])
	for i := range k {
		bl.fastest[i] = 0
	}
}

// base is the fastest answer of the slots remembered, 0 without one.
func (bl *baseline) base() time.Duration {
	var m time.Duration
	for _, d := range bl.fastest {
		if d > 0 && (m == 0 || d < m) {
			m = d
		}
	}
	return m
}
