// Package claims knows which pages of a browser are the relay's clients':
// those they created, drove or opened as popups of theirs. The Fetch way
// of holding sees every page's requests through the relay's own
// connections, and holds only these; the core of holding tells it what
// the clients' commands say.
package claims

import (
	"context"

	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

// Set holds the pages of one browser that the relay's own clients
// created, drove or opened (as popups of their pages): in Fetch mode the
// relay's connections see every page's requests, and hold only these.
// Call Init before use; methods are safe for concurrent use.
type Set struct {
	all bool // set once, by ClaimAll
	// OnClaim, set once before use, is told of each page claimed, outside
	// the lock: the Fetch strategy arms it.
	OnClaim func(target string)
	// mu guards pages, pending and changed; a leaf: taken under
	// hold.Watch.mu and hold/fetch's mutexes, takes none.
	mu      lockorder.Mutex[lockorder.Leaf]
	pages   map[string]struct{} // guarded by mu; target ids
	pending int                 // guarded by mu; pages being created by clients, ids not known yet
	changed chan struct{}       // guarded by mu; closed and replaced when pending or pages change
}

// Max bounds the pages remembered; a page leaves when its target is
// destroyed, so only a browser that never says so fills it.
const Max = 100_000

// Init readies an empty set.
func (c *Set) Init() {
	c.pages = make(map[string]struct{})
	c.changed = make(chan struct{})
}

func (c *Set) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// ClaimAll makes every page of the browser count as a client's, for a
// browser no one but the relay's clients drives (the tests of holding
// play pauses of pages no client drives). Call it before the browser's
// way of holding starts: in a Ways.Fetch, before the way it returns.
func (c *Set) ClaimAll() { c.all = true }

// Claim marks a page as a client's.
func (c *Set) Claim(target string) {
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

// addLocked adds a page, within Max. Callers hold mu.
func (c *Set) addLocked(target string) {
	if len(c.pages) >= Max {
		clear(c.pages)
	}
	c.pages[target] = struct{}{}
}

// Forget drops a page that is gone.
func (c *Set) Forget(target string) {
	c.mu.Lock()
	delete(c.pages, target)
	c.mu.Unlock()
}

// Claimed reports whether a page is a client's.
func (c *Set) Claimed(target string) bool {
	if c.all {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pages[target]
	return ok
}

// Creating notes a page a client is creating (Target.createTarget,
// /json/new); Created ends it, with the new page's id ("" when it failed).
func (c *Set) Creating() {
	c.mu.Lock()
	c.pending++
	c.broadcast()
	c.mu.Unlock()
}

// Created ends a Creating: the page is target, "" when it failed.
func (c *Set) Created(target string) {
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
func (c *Set) Decide(ctx context.Context, target string) bool {
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
func (c *Set) Any() bool {
	if c.all {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pages) > 0 || c.pending > 0
}

// Unsure reports whether Decide could have to wait.
func (c *Set) Unsure() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending > 0
}
