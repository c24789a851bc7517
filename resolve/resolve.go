// Package resolve knows which server address each host name is on, for
// --bucket ip: hosts on one address share one schedule. It learns an
// address from what the browser itself connected to (the relay reads it
// from the answers to the navigations it follows: Chromium's
// remoteIPAddress) and, for a name the browser has not told about yet,
// asks the system resolver, bounded in time: a navigation never waits
// longer than Cache.Wait to learn an address, and a name that does not
// resolve, or whose lookup hangs, is remembered as unknown for a while
// (its navigations go on their host's schedule meanwhile). It also maps
// names as the browser's own --host-resolver-rules do (Rules), so a name
// the browser reaches through such a rule is on the right address from
// its first navigation.
//
// It knows nothing of CDP, the limiter or the relay.
package resolve

import (
	"container/list"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Source says where a Cache learns addresses from.
type Source int

const (
	// Both learns from the browser and, for a name it has not told about,
	// from the resolver (the default).
	Both Source = iota
	// Browser learns only what the browser connected to.
	Browser
	// Resolver asks only the system resolver: the choice for a browser
	// behind an HTTP proxy, whose every answer comes from the proxy's
	// address.
	Resolver
)

// ParseSource reads "both", "browser" or "resolver".
func ParseSource(s string) (Source, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "both":
		return Both, nil
	case "browser":
		return Browser, nil
	case "resolver":
		return Resolver, nil
	}
	return Both, fmt.Errorf("--bucket-ip-source %q: want both, browser or resolver", s)
}

func (s Source) String() string {
	return [...]string{"both", "browser", "resolver"}[s]
}

// Defaults for the zero values of Cache's fields. A name the browser
// connected to is kept longer than one the resolver gave: the browser's
// is what it really reached, and it tells again at every answer; Go's
// resolver does not say a record's TTL, so its answers are kept for a
// minute, a common TTL of names behind CDNs and load balancers, which move.
const (
	DefaultSize       = 10_000
	DefaultWait       = time.Second      // the longest a navigation waits for an address
	DefaultLearnedTTL = 10 * time.Minute // an address the browser connected to
	DefaultLookupTTL  = time.Minute      // an address the resolver gave
	DefaultUnknownTTL = time.Minute      // a name that did not resolve, or whose lookup outlived Wait
	// DefaultLookupTimeout bounds a lookup itself, past the wait: a slow
	// answer still serves the navigations after it.
	DefaultLookupTimeout = 10 * time.Second
)

// Cache maps host names (as limiter.Key returns them) to the address of
// their server. Set its fields before first use; the zero Cache learns
// from both sources with the defaults above and the system resolver. Its
// methods are safe for concurrent use. Close ends its lookups.
type Cache struct {
	// Source says which of the browser and the resolver it learns from.
	Source Source
	// SourceSet reports that the user chose Source (--bucket-ip-source):
	// FitBrowser leaves it as it is.
	SourceSet bool
	// Rules, when set, map names before anything else, as the browser's
	// --host-resolver-rules do.
	Rules *Rules
	// Lookup resolves a name; nil means net.DefaultResolver.LookupNetIP.
	// It must return once ctx ends.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Size is how many names are kept at most, the least recently used
	// forgotten first; 0 means DefaultSize.
	Size int
	// Wait is how long Addr waits for a lookup; 0 means DefaultWait.
	Wait time.Duration
	// LookupTimeout bounds each lookup; 0 means DefaultLookupTimeout.
	LookupTimeout time.Duration
	// LearnedTTL, LookupTTL and UnknownTTL are how long an address the
	// browser connected to, one the resolver gave, and a name known not
	// to resolve (or whose lookup outlived Wait) are kept; 0 means their
	// defaults.
	LearnedTTL, LookupTTL, UnknownTTL time.Duration

	mu      sync.Mutex
	names   map[string]*list.Element // guarded by mu; of *entry
	lru     list.List                // guarded by mu; most recently used first
	lookups map[string]*lookup       // guarded by mu; under way, by name
	ctx     context.Context          // guarded by mu; ends at Close
	stop    context.CancelFunc       // guarded by mu
	running sync.WaitGroup
}

// entry is what is known of one name until expires.
type entry struct {
	name    string
	addr    netip.Addr // invalid: known not to resolve
	browser bool       // the browser connected to it
	expires time.Time
}

// lookup is a resolver lookup under way; done is closed once it ended.
type lookup struct {
	done chan struct{}
	late bool // guarded by Cache.mu: a navigation gave up waiting for it
}

// Key is the bucket an address names, written as limiter.Key writes a
// host that is an address: IPv4 plain (an IPv4-mapped IPv6 address too),
// IPv6 in brackets, without a zone.
func Key(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

// Learn records that the browser reached name at addr. It does nothing
// with Source Resolver, or an invalid addr.
func (c *Cache) Learn(name string, addr netip.Addr) {
	if c.Source == Resolver || !addr.IsValid() || name == "" {
		return
	}
	name, _, _, done := c.mapped(name)
	if done {
		return // an address, or mapped to one: nothing to learn
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(name, addr, true, time.Now().Add(orDefault(c.LearnedTTL, DefaultLearnedTTL)))
}

// Peek returns the address name is known to be on, without asking the
// resolver.
func (c *Cache) Peek(name string) (netip.Addr, bool) {
	name, a, ok, done := c.mapped(name)
	if done {
		return a, ok
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.getLocked(name, time.Now())
	if e == nil || !e.addr.IsValid() {
		return netip.Addr{}, false
	}
	return e.addr, true
}

// Addr returns the address name is on: as the rules map it, as the
// browser last connected to it, or else as the resolver says (with a
// source that allows it), waiting for the lookup no longer than Wait nor
// past ctx. ok is false when the address is not known: the name does not
// resolve, or did not in time; a name whose lookup outlived a wait is
// not waited for again until UnknownTTL has passed or the lookup ended.
func (c *Cache) Addr(ctx context.Context, name string) (addr netip.Addr, ok bool) {
	name, a, ok, done := c.mapped(name)
	if done {
		return a, ok
	}
	c.mu.Lock()
	if e := c.getLocked(name, time.Now()); e != nil {
		c.mu.Unlock()
		return e.addr, e.addr.IsValid()
	}
	if c.Source == Browser {
		c.mu.Unlock()
		return netip.Addr{}, false
	}
	l := c.startLocked(name)
	if l == nil || l.late {
		c.mu.Unlock()
		return netip.Addr{}, false
	}
	c.mu.Unlock()
	t := time.NewTimer(orDefault(c.Wait, DefaultWait))
	defer t.Stop()
	select {
	case <-l.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		if e := c.getLocked(name, time.Now()); e != nil {
			return e.addr, e.addr.IsValid()
		}
		return netip.Addr{}, false
	case <-t.C:
	case <-ctx.Done():
		return netip.Addr{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-l.done: // ended as the wait did
		if e := c.getLocked(name, time.Now()); e != nil {
			return e.addr, e.addr.IsValid()
		}
		return netip.Addr{}, false
	default:
	}
	// Unknown until the lookup ends, for UnknownTTL at most.
	l.late = true
	c.putLocked(name, netip.Addr{}, false, time.Now().Add(orDefault(c.UnknownTTL, DefaultUnknownTTL)))
	return netip.Addr{}, false
}

// startLocked returns the lookup of name under way, or starts one; nil
// once the cache is closed. Callers hold mu.
func (c *Cache) startLocked(name string) *lookup {
	if l := c.lookups[name]; l != nil {
		return l
	}
	if c.ctx == nil {
		c.ctx, c.stop = context.WithCancel(context.Background())
	}
	if c.ctx.Err() != nil {
		return nil
	}
	if c.lookups == nil {
		c.lookups = make(map[string]*lookup)
	}
	l := &lookup{done: make(chan struct{})}
	c.lookups[name] = l
	ctx, cancel := context.WithTimeout(c.ctx, orDefault(c.LookupTimeout, DefaultLookupTimeout))
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		defer cancel()
		addr, err := c.resolve(ctx, name)
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.lookups, name)
		close(l.done)
		if e := c.getLocked(name, time.Now()); e != nil && e.browser {
			return // what the browser connected to stands
		}
		if err != nil {
			c.putLocked(name, netip.Addr{}, false, time.Now().Add(orDefault(c.UnknownTTL, DefaultUnknownTTL)))
			return
		}
		c.putLocked(name, addr, false, time.Now().Add(orDefault(c.LookupTTL, DefaultLookupTTL)))
	}()
	return l
}

// resolve asks the resolver for name's first address.
func (c *Cache) resolve(ctx context.Context, name string) (netip.Addr, error) {
	lookup := c.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	addrs, err := lookup(ctx, name)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a.IsValid() {
			return a.Unmap().WithZone(""), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("resolve: %s: no address", name)
}

// getLocked returns name's entry unless it expired, and marks it used.
// Callers hold mu.
func (c *Cache) getLocked(name string, now time.Time) *entry {
	el := c.names[name]
	if el == nil {
		return nil
	}
	e := el.Value.(*entry)
	if !now.Before(e.expires) {
		c.lru.Remove(el)
		delete(c.names, name)
		return nil
	}
	c.lru.MoveToFront(el)
	return e
}

// putLocked records what is known of name until expires, forgetting the
// least recently used name past Size. Callers hold mu.
func (c *Cache) putLocked(name string, addr netip.Addr, browser bool, expires time.Time) {
	if c.names == nil {
		c.names = make(map[string]*list.Element)
	}
	e := &entry{name: name, addr: addr.Unmap().WithZone(""), browser: browser, expires: expires}
	if el := c.names[name]; el != nil {
		el.Value = e
		c.lru.MoveToFront(el)
		return
	}
	c.names[name] = c.lru.PushFront(e)
	for c.lru.Len() > orDefault(c.Size, DefaultSize) {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.names, old.Value.(*entry).name)
	}
}

// Len reports how many names are kept.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Close ends the lookups under way and waits for them; Addr asks the
// resolver no more.
func (c *Cache) Close() {
	c.mu.Lock()
	if c.ctx == nil {
		c.ctx, c.stop = context.WithCancel(context.Background())
	}
	c.stop()
	c.mu.Unlock()
	c.running.Wait()
}

// mapped applies what needs no cache: a name that is an address already
// (IPv6 in brackets, as limiter.Key writes it) is its own; the rules may
// map it to an address, fail it, or name another name to look up. done
// reports an answer (addr, ok); otherwise look is the name to look up.
func (c *Cache) mapped(name string) (look string, addr netip.Addr, ok, done bool) {
	if a, lit := literal(name); lit {
		return "", a, true, true
	}
	to, m := c.Rules.Map(name)
	switch {
	case !m:
		return name, netip.Addr{}, false, false
	case to == notFound:
		return "", netip.Addr{}, false, true
	}
	if a, lit := literal(to); lit {
		return "", a, true, true
	}
	return to, netip.Addr{}, false, false
}

// literal reads an address, IPv6 in brackets or not.
func literal(name string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

func orDefault[T time.Duration | int](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
