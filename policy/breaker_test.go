package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestBreakerDefers: with --host-errors 2/1m, two failures of a host's
// documents open its breaker: its navigations are deferred, booking
// nothing, until the pause ends; then one goes as the probe while the
// others are still deferred; the probe's answer, not a failure, closes it.
// Another host is not touched, and exempt hosts never ask.
func TestBreakerDefers(t *testing.T) {
	cfg, err := FromFlags(Flags{Delay: "100ms", HostErrors: "2/1m"})
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(cfg.Default)
	p := New(cfg, lim)
	defer p.Close()
	ctx := context.Background()
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	reserve := func(host string, d time.Duration) limiter.Reservation {
		return p.Reserve(ctx, host, "http://"+host+"/", at(d))
	}
	if r := reserve("a.test", 0); r.Deferred != "" || !r.Tracked {
		t.Fatalf("first: %+v, want booked", r)
	}
	p.Observe("a.test", limiter.Outcome{Status: 503}, at(time.Second))
	p.Observe("a.test", limiter.Outcome{NoAnswer: true}, at(2*time.Second))
	r := reserve("a.test", 3*time.Second)
	if r.Deferred != "breaker" || r.Tracked {
		t.Fatalf("after 2 failures: %+v, want deferred by the breaker", r)
	}
	if pause := r.Start.Sub(at(2 * time.Second)); pause < 30*time.Second || pause > 36*time.Second {
		t.Errorf("the breaker opened for %v, want 30 s and its jitter", pause)
	}
	if r := reserve("b.test", 3*time.Second); r.Deferred != "" || !r.Tracked {
		t.Errorf("another host: %+v, want booked", r)
	}
	if r := reserve("127.0.0.1", 3*time.Second); r.Deferred != "" {
		t.Errorf("loopback: %+v, want never deferred", r)
	}
	// /hosts shows the bucket's deferrals and its open breaker.
	var shown bool
	for _, h := range p.Busiest(at(3*time.Second), 50) {
		if h.Host == "a.test" {
			shown = true
			if h.Deferred != 1 || h.Breaker != "open" || h.BreakerEnds < 29*time.Second {
				t.Errorf("/hosts shows a.test with %d deferred, breaker %q for %v; want 1, open for about 30 s", h.Deferred, h.Breaker, h.BreakerEnds)
			}
		}
	}
	if !shown {
		t.Error("/hosts does not show a.test")
	}
	after := r.Start.Sub(t0) + time.Millisecond
	probe := reserve("a.test", after)
	if probe.Deferred != "" || !probe.Tracked {
		t.Fatalf("at the pause's end: %+v, want the probe booked", probe)
	}
	if r := reserve("a.test", after); r.Deferred != "breaker" {
		t.Errorf("beside the probe: %+v, want deferred", r)
	}
	p.Observe("a.test", limiter.Outcome{Status: 200}, at(after+time.Second))
	if r := reserve("a.test", after+2*time.Second); r.Deferred != "" || !r.Tracked {
		t.Errorf("after the probe's 200: %+v, want booked: the breaker closed", r)
	}
	if c := p.Breakers().Counts(); c.Opened != 1 || c.Probes != 1 {
		t.Errorf("breaker counts %+v, want opened once, one probe", c)
	}
}

// TestBreakerOff: without --host-errors, failures defer nothing.
func TestBreakerOff(t *testing.T) {
	cfg, err := FromFlags(Flags{Delay: "100ms"})
	if err != nil {
		t.Fatal(err)
	}
	p := New(cfg, limiter.New(cfg.Default))
	defer p.Close()
	now := time.Now()
	for range 10 {
		p.Observe("a.test", limiter.Outcome{Status: 503}, now)
	}
	if r := p.Reserve(context.Background(), "a.test", "http://a.test/", now); r.Deferred != "" || p.Breakers() != nil {
		t.Errorf("got %+v, want booked, and no breakers", r)
	}
}

// TestMaxWaitFlag: --max-wait reaches the flags' setting and every rule's,
// and bad values are refused with the flag's name.
func TestMaxWaitFlag(t *testing.T) {
	cfg, err := FromFlags(Flags{MaxWait: "25s", Rules: []string{"a.test=fixed:1s", "b.test=adaptive"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Default.MaxWait != 25*time.Second {
		t.Errorf("flags' setting: MaxWait %v, want 25s", cfg.Default.MaxWait)
	}
	for _, r := range cfg.Rules {
		if r.Setting.MaxWait != 25*time.Second {
			t.Errorf("rule %q: MaxWait %v, want the flag's 25s", r.Text, r.Setting.MaxWait)
		}
	}
	for _, bad := range []string{"-1s", "2h", "soon"} {
		if _, err := FromFlags(Flags{MaxWait: bad}); err == nil || !strings.Contains(err.Error(), "--max-wait") {
			t.Errorf("--max-wait %q: got %v, want an error naming the flag", bad, err)
		}
	}
	if _, err := FromFlags(Flags{HostErrors: "0/1m"}); err == nil || !strings.Contains(err.Error(), "--host-errors") {
		t.Errorf("--host-errors 0/1m: got %v, want an error naming the flag", err)
	}
}

// TestBreakerProbeLost: a probe that ends with no answer (its page went)
// lets another go at once, rather than when the breaker stops waiting for
// its answer; once a probe's answer was told, a late ProbeLost does
// nothing.
func TestBreakerProbeLost(t *testing.T) {
	cfg, err := FromFlags(Flags{Delay: "100ms", HostErrors: "1/1m"})
	if err != nil {
		t.Fatal(err)
	}
	p := New(cfg, limiter.New(cfg.Default))
	defer p.Close()
	ctx := context.Background()
	t0 := time.Now()
	reserve := func(d time.Duration) limiter.Reservation {
		return p.Reserve(ctx, "a.test", "http://a.test/", t0.Add(d))
	}
	if r := reserve(0); r.Probe || r.Deferred != "" {
		t.Fatalf("first: %+v, want booked, not a probe", r)
	}
	p.Observe("a.test", limiter.Outcome{Status: 503}, t0.Add(time.Second))
	open := reserve(2 * time.Second)
	if open.Deferred != "breaker" || open.Probe {
		t.Fatalf("after the 503: %+v, want deferred by the breaker", open)
	}
	after := open.Start.Sub(t0) + time.Millisecond
	if r := reserve(after); !r.Probe || r.Deferred != "" {
		t.Fatalf("at the pause's end: %+v, want booked as the probe", r)
	}
	if r := reserve(after); r.Deferred != "breaker" || r.Probe {
		t.Fatalf("beside the probe: %+v, want deferred", r)
	}
	p.ProbeLost("a.test", t0.Add(after+time.Second))
	second := reserve(after + time.Second)
	if !second.Probe || second.Deferred != "" {
		t.Fatalf("after the probe was lost: %+v, want another probe at once", second)
	}
	p.Observe("a.test", limiter.Outcome{Status: 200}, t0.Add(after+2*time.Second))
	p.ProbeLost("a.test", t0.Add(after+3*time.Second)) // late: its answer came
	if r := reserve(after + 3*time.Second); r.Deferred != "" || r.Probe {
		t.Errorf("after the probe's 200 and a late ProbeLost: %+v, want booked, the breaker closed", r)
	}
	if c := p.Breakers().Counts(); c.Probes != 2 {
		t.Errorf("breaker counts %+v, want two probes", c)
	}
}
