// Package inflight caps how many top-level navigations of one bucket (a
// host, or a site) are in flight at once: between their release and
// their document's answer, as Scrapy's CONCURRENT_REQUESTS_PER_DOMAIN and
// Colly's Parallelism do. A navigation over the cap waits, in arrival
// order, for a place; its place is given back when the navigation ends,
// and in any case after a bound, so that a navigation whose end is never
// seen cannot stall its host for good.
//
// Places are counted in a Table: in this process by default, or in a
// shared store (package store keeps them in Redis as leases that expire,
// so that every relay of a fleet counts against the same cap and a relay
// that dies holds no place). Waiting is the Cap's own business either way:
// the first waiter of a bucket asks for a place, the others wait their
// turn behind it.
//
// The package knows nothing of CDP, the relay, rules or Redis.
package inflight

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

// Defaults for the zero values of Cap's fields.
const (
	// DefaultBound is how long a place is held at most: a navigation
	// whose end the relay never sees gives its place back then.
	DefaultBound = 30 * time.Second
	// DefaultPoll is how often the first waiter of a bucket asks a shared
	// Table again, for places given back by other processes.
	DefaultPoll = 20 * time.Millisecond
)

// ErrClosed is returned by Enter once the Cap is closed.
var ErrClosed = errors.New("inflight: cap closed")

// Table counts the places of each bucket where every process that shares
// the cap sees them: a shared store. Its methods must be safe for
// concurrent use.
type Table interface {
	// Enter takes a place of bucket for id when fewer than limit are
	// taken, and reports whether it did. It may block as long as one call
	// to the store takes, no longer.
	Enter(bucket, id string, limit int) bool
	// Leave gives id's place of bucket back. It may block as Enter does;
	// the Cap calls it on a goroutine of its own.
	Leave(bucket, id string)
	// InFlight reports how many places of bucket are taken, by every
	// process.
	InFlight(bucket string) int
}

// Cap caps the navigations in flight of each bucket. Its zero value counts
// in process with the default bound; set the fields before the first
// Enter. It is safe for concurrent use. Close gives back every place still
// held.
type Cap struct {
	// Table counts the places; nil counts them in this process.
	Table Table
	// Poll is how often the first waiter of a bucket asks Table again.
	// Zero means DefaultPoll. Without a Table nothing polls: a place given
	// back is handed on at once.
	Poll time.Duration
	// Bound is how long a place is held at most: after it, the place is
	// given back anyway and counted (Expired). Zero means DefaultBound.
	Bound time.Duration

	ids     atomic.Uint64
	expired atomic.Uint64
	leaving sync.WaitGroup // Table.Leave calls under way

	mu      lockorder.Mutex[lockorder.Leaf]
	buckets map[string]*bucket  // guarded by mu; those with places held or waiters here
	places  map[*Place]struct{} // guarded by mu; held here
	closed  bool                // guarded by mu
}

// bucket is what this process knows of one bucket.
type bucket struct {
	held  int           // places held by this process
	limit int           // the cap of its last Enter, for the status page
	queue []*waiter     // in arrival order; queue[0] asks for a place
	freed chan struct{} // closed and replaced when a place held here is given back
	// stuck says the first in line last found no place free; misses
	// counts the times one did. A navigation behind others waits only
	// when one of them could not take a place: one queued behind another
	// taking a free place in the same instant did not wait.
	stuck  bool
	misses uint64
}

// waiter is one Enter waiting for a place.
type waiter struct {
	turn  chan struct{} // closed when it is first in line
	since time.Time
}

// Place is one navigation's place among the navigations of its bucket in
// flight. Leave gives it back.
type Place struct {
	// Bucket and Limit are what the place was taken in, and under.
	Bucket string
	Limit  int
	// Waited is how long Enter waited for it: 0 when a place was free at
	// once.
	Waited time.Duration
	// Source and Rule say where the cap came from ("flag", "rule N" and
	// the rule's text); the Cap leaves them empty, a policy fills them in.
	Source, Rule string

	c     *Cap
	id    string
	left  atomic.Bool
	timer *time.Timer // the bound; set before Enter returns
}

// Enter waits until a place of bucket is free under limit, behind the
// navigations that came before it, takes it and returns it. limit ≤ 0
// means no cap: it returns nil at once. It returns ctx's error when ctx
// ends first, and ErrClosed once the Cap is closed.
func (c *Cap) Enter(ctx context.Context, name string, limit int) (*Place, error) {
	if limit <= 0 {
		return nil, nil
	}
	w := &waiter{turn: make(chan struct{}), since: time.Now()}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	b := c.bucketLocked(name)
	b.limit = limit
	b.queue = append(b.queue, w)
	waited := len(b.queue) > 1 && b.stuck // behind one that found no place
	misses := b.misses
	if len(b.queue) == 1 {
		close(w.turn)
	}
	c.mu.Unlock()

	select {
	case <-w.turn:
	case <-ctx.Done():
		c.dequeue(name, b, w)
		return nil, ctx.Err()
	}
	id := strconv.FormatUint(c.ids.Add(1), 10)
	var poll *time.Timer
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		c.mu.Lock()
		freed, closed := b.freed, c.closed
		c.mu.Unlock()
		if closed {
			c.dequeue(name, b, w)
			return nil, ErrClosed
		}
		took := c.take(b, name, id, limit)
		c.mu.Lock()
		b.stuck = !took
		if !took {
			b.misses++
		}
		waited = waited || b.misses != misses // one ahead, or this one, found no place
		c.mu.Unlock()
		if took {
			p := &Place{Bucket: name, Limit: limit, c: c, id: id}
			if waited {
				p.Waited = time.Since(w.since)
			}
			c.mu.Lock()
			c.placesLocked()[p] = struct{}{}
			p.timer = time.AfterFunc(c.bound(), func() {
				if p.give() {
					c.expired.Add(1)
				}
			})
			c.mu.Unlock()
			c.dequeue(name, b, w)
			return p, nil
		}
		waited = true
		var tick <-chan time.Time
		if c.Table != nil {
			if poll == nil {
				poll = time.NewTimer(c.poll())
			} else {
				poll.Reset(c.poll())
			}
			tick = poll.C
		}
		select {
		case <-freed:
		case <-tick:
		case <-ctx.Done():
			c.dequeue(name, b, w)
			return nil, ctx.Err()
		}
	}
}

// take takes a place of b for id when one is free.
func (c *Cap) take(b *bucket, name, id string, limit int) bool {
	if c.Table == nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		if b.held >= limit {
			return false
		}
		b.held++
		return true
	}
	if !c.Table.Enter(name, id, limit) {
		return false
	}
	c.mu.Lock()
	b.held++
	c.mu.Unlock()
	return true
}

// dequeue takes w out of b's line, handing the turn to whoever is first
// now, and forgets b when nothing is left of it.
func (c *Cap) dequeue(name string, b *bucket, w *waiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(b.queue, w)
	if i < 0 {
		return
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	if i == 0 && len(b.queue) > 0 {
		close(b.queue[0].turn)
	}
	c.forgetLocked(name, b)
}

// Leave gives the place back: the first navigation waiting in its bucket
// may take it. It never blocks, and only the first call counts: a place is
// given back once, whoever sees its navigation end first.
func (p *Place) Leave() {
	if p != nil {
		p.give()
	}
}

// give gives the place back unless it was already, and reports whether it
// did.
func (p *Place) give() bool {
	if !p.left.CompareAndSwap(false, true) {
		return false
	}
	c := p.c
	c.mu.Lock()
	if p.timer != nil {
		p.timer.Stop()
	}
	delete(c.places, p)
	b := c.buckets[p.Bucket]
	c.mu.Unlock()
	if c.Table == nil {
		c.freed(p.Bucket, b)
		return true
	}
	c.leaving.Add(1)
	go func() {
		defer c.leaving.Done()
		c.Table.Leave(p.Bucket, p.id)
		c.freed(p.Bucket, b) // after the table knows: the first waiter asks it next
	}()
	return true
}

// freed counts a place of b given back and wakes its first waiter.
func (c *Cap) freed(name string, b *bucket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b == nil {
		return
	}
	b.held--
	close(b.freed)
	b.freed = make(chan struct{})
	c.forgetLocked(name, b)
}

func (c *Cap) bucketLocked(name string) *bucket {
	if c.buckets == nil {
		c.buckets = make(map[string]*bucket)
	}
	b := c.buckets[name]
	if b == nil {
		b = &bucket{freed: make(chan struct{})}
		c.buckets[name] = b
	}
	return b
}

func (c *Cap) forgetLocked(name string, b *bucket) {
	if b.held <= 0 && len(b.queue) == 0 && c.buckets[name] == b {
		delete(c.buckets, name)
	}
}

func (c *Cap) placesLocked() map[*Place]struct{} {
	if c.places == nil {
		c.places = make(map[*Place]struct{})
	}
	return c.places
}

func (c *Cap) bound() time.Duration {
	if c.Bound > 0 {
		return c.Bound
	}
	return DefaultBound
}

func (c *Cap) poll() time.Duration {
	if c.Poll > 0 {
		return c.Poll
	}
	return DefaultPoll
}

// Expired reports how many places were given back by the bound: their
// navigations' ends were never seen.
func (c *Cap) Expired() uint64 { return c.expired.Load() }

// State is what is known of one bucket's navigations in flight.
type State struct {
	Bucket string
	// InFlight is how many places are taken: by every process sharing the
	// Table, or by this one without a Table.
	InFlight int
	// Waiting is how many navigations of this process wait for a place.
	Waiting int
	// Limit is the cap of the bucket's last Enter here.
	Limit int
}

// Busy returns the buckets with places held or navigations waiting in this
// process, without asking the Table.
func (c *Cap) Busy() []State {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]State, 0, len(c.buckets))
	for name, b := range c.buckets {
		out = append(out, State{Bucket: name, InFlight: b.held, Waiting: len(b.queue), Limit: b.limit})
	}
	return out
}

// StateOf reports a bucket's state, asking the Table (when there is one)
// how many places are taken everywhere.
func (c *Cap) StateOf(name string) State {
	c.mu.Lock()
	st := State{Bucket: name}
	if b := c.buckets[name]; b != nil {
		st.InFlight, st.Waiting, st.Limit = b.held, len(b.queue), b.limit
	}
	c.mu.Unlock()
	if c.Table != nil {
		st.InFlight = c.Table.InFlight(name)
	}
	return st
}

// Close gives back every place still held (a shared Table is told, so a
// relay that stops leaves no lease behind), wakes every waiter with
// ErrClosed and waits for the Table's calls.
func (c *Cap) Close() {
	c.mu.Lock()
	c.closed = true
	held := make([]*Place, 0, len(c.places))
	for p := range c.places {
		held = append(held, p)
	}
	for _, b := range c.buckets {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	c.mu.Unlock()
	for _, p := range held {
		p.give()
	}
	c.leaving.Wait()
}
