// Package admission decides when a new client connection may be relayed:
// at once while its browser and the relay have room, after a wait in a
// bounded first-in, first-out queue while they do not, or never (the
// queue is full, or the wait timed out). It knows how many clients each
// browser and the relay take and who waits for a place; it knows nothing
// of websockets, CDP or which browser is alive, which its caller tells it.
//
// A browser's capacity is how many client connections it serves at once:
// lightpanda serve announces it (max_browser_connections, its
// --cdp-max-connections), and a Chromium has none. The relay's own limit
// bounds the sum over its browsers.
package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// DefaultTimeout is how long a client waits in the queue when
// Options.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// Errors Enter returns besides its context's.
var (
	// ErrFull means the queue was full: the client is refused at once.
	ErrFull = errors.New("admission: every place is taken and the queue is full")
	// ErrTimeout means no place freed within Options.Timeout.
	ErrTimeout = errors.New("admission: no place freed in time")
)

// Options configures a Gate. The zero Options admits everyone at once.
type Options struct {
	// MaxClients bounds the clients connected through the relay at once;
	// zero means no bound beyond the browsers' own.
	MaxClients int
	// Capacity is how many clients each browser takes at once, by the
	// browser's index; zero means no bound. Its length is the number of
	// browsers (at least one).
	Capacity []int
	// Queue is how many clients may wait for a place at once; one more is
	// refused at once (ErrFull). Zero means none wait.
	Queue int
	// Timeout is how long a client waits for a place before it is refused
	// (ErrTimeout). Zero means DefaultTimeout.
	Timeout time.Duration
	// OnWait is told how long each client waited that got a place after
	// waiting, for a histogram. Nil tells nobody.
	OnWait func(time.Duration)
}

// Gate hands out places to clients, a place in one browser each. Create
// it with New; its methods are safe for concurrent use.
type Gate struct {
	max     int
	cap     []int
	queue   int
	timeout time.Duration
	onWait  func(time.Duration)

	mu      sync.Mutex
	in      []int     // guarded by mu; clients in each browser
	total   int       // guarded by mu; sum of in
	peak    int       // guarded by mu; the most total has been
	waiters []*waiter // guarded by mu; oldest first
	refused [2]uint64 // guarded by mu; full, timeout
	waited  float64   // guarded by mu; recent mean wait in seconds (moving average), for Retry-After
}

// waiter is one client in the queue.
type waiter struct {
	accept func(int) bool
	got    chan int // receives the browser of its place; buffered
}

// New returns a Gate with o.
func New(o Options) *Gate {
	g := &Gate{max: max(o.MaxClients, 0), cap: append([]int(nil), o.Capacity...), queue: max(o.Queue, 0), timeout: o.Timeout, onWait: o.OnWait}
	if len(g.cap) == 0 {
		g.cap = []int{0}
	}
	if g.timeout <= 0 {
		g.timeout = DefaultTimeout
	}
	g.in = make([]int, len(g.cap))
	return g
}

// Limited reports whether the gate can ever make a client wait: the relay
// or one of its browsers has a bound.
func (g *Gate) Limited() bool {
	return g.Capacity() >= 0
}

// Capacity reports how many clients the relay takes at once: the least of
// MaxClients and the sum of the browsers' capacities; -1 when there is no
// bound.
func (g *Gate) Capacity() int {
	sum := 0
	for _, c := range g.cap {
		if c <= 0 {
			sum = -1
			break
		}
		sum += c
	}
	switch {
	case g.max > 0 && (sum < 0 || g.max < sum):
		return g.max
	default:
		return sum
	}
}

// BrowserCapacity reports the capacity of browser i, 0 for no bound.
func (g *Gate) BrowserCapacity(i int) int { return g.cap[i] }

// Place is a client's place in one browser, held until Leave.
type Place struct {
	// Browser is the index of the browser the client goes to.
	Browser int
	// Waited is how long the client waited for it.
	Waited time.Duration

	g    *Gate
	once sync.Once
}

// Leave gives the place back, to the oldest waiter that can use it. It
// may be called more than once.
func (p *Place) Leave() {
	if p == nil || p.g == nil {
		return
	}
	p.once.Do(func() { p.g.leave(p.Browser) })
}

// Refusal is Enter's error when a client gets no place: ErrFull or
// ErrTimeout, with how long the client should wait before it asks again.
type Refusal struct {
	Err        error
	RetryAfter time.Duration // whole seconds, at least one
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

// Enter finds the client a place in a browser that accept takes (the one
// with the fewest clients of those with room), waiting in the queue while
// there is none. accept is asked, under the gate's lock, whenever a place
// may have freed; a nil accept takes every browser. It returns a *Refusal
// when the queue is full or the wait timed out, ctx's error when ctx ended
// first.
func (g *Gate) Enter(ctx context.Context, accept func(browser int) bool) (*Place, error) {
	if accept == nil {
		accept = func(int) bool { return true }
	}
	began := time.Now()
	g.mu.Lock()
	// Those waiting go first; a place none of them can use is this
	// client's at once.
	g.handOn()
	if b := g.free(accept); b >= 0 {
		g.take(b)
		g.mu.Unlock()
		return &Place{Browser: b, g: g}, nil
	}
	if len(g.waiters) >= g.queue {
		g.refused[0]++
		ra := g.retryAfter()
		g.mu.Unlock()
		return nil, &Refusal{Err: ErrFull, RetryAfter: ra}
	}
	w := &waiter{accept: accept, got: make(chan int, 1)}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()

	t := time.NewTimer(g.timeout)
	defer t.Stop()
	var err error
	select {
	case b := <-w.got:
		return g.admitted(b, began), nil
	case <-t.C:
		err = ErrTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	select {
	case b := <-w.got: // a place came as the wait ended
		g.mu.Unlock()
		if err == ErrTimeout {
			return g.admitted(b, began), nil
		}
		g.leave(b) // the client is gone: the place goes on to the next
		return nil, err
	default:
	}
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			break
		}
	}
	defer g.mu.Unlock()
	if err == ErrTimeout {
		g.refused[1]++
		return nil, &Refusal{Err: ErrTimeout, RetryAfter: g.retryAfter()}
	}
	return nil, err
}

// admitted makes the place of a client that waited since began.
func (g *Gate) admitted(b int, began time.Time) *Place {
	d := time.Since(began)
	g.mu.Lock()
	// A moving average over about the last ten waits.
	g.waited += (d.Seconds() - g.waited) / 10
	g.mu.Unlock()
	if g.onWait != nil {
		g.onWait(d)
	}
	return &Place{Browser: b, Waited: d, g: g}
}

// free returns the browser accept takes with room and the fewest clients,
// or -1. Called with mu held.
func (g *Gate) free(accept func(int) bool) int {
	if g.max > 0 && g.total >= g.max {
		return -1
	}
	best := -1
	for i, c := range g.cap {
		if (c > 0 && g.in[i] >= c) || !accept(i) {
			continue
		}
		if best < 0 || g.in[i] < g.in[best] {
			best = i
		}
	}
	return best
}

// take counts a client into browser b. Called with mu held.
func (g *Gate) take(b int) {
	g.in[b]++
	g.total++
	g.peak = max(g.peak, g.total)
}

// leave counts a client out of browser b and hands places to the oldest
// waiters that can use them.
func (g *Gate) leave(b int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.in[b]--
	g.total--
	g.handOn()
}

// Retry asks again for places for the waiters, as a place might be free
// to them now that was not (a browser that did not answer is back).
func (g *Gate) Retry() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handOn()
}

// handOn gives free places to waiters, oldest first; a waiter no free
// place suits is passed over, not in the way of those behind it. Called
// with mu held.
func (g *Gate) handOn() {
	for i := 0; i < len(g.waiters); {
		w := g.waiters[i]
		b := g.free(w.accept)
		if b < 0 {
			if g.max > 0 && g.total >= g.max {
				return // no place for anyone
			}
			i++
			continue
		}
		g.take(b)
		w.got <- b
		g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
	}
}

// retryAfter is what a refused client is told to wait: the recent mean
// wait, in whole seconds, at least one and at most the timeout. Called
// with mu held.
func (g *Gate) retryAfter() time.Duration {
	s := math.Ceil(g.waited)
	s = min(max(s, 1), math.Ceil(g.timeout.Seconds()))
	return time.Duration(s) * time.Second
}

// Stats is what a gate has done, for metrics and status pages.
type Stats struct {
	Capacity       int   // -1: no bound
	Connected      int   // clients holding a place
	Peak           int   // the most that held a place at once
	Queued         int   // clients waiting
	PerBrowser     []int // clients holding a place in each browser
	RefusedFull    uint64
	RefusedTimeout uint64
}

// Stats reports the gate's state now.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Capacity: g.Capacity(), Connected: g.total, Peak: g.peak, Queued: len(g.waiters), PerBrowser: append([]int(nil), g.in...),
		RefusedFull: g.refused[0], RefusedTimeout: g.refused[1]}
}

// String describes the gate's bounds, for a log line.
func (g *Gate) String() string {
	c := g.Capacity()
	if c < 0 {
		return "no bound"
	}
	return fmt.Sprintf("%d clients at once, %d waiting at most for %v", c, g.queue, g.timeout)
}
