package store

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The places of the in-flight cap (package inflight), fleet-wide: Redis
// implements inflight.Table. Each place is a lease in a sorted set per
// bucket (Options.Prefix + "inflight:" + bucket), taken by one atomic
// script step when fewer than the cap are taken, and given back when its
// navigation ends. While the navigation is in flight, the store renews its
// lease every Options.Lease / 3; a relay that dies stops renewing, and its
// leases run out after Options.Lease, so it holds no place for long.
//
// While Redis does not answer, the fallback decides, as for bookings: by
// default places are counted in this process only, as if the relay were
// alone; with FallbackClosed no place is given until Redis answers.

// DefaultLease is how long a lease lives unless renewed: how long the
// places of a relay that died are held.
const DefaultLease = 3 * time.Second

//go:embed inflight.lua
var inflightSource string

var inflightStep = script(inflightSource)

// leases are the places this store holds, by bucket.
type leases struct {
	mu   sync.Mutex
	held map[string]map[string]bool // guarded by mu; bucket → lease → taken in Redis (false: in this process, while Redis was down)
}

func (l *leases) add(bucket, lease string, inRedis bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addLocked(bucket, lease, inRedis)
}

func (l *leases) addLocked(bucket, lease string, inRedis bool) {
	if l.held == nil {
		l.held = make(map[string]map[string]bool)
	}
	if l.held[bucket] == nil {
		l.held[bucket] = make(map[string]bool)
	}
	l.held[bucket][lease] = inRedis
}

// addUnder takes a place in this process when fewer than limit are held
// here.
func (l *leases) addUnder(bucket, lease string, limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.held[bucket]) >= limit {
		return false
	}
	l.addLocked(bucket, lease, false)
	return true
}

// remove forgets a lease and reports whether it was taken in Redis.
func (l *leases) remove(bucket, lease string) (inRedis bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	inRedis = l.held[bucket][lease]
	delete(l.held[bucket], lease)
	if len(l.held[bucket]) == 0 {
		delete(l.held, bucket)
	}
	return inRedis
}

func (l *leases) count(bucket string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held[bucket])
}

// inRedis returns the leases taken in Redis, by bucket.
func (l *leases) inRedis() map[string][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]string, len(l.held))
	for bucket, ls := range l.held {
		for lease, r := range ls {
			if r {
				out[bucket] = append(out[bucket], lease)
			}
		}
	}
	return out
}

func newOwner() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Enter takes a place of bucket for id when fewer than limit are taken
// by every relay on this Redis, and reports whether it did
// (inflight.Table). It blocks for one call to Redis at most.
func (s *Redis) Enter(bucket, id string, limit int) bool {
	lease := s.owner + ":" + id
	if o := s.outageOf(s.inflightKey(bucket)); s.tryRedis(o) {
		v, err := s.runInflight("enter", bucket, limit, lease)
		if err == nil {
			s.answered(o)
			if v[0] == 1 {
				s.leases.add(bucket, lease, true)
				return true
			}
			return false
		}
		s.failed(o, err)
	}
	if s.holds {
		return false
	}
	if s.leases.addUnder(bucket, lease, limit) {
		s.fallbacks.Add(1)
		return true
	}
	return false
}

// Leave gives id's place of bucket back (inflight.Table). When Redis does
// not answer, the lease runs out by itself.
func (s *Redis) Leave(bucket, id string) {
	lease := s.owner + ":" + id
	o := s.outageOf(s.inflightKey(bucket))
	if !s.leases.remove(bucket, lease) || !s.tryRedis(o) {
		return
	}
	if _, err := s.runInflight("leave", bucket, 0, lease); err != nil {
		s.failed(o, err)
		return
	}
	s.answered(o)
}

// InFlight reports how many places of bucket every relay on this Redis
// holds (inflight.Table); while Redis does not answer, this relay's.
func (s *Redis) InFlight(bucket string) int {
	if !s.outageOf(s.inflightKey(bucket)).down.Load() {
		if v, err := s.runInflight("count", bucket, 0); err == nil {
			return int(v[1])
		}
	}
	return s.leases.count(bucket)
}

// renew renews the leases this store holds in Redis, every Lease/3, until
// stop is closed.
func (s *Redis) renew(stop <-chan struct{}) {
	t := time.NewTicker(s.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for bucket, ls := range s.leases.inRedis() {
			o := s.outageOf(s.inflightKey(bucket))
			if !s.tryRedis(o) {
				continue
			}
			if _, err := s.runInflight("renew", bucket, 0, ls...); err != nil {
				s.failed(o, err)
				continue
			}
			s.answered(o)
		}
	}
}

// runInflight runs one step of the in-flight script for bucket.
func (s *Redis) runInflight(op, bucket string, limit int, leases ...string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	nowArg := ""
	if s.clock != nil {
		nowArg = strconv.FormatInt(s.clock().UnixMicro(), 10)
	}
	args := append([]any{op, nowArg, s.lease.Microseconds(), limit}, anys(leases)...)
	v, err := inflightStep.Run(ctx, s.client, []string{s.inflightKey(bucket)}, args...).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("in-flight script returned %d values, want 2", len(v))
	}
	return v, err
}

func (s *Redis) inflightKey(bucket string) string { return s.prefix + inflightInfix + bucket }

// inflightInfix follows the prefix in the keys of the in-flight places,
// which no host's key can start with.
const inflightInfix = "inflight:"

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
