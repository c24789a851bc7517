package dashboard

import (
	"sync"
	"time"
)

// Bounds of a Timeline, for the zero values of its fields. Together they
// cap its memory: DefaultMaxBuckets × DefaultPerBucket marks of 64 bytes
// (and the host names they share with the relay), about 4 MB however long
// and wide the crawl.
const (
	// DefaultMaxBuckets is how many buckets a Timeline remembers; past it
	// the one booked least recently is forgotten.
	DefaultMaxBuckets = 50
	// DefaultPerBucket is how many navigations a Timeline remembers per
	// bucket, the oldest forgotten first: two minutes of a host at the
	// adaptive rule's plateau (one every 100 ms).
	DefaultPerBucket = 1200
	// AnswerBound is how long after its release a navigation can still be
	// matched with an answer. A navigation that was aborted, or whose
	// page closed, never gets one; past the bound it stops taking the
	// answers of later navigations of its host.
	AnswerBound = time.Minute
)

// Answer is the class of the answer a navigation got, as the limiter hears
// it: ok, overload (it adds the overload pressure: 429, 503) or failure
// (another 5xx, or no answer at all). The zero Answer is Pending: none
// seen yet.
type Answer uint8

const (
	Pending Answer = iota
	OK
	Overload
	Failure
)

func (a Answer) String() string {
	return [...]string{"pending", "ok", "overload", "failure"}[a]
}

// Booking is one navigation booked, as the relay tells a Timeline.
type Booking struct {
	Bucket string // the schedule booked: the host, or its site
	Host   string // the navigation's host
	// At is when the navigation asked for its slot, Start when it may go:
	// the moment it is released.
	At, Start time.Time
	// Spacing is how far the booking pushed the bucket's schedule, and
	// Pressure the bucket's pressure after it.
	Spacing  time.Duration
	Pressure int
	// Mode, Source and Rule say which setting booked it and where that
	// came from ("flag", "rule N", "robots.txt", "server").
	Mode, Source, Rule string
}

// Timeline remembers the last navigations of the buckets booked lately,
// for the page: when each was released, how long it waited, the spacing
// it was booked with and the answer it got. It records per navigation,
// never per message, and is bounded in buckets and in navigations per
// bucket. Every change bumps a version, so a reader asks only for what
// changed since the version it last read.
//
// The zero Timeline is ready to use with the default bounds. Its methods
// are safe for concurrent use; its fields must not change after first use.
type Timeline struct {
	// MaxBuckets bounds the buckets remembered. Zero means DefaultMaxBuckets.
	MaxBuckets int
	// PerBucket bounds the navigations remembered per bucket. Zero means
	// DefaultPerBucket.
	PerBucket int

	mu      sync.Mutex
	ver     uint64            // guarded by mu; bumped by every change
	seq     uint64            // guarded by mu; numbers the navigations
	buckets map[string]*trail // guarded by mu
}

// trail is one bucket's navigations, a ring once full. Guarded by
// Timeline.mu.
type trail struct {
	marks []mark // the mark at position p (the p-th of the bucket) is marks[p%perBucket]
	total uint64 // marks ever added: the next one's position
	// firstOpen is a position before which every mark kept has its
	// answer, or is too old for one: where the search for one starts.
	firstOpen   uint64
	ver         uint64 // the last change
	open        int    // marks without an answer
	passed      uint64
	delayed     uint64
	lastAnswer  Answer
	lastStatus  int
	mode        string
	source      string
	rule        string
	lastBooking time.Time // also decides which bucket is forgotten first
}

type mark struct {
	seq, ver  uint64
	host      string
	at, start int64 // unix nanoseconds
	spacing   time.Duration
	pressure  int32
	status    int16
	answer    Answer
}

func (t *Timeline) maxBuckets() int {
	if t.MaxBuckets > 0 {
		return t.MaxBuckets
	}
	return DefaultMaxBuckets
}

func (t *Timeline) perBucket() int {
	if t.PerBucket > 0 {
		return t.PerBucket
	}
	return DefaultPerBucket
}

// Booked records a navigation booked. A nil Timeline records nothing.
func (t *Timeline) Booked(b Booking) {
	if t == nil {
		return
	}
	start := b.Start
	if start.Before(b.At) {
		start = b.At
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.buckets[b.Bucket]
	if tr == nil {
		if t.buckets == nil {
			t.buckets = make(map[string]*trail)
		}
		if len(t.buckets) >= t.maxBuckets() {
			t.evictLocked()
		}
		tr = &trail{}
		t.buckets[b.Bucket] = tr
	}
	t.ver++
	t.seq++
	m := mark{seq: t.seq, ver: t.ver, host: b.Host, at: b.At.UnixNano(), start: start.UnixNano(),
		spacing: b.Spacing, pressure: int32(b.Pressure)}
	if n := t.perBucket(); len(tr.marks) < n {
		if len(tr.marks) == cap(tr.marks) { // grown by hand, so that a full ring holds n marks and no more
			tr.marks = append(make([]mark, 0, min(max(16, 2*cap(tr.marks)), n)), tr.marks...)
		}
		tr.marks = append(tr.marks, m)
	} else {
		old := &tr.marks[tr.total%uint64(n)]
		if old.answer == Pending {
			tr.open--
		}
		*old = m
	}
	tr.total++
	tr.open++
	tr.ver = t.ver
	if start.After(b.At) {
		tr.delayed++
	} else {
		tr.passed++
	}
	tr.mode, tr.source, tr.rule, tr.lastBooking = b.Mode, b.Source, b.Rule, b.At
}

// evictLocked forgets the bucket booked least recently. Callers hold mu.
func (t *Timeline) evictLocked() {
	var oldest string
	var at time.Time
	first := true
	for name, tr := range t.buckets {
		if first || tr.lastBooking.Before(at) {
			oldest, at, first = name, tr.lastBooking, false
		}
	}
	delete(t.buckets, oldest)
}

// Answered records the answer a navigation of host (in bucket) got at at:
// it goes to the oldest navigation of that host still without one that
// was released by then, and no more than AnswerBound before. status is
// the HTTP status, 0 when there was none. A nil Timeline records nothing.
func (t *Timeline) Answered(bucket, host string, a Answer, status int, at time.Time) {
	if t == nil {
		return
	}
	now := at.UnixNano()
	earliest := now - int64(AnswerBound)
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.buckets[bucket]
	if tr == nil || tr.open == 0 {
		return
	}
	n := uint64(t.perBucket())
	first := max(tr.firstOpen, tr.total-uint64(len(tr.marks)))
	for p := first; p < tr.total; p++ {
		m := &tr.marks[p%n]
		if m.answer != Pending || m.start < earliest {
			if p == first {
				first++ // answered, or past its bound: never searched again
			}
			continue
		}
		if m.host != host || m.start > now {
			continue
		}
		t.ver++
		m.answer, m.status, m.ver = a, int16(status), t.ver
		tr.open--
		tr.ver, tr.lastAnswer, tr.lastStatus = t.ver, a, status
		if p == first {
			first++
		}
		break
	}
	tr.firstOpen = first
}

// Trail is what a Timeline remembers of one bucket, as Since copies it.
type Trail struct {
	Bucket          string
	Passed, Delayed uint64 // navigations booked since the bucket was first remembered: went at once, waited
	LastAnswer      Answer // of the latest answer matched
	LastStatus      int
	// Mode, Source and Rule are those of the last booking; LastBooking is
	// when it was asked for.
	Mode, Source, Rule string
	LastBooking        time.Time
	// Marks are the navigations that changed since the version asked for
	// (booked or answered), oldest first.
	Marks []Mark
}

// Mark is one navigation.
type Mark struct {
	Seq      uint64
	Host     string
	At       time.Time // asked for its slot
	Start    time.Time // released: its slot
	Spacing  time.Duration
	Pressure int
	Answer   Answer
	Status   int
}

// Since returns the timeline's version and every bucket it remembers, each
// with the navigations that changed after version since (all of them for
// 0, or for a version the timeline never reached: it restarted). A nil
// Timeline has nothing.
func (t *Timeline) Since(since uint64) (version uint64, trails []Trail) {
	if t == nil {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if since > t.ver {
		since = 0
	}
	trails = make([]Trail, 0, len(t.buckets))
	for name, tr := range t.buckets {
		out := Trail{Bucket: name, Passed: tr.passed, Delayed: tr.delayed, LastAnswer: tr.lastAnswer, LastStatus: tr.lastStatus,
			Mode: tr.mode, Source: tr.source, Rule: tr.rule, LastBooking: tr.lastBooking}
		if tr.ver > since {
			n := uint64(t.perBucket())
			for p := tr.total - uint64(len(tr.marks)); p < tr.total; p++ {
				m := &tr.marks[p%n]
				if m.ver > since {
					out.Marks = append(out.Marks, Mark{Seq: m.seq, Host: m.host, At: time.Unix(0, m.at), Start: time.Unix(0, m.start),
						Spacing: m.spacing, Pressure: int(m.pressure), Answer: m.answer, Status: int(m.status)})
				}
			}
		}
		trails = append(trails, out)
	}
	return t.ver, trails
}
