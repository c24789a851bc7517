package ownership

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdp-throttle/cdp-throttle/cdp"
)

// Conn follows one client connection: the sessions it is attached to, the
// Target commands whose answers say what it created, and what it owns.
// FromClient and FromBrowser may run on two goroutines (the connection's
// two readers); its methods are safe for concurrent use.
type Conn struct {
	r  *Registry
	id uint64

	mu       sync.Mutex
	sessions map[string]session // guarded by mu; the page each session is attached to
	detached chan struct{}      // guarded by mu; closed when a session detaches, then replaced
	pending  map[cmdKey]pending // guarded by mu; Target commands not answered yet
	waiting  atomic.Int32       // len(pending), read without mu by Wants

	items map[*item]struct{} // guarded by r.mu; what it owns, or left to nobody
	left  bool               // guarded by r.mu; it is gone: it owns nothing more
	timer *time.Timer        // guarded by r.mu; hands what it left to Close
}

// session is the page a client session is attached to.
type session struct {
	target, context string
}

type cmdKey struct {
	session string
	id      int64
}

// pending is a Target command whose answer decides what a client owns.
type pending struct {
	method  string
	target  string // of attachToTarget, closeTarget
	context string // of createTarget, disposeBrowserContext
}

// maxTracked bounds a connection's sessions, unanswered commands and the
// pages and contexts it owns; a client past it has the newest ones
// untracked (sessions and commands: forgotten).
const maxTracked = 10_000

// Client reports the number the connection was given by Join.
func (c *Conn) Client() uint64 { return c.id }

// FromClient reads the header of a command on its way to the browser.
func (c *Conn) FromClient(hd *cdp.Header) {
	if !hd.HasID {
		return
	}
	switch string(hd.Method) {
	case "Target.createTarget", "Target.createBrowserContext", "Target.attachToTarget",
		"Target.closeTarget", "Target.disposeBrowserContext":
		p := pending{method: string(hd.Method)} // a string of its own only here: the hot path allocates nothing
		p.target, p.context = cdp.TargetParams(hd.Params)
		c.mu.Lock()
		if len(c.pending) >= maxTracked {
			clear(c.pending)
		}
		c.pending[cmdKey{string(hd.SessionID), hd.ID}] = p
		c.waiting.Store(int32(len(c.pending)))
		c.mu.Unlock()
		return
	}
	if !cdp.Drives(hd.Method) {
		return
	}
	c.mu.Lock()
	s, ok := c.sessions[string(hd.SessionID)]
	c.mu.Unlock()
	if ok {
		c.claim(s.target, s.context)
	}
}

// Wants reports, from its first bytes, whether FromBrowser needs to see a
// message from the browser: the Target events but the changes to pages
// already settled, and the answers while a Target command is under way.
// Chromium writes an event's method and a reply's id first; anything else
// is looked at.
func (c *Conn) Wants(msg []byte) bool {
	switch {
	case bytes.HasPrefix(msg, []byte(`{"method":"Target.`)):
		return !c.settledChange(msg)
	case bytes.HasPrefix(msg, []byte(`{"method":"`)):
		return false
	case bytes.HasPrefix(msg, []byte(`{"id":`)):
		return c.waiting.Load() > 0
	}
	return true
}

// FromBrowser reads a message on its way to the client, whose header is
// hd.
func (c *Conn) FromBrowser(hd *cdp.Header, msg []byte) {
	if hd.HasID {
		c.answered(cmdKey{string(hd.SessionID), hd.ID}, msg)
		return
	}
	switch string(hd.Method) {
	case "Target.attachedToTarget":
		ti, ok := cdp.ReadTargetInfo(hd.Params)
		sid, _, ok2 := cdp.AttachedTarget(hd.Params)
		if !ok || !ok2 || ti.Type != "page" {
			return
		}
		c.mu.Lock()
		if len(c.sessions) >= maxTracked {
			clear(c.sessions)
		}
		c.sessions[sid] = session{target: ti.TargetID, context: ti.BrowserContextID}
		c.mu.Unlock()
		c.seen(ti)
	case "Target.detachedFromTarget":
		if sid, ok := cdp.DetachedSession(hd.Params); ok {
			c.mu.Lock()
			delete(c.sessions, sid)
			if c.detached != nil {
				close(c.detached)
				c.detached = nil
			}
			c.mu.Unlock()
		}
	case "Target.targetCreated", "Target.targetInfoChanged":
		if id, ok := cdp.LeadingTargetID(hd.Params); ok && c.settled(id) {
			return // seen would change nothing: its title or URL changed
		}
		if ti, ok := cdp.ReadTargetInfo(hd.Params); ok && ti.Type == "page" {
			c.seen(ti)
		}
	case "Target.targetDestroyed":
		if id, ok := cdp.ReadTargetID(hd.Params); ok {
			c.gone(key{page, id})
		}
	}
}

// answered follows the answer to one of the client's Target commands.
func (c *Conn) answered(k cmdKey, msg []byte) {
	c.mu.Lock()
	p, ok := c.pending[k]
	delete(c.pending, k)
	c.waiting.Store(int32(len(c.pending)))
	c.mu.Unlock()
	if !ok {
		return
	}
	result, e, _ := cdp.ReadReply(msg)
	if e != nil || result == nil {
		return
	}
	target, ctx := cdp.TargetParams(result)
	switch p.method {
	case "Target.createTarget":
		c.created(key{page, target}, p.context)
	case "Target.createBrowserContext":
		c.created(key{context, ctx}, "")
	case "Target.attachToTarget":
		c.claim(p.target, "")
	case "Target.closeTarget":
		c.gone(key{page, p.target})
	case "Target.disposeBrowserContext":
		c.gone(key{context, p.context})
	}
}

// Claim makes a page the connection's, as when it opens the page's own
// socket.
func (c *Conn) Claim(target string) { c.claim(target, "") }

func (c *Conn) claim(target, ctx string) {
	if target == "" {
		return
	}
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(c.items) >= maxTracked {
		return
	}
	it := r.addLocked(key{page, target})
	if it == nil {
		return
	}
	if it.context == "" {
		it.context = ctx
	}
	r.ownLocked(c, it)
}

func (c *Conn) created(k key, ctx string) {
	if k.id == "" {
		return
	}
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.left || len(c.items) >= maxTracked {
		return
	}
	it := r.addLocked(k)
	if it == nil {
		return
	}
	it.created = true
	if it.context == "" {
		it.context = ctx
	}
	r.ownLocked(c, it)
}

// settledChange reports, from its first bytes, whether msg is a
// Target.targetCreated or Target.targetInfoChanged of a page already
// settled, which FromBrowser would read no further: every client of a
// browser hears of every change to every page (100 × the changes of 100
// pages in a crawl of 100), and this tells most of them without reading
// their header.
func (c *Conn) settledChange(msg []byte) bool {
	id, ok := cdp.ChangedTargetID(msg)
	return ok && c.settled(id)
}

// settled reports whether the page target id is known with its browser
// context: what seen does for it then is nothing.
func (c *Conn) settled(id []byte) bool {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	it := r.items[key{page, string(id)}]
	return it != nil && it.context != ""
}

// seen learns a page's browser context, and makes a popup of a page the
// connection owns the connection's too.
func (c *Conn) seen(ti cdp.TargetInfo) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	it := r.items[key{page, ti.TargetID}]
	if it != nil {
		if it.context == "" && ti.BrowserContextID != "" {
			it.context = ti.BrowserContextID
			if ctx := r.items[key{context, it.context}]; ctx != nil {
				for o := range it.owners {
					r.ownLocked(o, ctx)
				}
			}
		}
		return
	}
	if ti.OpenerID == "" || c.left || len(c.items) >= maxTracked {
		return
	}
	opener := r.items[key{page, ti.OpenerID}]
	if opener == nil {
		return
	}
	if _, mine := opener.owners[c]; !mine {
		return
	}
	if it = r.addLocked(key{page, ti.TargetID}); it != nil {
		it.created = opener.created
		it.context = ti.BrowserContextID
		r.ownLocked(c, it)
	}
}

func (c *Conn) gone(k key) {
	if k.id == "" {
		return
	}
	c.r.mu.Lock()
	c.r.forgetLocked(k)
	c.r.mu.Unlock()
}

// Leave ends the connection: what it owned alone and created is closed
// after Timeout unless another connection takes it over; what it only
// drove is left to the browser.
func (c *Conn) Leave() {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.left {
		return
	}
	c.left = true
	orphans := false
	for it := range c.items {
		delete(it.owners, c)
		switch {
		case len(it.owners) > 0:
			delete(c.items, it)
		case it.created && r.Timeout > 0:
			it.orphan = c
			orphans = true
		default:
			delete(r.items, it.key)
			delete(c.items, it)
		}
	}
	if orphans {
		r.expireLocked(c)
	}
}

// WaitDetached waits until none of the connection's sessions is attached
// to a page of l (one of its pages, or a page in one of its contexts),
// as the browser says when it closes them, or until done is closed; it
// reports whether none is. Chromium tells a client closing its browser
// of each of its sessions detached before the connection ends. done
// ends the wait.
func (c *Conn) WaitDetached(done <-chan struct{}, l Leftovers) bool {
	for {
		c.mu.Lock()
		attached := false
		for _, s := range c.sessions {
			if slices.Contains(l.Pages, s.target) || s.context != "" && slices.Contains(l.Contexts, s.context) {
				attached = true
				break
			}
		}
		if !attached {
			c.mu.Unlock()
			return true
		}
		if c.detached == nil {
			c.detached = make(chan struct{})
		}
		ch := c.detached
		c.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}

// CloseAll ends the connection, as the client's Browser.close, and
// returns what it owned alone, to close now: the pages it created or
// drove and the contexts it created. What another connection owns too is
// left to that one.
func (c *Conn) CloseAll() Leftovers {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	l := Leftovers{Client: c.id}
	if c.left {
		return l
	}
	c.left = true
	for it := range c.items {
		delete(it.owners, c)
		if len(it.owners) == 0 && r.items[it.key] == it {
			l.add(it)
			delete(r.items, it.key)
		}
	}
	clear(c.items)
	return l
}
