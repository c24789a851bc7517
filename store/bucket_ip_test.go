package store

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// TestBucketIPShared: with --bucket ip and a shared store, the Redis key
// is the address: two relays, each knowing one host on 10.0.0.7 (learned
// from its own browser), book one schedule.
func TestBucketIPShared(t *testing.T) {
	srv := startRedis(t)
	flags := policy.Flags{Delay: "200ms", Burst: "1", Bucket: "ip", IPSource: "browser"}
	prefix := "bucketip:"
	relay := func(host string) *policy.Policy {
		c, err := policy.FromFlags(flags) // each relay its own address cache
		if err != nil {
			t.Fatal(err)
		}
		p := policy.New(c, newStore(t, srv, c.Default, Options{Prefix: prefix, Timeout: patient}))
		t.Cleanup(p.Close)
		p.Observe(host, limiter.Outcome{Status: 200, Addr: netip.MustParseAddr("10.0.0.7")}, time.Now())
		return p
	}
	a, b := relay("a.test"), relay("b.test")
	now := time.Now()
	ra := a.Reserve(context.Background(), "a.test", "http://a.test/", now)
	rb := b.Reserve(context.Background(), "b.test", "http://b.test/", now)
	if ra.Bucket != "10.0.0.7" || rb.Bucket != "10.0.0.7" {
		t.Fatalf("buckets %q and %q, want 10.0.0.7 for both", ra.Bucket, rb.Bucket)
	}
	if got := rb.Start.Sub(ra.Start); got < 195*time.Millisecond || got > 205*time.Millisecond {
		t.Errorf("b.test's slot %v after a.test's, want 200ms: one schedule across the relays", got)
	}
	keys, err := srv.client().Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range keys {
		found = found || k == prefix+"10.0.0.7"
		if k == prefix+"a.test" || k == prefix+"b.test" {
			t.Errorf("key %s: want the address's, not a host's", k)
		}
	}
	if !found {
		t.Errorf("keys %v, want %s10.0.0.7", keys, prefix)
	}
}
