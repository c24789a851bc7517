package policy

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/resolve"
)

// fakeDNS answers from a map; a name it lacks does not resolve, and
// hang.test never answers before its context ends.
func fakeDNS(ctx context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "a.test", "b.test":
		return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
	case "c.test":
		return []netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("10.0.0.8")}, nil
	case "hang.test":
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, errors.New("no such host")
}

func ipPolicy(t *testing.T, f Flags) *Policy {
	t.Helper()
	f.Bucket = "ip"
	cfg := mustConfig(t, f)
	cfg.Addrs.Lookup = fakeDNS
	p := New(cfg, limiter.New(cfg.Default))
	t.Cleanup(p.Close)
	return p
}

// TestIPBuckets: hosts on one address share one schedule; the address
// is the browser's when it told, else the resolver's; a host whose
// address is not known is its own bucket.
func TestIPBuckets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := ipPolicy(t, Flags{Delay: "100ms", Burst: "1"})
		now := time.Now()
		p.Observe("learned.test", limiter.Outcome{Status: 200, Addr: netip.MustParseAddr("10.0.0.7")}, now)
		p.Observe("lo.test", limiter.Outcome{Status: 200, Addr: netip.MustParseAddr("127.0.0.1")}, now)
		tests := []struct {
			host   string
			bucket string
			start  time.Duration // after now, all asked for at now
		}{
			{"a.test", "10.0.0.7", 0},
			{"b.test", "10.0.0.7", 100 * time.Millisecond},
			{"learned.test", "10.0.0.7", 200 * time.Millisecond}, // from the browser, never looked up
			{"c.test", "[2001:db8::1]", 0},                       // the resolver's first address, IPv6 as limiter.Key writes it
			{"d.invalid", "d.invalid", 0},                        // does not resolve: its host bucket
			{"d.invalid", "d.invalid", 100 * time.Millisecond},
			{"10.0.0.7", "10.0.0.7", 300 * time.Millisecond}, // an address navigated to is its own bucket
			{"lo.test", "127.0.0.1", 0},                      // on loopback, not exempt: exemption is by name
			{"127.0.0.2", "127.0.0.2", 0},                    // not exempt, as today
		}
		for i, tt := range tests {
			r := p.Reserve(context.Background(), tt.host, "http://"+tt.host+"/", now)
			if r.Bucket != tt.bucket || r.Start.Sub(now) != tt.start || !r.Tracked {
				t.Errorf("%d %s: got bucket %q at %v (tracked %v); want %q at %v", i, tt.host, r.Bucket, r.Start.Sub(now), r.Tracked, tt.bucket, tt.start)
			}
			if got := p.Bucket(tt.host); got != tt.bucket {
				t.Errorf("%d Bucket(%s): got %q, want %q", i, tt.host, got, tt.bucket)
			}
		}
		if r := p.Reserve(context.Background(), "localhost", "http://localhost/", now); r.Tracked {
			t.Errorf("localhost: booked in %q; want exempt, as without --bucket ip", r.Bucket)
		}
		if got := p.Buckets(); got != "ip" {
			t.Errorf("Buckets(): got %q, want ip", got)
		}
	})
}

// TestIPBucketBrowserMoves: the address the browser connected to wins
// over the resolver's, and follows the host when it moves.
func TestIPBucketBrowserMoves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := ipPolicy(t, Flags{Delay: "100ms", Burst: "1"})
		now := time.Now()
		if r := p.Reserve(context.Background(), "a.test", "http://a.test/", now); r.Bucket != "10.0.0.7" {
			t.Fatalf("resolver: bucket %q, want 10.0.0.7", r.Bucket)
		}
		p.Observe("a.test", limiter.Outcome{Status: 200, Addr: netip.MustParseAddr("192.0.2.9")}, now)
		if r := p.Reserve(context.Background(), "a.test", "http://a.test/", now); r.Bucket != "192.0.2.9" || r.Start != now {
			t.Errorf("after the browser connected to 192.0.2.9: bucket %q at %v, want 192.0.2.9 at once", r.Bucket, r.Start.Sub(now))
		}
		p.Observe("a.test", limiter.Outcome{NoAnswer: true}, now) // a failure says no address: nothing changes
		if got := p.Bucket("a.test"); got != "192.0.2.9" {
			t.Errorf("after a failure: bucket %q, want 192.0.2.9", got)
		}
	})
}

// TestIPBucketBoundedWait: a lookup that hangs holds the first
// navigation of its host one second at most, and the next ones not at
// all; the booking counts from when the wait ended.
func TestIPBucketBoundedWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := ipPolicy(t, Flags{Delay: "100ms", Burst: "1"})
		now := time.Now()
		r := p.Reserve(context.Background(), "hang.test", "http://hang.test/", now)
		if waited := time.Since(now); waited != resolve.DefaultWait || r.Bucket != "hang.test" || r.Start.Sub(now) != resolve.DefaultWait {
			t.Errorf("first: waited %v, bucket %q, slot at %v; want %v, hang.test, at %v", waited, r.Bucket, r.Start.Sub(now), resolve.DefaultWait, resolve.DefaultWait)
		}
		now = time.Now()
		r = p.Reserve(context.Background(), "hang.test", "http://hang.test/", now)
		if waited := time.Since(now); waited != 0 || r.Bucket != "hang.test" || r.Start.Sub(now) != 100*time.Millisecond {
			t.Errorf("second: waited %v, bucket %q, slot at %v; want 0, hang.test, at 100ms", waited, r.Bucket, r.Start.Sub(now))
		}
	})
}

// TestIPBucketRules: two hosts on one address with different rules
// share one schedule, each booking with its own host's setting, as two
// hosts of one site do with --bucket site; the cap too is the bucket's,
// with the entering host's limit.
func TestIPBucketRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := ipPolicy(t, Flags{Delay: "100ms", Burst: "1", Rules: []string{"b.test=fixed:1s,concurrency:1"}})
		now := time.Now()
		var got []time.Duration
		for _, h := range []string{"a.test", "b.test", "a.test"} {
			r := p.Reserve(context.Background(), h, "http://"+h+"/", now)
			got = append(got, r.Start.Sub(now))
		}
		if got[0] != 0 || got[1] != 100*time.Millisecond || got[2] != 1100*time.Millisecond {
			t.Errorf("a, b, a: slots %v; want 0s 100ms 1.1s: b's 1s spacing moves the address's schedule", got)
		}
		pl, err := p.Enter(context.Background(), "b.test")
		if err != nil || pl == nil || pl.Bucket != "10.0.0.7" || pl.Limit != 1 {
			t.Fatalf("b.test's place: %+v, %v; want one in 10.0.0.7 under b.test's cap of 1", pl, err)
		}
		defer pl.Leave()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if pl2, err := p.Enter(ctx, "b.test"); pl2 != nil || err == nil {
			t.Errorf("a second b.test: got a place %+v; want none while b.test's one is in flight", pl2)
		}
	})
}

func TestIPSourceFlag(t *testing.T) {
	for _, tt := range []struct {
		f    Flags
		want resolve.Source
		err  bool
	}{
		{f: Flags{Bucket: "ip"}, want: resolve.Both},
		{f: Flags{Bucket: "ip", IPSource: "resolver"}, want: resolve.Resolver},
		{f: Flags{Bucket: "IP", IPSource: "browser"}, want: resolve.Browser},
		{f: Flags{Bucket: "ip", IPSource: "dns"}, err: true},
		{f: Flags{Bucket: "host", IPSource: "resolver"}, err: true},
	} {
		c, err := FromFlags(tt.f)
		if (err != nil) != tt.err || err == nil && (c.Bucket != ByIP || c.Addrs == nil || c.Addrs.Source != tt.want) {
			t.Errorf("%+v: got %v, %+v; want source %v, error %v", tt.f, err, c.Addrs, tt.want, tt.err)
		}
	}
	if c, _ := FromFlags(Flags{}); c.Addrs != nil {
		t.Error("--bucket host: an address cache")
	}
}
