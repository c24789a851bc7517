// Package ownership knows, for a browser that several clients share, which
// client connection owns which pages and browser contexts, and what a
// client that went away left behind.
//
// It learns it from the CDP messages of each connection (read with package
// cdp, never decoding more than a Target command or event): a client owns
// the pages it creates (Target.createTarget), the browser contexts it
// creates (Target.createBrowserContext), the popups of its pages, and the
// pages it drives (navigates, runs script in, gives input to) or attaches
// to explicitly (Target.attachToTarget, or a page's own socket). Merely
// being attached, as Puppeteer and Playwright attach to every page of a
// browser, is not owning.
//
// What it says is closed by its caller: a client's Browser.close ends
// what that client owns alone (Conn.CloseAll), and the pages and contexts
// a client created are handed to Registry.Close once it has been gone for
// Registry.Timeout, unless another connection took them over meanwhile by
// driving or attaching to one of them. The package sends nothing itself.
package ownership

import (
	"slices"
	"sync"
	"time"
)

// Leftovers are pages and browser contexts to close, all of one client:
// pages first, then contexts (closing a context closes its pages).
type Leftovers struct {
	// Client is the number the connection was given by Join; 0 for pages
	// opened by Registry.Opened that no client took.
	Client   uint64
	Pages    []string
	Contexts []string
}

// Empty reports whether there is nothing to close.
func (l Leftovers) Empty() bool { return len(l.Pages) == 0 && len(l.Contexts) == 0 }

// Registry is who owns what in one browser. Its zero value keeps what
// clients leave behind; set Timeout and Close before the first Join. Its
// methods are safe for concurrent use.
type Registry struct {
	// Timeout is how long the pages and contexts a client created outlive
	// its connection: once it has been gone that long, they are handed to
	// Close. Zero or negative keeps them, as the browser itself would.
	Timeout time.Duration
	// Close closes what a client left behind. It is called on a goroutine
	// of its own (one per client), and Stop waits for it. Nil closes
	// nothing.
	Close func(Leftovers)

	mu       sync.Mutex
	items    map[key]*item      // guarded by mu
	timers   map[*Conn]struct{} // guarded by mu; connections whose leftovers are due
	stopped  bool               // guarded by mu
	closings sync.WaitGroup     // calls of Close under way
}

// maxItems bounds what the registry remembers. An item leaves when its
// target is destroyed (or found gone), when nobody owns it and it was not
// created by a client, or when it is closed, so only a browser that never
// says so fills it; past it, new pages and contexts are not tracked (they
// stay open, as without the relay).
const maxItems = 100_000

type kind uint8

const (
	page kind = iota
	context
)

func (k kind) String() string { return [...]string{"page", "context"}[k] }

type key struct {
	kind kind
	id   string
}

// item is a page or browser context that a client owns or owned.
type item struct {
	key
	// context is a page's browser context, "" while unknown (or the
	// default one, which nobody owns).
	context string
	// created is set for what a client created (and the popups of such
	// pages), which is closed when its owners are gone; a page clients
	// only drove is left to the browser then.
	created bool
	owners  map[*Conn]struct{}
	// orphan is the connection whose leaving left the item to nobody, nil
	// while somebody owns it: its timer hands the item to Close.
	orphan *Conn
}

// Stop stops the timers of what clients left behind (nothing more is
// closed) and waits for the calls of Close under way.
func (r *Registry) Stop() {
	r.mu.Lock()
	r.stopped = true
	for c := range r.timers {
		c.timer.Stop()
	}
	clear(r.timers)
	r.mu.Unlock()
	r.closings.Wait()
}

// Snapshot returns every page and browser context a client created that
// the registry knows of, its creator connected or gone (pages first): what
// a guardian closes if the relay dies.
func (r *Registry) Snapshot() Leftovers {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.createdLocked(false)
}

// createdLocked returns what clients created, sorted (the same set, the
// same report), forgetting it when forget is set. Callers hold mu.
func (r *Registry) createdLocked(forget bool) Leftovers {
	var l Leftovers
	for k, it := range r.items {
		if it.created {
			l.add(it)
			if forget {
				delete(r.items, k)
			}
		}
	}
	slices.Sort(l.Pages)
	slices.Sort(l.Contexts)
	return l
}

// Created ends the registry as the relay stops: the timers of what
// clients left stop, as with Stop, and every page and browser context a
// client created, its creator connected or gone, is returned to close
// now (pages first); the registry forgets them.
func (r *Registry) Created() Leftovers {
	r.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.createdLocked(true)
}

// Join starts following a client connection, numbered id for logs.
func (r *Registry) Join(id uint64) *Conn {
	return &Conn{
		r:        r,
		id:       id,
		sessions: make(map[string]session),
		pending:  make(map[cmdKey]pending),
		items:    make(map[*item]struct{}),
	}
}

// Opened notes a page created for no connection (Chrome's PUT /json/new):
// it is closed after Timeout unless a connection takes it over first.
func (r *Registry) Opened(target string) {
	if target == "" || r.Timeout <= 0 {
		return // kept, as by a browser without the relay
	}
	c := r.Join(0)
	r.mu.Lock()
	defer r.mu.Unlock()
	it := r.addLocked(key{page, target})
	if it == nil || len(it.owners) > 0 {
		return
	}
	it.created = true
	c.items[it] = struct{}{}
	c.left = true
	it.orphan = c
	r.expireLocked(c)
}

// Len reports how many pages and contexts the registry remembers.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

// addLocked returns the item for k, adding it when new (nil when the
// registry is full). Callers hold mu.
func (r *Registry) addLocked(k key) *item {
	if it := r.items[k]; it != nil {
		return it
	}
	if r.items == nil {
		r.items = make(map[key]*item)
	}
	if len(r.items) >= maxItems {
		return nil
	}
	it := &item{key: k, owners: make(map[*Conn]struct{})}
	r.items[k] = it
	return it
}

// ownLocked makes c an owner of it, taking it over from nobody, and of
// the context of a page. Callers hold mu.
func (r *Registry) ownLocked(c *Conn, it *item) {
	if c.left || it == nil {
		return
	}
	it.owners[c] = struct{}{}
	it.orphan = nil
	c.items[it] = struct{}{}
	if it.kind == page && it.context != "" {
		if ctx := r.items[key{context, it.context}]; ctx != nil {
			r.ownLocked(c, ctx)
		}
	}
}

// forgetLocked drops an item that is gone. Callers hold mu.
func (r *Registry) forgetLocked(k key) {
	it := r.items[k]
	if it == nil {
		return
	}
	delete(r.items, k)
	for c := range it.owners {
		delete(c.items, it)
	}
	if it.orphan != nil {
		delete(it.orphan.items, it)
	}
}

// expireLocked arms the timer that hands what c left to Close. Callers
// hold mu.
func (r *Registry) expireLocked(c *Conn) {
	if r.stopped || r.Timeout <= 0 || c.timer != nil {
		return
	}
	if r.timers == nil {
		r.timers = make(map[*Conn]struct{})
	}
	r.timers[c] = struct{}{}
	c.timer = time.AfterFunc(r.Timeout, func() { r.expire(c) })
}

// expire hands to Close what c left that nobody has taken over since.
func (r *Registry) expire(c *Conn) {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	delete(r.timers, c)
	l := Leftovers{Client: c.id}
	for it := range c.items {
		if it.orphan == c && len(it.owners) == 0 && r.items[it.key] == it {
			l.add(it)
			delete(r.items, it.key)
		}
	}
	clear(c.items)
	if l.Empty() || r.Close == nil {
		r.mu.Unlock()
		return
	}
	r.closings.Add(1)
	r.mu.Unlock()
	defer r.closings.Done()
	r.Close(l)
}

func (l *Leftovers) add(it *item) {
	if it.kind == page {
		l.Pages = append(l.Pages, it.id)
	} else {
		l.Contexts = append(l.Contexts, it.id)
	}
}
