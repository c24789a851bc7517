package hold

import (
	"context"
	"sync"
	"time"
)

// Claims are the pages of one browser that the relay's own clients
// created, drove or opened (as popups of their pages): in Fetch mode the
// relay's connections see every page's requests, and hold only these.
// Methods are safe for concurrent use.
type Claims struct {
	all bool // set once, by ClaimAll
	// OnClaim, set once before use, is told of each page claimed, outside
	// the lock: the Fetch strategy arms it.
	OnClaim func(target string)
	// mu guards pages, pending and changed; a leaf: taken under
	// Watch.mu and fetch's mutexes, takes none.
	mu      sync.Mutex
	pages   map[string]struct{} // guarded by mu; target ids
	pending int                 // guarded by mu; pages being created by clients, ids not known yet
	changed chan struct{}       // guarded by mu; closed and replaced when pending or pages change
}

// MaxClaims bounds the pages remembered; a page leaves when its target is
// destroyed, so only a browser that never says so fills it.
const MaxClaims = 100_000

func (c *Claims) init() {
	c.pages = make(map[string]struct{})
	c.changed = make(chan struct{})
}

func (c *Claims) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// ClaimAll makes every page of the browser count as a client's, for a
// browser no one but the relay's clients drives (the tests of holding
// play pauses of pages no client drives). Call it before the browser's
// way of holding starts: in a Ways.Fetch, before the way it returns.
func (c *Claims) ClaimAll() { c.all = true }

// Claim marks a page as a client's.
func (c *Claims) Claim(target string) {
	if target == "" {
		return
	}
	c.mu.Lock()
	if _, ok := c.pages[target]; ok {
		c.mu.Unlock()
		return
	}
	c.addLocked(target)
	c.broadcast()
	c.mu.Unlock()
	if c.OnClaim != nil {
		c.OnClaim(target)
	}
}

// addLocked adds a page, within maxClaims. Callers hold mu.
func (c *Claims) addLocked(target string) {
	if len(c.pages) >= MaxClaims {
		clear(c.pages)
	}
	c.pages[target] = struct{}{}
}

// Forget drops a page that is gone.
func (c *Claims) Forget(target string) {
	c.mu.Lock()
	delete(c.pages, target)
	c.mu.Unlock()
}

// Claimed reports whether a page is a client's.
func (c *Claims) Claimed(target string) bool {
	if c.all {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pages[target]
	return ok
}

// creating notes a page a client is creating (Target.createTarget,
// /json/new); created ends it, with the new page's id ("" when it failed).
func (c *Claims) creating() {
	c.mu.Lock()
	c.pending++
	c.broadcast()
	c.mu.Unlock()
}

func (c *Claims) created(target string) {
	c.mu.Lock()
	c.pending = max(c.pending-1, 0)
	if target != "" {
		c.addLocked(target)
	}
	c.broadcast()
	c.mu.Unlock()
	if target != "" && c.OnClaim != nil {
		c.OnClaim(target)
	}
}

// Decide reports whether target is a client's page, waiting while a
// client is creating a page whose id is not known yet (the new page's
// first request can pause before the client learns its id), but no longer
// than ctx. Unsure when ctx ends, it says yes: politeness fails closed.
func (c *Claims) Decide(ctx context.Context, target string) bool {
	if c.all {
		return true
	}
	for {
		c.mu.Lock()
		_, ok := c.pages[target]
		pending, changed := c.pending, c.changed
		c.mu.Unlock()
		if ok || pending == 0 {
			return ok
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return true
		}
	}
}

// Any reports whether the relay's clients have a page, or are creating
// one.
func (c *Claims) Any() bool {
	if c.all {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pages) > 0 || c.pending > 0
}

// Unsure reports whether decide could have to wait.
func (c *Claims) Unsure() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending > 0
}

// ClaimWait bounds how long a page's first request waits to learn whether
// a client is creating that page.
const ClaimWait = 3 * time.Second

// warnOnce remembers the hosts already warned about, so each is warned
// once for the life of the process. Memory is bounded: past max hosts the
// older half is forgotten, and a host from it may be warned once more.
type warnOnce struct {
	mu       sync.Mutex          // taken under no other, takes none
	cur, old map[string]struct{} // guarded by mu
}

const maxWarned = 100_000

// first reports whether host has not been warned about, and marks it.
func (w *warnOnce) first(host string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.cur[host]; ok {
		return false
	}
	if _, ok := w.old[host]; ok {
		return false
	}
	if w.cur == nil || len(w.cur) >= maxWarned/2 {
		w.old, w.cur = w.cur, make(map[string]struct{})
	}
	w.cur[host] = struct{}{}
	return true
}
