package policy

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/limiter"
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
		{Flags{Bucket: "domain"}, `--bucket "domain": want host or site`},
		{Flags{ExemptHosts: []string{"http://x/"}}, `--exempt-host "http://x/"`},
		{Flags{Robots: "obey"}, `--robots "obey": want ignore or crawl-delay`},
		{Flags{RobotsAgent: "bot"}, `--robots-user-agent "bot": needs --robots crawl-delay`},
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
