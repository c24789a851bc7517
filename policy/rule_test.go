package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "100ms", want: 100 * time.Millisecond},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "100", want: 100 * time.Millisecond},
		{in: " 250 ", want: 250 * time.Millisecond},
		{in: "4.5", want: 4500 * time.Microsecond},
		{in: "0", want: 0},
		{in: "0s", want: 0},
		{in: "2m", want: 2 * time.Minute},
		{in: "", bad: true},
		{in: "fast", bad: true},
		{in: "-5", bad: true},
		{in: "-1s", bad: true},
		{in: "1e3", bad: true},
		{in: "Inf", bad: true},
		{in: "100 ms", bad: true},
		{in: "99999999999999", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseDuration(%q): got %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.bad)
		}
	}
	_, err := FlagDuration("load", "soon", false)
	if want := `--load "soon": want a duration such as 100ms or 1.5s, or a number of milliseconds`; err == nil || err.Error() != want {
		t.Errorf("FlagDuration: got %v, want %s", err, want)
	}
	if _, err := FlagDuration("store-timeout", "0", true); err == nil || !strings.Contains(err.Error(), "> 0") {
		t.Errorf("FlagDuration positive: got %v, want an error asking for > 0", err)
	}
}

func TestParseRule(t *testing.T) {
	adaptive := limiter.Config{}
	tests := []struct {
		in      string
		pattern string
		want    limiter.Config
		exempt  bool
		err     string // part of the error; "" when the rule is good
	}{
		{in: "*.slow.test=fixed:300ms", pattern: "*.slow.test", want: limiter.Config{Mode: limiter.Fixed, Interval: 300 * time.Millisecond}},
		{in: "*.slow.test=fixed:300", pattern: "*.slow.test", want: limiter.Config{Mode: limiter.Fixed, Interval: 300 * time.Millisecond}},
		{in: " Example.ORG. = adaptive ", pattern: "example.org", want: adaptive},
		{in: "10.*=off", pattern: "10.*", want: limiter.Config{Mode: limiter.Off}},
		{in: "*.internal=exempt", pattern: "*.internal", want: limiter.Config{Mode: limiter.Off}, exempt: true},
		{in: "a.test=fixed:1.5s,burst:3", pattern: "a.test", want: limiter.Config{Mode: limiter.Fixed, Interval: 1500 * time.Millisecond, Burst: 3}},
		{in: "a.test=adaptive burst:1", pattern: "a.test", want: limiter.Config{Burst: 1}},
		{in: "a.test=burst:0", pattern: "a.test", want: limiter.Config{Burst: 1}},
		{in: "a.test=burst:4", pattern: "a.test", want: limiter.Config{Burst: 4}},
		{in: "*.bücher.de=fixed:1s", pattern: "*.xn--bcher-kva.de", want: limiter.Config{Mode: limiter.Fixed, Interval: time.Second}},
		{in: "[2001:DB8::1]=off", pattern: "[2001:db8::1]", want: limiter.Config{Mode: limiter.Off}},
		{in: "2001:db8::1=off", pattern: "[2001:db8::1]", want: limiter.Config{Mode: limiter.Off}},
		{in: "a.test", err: "want PATTERN=SETTING"},
		{in: "=adaptive", err: "empty host pattern"},
		{in: "a.test=", err: "empty setting"},
		{in: "a.test=fast", err: `"fast": want adaptive, fixed:DURATION, off or exempt`},
		{in: "a.test=fixed", err: `"fixed": want adaptive`},
		{in: "a.test=fixed:soon", err: `"fixed:soon": want a duration such as 100ms`},
		{in: "a.test=fixed:0", err: "want a spacing > 0"},
		{in: "a.test=fixed:2h", err: "at most an hour"},
		{in: "a.test=adaptive,fixed:1s", err: "one mode only"},
		{in: "a.test=burst:-1", err: "burst:N with N a whole number ≥ 0"},
		{in: "a.test=burst:1,burst:2", err: "one burst:N only"},
		{in: "a.test=off,burst:2", err: "burst:N means nothing"},
		{in: "https://a.test/=off", err: "not a URL"},
		{in: "a.test:8080=off", err: "without a port"},
		{in: "[a-=off", err: "bad glob"},
		{in: "a.test=overload:403+429+503", pattern: "a.test", want: limiter.Config{Overload: limiter.NewStatuses(403, 429, 503)}},
		{in: "a.test=adaptive,overload:none", pattern: "a.test", want: limiter.Config{Overload: limiter.NewStatuses()}},
		{in: "a.test=fixed:1s,concurrency:2", pattern: "a.test", want: limiter.Config{Mode: limiter.Fixed, Interval: time.Second}},
		{in: "a.test=off,concurrency:2", pattern: "a.test", want: limiter.Config{Mode: limiter.Off}},
		{in: "a.test=overload:403,429", err: `"429": want adaptive`},
		{in: "a.test=overload:999", err: `want HTTP statuses from 100 to 599`},
		{in: "a.test=overload:", err: `want HTTP statuses such as 429,503`},
		{in: "a.test=overload:429,overload:503", err: "one overload:STATUSES only"},
		{in: "a.test=fixed:1s,overload:403", err: "only the adaptive rule hears answers"},
		{in: "a.test=concurrency:-1", err: "concurrency:N with N a whole number from 0"},
		{in: "a.test=concurrency:two", err: "concurrency:N with N a whole number from 0"},
		{in: "a.test=concurrency:1,concurrency:2", err: "one concurrency:N only"},
		{in: "a.test=exempt,concurrency:2", err: "never held"},
		{in: "a.test=overload-header:cf-mitigated=challenge", pattern: "a.test", want: limiter.Config{OverloadHeaders: limiter.NewHeaders(limiter.Header{Name: "cf-mitigated", Value: "challenge"})}},
		{in: "a.test=adaptive,overload-header:CF-Mitigated=Challenge overload-header:x-overloaded", pattern: "a.test",
			want: limiter.Config{OverloadHeaders: limiter.NewHeaders(limiter.Header{Name: "cf-mitigated", Value: "challenge"}, limiter.Header{Name: "x-overloaded"})}},
		{in: "a.test=overload-header:none", pattern: "a.test", want: adaptive},
		{in: "a.test=overload-header:x=a:b", pattern: "a.test", want: limiter.Config{OverloadHeaders: limiter.NewHeaders(limiter.Header{Name: "x", Value: "a:b"})}},
		{in: "a.test=overload-header:", err: `"overload-header:": no header name`},
		{in: "a.test=overload-header:=challenge", err: "no header name"},
		{in: "a.test=overload-header:cf-mitigated=", err: "an empty VALUE"},
		{in: "a.test=overload-header:cf(mitigated)", err: `"cf(mitigated)" is no header name`},
		{in: "a.test=overload-header:none,overload-header:x", err: "none, or headers, not both"},
		{in: "a.test=overload-header:x,overload-header:none", err: "none, or headers, not both"},
		{in: "a.test=fixed:1s,overload-header:x", err: "only the adaptive rule hears answers"},
		{in: "a.test=off overload-header:x", err: "only the adaptive rule hears answers"},
		{in: "a.test=retry-after-max:5m", pattern: "a.test", want: limiter.Config{RetryAfterMax: 5 * time.Minute}},
		{in: "a.test=retry-after-max:1h,overload:403+429", pattern: "a.test", want: limiter.Config{RetryAfterMax: time.Hour, Overload: limiter.NewStatuses(403, 429)}},
		{in: "a.test=retry-after-max:61m", err: "over an hour"},
		{in: "a.test=retry-after-max:120", err: "under a second"},
		{in: "a.test=retry-after-max:0", err: "under a second"},
		{in: "a.test=retry-after-max:later", err: "want a duration from 1s to 1h"},
		{in: "a.test=retry-after-max:1m,retry-after-max:2m", err: "one retry-after-max:DURATION only"},
		{in: "a.test=fixed:1s retry-after-max:2m", err: "only the adaptive rule hears answers"},
		{in: "a.test=ratelimit-headers:ignore", pattern: "a.test", want: limiter.Config{IgnoreServer: true}},
		{in: "a.test=fixed:1s ratelimit-headers:IGNORE", pattern: "a.test", want: limiter.Config{Mode: limiter.Fixed, Interval: time.Second, IgnoreServer: true}},
		{in: "a.test=ratelimit-headers:obey", pattern: "a.test", want: adaptive},
		{in: "a.test=ratelimit-headers:yes", err: `"ratelimit-headers:yes": want obey`},
		{in: "a.test=ratelimit-headers:obey,ratelimit-headers:ignore", err: "one ratelimit-headers:… only"},
		{in: "a.test=off,ratelimit-headers:ignore", err: "never spaced"},
		{in: "a.test=jitter:0.5", pattern: "a.test", want: limiter.Config{Jitter: 0.5}},
		{in: "a.test=fixed:200ms,burst:1,jitter:0.25", pattern: "a.test", want: limiter.Config{Mode: limiter.Fixed, Interval: 200 * time.Millisecond, Burst: 1, Jitter: 0.25}},
		{in: "a.test=adaptive jitter:0.9", pattern: "a.test", want: limiter.Config{Jitter: 0.9}},
		{in: "a.test=jitter:0", pattern: "a.test", want: adaptive},
		{in: "a.test=jitter:1", err: `"jitter:1": want a fraction F from 0 up to 1, 1 excluded`},
		{in: "a.test=jitter:1.5", err: "want a fraction F"},
		{in: "a.test=jitter:-0.1", err: "want a fraction F"},
		{in: "a.test=jitter:50%", err: "want a fraction F"},
		{in: "a.test=jitter:NaN", err: "want a fraction F"},
		{in: "a.test=jitter:", err: "want a fraction F"},
		{in: "a.test=jitter:0.1,jitter:0.2", err: "one jitter:F only"},
		{in: "a.test=off,jitter:0.5", err: "jitter:F means nothing"},
		{in: "a.test=exempt jitter:0.5", err: "jitter:F means nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRule(tt.in, adaptive, 0)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %+v, %v; want an error with %q", r, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Pattern != tt.pattern || r.Setting != tt.want || r.Exempt != tt.exempt {
				t.Errorf("got %q %+v exempt %v, want %q %+v exempt %v", r.Pattern, r.Setting, r.Exempt, tt.pattern, tt.want, tt.exempt)
			}
		})
	}
}

// TestRuleConcurrency: a rule caps the navigations in flight with
// concurrency:N, else starts from the flag's cap; 0 lifts it; exempt
// hosts are never held, so never capped.
func TestRuleConcurrency(t *testing.T) {
	tests := []struct {
		in        string
		flag      int
		want      int
		own       bool
		overloads string
	}{
		{"*.slow.test=fixed:1s,concurrency:2", 0, 2, true, "429,503"},
		{"*.slow.test=fixed:1s", 4, 4, false, "429,503"},
		{"*.slow.test=concurrency:0", 4, 0, true, "429,503"},
		{"*.slow.test=concurrency:3 burst:1", 0, 3, true, "429,503"},
		{"*.corp=exempt", 4, 0, false, "429,503"},
		{"*.cdn.test=adaptive overload:403+429+503 concurrency:1", 0, 1, true, "403,429,503"},
	}
	for _, tt := range tests {
		r, err := ParseRule(tt.in, limiter.Config{}, tt.flag)
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if r.Concurrency != tt.want || r.OwnConcurrency != tt.own || r.Setting.Overload.String() != tt.overloads {
			t.Errorf("%s with --http-nav-concurrency %d: got concurrency %d (own %v), overload %s; want %d (%v), %s",
				tt.in, tt.flag, r.Concurrency, r.OwnConcurrency, r.Setting.Overload, tt.want, tt.own, tt.overloads)
		}
	}
}

// TestParseStatuses: the overload statuses as the flag and a rule read
// them.
func TestParseStatuses(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "429,503", want: "429,503"},
		{in: "403,429,503", want: "403,429,503"},
		{in: "503+429+403", want: "403,429,503"},
		{in: " 429 , 503 ", want: "429,503"},
		{in: "none", want: ""},
		{in: "NONE", want: ""},
		{in: "", bad: true},
		{in: "4xx", bad: true},
		{in: "99", bad: true},
		{in: "600", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseStatuses(tt.in)
		if (err != nil) != tt.bad || err == nil && got.String() != tt.want {
			t.Errorf("ParseStatuses(%q): got %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func TestRuleStartsFromFlags(t *testing.T) {
	def := limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 2}
	r, err := ParseRule("a.test=burst:5", def, 0)
	if err != nil || r.Setting != (limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 5}) {
		t.Errorf("burst alone: got %+v, %v; want the flags' fixed 100ms with burst 5", r.Setting, err)
	}
	r, err = ParseRule("a.test=adaptive", def, 0)
	if err != nil || r.Setting != (limiter.Config{Burst: 2}) {
		t.Errorf("adaptive: got %+v, %v; want adaptive with the flags' burst", r.Setting, err)
	}
	// A rule keeps the flag's --jitter unless it says jitter:F itself.
	def.Jitter = 0.5
	r, err = ParseRule("a.test=fixed:300ms", def, 0)
	if err != nil || r.Setting.Jitter != 0.5 {
		t.Errorf("jitter from the flag: got %+v, %v; want jitter 0.5", r.Setting, err)
	}
	r, err = ParseRule("a.test=jitter:0", def, 0)
	if err != nil || r.Setting != (limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 2}) {
		t.Errorf("jitter:0: got %+v, %v; want the flags' setting without jitter", r.Setting, err)
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"example.org", "example.org", true},
		{"example.org", "www.example.org", false},
		{"10.*", "10.0.0.7", true},
		{"10.*", "110.0.0.7", false},
		{"*", "anything.test", true},
		{"a?.test", "ab.test", true},
		{"[ab].test", "b.test", true},
		{"[2001:db8::1]", "[2001:db8::1]", true},
		{"[2001:db8::1]", "[2001:db8::2]", false},
		{"*.xn--bcher-kva.de", "www.xn--bcher-kva.de", true},
	}
	for _, tt := range tests {
		if got := match(tt.pattern, tt.host); got != tt.want {
			t.Errorf("match(%q, %q): got %v, want %v", tt.pattern, tt.host, got, tt.want)
		}
	}
}

func TestReadRules(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "rules.txt")
	os.WriteFile(good, []byte("# slow sites\n*.slow.test = fixed:300ms   # their request\n\n  *.corp = exempt\n"), 0o644)
	rules, err := ReadRules(good, limiter.Config{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 2 || rules[0].Pattern != "*.slow.test" || rules[1].Pattern != "*.corp" || !rules[1].Exempt {
		t.Fatalf("got %+v, want the two rules", rules)
	}
	if want := "*.slow.test = fixed:300ms (" + good + ":2)"; rules[0].Text != want {
		t.Errorf("text: got %q, want %q", rules[0].Text, want)
	}
	bad := filepath.Join(dir, "bad.txt")
	os.WriteFile(bad, []byte("a.test=adaptive\nb.test=sometimes\n"), 0o644)
	_, err = ReadRules(bad, limiter.Config{}, 0)
	if want := "--rules " + bad + `:2 "b.test=sometimes": "sometimes": want adaptive`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("bad file: got %v, want %s", err, want)
	}
	if _, err := ReadRules(filepath.Join(dir, "none.txt"), limiter.Config{}, 0); err == nil || !strings.HasPrefix(err.Error(), "--rules") {
		t.Errorf("missing file: got %v, want an error naming --rules", err)
	}
}

func TestSite(t *testing.T) {
	tests := []struct{ host, want string }{
		{"www.example.com", "example.com"},
		{"static.example.com", "example.com"},
		{"example.com", "example.com"},
		{"a.b.c.example.com", "example.com"},
		{"www.bbc.co.uk", "bbc.co.uk"},
		{"bbc.co.uk", "bbc.co.uk"},
		{"co.uk", "co.uk"},
		{"a.github.io", "a.github.io"},
		{"b.github.io", "b.github.io"},
		{"x.a.github.io", "a.github.io"},
		{"github.io", "github.io"},
		{"www.site.test", "site.test"}, // .test is not listed: the default rule makes its last label the suffix
		{"site.test", "site.test"},
		{"10.0.0.7", "10.0.0.7"},
		{"192.168.1.1", "192.168.1.1"},
		{"[2001:db8::1]", "[2001:db8::1]"},
		{"intranet", "intranet"},
		{"www.xn--bcher-kva.de", "xn--bcher-kva.de"},    // www.bücher.de
		{"shop.foo.xn--55qx5d.cn", "foo.xn--55qx5d.cn"}, // 公司.cn is a public suffix
		{"xn--55qx5d.cn", "xn--55qx5d.cn"},
	}
	for _, tt := range tests {
		if got := Site(tt.host); got != tt.want {
			t.Errorf("Site(%q): got %q, want %q", tt.host, got, tt.want)
		}
	}
}
