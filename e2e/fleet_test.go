//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/store"
	"github.com/cdp-throttle/cdp-throttle/store/redistest"
)

// lpRelay launches the binary in front of Lightpanda with args (before --)
// and waits until it is ready.
func lpRelay(t *testing.T, browsers int, args ...string) *launched {
	t.Helper()
	argv := append(append([]string{"--log-level", "debug", "--browsers", strconv.Itoa(browsers)}, args...),
		"--", lightpandaBin(t), "serve", "--host", "127.0.0.1", "--port", "{port}")
	l, ready := launch(t, argv...)
	if !ready {
		t.Fatalf("relay not ready:\n%s", l.logs.raw.String())
	}
	return l
}

// crawl has pages clients on each endpoint navigate to host, one after
// another each, until n navigations were sent; at(k) is called as the
// server sees the k-th. It returns when every navigation was answered.
func crawl(t *testing.T, s *site, host string, n int, endpoints []string, pages int, at func(k int)) {
	t.Helper()
	var clients []pageClient
	for _, ep := range endpoints {
		for range pages {
			clients = append(clients, newPageClient(t, ep))
		}
	}
	run := runID()
	var seen atomic.Int64
	s.onHit(func(h hit) {
		if h.Host == host && strings.Contains(h.Path, run) && at != nil {
			at(int(seen.Add(1)))
		}
	})
	defer s.onHit(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for k := next.Add(1); k <= int64(n); k = next.Add(1) {
				if err := c.navigate(context.Background(), 2*time.Minute, s.url(host, fmt.Sprintf("/page/%s/%d", run, k))); err != nil {
					t.Errorf("navigation %d: %v", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// minGap is the shortest gap between two of at, sorted.
func minGap(at []time.Time) (time.Duration, int) {
	at = slices.SortedFunc(slices.Values(at), func(a, b time.Time) int { return a.Compare(b) })
	best, k := time.Duration(1<<62), -1
	for i := 1; i < len(at); i++ {
		if g := at[i].Sub(at[i-1]); g < best {
			best, k = g, i
		}
	}
	return best, k
}

// TestSentinelFailover: two relays, each in front of a Lightpanda, share a
// master that three Redis Sentinels watch, at fixed 200 ms, burst 1, with
// --store-fallback closed. The master is SIGKILLed a third of the way
// through 120 navigations to one host: all 120 arrive, never two closer
// than 160 ms (what Redis had booked was on the replica the sentinels
// promoted; while there was no master, navigations waited), and each
// relay logs the failover once.
func TestSentinelFailover(t *testing.T) {
	const n, spacing, bound = 120, 200 * time.Millisecond, 40 * time.Millisecond
	rs := redistest.StartSentinels(t)
	args := []string{"--store", rs.URL(), "--store-fallback", "closed", "--http-nav-delay", "200", "--http-nav-burst", "1"}
	relays := []*launched{lpRelay(t, 1, args...), lpRelay(t, 1, args...)}
	s := newSite(t)
	var killedAt time.Time
	var promoted time.Duration
	killed := make(chan struct{})
	began := time.Now()
	crawl(t, s, siteIP, n, []string{"ws://" + relays[0].listen + "/", "ws://" + relays[1].listen + "/"}, 3, func(k int) {
		if k == n/3 {
			killedAt = time.Now()
			go func() {
				defer close(killed)
				rs.Master.Kill()
				var err error
				if promoted, err = rs.WaitFailover(rs.Master.Addr(), 30*time.Second); err != nil {
					t.Error(err)
				}
			}()
		}
	})
	took := time.Since(began)
	<-killed
	hits := navigations(s, siteIP)
	at := arrivals(hits)
	gap, k := minGap(at)
	st := statsOf(at)
	t.Logf("master SIGKILLed %.1fs in, at navigation %d; %d navigations in %.1fs through two relays; closest two %.1fms apart (navigations %d and %d); "+
		"longest gap %.1fms (the wait for a new master); the sentinels named it %v after the kill (down-after %v)",
		killedAt.Sub(began).Seconds(), n/3, len(at), took.Seconds(), ms(gap), k, k+1, ms(st.max), promoted.Round(100*time.Millisecond), redistest.DownAfter)
	if len(at) != n {
		t.Errorf("the server saw %d navigations, want %d", len(at), n)
	}
	if gap < spacing-bound {
		t.Errorf("two navigations %v apart, want at least %v less %v", gap, spacing, bound)
	}
	for i, l := range relays {
		if got := l.logs.count("redis failover: following the new master"); got != 1 {
			t.Errorf("relay %d logged the failover %d times, want once:\n%s", i+1, got, l.logs.raw.String())
		}
	}
}

// TestSentinelFailoverLoss measures what a failover loses: bookings the
// old master acknowledged that had not reached the replica when it died.
// Eight callers book one host as fast as Redis answers (a fixed spacing
// of 10 s, so that the host's next free slot counts the bookings); the
// master is SIGKILLed; once the sentinels promoted the replica, its slot
// count is compared with the bookings acknowledged.
func TestSentinelFailoverLoss(t *testing.T) {
	const spacing, host = 10 * time.Second, "loss.example"
	rs := redistest.StartSentinels(t)
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: spacing, Burst: 1}
	st, err := store.NewRedis(context.Background(), rs.URL(), cfg, store.Options{Fallback: store.FallbackClosed, Prefix: "loss:", ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if r := st.Reserve(host, time.Now()); !r.Tracked || r.Retry {
		t.Fatalf("first booking: %+v", r)
	}
	first, err := rs.Master.Client().HGet(context.Background(), "loss:"+host, "t").Int64()
	if err != nil {
		t.Fatal(err)
	}
	var acked, beforeKill atomic.Int64
	acked.Store(1)
	var killed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := st.Reserve(host, time.Now()); r.Tracked && !r.Retry {
					acked.Add(1)
					if !killed.Load() {
						beforeKill.Add(1)
					}
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	rate := float64(acked.Load()) / 2
	killed.Store(true)
	rs.Master.Kill()
	promoted, err := rs.WaitFailover(rs.Master.Addr(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Book on the new master for a moment, then count.
	after := acked.Load()
	deadline := time.Now().Add(10 * time.Second)
	for acked.Load() < after+100 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	last, err := rs.Replica.Client().HGet(context.Background(), "loss:"+host, "t").Int64()
	if err != nil {
		t.Fatal(err)
	}
	kept := (last-first)/spacing.Microseconds() + 1
	lost := acked.Load() - kept
	t.Logf("%d bookings acknowledged (%.0f a second; %d before the kill), %d on the promoted replica: the failover lost %d (%.1f ms of bookings at that rate); "+
		"the sentinels promoted the replica %v after the kill", acked.Load(), rate, int(beforeKill.Load())+1, kept, lost, float64(lost)/rate*1000, promoted.Round(100*time.Millisecond))
	// A step that timed out may have run all the same, so the new master
	// may count more than was acknowledged; it never counts what it
	// never had.
	if st.Failovers() != 1 {
		t.Errorf("the store saw %d failovers, want 1", st.Failovers())
	}
}

// TestClusterNodeDown: two relays, each in front of a Lightpanda, share a
// three-node Redis Cluster at fixed 200 ms, burst 1. Three hosts whose
// keys land on different nodes each get one schedule: twenty navigations,
// ten through each relay, never closer than 160 ms. With one node killed,
// only its host falls back (each relay books it on its own, so its
// navigations come twice as fast), the other two stay shared.
func TestClusterNodeDown(t *testing.T) {
	const perRelay, spacing, bound = 10, 200 * time.Millisecond, 40 * time.Millisecond
	rc := redistest.StartCluster(t, 3)
	// One host on each node: loopback addresses Lightpanda reaches as
	// they are (it resolves no names of ours).
	hosts := map[*redistest.Process]string{}
	var order []string
	for i := 2; len(hosts) < 3 && i < 255; i++ {
		h := fmt.Sprintf("127.0.0.%d", i)
		if n := rc.NodeOf(t, store.DefaultPrefix+h); hosts[n] == "" {
			hosts[n] = h
			order = append(order, h)
		}
	}
	if len(hosts) != 3 {
		t.Fatalf("hosts on %d nodes, want 3", len(hosts))
	}
	sites := map[string]*site{}
	for _, h := range order {
		sites[h] = newSiteAt(t, h)
	}
	args := []string{"--store", rc.URL(), "--http-nav-delay", "200", "--http-nav-burst", "1"}
	relays := []*launched{lpRelay(t, 1, args...), lpRelay(t, 1, args...)}
	type client struct {
		pageClient
		host string
	}
	var clients []client
	for _, l := range relays {
		for _, h := range order {
			clients = append(clients, client{newPageClient(t, "ws://"+l.listen+"/"), h})
		}
	}
	phase := func() map[string][]time.Time {
		run := runID()
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() {
				for k := range perRelay {
					if err := c.navigate(context.Background(), time.Minute, sites[c.host].url(c.host, fmt.Sprintf("/page/%s/%d", run, k))); err != nil {
						t.Errorf("%s: %v", c.host, err)
						return
					}
				}
			})
		}
		wg.Wait()
		out := map[string][]time.Time{}
		for _, h := range order {
			out[h] = arrivals(sites[h].hitsOf(func(x hit) bool { return strings.Contains(x.Path, run) }))
		}
		return out
	}
	report := func(name string, at map[string][]time.Time, dead string) {
		var b strings.Builder
		fmt.Fprintf(&b, "%s\n%-12s %-22s %5s %9s %9s", name, "host", "node", "reqs", "span (s)", "gap min")
		nodeOf := map[string]*redistest.Process{}
		for n, h := range hosts {
			nodeOf[h] = n
		}
		for _, h := range order {
			n := nodeOf[h]
			g, _ := minGap(at[h])
			note := ""
			if h == dead {
				note = "  (its node killed)"
			}
			fmt.Fprintf(&b, "\n%-12s %-22s %5d %9.2f %9.1f%s", h, n.Addr(), len(at[h]), statsOf(at[h]).span.Seconds(), ms(g), note)
		}
		t.Log(b.String())
	}
	shared := time.Duration(2*perRelay-1) * spacing
	checkShared := func(when, h string, at []time.Time) {
		if len(at) != 2*perRelay {
			t.Errorf("%s: %s saw %d navigations, want %d", when, h, len(at), 2*perRelay)
			return
		}
		if g, k := minGap(at); g < spacing-bound {
			t.Errorf("%s: %s saw navigations %d and %d %v apart, want one schedule (at least %v less %v)", when, h, k, k+1, g, spacing, bound)
		}
		if span := statsOf(at).span; span < shared-bound {
			t.Errorf("%s: %s's %d navigations span %v, want one schedule's %v", when, h, len(at), span, shared)
		}
	}

	before := phase()
	report("both relays, every node up", before, "")
	for _, h := range order {
		checkShared("every node up", h, before[h])
	}

	dead := rc.Nodes[0]
	deadHost := hosts[dead]
	dead.Kill()
	time.Sleep(hostForgotten)
	after := phase()
	report("one node killed", after, deadHost)
	for _, h := range order {
		if h != deadHost {
			checkShared("a node killed", h, after[h])
			continue
		}
		// Booked by each relay on its own: two schedules of 200 ms.
		if span := statsOf(after[h]).span; len(after[h]) != 2*perRelay || span > shared*3/4 {
			t.Errorf("%s, on the killed node: %d navigations span %v, want two schedules' (about %v)", h, len(after[h]), span, time.Duration(perRelay-1)*spacing)
		}
	}
	for i, l := range relays {
		if !strings.Contains(l.logs.raw.String(), `"node":"`+dead.Addr()+`"`) || l.logs.count("lost redis") != 1 {
			t.Errorf("relay %d: want one \"lost redis\" naming node %s:\n%s", i+1, dead.Addr(), l.logs.raw.String())
		}
		// Each navigation to the dead node's host books there once, and
		// may push its schedule once (a late departure: Lightpanda's are
		// followed), each a fallback.
		if f := metricAt(t, "http://"+l.listen, "cdp_throttle_store_fallbacks_total"); f < perRelay || f > 2*perRelay+2 {
			t.Errorf("relay %d: %v store fallbacks, want %d to %d (its navigations to %s only, and their pushes)", i+1, f, perRelay, 2*perRelay, deadHost)
		}
	}
}
