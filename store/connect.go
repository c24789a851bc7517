package store

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The three ways to reach Redis, all go-redis's own clients: one server,
// a master that Redis Sentinel watches and fails over (go-redis's failover
// client asks the sentinels for the master and follows it), and a Redis
// Cluster (go-redis's cluster client sends each key to the node that owns
// its slot). The store adds no failover logic of its own: it only notices
// when the master moved, to say so, and in a cluster keeps an outage per
// node, so that only the hosts of a node that does not answer fall back.
//
// Every step touches one key, so each runs whole on the node that owns it.

// Kind is how a store reaches Redis.
type Kind string

const (
	// Single is one Redis server: redis://HOST:PORT/DB.
	Single Kind = "single"
	// Sentinel is a master watched by Redis Sentinel:
	// redis://S1:26379/DB?master_name=NAME&addr=S2:26379&addr=S3:26379, the
	// addresses those of the sentinels.
	Sentinel Kind = "sentinel"
	// Cluster is a Redis Cluster: redis-cluster://N1:7000?addr=N2:7001,
	// any of its nodes (more with addr).
	Cluster Kind = "cluster"
)

// ParseKind tells how a --store URL reaches Redis, checking that go-redis
// can read it.
func ParseKind(raw string) (Kind, error) {
	k, _, err := parse(raw)
	return k, err
}

// clusterSchemes maps the cluster forms of the URL to go-redis's, which
// reads a cluster URL with the plain schemes.
var clusterSchemes = map[string]string{"redis-cluster": "redis", "rediss-cluster": "rediss"}

// parse reads a --store URL into go-redis's options for its kind: a
// *redis.Options, *redis.FailoverOptions or *redis.ClusterOptions.
func parse(raw string) (Kind, any, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", nil, fmt.Errorf("store: redis URL: %w", err)
	}
	if scheme, ok := clusterSchemes[strings.ToLower(u.Scheme)]; ok {
		u.Scheme = scheme
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return "", nil, fmt.Errorf("store: redis cluster URL: %w", err)
		}
		return Cluster, o, nil
	}
	if u.Query().Has("master_name") {
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return "", nil, fmt.Errorf("store: redis sentinel URL: %w", err)
		}
		if o.MasterName == "" {
			return "", nil, fmt.Errorf("store: redis sentinel URL: master_name is empty")
		}
		return Sentinel, o, nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return "", nil, fmt.Errorf("store: redis URL: %w", err)
	}
	return Single, o, nil
}

// connect makes the go-redis client for raw. Every call is bounded by
// timeout through its context, dialing included, and never retried by the
// client on a timeout or a lost connection: a step that timed out may
// have run, and running it again would book a second slot. (A cluster
// node's MOVED or ASK is followed: the step did not run there.)
func (s *Redis) connect(raw string, timeout time.Duration) error {
	kind, opts, err := parse(raw)
	if err != nil {
		return err
	}
	s.kind = kind
	switch o := opts.(type) {
	case *redis.Options:
		s.addr = fmt.Sprintf("%s/%d", o.Addr, o.DB)
		o.ContextTimeoutEnabled = true
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
		o.MaxRetries, o.DialerRetries = -1, 1
		o.DisableIdentity = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		s.client = redis.NewClient(o)
	case *redis.FailoverOptions:
		s.addr = fmt.Sprintf("master %s of sentinels %s/%d", o.MasterName, strings.Join(o.SentinelAddrs, ","), o.DB)
		o.ContextTimeoutEnabled = true
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
		o.MaxRetries, o.DialerRetries = -1, 1
		o.DisableIdentity = true
		c := redis.NewFailoverClient(o)
		// It dials the master the sentinels name: each connection says
		// where the master is now.
		c.AddHook(masterHook{s})
		s.client = c
	case *redis.ClusterOptions:
		s.addr = "cluster " + strings.Join(o.Addrs, ",")
		o.ContextTimeoutEnabled = true
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = timeout, timeout, timeout, timeout
		o.MaxRetries, o.DialerRetries = -1, 1
		o.DisableIdentity = true
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		c := redis.NewClusterClient(o)
		s.cluster, s.client = c, c
		s.nodes = &nodeOutages{byAddr: map[string]*outage{}}
	}
	return nil
}

// master follows where a Sentinel-watched master is, from go-redis's
// dials, and logs each move once.
type master struct {
	mu        sync.Mutex
	addr      string // guarded by mu; "" before the first dial
	failovers atomic.Uint64
}

// masterHook watches the connections a failover client makes to the
// master (its sentinels' are their own clients').
type masterHook struct{ s *Redis }

func (h masterHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err == nil {
			h.s.master.connected(h.s, c.RemoteAddr().String())
		}
		return c, err
	}
}

func (masterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (masterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (m *master) connected(s *Redis, addr string) {
	m.mu.Lock()
	prev := m.addr
	m.addr = addr
	m.mu.Unlock()
	switch {
	case prev == "":
		s.log.Info().Str("redis", s.addr).Str("master", addr).Msg("redis master, as the sentinels name it")
	case prev != addr:
		m.failovers.Add(1)
		s.log.Warn().Str("redis", s.addr).Str("from", prev).Str("to", addr).Msg("redis failover: following the new master")
	}
}

// Failovers reports how many times a Sentinel-watched master moved, as the
// store saw it.
func (s *Redis) Failovers() uint64 { return s.master.failovers.Load() }

// Conns reports the connections to Redis open now (idle ones included;
// those of a cluster's every node).
func (s *Redis) Conns() int { return int(s.client.PoolStats().TotalConns) }

// Kind reports how the store reaches Redis.
func (s *Redis) Kind() Kind { return s.kind }

// outage is the state of one way to Redis: the whole of it, or one node of
// a cluster.
type outage struct {
	name      string       // for logs: "" for the whole of it, else the node's address
	down      atomic.Bool  // its last call failed
	nextProbe atomic.Int64 // unix ns; while down, the first call after it tries Redis
	downSince atomic.Int64 // unix ns
}

// nodeOutages are a cluster's outages, one per master node.
type nodeOutages struct {
	mu     sync.Mutex
	byAddr map[string]*outage // guarded by mu; bounded by the cluster's nodes
}

// outageOf returns the outage a call on key counts against: in a cluster,
// that of the node that owns the key's slot, as the client knows it.
func (s *Redis) outageOf(key string) *outage {
	if s.cluster == nil {
		return &s.whole
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	addr := ""
	if c, err := s.cluster.MasterForKey(ctx, key); err == nil {
		addr = c.Options().Addr
	}
	s.nodes.mu.Lock()
	defer s.nodes.mu.Unlock()
	o := s.nodes.byAddr[addr]
	if o == nil {
		o = &outage{name: addr}
		s.nodes.byAddr[addr] = o
	}
	return o
}

// scan returns up to max keys matching pattern: on each master of a
// cluster (those that answer), else on the one server.
func (s *Redis) scan(ctx context.Context, pattern string, max int) ([]string, error) {
	one := func(ctx context.Context, c redis.UniversalClient) ([]string, error) {
		var keys []string
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) && len(keys) < max {
			keys = append(keys, iter.Val())
		}
		return keys, iter.Err()
	}
	if s.cluster == nil {
		return one(ctx, s.client)
	}
	var mu sync.Mutex
	var keys []string
	s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		k, _ := one(ctx, c) // a node that does not answer shows nothing
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, k[:min(len(k), max-len(keys))]...)
		return nil
	})
	return keys, nil
}
