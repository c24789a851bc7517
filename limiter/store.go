package limiter

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// shardCount is how many shards hosts are spread over: a power of two, so
// that inserting a new host, the only step that takes a shard's lock, rarely
// waits for another core.
const shardCount = 64

// minSweep is the size below which a shard never bothers to sweep.
const minSweep = 256

// forgetGrace is how long a host stays remembered after it became idle.
// Callers take now before they reach the shard, so a booking may arrive
// with a now a little older than a sweep's; a host idle for forgetGrace is
// booked the same, whether remembered or not, by any now within forgetGrace
// of the sweep's.
const forgetGrace = time.Second

// record is one remembered host with its own lock.
type record struct {
	mu sync.Mutex
	host
}

// shard holds the hosts whose names hash to it. Lookups read an immutable
// map without any lock (read); hosts added since it was built wait in
// dirty, under mu, until the next rebuild folds them in. A rebuild also
// forgets idle hosts, marking their records gone under their own lock, so a
// navigation that found a record in an old map notices and looks again.
//
// Lock order: mu before any record's mu.
type shard struct {
	read    atomic.Pointer[map[string]*record] // never written once stored
	mu      sync.Mutex
	dirty   map[string]*record // guarded by mu; hosts added since read was built
	misses  int                // guarded by mu; lookups that found their host in dirty
	sweepAt int                // guarded by mu; rebuild when the shard reaches this size
	_       [88]byte           // pad to 128 bytes: neighbouring shards never share a cache line
}

func (s *shard) init() {
	s.read.Store(&map[string]*record{})
	s.dirty = make(map[string]*record)
	s.sweepAt = minSweep
}

// lock returns the record of name with its mu held. When the shard does
// not know name it returns nil with s.mu held instead, for the caller to
// insert the host and unlock s.mu.
func (s *shard) lock(name string, t int64) *record {
	if r := (*s.read.Load())[name]; r != nil {
		r.mu.Lock()
		if !r.gone {
			return r
		}
		r.mu.Unlock() // forgotten meanwhile; the maps under s.mu say what is current
	}
	s.mu.Lock()
	r := (*s.read.Load())[name]
	if r == nil {
		if r = s.dirty[name]; r == nil {
			return nil
		}
		if s.misses++; s.misses >= max(len(s.dirty), len(*s.read.Load())/8, 16) {
			s.rebuild(t) // a host found only under the lock keeps being looked up: fold dirty in
			if (*s.read.Load())[name] == nil {
				return nil // the rebuild forgot it as idle at t: the caller books it afresh
			}
		}
	}
	// Under s.mu no record in read or dirty is gone.
	r.mu.Lock()
	s.mu.Unlock()
	return r
}

// insert adds a host the shard does not know, rebuilding first when the
// shard has doubled since the last sweep. Callers hold s.mu.
func (s *shard) insert(name string, h host, t int64) {
	if len(*s.read.Load())+len(s.dirty) >= s.sweepAt {
		s.rebuild(t)
		s.sweepAt = max(minSweep, 2*len(*s.read.Load()))
	}
	// The name often points into a whole URL; keep only the host's bytes.
	s.dirty[strings.Clone(name)] = &record{host: h}
}

// rebuild folds dirty into a new read map, leaving out and marking gone
// the hosts idle at t, and reports how many it forgot. Callers hold s.mu.
func (s *shard) rebuild(t int64) int {
	old := *s.read.Load()
	next := make(map[string]*record, len(old)+len(s.dirty))
	forgotten := 0
	for _, m := range []map[string]*record{old, s.dirty} {
		for name, r := range m {
			r.mu.Lock()
			if r.idle(t - int64(forgetGrace)) {
				r.gone = true
				forgotten++
			} else {
				next[name] = r
			}
			r.mu.Unlock()
		}
	}
	s.read.Store(&next)
	s.dirty = make(map[string]*record)
	s.misses = 0
	return forgotten
}

func (s *shard) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(*s.read.Load()) + len(s.dirty)
}
