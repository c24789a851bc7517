package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/store/redistest"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

func TestParseKind(t *testing.T) {
	for _, tt := range []struct {
		url  string
		want Kind
		err  string
	}{
		{"redis://127.0.0.1:6379/0", Single, ""},
		{"redis://127.0.0.1:26379/0?master_name=m&addr=127.0.0.1:26380&addr=127.0.0.1:26381", Sentinel, ""},
		{"redis-cluster://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", Cluster, ""},
		{"rediss-cluster://127.0.0.1:7000", Cluster, ""},
		{"redis://127.0.0.1:26379/0?master_name=", "", "master_name is empty"},
		{"redis://127.0.0.1:26379/0?master_name=m&addr=nope", "", "sentinel URL"},
		{"redis-cluster://127.0.0.1:7000?addr=nope", "", "cluster URL"},
		{"http://127.0.0.1/", "", "redis URL"},
	} {
		got, err := ParseKind(tt.url)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: got %v, want an error with %q", tt.url, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.url, got, err, tt.want)
		}
	}
}

// TestSentinelFailover: a store on a master that Sentinel watches books
// there; with the master killed it holds navigations (closed fallback)
// until the sentinels promote the replica, then books on the new master,
// whose schedule carries on from the old one's (the replica had it), and
// says once that it follows the new master.
func TestSentinelFailover(t *testing.T) {
	rs := redistest.StartSentinels(t)
	logs := &fakebrowser.Logs{}
	log := zerolog.New(logs)
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: 10 * time.Second, Burst: 1}
	s, err := NewRedis(context.Background(), rs.URL(), cfg, Options{Fallback: FallbackClosed, Log: &log, Prefix: "t:", ProbeInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Kind() != Sentinel {
		t.Fatalf("kind %q, want sentinel", s.Kind())
	}
	now := time.Now()
	first := s.Reserve("a.example", now)
	second := s.Reserve("a.example", now)
	if !first.Tracked || first.Retry || second.Start.Sub(first.Start) < 9*time.Second {
		t.Fatalf("bookings on the master: %+v then %+v, want the second 10s after the first", first, second)
	}
	// Until the replica has it, a booking lives on the master alone.
	if err := rs.Master.Client().Wait(context.Background(), 1, time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	rs.Master.Kill()
	if r := s.Reserve("a.example", time.Now()); !r.Retry {
		t.Fatalf("a booking with the master dead: %+v, want a hold", r)
	}
	took, err := rs.WaitFailover(rs.Master.Addr(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var third limiter.Reservation
	deadline := time.Now().Add(10 * time.Second)
	for third = s.Reserve("a.example", time.Now()); third.Retry; third = s.Reserve("a.example", time.Now()) {
		if time.Now().After(deadline) {
			t.Fatalf("no booking on the new master within 10s of the failover:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the sentinels promoted the replica %v after the master died", took)
	if d := third.Start.Sub(second.Start); d < 9*time.Second || d > 11*time.Second {
		t.Errorf("the booking after the failover starts %v after the last one before, want 10s: the replica had the schedule", d)
	}
	if n := strings.Count(logs.String(), "redis failover: following the new master"); n != 1 || s.Failovers() != 1 {
		t.Errorf("the failover logged %d times, counted %d, want once:\n%s", n, s.Failovers(), logs)
	}
	if !strings.Contains(logs.String(), rs.Replica.Addr()) {
		t.Errorf("the log does not name the new master %s:\n%s", rs.Replica.Addr(), logs)
	}
}

// TestClusterNodeDown: two stores on a three-node Redis Cluster share one
// schedule per host, whichever node holds it; with one node killed, only
// its hosts fall back (each store books them on its own), the others stay
// shared.
func TestClusterNodeDown(t *testing.T) {
	rc := redistest.StartCluster(t, 3)
	logs := &fakebrowser.Logs{}
	log := zerolog.New(logs)
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: 10 * time.Second, Burst: 1}
	open := func() *Redis {
		s, err := NewRedis(context.Background(), rc.URL(), cfg, Options{Prefix: "t:", Log: &log, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	if a.Kind() != Cluster {
		t.Fatalf("kind %q, want cluster", a.Kind())
	}
	// One host on each node.
	hosts := map[*redistest.Process]string{}
	for i := 0; len(hosts) < 3 && i < 1000; i++ {
		h := fmt.Sprintf("h%d.example", i)
		if n := rc.NodeOf(t, "t:"+h); hosts[n] == "" {
			hosts[n] = h
		}
	}
	if len(hosts) != 3 {
		t.Fatalf("hosts on %d nodes, want 3", len(hosts))
	}
	now := time.Now()
	for _, h := range hosts {
		ra, rb := a.Reserve(h, now), b.Reserve(h, now)
		if d := rb.Start.Sub(ra.Start); !ra.Tracked || !rb.Tracked || d < 9*time.Second {
			t.Fatalf("%s booked by two stores: %v apart, want 10s (one schedule)", h, d)
		}
	}
	if got := len(a.Busiest(time.Now(), 10)); got != 3 {
		t.Errorf("Busiest: %d hosts, want the 3 of every node", got)
	}
	dead := rc.Nodes[0]
	dead.Kill()
	for n, h := range hosts {
		ra, rb := a.Reserve(h, now), b.Reserve(h, now)
		shared := rb.Start.Sub(ra.Start) >= 9*time.Second && ra.Start.Sub(now) >= 19*time.Second
		if n == dead && shared {
			t.Errorf("%s, on the node killed: booked in Redis", h)
		}
		if n != dead && !shared {
			t.Errorf("%s, on a node alive: starts %v and %v after now, want the shared schedule's 20s and 30s", h, ra.Start.Sub(now), rb.Start.Sub(now))
		}
	}
	if a.Outages() != 1 || a.Fallbacks() != 1 || b.Fallbacks() != 1 {
		t.Errorf("outages %d, fallbacks %d and %d; want 1, 1, 1 (the dead node's host only)", a.Outages(), a.Fallbacks(), b.Fallbacks())
	}
	if !strings.Contains(logs.String(), `"node":"`+dead.Addr()+`"`) {
		t.Errorf("the log does not name the dead node %s:\n%s", dead.Addr(), logs)
	}
}

// TestClusterInflight: the in-flight cap's places in a Redis Cluster: one
// bucket on each node, the cap of 1 holds across two stores; with a node
// killed, only its bucket's places fall back to each relay alone.
func TestClusterInflight(t *testing.T) {
	rc := redistest.StartCluster(t, 3)
	open := func() *Redis {
		s, err := NewRedis(context.Background(), rc.URL(), limiter.Config{}, Options{Prefix: "c:", Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	buckets := map[*redistest.Process]string{}
	for i := 0; len(buckets) < 3 && i < 1000; i++ {
		h := fmt.Sprintf("h%d.example", i)
		if n := rc.NodeOf(t, a.inflightKey(h)); buckets[n] == "" {
			buckets[n] = h
		}
	}
	if len(buckets) != 3 {
		t.Fatalf("buckets on %d nodes, want 3", len(buckets))
	}
	for _, h := range buckets {
		if !a.Enter(h, "1", 1) || b.Enter(h, "1", 1) || a.InFlight(h) != 1 {
			t.Fatalf("%s: the cap of 1 does not hold across two stores on the cluster", h)
		}
		a.Leave(h, "1")
		if !b.Enter(h, "2", 1) {
			t.Fatalf("%s: a place given back is not free", h)
		}
	}
	dead := rc.Nodes[0]
	dead.Kill()
	for n, h := range buckets {
		took := a.Enter(h, "3", 1) // b holds the place: only a relay alone would take one
		if n == dead && !took {
			t.Errorf("%s, on the node killed: no place in the local fallback", h)
		}
		if n != dead && took {
			t.Errorf("%s, on a node alive: a second place under a cap of 1", h)
		}
	}
}
