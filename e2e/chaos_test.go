//go:build e2e

package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/store/redistest"
)

// lpProcess is a lightpanda serve on a fixed port that the test restarts
// a moment after it dies, as a supervisor would.
type lpProcess struct {
	port string
	mu   sync.Mutex
	cmd  *exec.Cmd // guarded by mu
	stop atomic.Bool
	done chan struct{}
}

func startLPProcess(t *testing.T) *lpProcess {
	t.Helper()
	lp := &lpProcess{port: freePort(t), done: make(chan struct{})}
	bin := lightpandaBin(t)
	started := make(chan struct{})
	go func() {
		defer close(lp.done)
		first := true
		for !lp.stop.Load() {
			cmd := exec.Command(bin, "serve", "--host", "127.0.0.1", "--port", lp.port, "--cdp-max-connections", "16")
			cmd.Env = append(os.Environ(), "LIGHTPANDA_DISABLE_TELEMETRY=true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Errorf("lightpanda: %v", err)
				return
			}
			lp.mu.Lock()
			lp.cmd = cmd
			lp.mu.Unlock()
			if first {
				first = false
				close(started)
			}
			cmd.Wait()
			time.Sleep(500 * time.Millisecond)
		}
	}()
	<-started
	t.Cleanup(func() {
		lp.stop.Store(true)
		lp.kill()
		<-lp.done
	})
	waitListening(t, "127.0.0.1:"+lp.port)
	return lp
}

// kill SIGKILLs the running process; it comes back on its port.
func (lp *lpProcess) kill() {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if lp.cmd != nil {
		lp.cmd.Process.Kill()
	}
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := httpGet("http://" + addr + "/json/version"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing answers at %s", addr)
		}
	}
}

// cutAll closes, both ways and without a close frame, every connection
// through the forwarder that is still open.
func (c *cutter) cutAll() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i := range c.conns {
		if cc := &c.conns[i]; !cc.cut {
			cc.a.Close()
			cc.b.Close()
			cc.cut = true
			n++
		}
	}
	c.conns = slices.DeleteFunc(c.conns, func(cc cutConn) bool { return cc.cut })
	return n
}

// chaosRelay is one relay of the chaos run: the binary, its four
// Lightpandas and the forwarders between them.
type chaosRelay struct {
	l     *launched
	lps   []*lpProcess
	ways  []*cutter
	base  string // http://listen
	index int
}

// vitals are a relay process's goroutines, open files and memory, from its
// /metrics. Its connections to Redis, idle in go-redis's pool, are not
// counted among the files: how many the pool keeps depends on how many
// calls were under way at once and which master they went to, not on
// anything left behind.
type vitals struct{ goroutines, fds, redis, rss, heap float64 }

func (r *chaosRelay) vitals(t *testing.T) vitals {
	redis := metricAt(t, r.base, "cdp_throttle_store_connections")
	return vitals{metricAt(t, r.base, "go_goroutines"), metricAt(t, r.base, "process_open_fds") - redis, redis,
		metricAt(t, r.base, "process_resident_memory_bytes"), metricAt(t, r.base, "go_memstats_heap_inuse_bytes")}
}

// settled waits until the relays' goroutines and files stop falling (at
// least 3 s, at most 20 s) and returns their vitals then.
func settled(t *testing.T, relays []*chaosRelay) []vitals {
	var last []vitals
	stable := 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && stable < 6; time.Sleep(500 * time.Millisecond) {
		var now []vitals
		for _, r := range relays {
			now = append(now, r.vitals(t))
		}
		same := last != nil
		for i := range now {
			same = same && now[i].goroutines == last[i].goroutines && now[i].fds == last[i].fds
		}
		if same {
			stable++
		} else {
			stable = 0
		}
		last = now
	}
	return last
}

// unheld compares what /metrics counts unheld with what the relay logged.
func (r *chaosRelay) unheld(t *testing.T) (counted, logged int) {
	counted = int(metricAt(t, r.base, `cdp_throttle_navigations_total{outcome="unheld"}`))
	return counted, r.l.logs.unheld()
}

// chaosClient is one crawler: it navigates its pages in turn and, when a
// navigation fails or its connection ends, connects again and retries it.
type chaosClient struct {
	relay   string // ws://listen/
	rc      *rawClient
	session string
	vanish  atomic.Bool // the next navigation is sent, then the client vanishes

	ok, retries, reconnects, refused int
}

func (c *chaosClient) connect(t *testing.T) error {
	d := websocket.Dialer{HandshakeTimeout: 70 * time.Second}
	ws, resp, err := d.Dial(c.relay, nil)
	if err != nil {
		if resp != nil && resp.StatusCode == 429 {
			c.refused++
		}
		return err
	}
	c.rc = &rawClient{t: t, c: ws, waiting: map[int64]chan rawMessage{}, done: make(chan struct{})}
	go c.rc.read()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var bc struct{ BrowserContextID string }
	var tg struct{ TargetID string }
	var at struct{ SessionID string }
	for _, step := range []struct {
		method string
		params any
		out    any
	}{
		{"Target.createBrowserContext", map[string]any{}, &bc},
		{"Target.createTarget", map[string]any{"url": "about:blank"}, &tg},
		{"Target.attachToTarget", nil, &at},
	} {
		params := step.params
		switch step.method {
		case "Target.createTarget":
			params = map[string]any{"url": "about:blank", "browserContextId": bc.BrowserContextID}
		case "Target.attachToTarget":
			params = map[string]any{"targetId": tg.TargetID, "flatten": true}
		}
		res, err := c.rc.call(ctx, "", step.method, params)
		if err == nil {
			err = json.Unmarshal(res, step.out)
		}
		if err != nil {
			c.rc.close()
			return err
		}
	}
	c.session = at.SessionID
	return nil
}

// crawl navigates to next() until ctx ends, each navigation until it
// succeeds (or the run is over).
func (c *chaosClient) crawl(t *testing.T, ctx context.Context, next func() string) {
	defer func() {
		if c.rc != nil {
			c.rc.close()
		}
	}()
	for ctx.Err() == nil {
		url := next()
		for first := true; ctx.Err() == nil; first = false {
			if !first {
				c.retries++
			}
			if c.rc == nil {
				if err := c.connect(t); err != nil {
					c.rc = nil
					time.Sleep(200 * time.Millisecond)
					continue
				}
				c.reconnects++
			}
			if c.vanish.CompareAndSwap(true, false) {
				// Gone mid-navigation: no close frame, the socket just ends.
				c.rc.send(c.session, "Page.navigate", map[string]any{"url": url})
				time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
				c.rc.c.UnderlyingConn().Close()
				<-c.rc.done
				c.rc = nil
				continue
			}
			nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := c.rc.call(nctx, c.session, "Page.navigate", map[string]any{"url": url})
			cancel()
			if err == nil {
				c.ok++
				break
			}
			// The connection may be gone (a browser killed, a way cut): start over.
			c.rc.close()
			c.rc = nil
		}
	}
}

// flood sends bad frames to a relay for d: not JSON, binary, arrays, ids
// out of range, unknown sessions, a navigation with invalid UTF-8.
func flood(relay string, d time.Duration) int {
	ws, _, err := websocket.DefaultDialer.Dial(relay, nil)
	if err != nil {
		return 0
	}
	defer ws.Close()
	go func() { // read what comes back, so the relay's writes never stall
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	}()
	frames := [][]byte{[]byte("{not json"), []byte(`[1,2,3]`), []byte(`{"id":1e400,"method":"Runtime.evaluate"}`),
		[]byte(`{"id":7,"sessionId":"nope","method":"Page.navigate","params":{"url":"http://127.0.0.2/"}}`),
		[]byte("{\"id\":8,\"method\":\"Page.navigate\",\"params\":{\"url\":\"http://127.0.0.2/\xff\"}}"), {}, []byte(`"x"`)}
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		mt := websocket.TextMessage
		if n%5 == 0 {
			mt = websocket.BinaryMessage
		}
		if ws.WriteMessage(mt, frames[n%len(frames)]) != nil {
			break
		}
	}
	return n
}

// TestChaos: two relays share a Redis master that three sentinels watch,
// each relay in front of four lightpanda serve (behind forwarders the test
// can cut); 40 clients crawl five hosts at fixed 200 ms, retrying what
// failed. Every few seconds one fault, at random: a Lightpanda SIGKILLed,
// the Redis master SIGKILLed (the sentinels fail over), a relay's
// connections to a Lightpanda cut, a client vanishing mid-navigation, a
// client flooding bad frames. At the end: no two slots of a host closer
// than the spacing, every request at a host after its own navigation's
// slot, and no two closer than the spacing less the bound unless one of
// them came late, but for what a failover can lose; each relay's unheld count is what it logged; its goroutines and
// open files are back to where they were (±5%) and its memory grew less
// than 10%.
func TestChaos(t *testing.T) {
	const (
		spacing     = 200 * time.Millisecond
		bound       = 40 * time.Millisecond // a release to the request at the server, Lightpanda on a busy machine
		lostPerFail = 1                     // what README says a failover can lose at a crawl's rate
		nClients    = 40
		faultEvery  = 5 * time.Second
		chaosFor    = 90 * time.Second
	)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rnd := rand.New(rand.NewPCG(seed, 1))
	rs := redistest.StartSentinels(t)
	var hosts []string
	sites := map[string]*site{}
	for i := 2; i <= 6; i++ {
		h := fmt.Sprintf("127.0.0.%d", i)
		hosts = append(hosts, h)
		sites[h] = newSiteAt(t, h)
	}
	var relays []*chaosRelay
	for i := range 2 {
		r := &chaosRelay{index: i + 1}
		args := []string{"--log-level", "debug", "--store", rs.URL(), "--store-fallback", "closed", "--http-nav-delay", "200", "--http-nav-burst", "1",
			"--clients-per-browser", "16", "--queue", "40"}
		for range 4 {
			lp := startLPProcess(t)
			way := newCutter(t, "127.0.0.1:"+lp.port)
			r.lps, r.ways = append(r.lps, lp), append(r.ways, way)
			args = append(args, "--upstream", strings.Replace(way.url(), "http://", "ws://", 1)+"/")
		}
		l, ready := launch(t, args...)
		if !ready {
			t.Fatalf("relay %d not ready:\n%s", i+1, l.logs.raw.String())
		}
		r.l, r.base = l, "http://"+l.listen
		relays = append(relays, r)
	}

	clients := make([]*chaosClient, nClients)
	for i := range clients {
		clients[i] = &chaosClient{relay: "ws://" + relays[i%2].l.listen + "/"}
	}
	var seq atomic.Int64
	run := runID()
	next := func() string {
		k := seq.Add(1)
		h := hosts[k%int64(len(hosts))]
		return sites[h].url(h, fmt.Sprintf("/page/%s/%d", run, k))
	}
	crawlFor := func(d time.Duration, during func(ctx context.Context)) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() { c.crawl(t, ctx, next) })
		}
		if during != nil {
			during(ctx)
		}
		wg.Wait()
	}

	// Warm up: every client in, and a flood of bad frames on each relay;
	// then all leave and the relays settle. That is the baseline.
	crawlFor(15*time.Second, func(ctx context.Context) {
		time.Sleep(5 * time.Second)
		for _, r := range relays {
			flood("ws://"+r.l.listen+"/", 2*time.Second)
		}
	})
	base := settled(t, relays)

	// The chaos.
	type fault struct {
		at   time.Duration
		what string
	}
	var faults []fault
	var failovers int
	var promotedMu sync.Mutex
	var promoted []string
	began := time.Now()
	logf := func(format string, args ...any) {
		faults = append(faults, fault{time.Since(began), fmt.Sprintf(format, args...)})
	}
	var killedRedis *redistest.Process
	var lastMasterKill time.Time
	crawlFor(chaosFor, func(ctx context.Context) {
		kinds := []string{"lightpanda", "redis", "cut", "vanish", "flood"}
		rnd.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		tick := time.NewTicker(faultEvery)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if killedRedis != nil { // back as a replica once the sentinels moved on
				if _, replica := rs.Roles(); replica == killedRedis {
					rs.Rejoin(killedRedis)
					logf("redis %s back, as a replica", killedRedis.Addr())
					killedRedis = nil
				}
			}
			kind := kinds[rnd.IntN(len(kinds))]
			if n < len(kinds) {
				kind = kinds[n] // each kind at least once
			}
			// A master killed at most every 20 s, once the last one is back
			// as a replica, and not in the last 20 s: the run ends with
			// a master every relay has followed.
			if kind == "redis" && (killedRedis != nil || time.Since(lastMasterKill) < 20*time.Second || time.Since(began) > chaosFor-20*time.Second) {
				kind = "cut"
			}
			r := relays[rnd.IntN(len(relays))]
			switch kind {
			case "lightpanda":
				i := rnd.IntN(len(r.lps))
				r.lps[i].kill()
				logf("lightpanda %d of relay %d SIGKILLed", i+1, r.index)
			case "redis":
				m, _ := rs.Roles()
				m.Kill()
				killedRedis, lastMasterKill = m, time.Now()
				failovers++
				go func() {
					took, err := rs.WaitFailover(m.Addr(), 30*time.Second)
					if err != nil {
						t.Error(err)
					}
					promotedMu.Lock()
					promoted = append(promoted, took.Round(100*time.Millisecond).String())
					promotedMu.Unlock()
				}()
				logf("redis master %s SIGKILLed", m.Addr())
			case "cut":
				i := rnd.IntN(len(r.ways))
				logf("relay %d's connections to lightpanda %d cut (%d)", r.index, i+1, r.ways[i].cutAll())
			case "vanish":
				c := clients[rnd.IntN(len(clients))]
				c.vanish.Store(true)
				logf("a client of %s vanishes mid-navigation", strings.TrimSuffix(strings.TrimPrefix(c.relay, "ws://"), "/"))
			case "flood":
				go func() { flood("ws://"+r.l.listen+"/", 2*time.Second) }()
				logf("a client floods relay %d with bad frames for 2s", r.index)
			}
		}
	})
	chaosTook := time.Since(began)

	// Settle: every client gone; the relays' goroutines and files back.
	end := settled(t, relays)

	// The figures.
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run (seed %d, CHAOS_SEED to repeat): %d clients, 2 relays × 4 lightpanda serve, Redis master + replica + 3 sentinels, fixed %v, burst 1, fallback closed\n", seed, nClients, spacing)
	fmt.Fprintf(&b, "fault log (%d faults in %.0fs):\n", len(faults), chaosTook.Seconds())
	for _, f := range faults {
		fmt.Fprintf(&b, "  %6.1fs  %s\n", f.at.Seconds(), f.what)
	}
	var ok, retries, reconnects, refused int
	for _, c := range clients {
		ok, retries, reconnects, refused = ok+c.ok, retries+c.retries, reconnects+c.reconnects, refused+c.refused
	}
	promotedMu.Lock()
	fmt.Fprintf(&b, "failovers: %d, the sentinels named a new master after %s\n", failovers, strings.Join(promoted, ", "))
	promotedMu.Unlock()
	fmt.Fprintf(&b, "clients: %d navigations answered, %d retried, %d connections (%d refused 429)\n", ok, retries, reconnects, refused)
	// Per host: the slots both relays booked (their debug logs say each,
	// to the millisecond, and its skew: the round trip of the Redis answer
	// the slot is counted from, by which it may be late), and what the
	// server saw. Two slots are too close when the later one is less than
	// the spacing after the earliest the first can have been.
	//
	// Each request at the server is matched to its navigation's slot by
	// its URL (the relays log it with the slot; a navigation retried after
	// a fault is booked again, and its request belongs to the last booking
	// before it), and is late by its arrival less the earliest that slot
	// can have been. Two arrivals closer than the spacing less the bound
	// are a schedule broken when both were on time: one that reached the
	// server late (Lightpanda busy, the machine saturated) comes closer to
	// the one after it, or to one whose slot was later and came first. A
	// request with no slot booked before it went through unheld.
	closer, late, overlaps, unslotted := 0, 0, 0, 0
	var when []string
	var lateness []time.Duration
	fmt.Fprintf(&b, "%-10s %6s %9s %9s %8s %10s %8s %9s %9s\n", "host", "reqs", "gap min", "gap p50", "slots", "slot gap", "closer", "one late", "no slot")
	for _, h := range hosts {
		var slots []skewedSlot
		for _, r := range relays {
			slots = append(slots, r.l.logs.skewedSlots(h)...)
		}
		slices.SortFunc(slots, func(a, b skewedSlot) int { return a.at.Compare(b.at) })
		for i := 1; i < len(slots); i++ {
			if d := slots[i].at.Sub(slots[i-1].earliest); d < spacing-2*time.Millisecond { // the later one's own millisecond of truncation, and a relay's own steps before it asked
				overlaps++
				when = append(when, fmt.Sprintf("slots of %s %.1fms apart (%.1fms from the earliest the first can have been) at %.1fs",
					h, ms(slots[i].at.Sub(slots[i-1].at)), ms(d), slots[i].at.Sub(began).Seconds()))
			}
		}
		byURL := map[string][]skewedSlot{} // by path, each in the order booked
		paths := map[string]string{}       // url_hash to path
		for _, x := range sites[h].hitsOf(func(x hit) bool { return strings.Contains(x.Path, run) }) {
			paths[urlHash(sites[h].url(h, x.Path))] = x.Path
		}
		for _, sl := range slots {
			p := paths[sl.urlHash]
			byURL[p] = append(byURL[p], sl)
		}
		hits := sites[h].hitsOf(func(x hit) bool { return strings.Contains(x.Path, run) })
		slices.SortFunc(hits, func(a, b hit) int { return a.At.Compare(b.At) })
		at := arrivals(hits)
		lateOf := make([]time.Duration, len(at))
		owns := make([]*skewedSlot, len(at))
		ns := 0
		for i, x := range hits {
			var own *skewedSlot
			for j, sl := range byURL[x.Path] {
				if !sl.earliest.After(x.At) {
					own = &byURL[x.Path][j]
				}
			}
			owns[i] = own
			if own == nil {
				ns++
				when = append(when, fmt.Sprintf("%s: %s at %.1fs with no slot booked before it", h, x.Path, x.At.Sub(began).Seconds()))
				continue
			}
			lateOf[i] = x.At.Sub(own.earliest)
			lateness = append(lateness, lateOf[i])
		}
		n, nl := 0, 0
		for i := 1; i < len(at); i++ {
			d := at[i].Sub(at[i-1])
			if d >= spacing-bound {
				continue
			}
			if l := max(lateOf[i-1], lateOf[i]); l > bound {
				nl++
				when = append(when, fmt.Sprintf("%s %.1fms apart at %.1fs, one %.0fms after its slot", h, ms(d), at[i].Sub(began).Seconds(), ms(l)))
			} else {
				n++
				when = append(when, fmt.Sprintf("%s %.1fms apart at %.1fs, both on time (%s)", h, ms(d), at[i].Sub(began).Seconds(), pairOf(hits[i-1:i+1], owns[i-1:i+1], byURL)))
			}
		}
		closer, late, unslotted = closer+n, late+nl, unslotted+ns
		g, _ := minGap(at)
		var sg time.Duration
		if len(slots) > 1 {
			sg = slots[1].at.Sub(slots[0].at)
			for i := 2; i < len(slots); i++ {
				sg = min(sg, slots[i].at.Sub(slots[i-1].at))
			}
		}
		fmt.Fprintf(&b, "%-10s %6d %9.1f %9.1f %8d %10.1f %8d %9d %9d\n", h, len(at), ms(g), ms(statsOf(at).p50), len(slots), ms(sg), n, nl, ns)
	}
	slices.Sort(lateness)
	if len(lateness) == 0 {
		lateness = []time.Duration{0} // no request had a slot: counted above
	}
	fmt.Fprintf(&b, "a request at the server after its slot: p50 %.1fms, p99 %.1fms, max %.1fms\n",
		ms(lateness[len(lateness)/2]), ms(lateness[len(lateness)*99/100]), ms(lateness[len(lateness)-1]))
	if len(when) > 0 {
		fmt.Fprintf(&b, "closer than they should be: %s\n", strings.Join(when, "; "))
	}
	for i, r := range relays {
		counted, logged := r.unheld(t)
		fmt.Fprintf(&b, "relay %d: unheld %d (logged %d); goroutines %.0f → %.0f, open files %.0f → %.0f (and Redis connections %.0f → %.0f), "+
			"RSS %.1f → %.1f MiB (heap in use %.1f → %.1f MiB); failovers logged %d\n",
			r.index, counted, logged, base[i].goroutines, end[i].goroutines, base[i].fds, end[i].fds, base[i].redis, end[i].redis,
			base[i].rss/(1<<20), end[i].rss/(1<<20), base[i].heap/(1<<20), end[i].heap/(1<<20),
			r.l.logs.count("redis failover: following the new master"))
		if counted != logged {
			t.Errorf("relay %d: unheld %d, logged %d", r.index, counted, logged)
		}
		if got := r.l.logs.count("redis failover: following the new master"); got != failovers {
			t.Errorf("relay %d logged %d failovers, want %d, one for each", r.index, got, failovers)
		}
		if g := end[i].goroutines; g > base[i].goroutines*1.05 || g < base[i].goroutines*0.95 {
			t.Errorf("relay %d: %.0f goroutines after the run, %.0f before: want within 5%%", r.index, g, base[i].goroutines)
		}
		// Within 5%, or two (a connection to Redis or the browser that a
		// failover or a reconnect replaced may not be closed yet): a leak
		// per client of the run's 40 shows either way.
		if f, within := end[i].fds, max(base[i].fds*0.05, 2); f > base[i].fds+within || f < base[i].fds-within {
			t.Errorf("relay %d: %.0f open files after the run, %.0f before: want within 5%% or 2", r.index, f, base[i].fds)
		}
		if end[i].rss > base[i].rss*1.10 {
			t.Errorf("relay %d: RSS grew from %.1f to %.1f MiB: want less than 10%%", r.index, base[i].rss/(1<<20), end[i].rss/(1<<20))
		}
	}
	t.Log(b.String())
	if closer+overlaps+unslotted > failovers*lostPerFail {
		t.Errorf("%d pairs of navigations on time came closer than %v less %v, %d pairs of slots closer than %v, and %d requests had no slot of their own; "+
			"a failover may lose %d and there were %d failovers",
			closer, spacing, bound, overlaps, spacing, unslotted, lostPerFail, failovers)
	}
	if ok < 500 {
		t.Errorf("only %d navigations answered in the run", ok)
	}
}

// urlHash is a URL as a relay's log line names it (url_hash).
func urlHash(rawURL string) string {
	h := fnv.New64a()
	h.Write([]byte(rawURL))
	return hex.EncodeToString(h.Sum(nil))
}

// pairOf describes two requests that came too close: each one's path,
// arrival, the slot it was matched to (when it was let go and the
// earliest the schedule's own slot can have been) and how many times its
// navigation was booked.
func pairOf(hits []hit, owns []*skewedSlot, byURL map[string][]skewedSlot) string {
	var parts []string
	for i, x := range hits {
		if owns[i] == nil {
			parts = append(parts, fmt.Sprintf("%s at %s, no slot", x.Path, x.At.Format("15:04:05.000")))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s at %s, slot %s (earliest %s), booked %d times",
			x.Path, x.At.Format("15:04:05.000"), owns[i].at.Format("15:04:05.000"), owns[i].earliest.Format("15:04:05.000"), len(byURL[x.Path])))
	}
	return strings.Join(parts, "; ")
}
