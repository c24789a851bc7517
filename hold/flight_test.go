package hold_test

// The core against its contract alone: a way that is nothing but a
// recording Holding, on a browser no connection is made to (the stream
// way's, which holds in the client connections: none here).

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// noUpstream is a browser the core never dials (the stream way).
type noUpstream struct{}

func (noUpstream) Name() string { return "none" }
func (noUpstream) Dial(context.Context) (*websocket.Conn, error) {
	panic("the core dialled the browser of a way held in the client connections")
}

// noWay holds nothing in a connection: the tests hold through the core.
type noWay struct{}

func (noWay) Arm()                                {}
func (noWay) FromClient(cdp.Header, []byte) bool  { return false }
func (noWay) FromBrowser(cdp.Header, []byte) bool { return false }
func (noWay) Ended()                              {}

// moments records the moments of one hold, in order, with when each came.
type moments struct {
	mu   sync.Mutex
	seen []string
	at   map[string]time.Time
	over chan struct{} // closed at Done
}

func newMoments() *moments {
	return &moments{at: map[string]time.Time{}, over: make(chan struct{})}
}

func (m *moments) note(what string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen = append(m.seen, what)
	m.at[what] = time.Now()
}

func (m *moments) Booked(time.Time, *pace.Nav) { m.note("booked") }
func (m *moments) Waits()                      { m.note("waits") }
func (m *moments) Refused(refusal.Reason)      { m.note("refused") }
func (m *moments) Release()                    { m.note("release") }
func (m *moments) Done()                       { m.note("done"); close(m.over) }

// order waits for Done and returns the moments seen.
func (m *moments) order(t *testing.T) string {
	t.Helper()
	select {
	case <-m.over:
	case <-time.After(10 * time.Second):
		t.Fatal("the hold never ended")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.seen, " ")
}

// refusing refuses every navigation to a host named no.test.
type refusing struct{ hold.Limiter }

func (refusing) Refuses() bool { return true }
func (refusing) Allowed(_ context.Context, host, _ string) (bool, string) {
	return host != "no.test", "test"
}

// armed is a browser held by a Holder over a fixed spacing, with no way
// but one that holds nothing.
func armed(t *testing.T, spacing time.Duration, wrap func(hold.Limiter) hold.Limiter) *hold.BrowserHold {
	t.Helper()
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: spacing, Burst: 1}
	_, b := armWith(t, wrap(policy.New(policy.Config{Default: cfg}, limiter.New(cfg))), nil)
	return b
}

// armWith is a browser held by a Holder over lim, logging to log (nil:
// nowhere), with no way but one that holds nothing; it is closed when the
// test ends.
func armWith(t *testing.T, lim hold.Limiter, log *zerolog.Logger) (*hold.Holder, *hold.BrowserHold) {
	t.Helper()
	hd := &hold.Holder{
		Limiter: lim,
		Ways:    hold.Ways{Stream: func(*hold.Watch) hold.ConnWay { return noWay{} }},
		Log:     log,
	}
	if !hd.Start() {
		t.Fatal("Holder.Start: it holds nothing")
	}
	var done sync.WaitGroup
	bg, stop := context.WithCancel(context.Background())
	b, err := hd.Arm(context.Background(), bg, noUpstream{}, "", nil, &done)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hd.Close()
		stop()
		done.Wait()
		hd.Wait()
	})
	return hd, b.(*hold.BrowserHold)
}

func same(l hold.Limiter) hold.Limiter { return l }

// TestHoldingMoments checks the order the core tells a way of the
// moments of a hold (Holding's doc): booked, waits when it must, release
// at its slot and done; refused then done for a refused one, nothing
// booked; done alone, no release, for one whose context ends first.
func TestHoldingMoments(t *testing.T) {
	const spacing = 300 * time.Millisecond
	h := armed(t, spacing, func(l hold.Limiter) hold.Limiter { return refusing{l} })
	ctx := context.Background()
	nav := func(ctx context.Context, host string, m *moments) {
		h.Hold(ctx, hold.Request{Flight: h.NewFlight(ctx), Host: host, URL: "http://" + host + "/", Refusable: true}, m)
	}

	first, second := newMoments(), newMoments()
	start := time.Now()
	nav(ctx, "a.test", first)
	if got := first.order(t); got != "booked release done" {
		t.Errorf("first navigation: %q, want booked release done", got)
	}
	nav(ctx, "a.test", second)
	if got := second.order(t); got != "booked waits release done" {
		t.Errorf("second navigation: %q, want booked waits release done", got)
	}
	if waited := second.at["release"].Sub(start); waited < spacing-10*time.Millisecond {
		t.Errorf("second navigation released %v after the first, want its spacing, %v", waited, spacing)
	}

	refused := newMoments()
	nav(ctx, "no.test", refused)
	if got := refused.order(t); got != "refused done" {
		t.Errorf("refused navigation: %q, want refused done", got)
	}

	gone := newMoments()
	cctx, cancel := context.WithCancel(ctx)
	nav(cctx, "a.test", gone) // its slot is a spacing away
	time.Sleep(50 * time.Millisecond)
	cancel()
	if got := gone.order(t); got != "booked waits done" {
		t.Errorf("navigation whose context ended: %q, want booked waits done", got)
	}
}

// TestWays checks which way a browser is armed in, given the ways the
// relay hands over: one left nil is never chosen, and one asked for that
// is not there is an error.
func TestWays(t *testing.T) {
	stream := func(*hold.Watch) hold.ConnWay { return noWay{} }
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: time.Second, Burst: 1}
	for _, tc := range []struct {
		name      string
		ways      hold.Ways
		intercept hold.Intercept
		want      string // Holding(), or the error's start
	}{
		{"auto, stream alone", hold.Ways{Stream: stream}, hold.InterceptAuto, "navigate"},
		{"auto, session and stream", hold.Ways{Session: stream, Stream: stream}, hold.InterceptAuto, "session"},
		{"navigate asked", hold.Ways{Session: stream, Stream: stream}, hold.InterceptNavigate, "navigate"},
		{"fetch asked, none", hold.Ways{Session: stream, Stream: stream}, hold.InterceptFetch, "hold: intercept fetch"},
		{"no way", hold.Ways{}, hold.InterceptAuto, "hold: the relay has no way"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hd := &hold.Holder{Limiter: policy.New(policy.Config{Default: cfg}, limiter.New(cfg)), Ways: tc.ways, Intercept: tc.intercept}
			hd.Start()
			var done sync.WaitGroup
			bg, stop := context.WithCancel(context.Background())
			defer func() { stop(); done.Wait() }()
			b, err := hd.Arm(context.Background(), bg, noUpstream{}, "", nil, &done)
			got := ""
			if err != nil {
				got = err.Error()
			} else {
				got = b.Holding()
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestWarnsOncePerHost: what an answer says badly, a RateLimit field
// that does not read or a Retry-After that is neither seconds nor a date,
// is ignored and warned about once per host, however many answers carry
// it: a server sends the same headers with every answer.
func TestWarnsOncePerHost(t *testing.T) {
	var logs fakebrowser.Logs
	log := zerolog.New(&logs)
	cfg := limiter.Config{} // adaptive: an overload's Retry-After is read
	hd, b := armWith(t, policy.New(policy.Config{Default: cfg}, limiter.New(cfg)), &log)
	var bad ratelimit.Fields
	bad.Add("RateLimit-Policy", `"p";q=-1;w=1`)
	for _, host := range []string{"a.test", "a.test", "a.test", "b.test", "b.test"} {
		b.Observe(nil, host, cdp.Outcome{Status: 429, RetryAfter: "tomorrow", Limits: bad}, &log)
	}
	hd.Wait()
	for _, msg := range []string{"malformed RateLimit headers ignored", "ignoring a Retry-After that is neither seconds nor an HTTP-date"} {
		if n := strings.Count(logs.String(), `"message":"`+msg+`"`); n != 2 {
			t.Errorf("%q said %d times, want once per host, 2", msg, n)
		}
	}
}

// probeLimiter books every navigation as its bucket's probe and records
// the probes told lost (hold.Prober).
type probeLimiter struct {
	hold.Limiter
	mu   sync.Mutex
	lost []string
}

func (p *probeLimiter) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	r := p.Limiter.Reserve(ctx, host, rawURL, now)
	r.Probe = true
	return r
}

func (p *probeLimiter) ProbeLost(bucket string, _ time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lost = append(p.lost, bucket)
}

func (p *probeLimiter) told() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lost)
}

// TestProbeLost: a probe whose flight ends with no answer (its page went)
// is told lost, once; one whose answer came is not, nor is one that
// never went (its client left before its slot: the policy was told when
// it could not book it, or is told now).
func TestProbeLost(t *testing.T) {
	cfg := limiter.Config{Mode: limiter.Fixed, Interval: time.Millisecond, Burst: 1}
	lim := &probeLimiter{Limiter: policy.New(policy.Config{Default: cfg}, limiter.New(cfg))}
	_, h := armWith(t, lim, nil)
	ctx := context.Background()
	fly := func(host string) *hold.Flight {
		fl := h.NewFlight(ctx)
		m := newMoments()
		h.Hold(ctx, hold.Request{Flight: fl, Host: host, URL: "http://" + host + "/"}, m)
		if got := m.order(t); got != "booked release done" && got != "booked waits release done" {
			t.Fatalf("%s: %q, want released", host, got)
		}
		return fl
	}
	gone := fly("gone.test")
	gone.End() // its page went before the answer
	gone.End()
	answered := fly("answered.test")
	nop := zerolog.Nop()
	h.Observe(answered, "answered.test", cdp.Outcome{Status: 200}, &nop)
	answered.End() // answered: nothing to tell, at once
	// gone.test's is told on a goroutine of its own.
	for deadline := time.Now().Add(5 * time.Second); len(lim.told()) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	if got := lim.told(); !slices.Equal(got, []string{"gone.test"}) {
		t.Errorf("probes told lost: %q, want gone.test's alone", got)
	}
}
