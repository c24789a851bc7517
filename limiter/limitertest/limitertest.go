// Package limitertest holds the limiter's rule as tables of steps at fixed
// instants, with the seed's golden numbers, so that every implementation of
// the rule is held to the same behaviour: the in-process limiter.Limiter and
// the shared Redis store in package store run these same checks and must
// book the same slots at the same instants.
//
// It is imported by tests only, and knows nothing of CDP or Redis: each
// implementation is driven through the Limiter interface.
package limitertest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Limiter is the part of an implementation the tables drive.
type Limiter interface {
	Reserve(host string, now time.Time) limiter.Reservation
	Observe(host string, o limiter.Outcome, now time.Time)
}

// Subject is one fresh implementation under test.
type Subject struct {
	Limiter
	// PressureAt reports host's pressure drained to now, changing nothing;
	// ok is false when the host is not remembered.
	PressureAt func(host string, now time.Time) (pressure int, ok bool)
}

// New returns a fresh implementation configured with cfg that remembers no
// host yet. It may register cleanups on t.
type New func(t *testing.T, cfg limiter.Config) Subject

// T0 is the instant the tables count from. It is a whole number of
// microseconds since the Unix epoch, as every step is, so an implementation
// that keeps microseconds loses nothing.
var T0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// At is the instant ms milliseconds after T0.
func At(ms float64) time.Time { return T0.Add(time.Duration(ms * float64(time.Millisecond))) }

// Step is one call at a fixed instant: a Reserve when Outcome is nil,
// otherwise an Observe.
type Step struct {
	AtMS      float64
	Host      string // "" means example.com
	Outcome   *limiter.Outcome
	WantStart float64 // ms after T0; checked for Reserve steps
}

// Case is a table of steps run against one fresh implementation.
type Case struct {
	Name   string
	Config limiter.Config
	Steps  []Step
}

// RunSteps runs steps against l and fails t at the first Reserve whose
// start is not the one wanted.
func RunSteps(t *testing.T, l Limiter, steps []Step) {
	t.Helper()
	for i, s := range steps {
		host := s.Host
		if host == "" {
			host = "example.com"
		}
		if s.Outcome != nil {
			l.Observe(host, *s.Outcome, At(s.AtMS))
			continue
		}
		r := l.Reserve(host, At(s.AtMS))
		if got := r.Start.Sub(T0); got != time.Duration(s.WantStart*float64(time.Millisecond)) {
			t.Fatalf("step %d: Reserve(%s, %vms): got start %v, want %vms", i, host, s.AtMS, got, s.WantStart)
		}
	}
}

func status(code int, retryAfter string) *limiter.Outcome {
	return &limiter.Outcome{Status: code, RetryAfter: retryAfter}
}

// RuleCases are the steps of SPEC §1, one table per behaviour.
var RuleCases = []Case{
	{"unknown host goes at once", limiter.Config{}, []Step{{AtMS: 5, WantStart: 5}}},
	{"burst of ten then spacing", limiter.Config{}, []Step{
		{0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0},
		{0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0},
		// tat = 200 after ten bookings at 20 ms; tau = 180.
		{0, "", nil, 20},
		// pressure 10 now: spacing 40.
		{20, "", nil, 60},
	}},
	{"burst 1 spaces from the second", limiter.Config{Burst: 1}, []Step{
		{0, "", nil, 0}, {0, "", nil, 20}, {0, "", nil, 40},
	}},
	{"negative burst acts as 1", limiter.Config{Burst: -3}, []Step{
		{0, "", nil, 0}, {0, "", nil, 20},
	}},
	{"hosts are independent", limiter.Config{Burst: 1}, []Step{
		{0, "a.example", nil, 0}, {0, "b.example", nil, 0}, {0, "a.example", nil, 20}, {0, "b.example", nil, 20},
	}},
	{"fixed spacing ignores pressure", limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1}, []Step{
		{0, "", nil, 0}, {0, "", nil, 100}, {0, "", nil, 200}, {0, "", nil, 300},
	}},
	{"fixed burst", limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 3}, []Step{
		{0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 100}, {0, "", nil, 200},
	}},
	{"fixed ignores 429 and Retry-After", limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1}, []Step{
		{0, "", nil, 0}, {1, "", status(429, "30"), 0}, {1, "", status(503, ""), 0}, {1, "", &limiter.Outcome{NoAnswer: true}, 0},
		{100, "", nil, 100}, {100, "", nil, 200},
	}},
	{"off never delays", limiter.Config{Mode: limiter.Off}, []Step{
		{0, "", nil, 0}, {0, "", nil, 0}, {0, "", status(429, "60"), 0}, {0, "", nil, 0},
	}},
	{"fixed with no interval is off", limiter.Config{Mode: limiter.Fixed}, []Step{
		{0, "", nil, 0}, {0, "", nil, 0},
	}},
	{"exempt hosts are never delayed", limiter.Config{Burst: 1}, []Step{
		{0, "localhost", nil, 0}, {0, "localhost", nil, 0}, {0, "LocalHost", nil, 0},
		{0, "127.0.0.1", nil, 0}, {0, "127.0.0.1", nil, 0}, {0, "[::1]", nil, 0}, {0, "[::1]", nil, 0},
		{0, "127.0.0.1", status(429, "60"), 0}, {1, "127.0.0.1", nil, 1},
		{0, "127.0.0.2", nil, 0}, {0, "127.0.0.2", nil, 20},
	}},
	{"503 adds 100 ms at once", limiter.Config{Burst: 1}, []Step{
		// pressure 1 after the first booking, 51 after the 503: spacing 20×(1+5) = 120.
		{0, "", nil, 0}, {10, "", status(503, ""), 0}, {10, "", nil, 20}, {20, "", nil, 140},
	}},
	{"429 adds like 503", limiter.Config{Burst: 1}, []Step{
		{0, "", nil, 0}, {10, "", status(429, ""), 0}, {10, "", nil, 20}, {20, "", nil, 140},
	}},
	{"500 and no answer add 20 ms", limiter.Config{Burst: 1}, []Step{
		// pressure 1 → 11 after the 500: spacing 40; 12 → 22 after no answer: spacing 60.
		{0, "", nil, 0}, {10, "", status(500, ""), 0}, {10, "", nil, 20},
		{20, "", &limiter.Outcome{NoAnswer: true}, 0}, {20, "", nil, 60}, {30, "", nil, 120},
	}},
	{"2xx 3xx 4xx and aborts add nothing", limiter.Config{Burst: 1}, []Step{
		{0, "", nil, 0}, {1, "", status(200, ""), 0}, {1, "", status(302, ""), 0}, {1, "", status(404, "5"), 0},
		{1, "", status(403, ""), 0}, {1, "", &limiter.Outcome{}, 0}, {1, "", status(599+1, ""), 0},
		{1, "", nil, 20}, {1, "", nil, 40},
	}},
	{"Retry-After seconds pushes the next slot past the burst", limiter.Config{}, []Step{
		{0, "", nil, 0}, {50, "", status(429, "3"), 0}, {60, "", nil, 3050}, {3100, "", nil, 3170},
	}},
	{"Retry-After over 60 s is capped", limiter.Config{}, []Step{
		{0, "", nil, 0}, {0, "", status(503, "3600"), 0}, {1, "", nil, 60000},
	}},
	{"Retry-After HTTP-date is ignored", limiter.Config{}, []Step{
		{0, "", nil, 0}, {0, "", status(429, "Wed, 21 Oct 2026 07:28:00 GMT"), 0}, {1, "", nil, 1},
	}},
	{"Retry-After garbage and negative are ignored", limiter.Config{}, []Step{
		{0, "", nil, 0}, {0, "", status(429, "soon"), 0}, {0, "", status(429, "-5"), 0}, {0, "", status(429, "1.5"), 0},
		{1, "", nil, 1},
	}},
	{"Retry-After on a 500 is ignored", limiter.Config{}, []Step{
		{0, "", nil, 0}, {0, "", status(500, "30"), 0}, {1, "", nil, 1},
	}},
	{"Retry-After on an unknown host", limiter.Config{}, []Step{
		{0, "redirected.example", status(503, "2"), 0}, {10, "redirected.example", nil, 2000},
	}},
}

// Run runs every check of this package against implementations made by
// newL, each as a subtest.
func Run(t *testing.T, newL New) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, New)
	}{
		{"Rule", Rule},
		{"PressureCapAndDrain", PressureCapAndDrain},
		{"DrainFromPlateau", DrainFromPlateau},
		{"DrainWholeSteps", DrainWholeSteps},
		{"IdleHostStartsFromZero", IdleHostStartsFromZero},
		{"Golden", Golden},
		{"Settings", Settings},
		{"Push", Push},
		{"SlackAndHeadroom", SlackAndHeadroom},
		{"Jitter", Jitter},
		{"ServerLimits", ServerLimits},
		{"MaxWait", MaxWait},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newL) })
	}
}

// Rule runs RuleCases, each against a fresh implementation.
func Rule(t *testing.T, newL New) {
	for _, tt := range RuleCases {
		t.Run(tt.Name, func(t *testing.T) {
			RunSteps(t, newL(t, tt.Config), tt.Steps)
		})
	}
}

// PressureCapAndDrain checks that pressure stops at 590, where the spacing
// is 1200 ms, and that it drains one unit per 100 ms from there.
func PressureCapAndDrain(t *testing.T, newL New) {
	l := newL(t, limiter.Config{})
	const host = "example.com"
	l.Reserve(host, At(0))
	for range 20 {
		l.Observe(host, limiter.Outcome{Status: 429}, At(0))
	}
	if p, _ := l.PressureAt(host, At(0)); p != 590 {
		t.Fatalf("pressure after 20 429s: got %d, want the cap 590", p)
	}
	// At the cap the spacing is 1200 ms, never more.
	r1 := l.Reserve(host, At(0))
	r2 := l.Reserve(host, At(0))
	if r1.Spacing != 1200*time.Millisecond || r2.Spacing != 1200*time.Millisecond {
		t.Fatalf("spacing at the cap: got %v and %v, want 1.2s", r1.Spacing, r2.Spacing)
	}
	if r2.Pressure != 590 {
		t.Fatalf("pressure after booking at the cap: got %d, want 590", r2.Pressure)
	}
	// 590 units drain in 59 s, one per 100 ms.
	if p, _ := l.PressureAt(host, At(58_900)); p != 1 {
		t.Fatalf("pressure after 58.9 s: got %d, want 1", p)
	}
	if p, _ := l.PressureAt(host, At(59_000)); p != 0 {
		t.Fatalf("pressure after 59 s: got %d, want 0", p)
	}
}

// DrainFromPlateau checks the 100 ms plateau at pressure 41 and that it
// drains in about 4 s.
func DrainFromPlateau(t *testing.T, newL New) {
	// Back to back at the 100 ms plateau the pressure sits at 41.
	l := newL(t, limiter.Config{})
	const host = "example.com"
	now := At(0)
	var r limiter.Reservation
	for range 400 {
		r = l.Reserve(host, now)
		now = r.Start
	}
	if r.Spacing != 100*time.Millisecond {
		t.Fatalf("plateau spacing: got %v, want 100ms", r.Spacing)
	}
	if r.Pressure != 41 {
		t.Fatalf("plateau pressure: got %d, want 41", r.Pressure)
	}
	if p, _ := l.PressureAt(host, now.Add(3900*time.Millisecond)); p == 0 {
		t.Fatalf("pressure 3.9 s after the plateau: got 0, want some left")
	}
	if p, _ := l.PressureAt(host, now.Add(4200*time.Millisecond)); p != 0 {
		t.Fatalf("pressure 4.2 s after the plateau: got %d, want 0", p)
	}
}

// DrainWholeSteps checks that draining loses nothing to rounding.
func DrainWholeSteps(t *testing.T, newL New) {
	// Touching a host every 60 ms must not lose the partial steps: 30
	// touches span 1.74 s, which forgives 17 units, not 0.
	l := newL(t, limiter.Config{})
	const host = "example.com"
	l.Observe(host, limiter.Outcome{Status: 503}, At(0)) // 50 units
	for i := 1; i <= 29; i++ {
		l.Observe(host, limiter.Outcome{Status: 200}, At(float64(60*i)))
	}
	if p, _ := l.PressureAt(host, At(1740)); p != 50-17 {
		t.Fatalf("pressure after 1.74 s of 60 ms touches: got %d, want %d", p, 50-17)
	}
	// A 200 leaves the host untouched; touches that do change it must
	// not lose the partial steps either: a 503 and nine 500s, one every
	// 60 ms, add 140 units while 0.54 s forgive 5, not 0.
	l = newL(t, limiter.Config{})
	l.Observe(host, limiter.Outcome{Status: 503}, At(0))
	for i := 1; i <= 9; i++ {
		l.Observe(host, limiter.Outcome{Status: 500}, At(float64(60*i)))
	}
	if p, _ := l.PressureAt(host, At(540)); p != 50+90-5 {
		t.Fatalf("pressure after 0.54 s of 60 ms 500s: got %d, want %d", p, 50+90-5)
	}
}

// IdleHostStartsFromZero checks that a host left alone for 8 s gets its
// whole burst again.
func IdleHostStartsFromZero(t *testing.T, newL New) {
	l := newL(t, limiter.Config{})
	const host = "example.com"
	now := At(0)
	for range 400 {
		now = l.Reserve(host, now).Start
	}
	// After 8 s without navigations the host is back to a fresh burst.
	now = now.Add(8 * time.Second)
	for i := range 10 {
		if r := l.Reserve(host, now); !r.Start.Equal(now) {
			t.Fatalf("navigation %d after 8 s idle: delayed by %v, want none", i+1, r.Start.Sub(now))
		}
	}
	if r := l.Reserve(host, now); r.Start.Sub(now) != 20*time.Millisecond {
		t.Fatalf("navigation 11 after 8 s idle: delayed by %v, want 20ms", r.Start.Sub(now))
	}
}

// Nav is one simulated navigation; times count from the simulation's origin.
type Nav struct {
	Start    time.Duration
	Wait     time.Duration // from the request to the start
	Spacing  time.Duration
	Pressure int
}

// Sim describes navigations issued back to back to one host, as
// `cdp-throttle simulate` replays them.
type Sim struct {
	Navigations int           // per phase
	Load        time.Duration // from a navigation's start to the next request
	Phases      int
	Idle        time.Duration // between phases
}

// Simulate replays s against l on a simulated clock starting at T0 and
// returns each phase's navigations.
func Simulate(l Limiter, s Sim) [][]Nav {
	const host = "example.com"
	phases := make([][]Nav, s.Phases)
	var t time.Duration // simulated time of the next request
	for p := range phases {
		if p > 0 {
			t += s.Idle
		}
		for range s.Navigations {
			r := l.Reserve(host, T0.Add(t))
			start := r.Start.Sub(T0)
			phases[p] = append(phases[p], Nav{Start: start, Wait: start - t, Spacing: r.Spacing, Pressure: r.Pressure})
			t = start + s.Load
		}
	}
	return phases
}

// FirstAt is the seed's table of when each enforced gap first appears, one
// row per gap: "20ms at 11 after 0.02s". Only a navigation that waited has
// an enforced gap, read in whole quanta; the first row is the run of
// navigations that went at load speed, "0ms at 1 to 10" (or "0ms at 1").
func FirstAt(navs []Nav, quantum time.Duration) []string {
	level := func(i int) time.Duration {
		if navs[i].Wait <= 0 {
			return 0
		}
		return (navs[i].Start - navs[i-1].Start + quantum/2) / quantum * quantum
	}
	free := 1
	for free < len(navs) && level(free) == 0 {
		free++
	}
	rows := []string{"0ms at 1"}
	if free > 1 {
		rows[0] = fmt.Sprintf("0ms at 1 to %d", free)
	}
	var top time.Duration
	for i := free; i < len(navs); i++ {
		if l := level(i); l > top {
			top = l
			rows = append(rows, fmt.Sprintf("%dms at %d after %.2fs", l.Milliseconds(), i+1, (navs[i].Start-navs[0].Start).Seconds()))
		}
	}
	return rows
}

// Span is the time from a phase's first navigation to its last, in seconds
// with two decimals as the seed prints it.
func Span(navs []Nav) string {
	return fmt.Sprintf("%.2f", (navs[len(navs)-1].Start - navs[0].Start).Seconds())
}

// Gaps are the gaps before navigations 2 to n+1, in ms with one decimal.
func Gaps(navs []Nav, n int) []string {
	var gaps []string
	for i := 1; i <= n && i < len(navs); i++ {
		gaps = append(gaps, fmt.Sprintf("%.1f", float64(navs[i].Start-navs[i-1].Start)/float64(time.Millisecond)))
	}
	return gaps
}

// Golden replays the seed's measurements (testdata/simulate of the main
// package) and checks its numbers: the first-at table, the span of 400
// navigations, the gaps at the start of each phase. It also checks that
// every navigation is booked exactly as the in-process limiter.Limiter
// books it.
func Golden(t *testing.T, newL New) {
	gaps := func(first ...string) []string { return first }
	tests := []struct {
		name    string
		cfg     limiter.Config
		sim     Sim
		firstAt []string
		span    string
		gaps    []string // before navigations 2 to 14, each phase
	}{
		{"load 0", limiter.Config{}, Sim{Navigations: 400, Phases: 1},
			[]string{"0ms at 1 to 10", "20ms at 11 after 0.02s", "40ms at 12 after 0.06s", "60ms at 27 after 0.68s",
				"80ms at 52 after 2.20s", "100ms at 100 after 6.06s"},
			"36.06", gaps("0.0", "0.0", "0.0", "0.0", "0.0", "0.0", "0.0", "0.0", "0.0", "20.0", "40.0", "40.0", "40.0")},
		{"load 4.5ms two phases", limiter.Config{}, Sim{Navigations: 400, Load: 4500 * time.Microsecond, Phases: 2, Idle: 8 * time.Second},
			[]string{"0ms at 1 to 11", "20ms at 12 after 0.06s", "40ms at 13 after 0.10s", "60ms at 27 after 0.68s",
				"80ms at 52 after 2.20s", "100ms at 100 after 6.06s"},
			"36.06", gaps("4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "15.0", "40.0", "40.0")},
		{"fixed 100", limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond}, Sim{Navigations: 400, Load: 4500 * time.Microsecond, Phases: 1},
			[]string{"0ms at 1 to 10", "100ms at 11 after 0.10s"},
			"39.00", gaps("4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "59.5", "100.0", "100.0", "100.0")},
		{"burst 1", limiter.Config{Burst: 1}, Sim{Navigations: 400, Load: 4500 * time.Microsecond, Phases: 1},
			[]string{"0ms at 1", "20ms at 2 after 0.02s", "40ms at 14 after 0.28s", "60ms at 30 after 0.94s",
				"80ms at 54 after 2.40s", "100ms at 102 after 6.26s"},
			"36.06", gaps("20.0", "20.0", "20.0", "20.0", "20.0", "20.0", "20.0", "20.0", "20.0", "20.0", "20.0", "20.0", "40.0")},
		{"off", limiter.Config{Mode: limiter.Off}, Sim{Navigations: 400, Load: 4500 * time.Microsecond, Phases: 1},
			[]string{"0ms at 1 to 400"},
			"1.80", gaps("4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5", "4.5")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			quantum := limiter.AdaptiveInterval
			if tt.cfg.Mode == limiter.Fixed {
				quantum = tt.cfg.Interval
			}
			got := Simulate(newL(t, tt.cfg), tt.sim)
			if rows := FirstAt(got[0], quantum); !slices.Equal(rows, tt.firstAt) {
				t.Errorf("first-at table: got %q, want %q", rows, tt.firstAt)
			}
			for p, navs := range got {
				if span := Span(navs); span != tt.span {
					t.Errorf("phase %d: span of %d navigations: got %s s, want %s s", p+1, len(navs), span, tt.span)
				}
				if g := Gaps(navs, 13); !slices.Equal(g, tt.gaps) {
					t.Errorf("phase %d: gaps before navigations 2 to 14: got %q, want %q", p+1, g, tt.gaps)
				}
				// The plateau: the last gaps are the cooldown, 100 ms, in
				// both modes that space navigations.
				if tt.cfg.Mode != limiter.Off {
					if last := navs[len(navs)-1].Start - navs[len(navs)-2].Start; last != 100*time.Millisecond {
						t.Errorf("phase %d: last gap: got %v, want the 100ms plateau", p+1, last)
					}
				}
			}
			want := Simulate(limiter.New(tt.cfg), tt.sim)
			for p := range want {
				for i := range want[p] {
					if got[p][i] != want[p][i] {
						t.Fatalf("phase %d navigation %d: got %+v, want %+v as limiter.Limiter books it", p+1, i+1, got[p][i], want[p][i])
					}
				}
			}
		})
	}
}
