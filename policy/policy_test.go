package policy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func mustConfig(t *testing.T, f Flags) Config {
	t.Helper()
	c, err := FromFlags(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestReserveBySetting(t *testing.T) {
	cfg := mustConfig(t, Flags{
		Burst:       "1",
		Rules:       []string{"*.slow.test=fixed:300ms", "*.test=adaptive,burst:3", "off.example=off", "*.corp=exempt"},
		ExemptHosts: []string{"*.internal"},
	})
	p := New(cfg, limiter.New(cfg.Default))
	tests := []struct {
		host         string
		wantSecond   int // ms: when a second navigation at 0 may go
		tracked      bool
		mode         limiter.Mode
		source, rule string
	}{
		{"a.slow.test", 300, true, limiter.Fixed, "rule 1", "*.slow.test=fixed:300ms"},
		{"fast.test", 0, true, limiter.Adaptive, "rule 2", "*.test=adaptive,burst:3"},
		{"off.example", 0, false, limiter.Off, "rule 3", "off.example=off"},
		{"x.corp", 0, false, limiter.Off, "rule 4", "*.corp=exempt"},
		{"db.internal", 0, false, limiter.Off, "exempt-host", "*.internal"},
		{"localhost", 0, false, limiter.Off, "loopback", ""},
		{"example.com", 20, true, limiter.Adaptive, "flag", ""},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			url := "http://" + tt.host + "/"
			first := p.Reserve(context.Background(), tt.host, url, at(0))
			second := p.Reserve(context.Background(), tt.host, url, at(0))
			if got := second.Start.Sub(t0); got != time.Duration(tt.wantSecond)*time.Millisecond {
				t.Errorf("second navigation: got %v, want %dms", got, tt.wantSecond)
			}
			if first.Tracked != tt.tracked || first.Mode != tt.mode || first.Source != tt.source || first.Rule != tt.rule {
				t.Errorf("got tracked %v mode %v source %q rule %q, want %v %v %q %q",
					first.Tracked, first.Mode, first.Source, first.Rule, tt.tracked, tt.mode, tt.source, tt.rule)
			}
			if tt.tracked && first.Bucket != tt.host {
				t.Errorf("bucket: got %q, want %q", first.Bucket, tt.host)
			}
		})
	}
}

func TestSiteBucketsShareOneSchedule(t *testing.T) {
	cfg := mustConfig(t, Flags{Burst: "1", Bucket: "site"})
	p := New(cfg, limiter.New(cfg.Default))
	var starts []time.Duration
	for i, h := range []string{"www.site.test", "site.test", "static.site.test"} {
		r := p.Reserve(context.Background(), h, "https://"+h+"/", at(0))
		if r.Bucket != "site.test" {
			t.Errorf("navigation %d to %s: bucket %q, want site.test", i, h, r.Bucket)
		}
		starts = append(starts, r.Start.Sub(t0))
	}
	if starts[1] != 20*time.Millisecond || starts[2] != 40*time.Millisecond {
		t.Errorf("starts %v, want 0s 20ms 40ms: one schedule", starts)
	}
	a := p.Reserve(context.Background(), "a.github.io", "https://a.github.io/", at(0))
	b := p.Reserve(context.Background(), "b.github.io", "https://b.github.io/", at(0))
	if !a.Start.Equal(t0) || !b.Start.Equal(t0) || a.Bucket == b.Bucket {
		t.Errorf("a.github.io and b.github.io: got %v in %q and %v in %q, want two schedules", a.Start, a.Bucket, b.Start, b.Bucket)
	}
	if h, ok := limiter.Key("http://www.bücher.de/"); !ok || Site(h) != "xn--bcher-kva.de" {
		t.Errorf("IDN: Site(Key(www.bücher.de)) = %q, want xn--bcher-kva.de", Site(h))
	}
}

func TestObserveOnlyAdaptive(t *testing.T) {
	cfg := mustConfig(t, Flags{Burst: "1", Rules: []string{"fixed.test=fixed:100ms"}})
	l := limiter.New(cfg.Default)
	p := New(cfg, l)
	for _, h := range []string{"fixed.test", "adaptive.test"} {
		p.Reserve(context.Background(), h, "http://"+h+"/", at(0))
		p.Observe(h, limiter.Outcome{Status: 503}, at(0))
	}
	busy := p.Busiest(at(0), 10)
	if len(busy) != 2 || busy[0].Host != "adaptive.test" || busy[0].Pressure != 51 || busy[1].Pressure != 0 {
		t.Fatalf("Busiest: got %+v, want adaptive.test pushed to 51 and fixed.test untouched", busy)
	}
	if busy[0].Source != "flag" || busy[1].Source != "rule 1" || busy[1].Rule != "fixed.test=fixed:100ms" || busy[1].Mode != limiter.Fixed {
		t.Errorf("labels: got %+v", busy)
	}
}

func TestCrawlDelayFloor(t *testing.T) {
	cfg := mustConfig(t, Flags{CrawlDelay: "500ms"})
	p := New(cfg, limiter.New(cfg.Default))
	var last limiter.Reservation
	for i := range 3 {
		last = p.Reserve(context.Background(), "a.test", "http://a.test/", at(0))
		if got := last.Start.Sub(t0); got != time.Duration(i)*500*time.Millisecond {
			t.Errorf("navigation %d: start %v, want %v (no burst under a Crawl-delay)", i+1, got, time.Duration(i)*500*time.Millisecond)
		}
	}
	if last.Source != "robots.txt" || last.Rule != "Crawl-delay: 500ms" {
		t.Errorf("source: got %q %q, want robots.txt", last.Source, last.Rule)
	}
	// A rule's spacing above the floor is what delays.
	cfg = mustConfig(t, Flags{CrawlDelay: "50ms", Rules: []string{"*=fixed:200ms"}})
	p = New(cfg, limiter.New(cfg.Default))
	p.Reserve(context.Background(), "a.test", "http://a.test/", at(0))
	if r := p.Reserve(context.Background(), "a.test", "http://a.test/", at(0)); r.Source != "rule 1" || r.Spacing != 200*time.Millisecond {
		t.Errorf("rule above the floor: got %q spacing %v, want rule 1 at 200ms", r.Source, r.Spacing)
	}
}

func TestMode(t *testing.T) {
	tests := []struct {
		f    Flags
		want limiter.Mode
	}{
		{Flags{}, limiter.Adaptive},
		{Flags{Delay: "100ms"}, limiter.Fixed},
		{Flags{Delay: "0"}, limiter.Off},
		{Flags{Delay: "0", Rules: []string{"*.a=exempt"}}, limiter.Off},
		{Flags{Delay: "0", Rules: []string{"*.a=off", "*.b=fixed:1s"}}, limiter.Fixed},
	}
	for _, tt := range tests {
		if got := New(mustConfig(t, tt.f), limiter.New(limiter.Config{})).Mode(); got != tt.want {
			t.Errorf("%+v: Mode() = %v, want %v", tt.f, got, tt.want)
		}
	}
}

func TestFromFlagsErrors(t *testing.T) {
	tests := []struct {
		f    Flags
		want string
	}{
		{Flags{Delay: "fast"}, `--http-nav-delay "fast": want a duration such as 100ms`},
		{Flags{Delay: "2h"}, `--http-nav-delay "2h": longer than an hour`},
		{Flags{Burst: "-1"}, `--http-nav-burst "-1": want a whole number of navigations ≥ 0 (0 acts as 1)`},
		{Flags{Rules: []string{"a.test=fast"}}, `--rule "a.test=fast": "fast": want adaptive, fixed:DURATION, off or exempt, optionally with burst:N`},
		{Flags{Bucket: "domain"}, `--bucket "domain": want host, site or ip`},
		{Flags{ExemptHosts: []string{"http://x/"}}, `--exempt-host "http://x/"`},
		{Flags{Robots: "never"}, `--robots "never": want ignore, crawl-delay`},
		{Flags{RobotsAgent: "bot"}, `--robots-user-agent "bot": needs --robots crawl-delay or obey`},
		{Flags{Robots: "crawl-delay", RobotsAgent: "my bot/1"}, `--robots-user-agent "my bot/1": want a product token`},
		{Flags{CrawlDelay: "x"}, `--crawl-delay "x": want a duration`},
		{Flags{CrawlDelay: "2m"}, `--crawl-delay "2m": at most 1m0s`},
	}
	for _, tt := range tests {
		_, err := FromFlags(tt.f)
		if err == nil || len(err.Error()) < len(tt.want) || err.Error()[:len(tt.want)] != tt.want {
			t.Errorf("%+v: got %v, want %s…", tt.f, err, tt.want)
		}
	}
}

// pushBooker is a Booker that records pushes.
type pushBooker struct {
	Booker
	pushed map[string]time.Duration
}

func (b *pushBooker) Push(bucket string, by time.Duration, now time.Time) { b.pushed[bucket] += by }

// TestPush: a push reaches the Booker under the bucket given, when the
// Booker takes pushes, and is dropped quietly when it does not.
func TestPush(t *testing.T) {
	b := &pushBooker{Booker: limiter.New(limiter.Config{}), pushed: map[string]time.Duration{}}
	p := New(Config{Bucket: BySite}, b)
	p.Push("example.com", 7*time.Millisecond, time.Now())
	if got := b.pushed["example.com"]; got != 7*time.Millisecond {
		t.Errorf("pushed %v, want 7ms", got)
	}
	// A Booker without Push: nothing happens.
	New(Config{}, struct{ Booker }{limiter.New(limiter.Config{})}).Push("example.com", time.Second, time.Now())
}

// TestLoopbackByRule: loopback is exempt unless a rule names it, or a glob
// of a rule matches it; then the rule applies as to any host.
func TestLoopbackByRule(t *testing.T) {
	tests := []struct {
		rules      []string
		host       string
		wantSecond int // ms: when a second navigation at 0 may go
		exempt     bool
		source     string
	}{
		{nil, "127.0.0.1", 0, true, "loopback"},
		{nil, "localhost", 0, true, "loopback"},
		{nil, "[::1]", 0, true, "loopback"},
		{[]string{"127.0.0.1=fixed:200ms"}, "127.0.0.1", 200, false, "rule 1"},
		{[]string{"127.0.0.1=fixed:200ms"}, "localhost", 0, true, "loopback"},
		{[]string{"localhost=fixed:100ms"}, "localhost", 100, false, "rule 1"},
		{[]string{"[::1]=fixed:100ms"}, "[::1]", 100, false, "rule 1"},
		{[]string{"127.*=fixed:50ms"}, "127.0.0.1", 50, false, "rule 1"},
		{[]string{"*.example.com=fixed:50ms"}, "127.0.0.1", 0, true, "loopback"},
		{[]string{"127.0.0.1=exempt"}, "127.0.0.1", 0, true, "rule 1"},
		{[]string{"127.0.0.1=off,concurrency:1"}, "127.0.0.1", 0, false, "rule 1"}, // capped, not spaced: held
	}
	for _, tt := range tests {
		cfg := mustConfig(t, Flags{Burst: "1", Rules: tt.rules})
		p := New(cfg, limiter.New(cfg.Default))
		url := "http://" + tt.host + "/"
		first := p.Reserve(context.Background(), tt.host, url, at(0))
		second := p.Reserve(context.Background(), tt.host, url, at(0))
		if got := second.Start.Sub(t0); got != time.Duration(tt.wantSecond)*time.Millisecond {
			t.Errorf("%v, %s: second navigation at %v, want %dms", tt.rules, tt.host, got, tt.wantSecond)
		}
		if p.Exempt(tt.host) != tt.exempt || first.Source != tt.source {
			t.Errorf("%v, %s: exempt %v, source %q; want %v, %q", tt.rules, tt.host, p.Exempt(tt.host), first.Source, tt.exempt, tt.source)
		}
	}
}

// TestEnterCap: the cap of a host comes from its rule's concurrency:N, or
// the flag's; a place is given back by Leave; /hosts shows the bucket's
// navigations in flight, those waiting and the cap with its source.
func TestEnterCap(t *testing.T) {
	cfg := mustConfig(t, Flags{Concurrency: "2", Rules: []string{"*.slow.test=fixed:1s,concurrency:1", "*.free.test=concurrency:0", "*.corp=exempt", "*.spaced.test=fixed:10ms"}})
	p := New(cfg, limiter.New(cfg.Default))
	defer p.Close()
	if !p.Caps() {
		t.Fatal("Caps() false with --http-nav-concurrency 2")
	}
	enter := func(host string) *inflight.Place {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		pl, err := p.Enter(ctx, host)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		return pl
	}
	tests := []struct {
		host   string
		places int // of 3 asked for at once
		source string
		rule   string
	}{
		{"a.test", 2, "flag", ""},
		{"b.slow.test", 1, "rule 1", "*.slow.test=fixed:1s,concurrency:1"},
		{"c.free.test", 0, "", ""},
		{"d.corp", 0, "", ""},
		{"e.spaced.test", 2, "flag", ""}, // the rule sets no cap: the flag's
		{"localhost", 0, "", ""},
	}
	for _, tt := range tests {
		var held []*inflight.Place
		for range 3 {
			if pl := enter(tt.host); pl != nil {
				held = append(held, pl)
			}
		}
		if len(held) != tt.places {
			t.Errorf("%s: %d places of 3 asked for, want %d", tt.host, len(held), tt.places)
		}
		if len(held) > 0 && (held[0].Source != tt.source || held[0].Rule != tt.rule) {
			t.Errorf("%s: cap from %q %q, want %q %q", tt.host, held[0].Source, held[0].Rule, tt.source, tt.rule)
		}
		if bucket, limit := p.Cap(tt.host); bucket != tt.host || limit != tt.places {
			t.Errorf("%s: Cap() = %s, %d; want %s, %d", tt.host, bucket, limit, tt.host, tt.places)
		}
		for _, pl := range held {
			defer pl.Leave()
		}
	}
	p.Reserve(context.Background(), "a.test", "http://a.test/", time.Now())
	hosts := p.Busiest(time.Now(), 10)
	byName := map[string]limiter.HostState{}
	for _, h := range hosts {
		byName[h.Host] = h
	}
	if a := byName["a.test"]; a.InFlight != 2 || a.Concurrency != 2 || a.ConcurrencySource != "flag" {
		t.Errorf("/hosts a.test: %+v, want 2 in flight under the flag's cap of 2", a)
	}
	// Never booked (its places were taken, nothing reserved), still shown.
	if b := byName["b.slow.test"]; b.InFlight != 1 || b.Concurrency != 1 || b.ConcurrencySource != "rule 1" {
		t.Errorf("/hosts b.slow.test: %+v, want 1 in flight under rule 1's cap of 1", b)
	}
	if !p.Exempt("d.corp") || p.Exempt("c.free.test") || !p.Exempt("localhost") {
		t.Errorf("Exempt: d.corp %v, c.free.test %v, localhost %v; want true, false, true", p.Exempt("d.corp"), p.Exempt("c.free.test"), p.Exempt("localhost"))
	}
	if New(mustConfig(t, Flags{}), nil).Caps() {
		t.Error("Caps() true without a cap")
	}
	if !New(mustConfig(t, Flags{Delay: "0", Rules: []string{"x.test=concurrency:1"}}), nil).Caps() {
		t.Error("Caps() false with a rule's concurrency:1")
	}
}

// TestObserveEffects: which answers are overload follows --overload-status
// and a rule's overload:, and only an adaptive setting changes the
// schedule; the effect is reported either way.
func TestObserveEffects(t *testing.T) {
	challenge := limiter.Outcome{Status: 200, Headers: []limiter.Header{{Name: "cf-mitigated", Value: "challenge"}}}
	tests := []struct {
		flags    Flags
		host     string
		o        limiter.Outcome
		effect   limiter.Effect
		pressure int // after one booking and the answer
	}{
		{Flags{}, "a.test", limiter.Outcome{Status: 403}, limiter.Calm, 1},
		{Flags{}, "a.test", limiter.Outcome{Status: 429}, limiter.Overload, 51},
		{Flags{Overload: "403,429,503"}, "a.test", limiter.Outcome{Status: 403}, limiter.Overload, 51},
		{Flags{Overload: "429"}, "a.test", limiter.Outcome{Status: 503}, limiter.Failure, 11},
		{Flags{Overload: "none"}, "a.test", limiter.Outcome{Status: 429}, limiter.Calm, 1},
		{Flags{Rules: []string{"*.cdn.test=overload:403+429"}}, "x.cdn.test", limiter.Outcome{Status: 403}, limiter.Overload, 51},
		{Flags{Rules: []string{"*.cdn.test=overload:403+429"}}, "a.test", limiter.Outcome{Status: 403}, limiter.Calm, 1},
		{Flags{Overload: "403,429,503", Rules: []string{"*.cdn.test=adaptive"}}, "x.cdn.test", limiter.Outcome{Status: 403}, limiter.Overload, 51}, // the rule starts from the flag
		{Flags{OverloadHeaders: []string{"cf-mitigated=challenge"}}, "a.test", challenge, limiter.Overload, 51},
		{Flags{}, "a.test", challenge, limiter.Calm, 1},
		{Flags{OverloadHeaders: []string{"cf-mitigated=managed"}}, "a.test", challenge, limiter.Calm, 1},
		{Flags{OverloadHeaders: []string{"CF-Mitigated"}}, "a.test", challenge, limiter.Overload, 51},
		{Flags{Rules: []string{"*.cdn.test=overload-header:cf-mitigated=challenge"}}, "x.cdn.test", challenge, limiter.Overload, 51},
		{Flags{Rules: []string{"*.cdn.test=overload-header:cf-mitigated=challenge"}}, "a.test", challenge, limiter.Calm, 1},
		{Flags{OverloadHeaders: []string{"cf-mitigated"}, Rules: []string{"*.cdn.test=overload-header:none"}}, "x.cdn.test", challenge, limiter.Calm, 1},
		{Flags{OverloadHeaders: []string{"cf-mitigated"}, Rules: []string{"*.cdn.test=burst:3"}}, "x.cdn.test", challenge, limiter.Overload, 51}, // the rule starts from the flag
		{Flags{Delay: "100"}, "a.test", limiter.Outcome{Status: 503}, limiter.Overload, 0},
		{Flags{}, "a.test", limiter.Outcome{Status: 500}, limiter.Failure, 11},
		{Flags{}, "a.test", limiter.Outcome{NoAnswer: true}, limiter.Failure, 11},
	}
	for _, tt := range tests {
		cfg := mustConfig(t, tt.flags)
		l := limiter.New(cfg.Default)
		p := New(cfg, l)
		p.Reserve(context.Background(), tt.host, "http://"+tt.host+"/", at(0))
		if got := p.Observe(tt.host, tt.o, at(0)); got != tt.effect {
			t.Errorf("%+v, %s answered %+v: effect %v, want %v", tt.flags, tt.host, tt.o, got, tt.effect)
		}
		if got, _ := pressureOf(l, tt.host, at(0)); got != tt.pressure {
			t.Errorf("%+v, %s answered %+v: pressure %d, want %d", tt.flags, tt.host, tt.o, got, tt.pressure)
		}
	}
}

// TestLatencyBackoff: with --latency-backoff 3, a 2xx answer slower than
// three times its bucket's baseline and than the floor adds the failure
// pressure; /hosts shows the baseline and the last answer time.
func TestLatencyBackoff(t *testing.T) {
	cfg := mustConfig(t, Flags{LatencyBackoff: "3", Burst: "1"})
	l := limiter.New(cfg.Default)
	p := New(cfg, l)
	answers := []struct {
		status   int
		took     time.Duration
		effect   limiter.Effect
		pressure int
	}{
		{200, 100 * time.Millisecond, limiter.Calm, 1}, // the first sets the baseline
		{200, 300 * time.Millisecond, limiter.Calm, 1}, // 3 × 100 ms: not slower
		{200, 301 * time.Millisecond, limiter.Slow, 11},
		{404, 900 * time.Millisecond, limiter.Calm, 11}, // not a 2xx: not read
		{200, 80 * time.Millisecond, limiter.Calm, 11},  // a faster one lowers the baseline
		{200, 250 * time.Millisecond, limiter.Slow, 21},
	}
	p.Reserve(context.Background(), "a.test", "http://a.test/", at(0))
	for i, a := range answers {
		if got := p.Observe("a.test", limiter.Outcome{Status: a.status, Took: a.took}, at(0)); got != a.effect {
			t.Errorf("answer %d (%d in %v): %v, want %v", i+1, a.status, a.took, got, a.effect)
		}
		if got, _ := pressureOf(l, "a.test", at(0)); got != a.pressure {
			t.Errorf("answer %d: pressure %d, want %d", i+1, got, a.pressure)
		}
	}
	h := p.Busiest(at(0), 1)
	if len(h) != 1 || h[0].Baseline != 80*time.Millisecond || h[0].LastAnswer != 250*time.Millisecond {
		t.Errorf("/hosts: %+v, want baseline 80ms and last answer 250ms", h)
	}
	// Off by default: the same slow answer changes nothing.
	cfg = mustConfig(t, Flags{Burst: "1"})
	l = limiter.New(cfg.Default)
	p = New(cfg, l)
	p.Reserve(context.Background(), "a.test", "http://a.test/", at(0))
	p.Observe("a.test", limiter.Outcome{Status: 200, Took: 10 * time.Millisecond}, at(0))
	if got := p.Observe("a.test", limiter.Outcome{Status: 200, Took: 10 * time.Second}, at(0)); got != limiter.Calm {
		t.Errorf("without --latency-backoff: a slow answer is %v, want calm", got)
	}
}

func TestFromFlagsNewErrors(t *testing.T) {
	tests := []struct {
		f    Flags
		want string
	}{
		{Flags{Concurrency: "-1"}, `--http-nav-concurrency "-1": want a whole number`},
		{Flags{Concurrency: "lots"}, `--http-nav-concurrency "lots": want a whole number`},
		{Flags{ConcurrencyBound: "0"}, `--http-nav-concurrency-bound "0"`},
		{Flags{ConcurrencyBound: "2h"}, `--http-nav-concurrency-bound "2h": at most an hour`},
		{Flags{Overload: "4xx"}, `--overload-status "4xx": "4xx": want HTTP statuses`},
		{Flags{LatencyBackoff: "1"}, `--latency-backoff "1": want a factor over 1`},
		{Flags{LatencyBackoff: "x"}, `--latency-backoff "x": want a factor over 1`},
		{Flags{Rules: []string{"a.test=concurrency:x"}}, `--rule "a.test=concurrency:x": "concurrency:x": want concurrency:N`},
		{Flags{RetryAfterMax: "2h"}, `--retry-after-max "2h": 2h0m0s is over an hour, the longest a Retry-After is honoured: want a duration from 1s to 1h`},
		{Flags{RetryAfterMax: "61m"}, `--retry-after-max "61m": 1h1m0s is over an hour`},
		{Flags{RetryAfterMax: "120"}, `--retry-after-max "120": 120ms is under a second: want a duration from 1s to 1h, such as 5m (a bare number is milliseconds)`},
		{Flags{RetryAfterMax: "0"}, `--retry-after-max "0": 0s is under a second`},
		{Flags{RetryAfterMax: "-1s"}, `--retry-after-max "-1s": want a duration ≥ 0`},
		{Flags{RetryAfterMax: "soon"}, `--retry-after-max "soon": want a duration such as 100ms`},
		{Flags{OverloadHeaders: []string{"cf-mitigated=challenge", ""}}, `--overload-header "": no header name: want a header NAME, or NAME=VALUE, such as cf-mitigated=challenge`},
		{Flags{OverloadHeaders: []string{"=challenge"}}, `--overload-header "=challenge": no header name`},
		{Flags{OverloadHeaders: []string{"cf mitigated=challenge"}}, `--overload-header "cf mitigated=challenge": "cf mitigated" is no header name`},
		{Flags{OverloadHeaders: []string{"cf-mitigated:challenge"}}, `--overload-header "cf-mitigated:challenge": "cf-mitigated:challenge" is no header name`},
		{Flags{OverloadHeaders: []string{"cf-mitigated="}}, `--overload-header "cf-mitigated=": an empty VALUE`},
		{Flags{OverloadHeaders: []string{"x=a\x01b"}}, `--overload-header "x=a\x01b": a VALUE with control characters`},
		{Flags{Rules: []string{"a.test=retry-after-max:2h"}}, `--rule "a.test=retry-after-max:2h": "retry-after-max:2h": 2h0m0s is over an hour`},
		{Flags{RateLimitHeaders: "off"}, `--ratelimit-headers "off": want obey (a document answer's RateLimit-Policy, RateLimit and X-RateLimit headers space its host) or ignore`},
		{Flags{Jitter: "1"}, `--jitter "1": want a fraction F from 0 up to 1, 1 excluded, such as 0.5`},
		{Flags{Jitter: "-0.5"}, `--jitter "-0.5": want a fraction F`},
		{Flags{Jitter: "half"}, `--jitter "half": want a fraction F`},
		{Flags{Jitter: "1e-1"}, `--jitter "1e-1": want a fraction F`},
		{Flags{Jitter: "0.5", Rules: []string{"a.test=jitter:2"}}, `--rule "a.test=jitter:2": "jitter:2": want a fraction F`},
	}
	for _, tt := range tests {
		_, err := FromFlags(tt.f)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%+v: got %v, want %s…", tt.f, err, tt.want)
		}
	}
	c := mustConfig(t, Flags{Concurrency: "3", ConcurrencyBound: "10s", Overload: "403+429", LatencyBackoff: "2.5", Jitter: " 0.5 ",
		RetryAfterMax: " 1h ", OverloadHeaders: []string{" CF-Mitigated = challenge ", "x-overloaded"}})
	if c.Concurrency != 3 || c.ConcurrencyBound != 10*time.Second || c.Default.Overload.String() != "403,429" || c.LatencyBackoff != 2.5 || c.Default.Jitter != 0.5 ||
		c.Default.RetryAfterMax != time.Hour || c.Default.OverloadHeaders.String() != "cf-mitigated=challenge,x-overloaded" {
		t.Errorf("got %+v", c)
	}
	if c := mustConfig(t, Flags{RateLimitHeaders: " Ignore ", Rules: []string{"a.test=fixed:1s", "b.test=ratelimit-headers:obey"}}); !c.Default.IgnoreServer ||
		!c.Rules[0].Setting.IgnoreServer || c.Rules[1].Setting.IgnoreServer {
		t.Errorf("--ratelimit-headers ignore: got %v, rules %v and %v; want ignore, the rule starting from it, and obey by the rule that says so",
			c.Default.IgnoreServer, c.Rules[0].Setting.IgnoreServer, c.Rules[1].Setting.IgnoreServer)
	}
	if c := mustConfig(t, Flags{RateLimitHeaders: "obey"}); c.Default.IgnoreServer {
		t.Error("--ratelimit-headers obey: got ignore")
	}
	if c := mustConfig(t, Flags{}); c.Default.RetryAfterMax != 0 || c.Default.OverloadHeaders != (limiter.Headers{}) {
		t.Errorf("unset: got Retry-After max %v, overload headers %q; want 0 (60 s) and none", c.Default.RetryAfterMax, c.Default.OverloadHeaders)
	}
}

// TestAnswerHeaders: the relay keeps of each answer the headers that the
// flag or some rule reads, each name once, and none when nothing reads one.
func TestAnswerHeaders(t *testing.T) {
	p := New(mustConfig(t, Flags{}), limiter.New(limiter.Config{}))
	if got := p.AnswerHeaders(); got != nil {
		t.Errorf("no --overload-header: got %q, want none kept", got)
	}
	p = New(mustConfig(t, Flags{OverloadHeaders: []string{"CF-Mitigated=challenge", "x-a"},
		Rules: []string{"*.cdn.test=overload-header:cf-mitigated", "*.b.test=overload-header:X-B=1,overload-header:x-a"}}), limiter.New(limiter.Config{}))
	if got := p.AnswerHeaders(); !slices.Equal(got, []string{"cf-mitigated", "x-a", "x-b"}) {
		t.Errorf("got %q, want [cf-mitigated x-a x-b]", got)
	}
}

// TestRetryAfterMaxByRule: --retry-after-max and a rule's retry-after-max:
// cap the wait a Retry-After asks for, seconds or a date, for the hosts
// they apply to.
func TestRetryAfterMaxByRule(t *testing.T) {
	cfg := mustConfig(t, Flags{Burst: "1", RetryAfterMax: "90s", Rules: []string{"*.long.test=retry-after-max:1h", "*.short.test=adaptive"}})
	tests := []struct {
		host, retryAfter string
		want             time.Duration
	}{
		{"a.test", "600", 90 * time.Second},
		{"a.test", "30", 30 * time.Second},
		{"x.short.test", "600", 90 * time.Second}, // the rule starts from the flag
		{"x.long.test", "600", 10 * time.Minute},
		{"x.long.test", at(0).Add(20 * time.Minute).UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), 20 * time.Minute},
		{"x.long.test", at(0).Add(3 * time.Hour).UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), time.Hour},
	}
	for _, tt := range tests {
		p := New(cfg, limiter.New(cfg.Default))
		p.Reserve(context.Background(), tt.host, "http://"+tt.host+"/", at(0))
		p.Observe(tt.host, limiter.Outcome{Status: 503, RetryAfter: tt.retryAfter}, at(0))
		if r := p.Reserve(context.Background(), tt.host, "http://"+tt.host+"/", at(0)); r.Start.Sub(at(0)) != tt.want {
			t.Errorf("%s answered Retry-After: %s: next slot %v later, want %v", tt.host, tt.retryAfter, r.Start.Sub(at(0)), tt.want)
		}
	}
}

// TestServerLimitsHeard: what an answer says of the server's own limits
// reaches the schedule of an adaptive or a fixed setting, unless the
// setting ignores them, and never one that is off; a fixed setting hears
// nothing else, and an answer without them changes nothing.
func TestServerLimitsHeard(t *testing.T) {
	policy := ratelimit.Limits{Spacing: 200 * time.Millisecond}
	spent := ratelimit.Limits{Wait: 3 * time.Second}
	cfg := mustConfig(t, Flags{Delay: "20ms", Burst: "1", Rules: []string{
		"*.adaptive.test=adaptive", "*.off.test=off", "*.ignored.test=fixed:20ms,ratelimit-headers:ignore"}})
	tests := []struct {
		host   string
		answer limiter.Outcome
		want   []float64 // the next two starts, in ms, booked at 10 ms
		effect limiter.Effect
	}{
		{"a.test", limiter.Outcome{Status: 200, Server: policy}, []float64{200, 400}, limiter.Calm}, // the policy's spacing after the one at 0 (issue 47)
		{"a.test", limiter.Outcome{Status: 200, Server: spent}, []float64{3010, 3030}, limiter.Calm},
		{"a.test", limiter.Outcome{Status: 200}, []float64{20, 40}, limiter.Calm},
		{"a.test", limiter.Outcome{Status: 503, RetryAfter: "5"}, []float64{20, 40}, limiter.Overload},       // fixed: no pressure, no Retry-After
		{"x.adaptive.test", limiter.Outcome{Status: 200, Server: policy}, []float64{200, 400}, limiter.Calm}, // the policy's spacing after the one at 0 (issue 47)
		{"x.adaptive.test", limiter.Outcome{Status: 200, Server: spent}, []float64{3010, 3030}, limiter.Calm},
		{"x.ignored.test", limiter.Outcome{Status: 200, Server: ratelimit.Limits{Spacing: time.Second, Wait: 3 * time.Second}}, []float64{20, 40}, limiter.Calm},
		{"x.off.test", limiter.Outcome{Status: 200, Server: ratelimit.Limits{Spacing: time.Second, Wait: 3 * time.Second}}, []float64{10, 10}, limiter.Calm},
	}
	for _, tt := range tests {
		lim := limiter.New(cfg.Default)
		p := New(cfg, lim)
		url := "http://" + tt.host + "/"
		p.Reserve(context.Background(), tt.host, url, at(0))
		if got := p.Observe(tt.host, tt.answer, at(10)); got != tt.effect {
			t.Errorf("%s, %+v: effect %v, want %v", tt.host, tt.answer, got, tt.effect)
		}
		var got []float64
		for range 2 {
			got = append(got, limiter.Millis(p.Reserve(context.Background(), tt.host, url, at(10)).Start.Sub(at(0))))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s, %+v: next starts %v ms, want %v", tt.host, tt.answer, got, tt.want)
		}
		if _, ok := pressureOf(lim, tt.host, at(10)); !ok && tt.host != "x.off.test" {
			t.Errorf("%s: not in the limiter", tt.host)
		}
	}
	p := New(cfg, limiter.New(cfg.Default))
	for host, want := range map[string]bool{"a.test": true, "x.adaptive.test": true, "x.ignored.test": false, "x.off.test": false, "localhost": false} {
		if got := p.ReadsLimits(host); got != want {
			t.Errorf("ReadsLimits(%s): got %v, want %v", host, got, want)
		}
	}
}

// TestServerSource: while a server's policy is what spaces a bucket, its
// booking and its line of /hosts say the server (SourceServer, with the
// spacing its policy asks for) and the line carries the policy, until
// when it holds, and a spent quota's reset; a rule stricter than the
// server keeps its own name, and the bucket's own source is back once the
// policy has lapsed.
func TestServerSource(t *testing.T) {
	cfg := mustConfig(t, Flags{Delay: "20ms", Burst: "1", Rules: []string{"*.strict.test=fixed:1s"}})
	p := New(cfg, limiter.New(cfg.Default))
	ctx := context.Background()
	line := func(host string, now time.Time) limiter.HostState {
		t.Helper()
		for _, h := range p.Busiest(now, 50) {
			if h.Host == host {
				return h
			}
		}
		t.Fatalf("/hosts does not show %s", host)
		return limiter.HostState{}
	}
	asked := ratelimit.Limits{Spacing: 200 * time.Millisecond, Wait: 3 * time.Second}
	for _, host := range []string{"api.test", "x.strict.test"} {
		p.Reserve(ctx, host, "http://"+host+"/", at(0))
		p.Observe(host, limiter.Outcome{Status: 200, Server: asked}, at(10))
	}
	r := p.Reserve(ctx, "api.test", "http://api.test/", at(10))
	if r.Source != SourceServer || r.Rule != "RateLimit-Policy: 200ms" || r.Spacing != 200*time.Millisecond || r.Start != at(3010) {
		t.Errorf("booked under the server's policy: got source %q, rule %q, spacing %v, start %v; want server, RateLimit-Policy: 200ms, 200ms, at 3010 ms",
			r.Source, r.Rule, r.Spacing, r.Start.Sub(at(0)))
	}
	h := line("api.test", at(1010))
	if h.Source != SourceServer || h.Rule != "RateLimit-Policy: 200ms" || h.Server != 200*time.Millisecond || h.Spacing != 200*time.Millisecond ||
		h.ServerEnds != limiter.ServerPolicyLife-time.Second || h.ServerReset != 2*time.Second {
		t.Errorf("api.test's line: got source %q, rule %q, server %v for %v, spacing %v, reset in %v; want server, RateLimit-Policy: 200ms, 200ms for an hour less 1s, 200ms, 2s",
			h.Source, h.Rule, h.Server, h.ServerEnds, h.Spacing, h.ServerReset)
	}
	if r := p.Reserve(ctx, "x.strict.test", "http://x.strict.test/", at(10)); r.Source != "rule 1" || r.Spacing != time.Second {
		t.Errorf("a rule stricter than the server: got source %q, spacing %v; want rule 1, 1s", r.Source, r.Spacing)
	}
	if h := line("x.strict.test", at(1010)); h.Source != "rule 1" || h.Server != 200*time.Millisecond || h.Spacing != time.Second {
		t.Errorf("x.strict.test's line: got source %q, server %v, spacing %v; want rule 1, the server's 200ms beside it, 1s", h.Source, h.Server, h.Spacing)
	}
	later := at(10).Add(limiter.ServerPolicyLife)
	if h := line("api.test", later); h.Source != SourceFlags || h.Rule != "" || h.Server != 0 || h.ServerEnds != 0 || h.ServerReset != 0 {
		t.Errorf("an hour after the policy: got %+v, want the flags' own line, no server", h)
	}
	if r := p.Reserve(ctx, "api.test", "http://api.test/", later); r.Source != SourceFlags || r.Spacing != 20*time.Millisecond {
		t.Errorf("booked an hour after the policy: got source %q, spacing %v; want flag, 20ms", r.Source, r.Spacing)
	}
}

// pressureOf reads a host's pressure from the limiter's status list.
func pressureOf(l *limiter.Limiter, host string, now time.Time) (int, bool) {
	for _, h := range l.Busiest(now, 1000) {
		if h.Host == host {
			return h.Pressure, true
		}
	}
	return 0, false
}

// TestJitterByRule: --jitter and a rule's jitter:F reach the limiter with
// each booking, in adaptive and fixed mode alike: their held slots move,
// within (1 ± F) × spacing of the one before, while a host whose setting
// has no jitter keeps the rule's exact schedule.
func TestJitterByRule(t *testing.T) {
	cfg := mustConfig(t, Flags{Jitter: "0.5", Burst: "1",
		Rules: []string{"fixed.test=fixed:200ms", "exact.test=fixed:200ms,jitter:0", "quarter.test=jitter:0.25"}})
	l := limiter.New(cfg.Default)
	l.SetRand(limiter.NewRand(1))
	p := New(cfg, l)
	tests := []struct {
		host    string
		jitter  float64
		spreads bool
	}{
		{"fixed.test", 0.5, true},    // the flag's jitter, the rule's spacing
		{"exact.test", 0, false},     // jitter:0 lifts it
		{"quarter.test", 0.25, true}, // adaptive, the rule's jitter
		{"adaptive.test", 0.5, true}, // no rule: the flags, adaptive
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			url := "http://" + tt.host + "/"
			prev := p.Reserve(context.Background(), tt.host, url, at(0))
			moved := false
			for i := 1; i < 300; i++ {
				r := p.Reserve(context.Background(), tt.host, url, at(i))
				gap, s := r.Start.Sub(prev.Start), r.Spacing
				lo, hi := time.Duration((1-tt.jitter)*float64(s)), time.Duration((1+tt.jitter)*float64(s))
				if gap < lo || gap > hi {
					t.Fatalf("navigation %d: %v after the one before, spacing %v: want %v to %v", i+1, gap, s, lo, hi)
				}
				moved = moved || gap != prev.Spacing
				prev = r
			}
			if moved != tt.spreads {
				t.Errorf("some gap differs from the spacing: got %v, want %v", moved, tt.spreads)
			}
		})
	}
}
