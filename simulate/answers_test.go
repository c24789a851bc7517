package simulate

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// TestParseAnswer: --answer's syntax, FROM-TO=STATUS[;NAME: VALUE]...: a
// ';' starts a header only before NAME and a colon, so Structured Field
// parameters stay in their value; every mistake is one line that quotes
// the value and says what is wanted.
func TestParseAnswer(t *testing.T) {
	tests := []struct {
		in   string
		want Answer
	}{
		{"10s-11s=429", Answer{Span: Span{10 * time.Second, 11 * time.Second}, Status: 429}},
		{"10s-11s=429;Retry-After: 10", Answer{Span: Span{10 * time.Second, 11 * time.Second}, Status: 429,
			Headers: []limiter.Header{{Name: "Retry-After", Value: "10"}}}},
		{` 0s - 1h = 200 ; RateLimit-Policy: "p";q=5;w=1 ; RateLimit: "p";r=0;t=3`, Answer{Span: Span{0, time.Hour}, Status: 200,
			Headers: []limiter.Header{{Name: "RateLimit-Policy", Value: `"p";q=5;w=1`}, {Name: "RateLimit", Value: `"p";r=0;t=3`}}}},
		{"1s-2s=503;Retry-After: Thu, 01 Jan 2026 00:00:20 GMT", Answer{Span: Span{time.Second, 2 * time.Second}, Status: 503,
			Headers: []limiter.Header{{Name: "Retry-After", Value: "Thu, 01 Jan 2026 00:00:20 GMT"}}}},
		{"1s-2s=200;X-RateLimit-Remaining: 0;X-RateLimit-Reset: 1767225605;cf-mitigated: challenge", Answer{Span: Span{time.Second, 2 * time.Second}, Status: 200,
			Headers: []limiter.Header{{Name: "X-RateLimit-Remaining", Value: "0"}, {Name: "X-RateLimit-Reset", Value: "1767225605"}, {Name: "cf-mitigated", Value: "challenge"}}}},
		{"500ms-1.5s=403;Link: <https://a.test/>; rel=preload", Answer{Span: Span{500 * time.Millisecond, 1500 * time.Millisecond}, Status: 403,
			Headers: []limiter.Header{{Name: "Link", Value: "<https://a.test/>; rel=preload"}}}},
	}
	for _, tt := range tests {
		got, err := ParseAnswer(tt.in)
		if err != nil || got.Span != tt.want.Span || got.Status != tt.want.Status || !slices.Equal(got.Headers, tt.want.Headers) {
			t.Errorf("ParseAnswer(%q): got %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}

	bad := []struct{ in, want string }{
		{"", `--answer "": want FROM-TO=STATUS[;NAME: VALUE]..., such as '10s-11s=429;Retry-After: 10'`},
		{"10s-11s", `--answer "10s-11s": want FROM-TO=STATUS[;NAME: VALUE]...`},
		{"=429", `--answer "=429": want FROM-TO=STATUS`},
		{"10s=429", `--answer "10s=429": span "10s": want FROM-TO, two durations from the run's start, FROM before TO, such as 10s-11s`},
		{"11s-10s=429", `span "11s-10s": want FROM-TO`},
		{"10s-10s=429", `span "10s-10s": want FROM-TO`},
		{"10-11s=429", `span "10-11s": want FROM-TO`},
		{"10s-11s=", `--answer "10s-11s=": status "": want a whole number from 100 to 599`},
		{"10s-11s=abc", `status "abc": want a whole number from 100 to 599`},
		{"10s-11s=99", `status "99": want a whole number from 100 to 599`},
		{"10s-11s=600", `status "600": want a whole number from 100 to 599`},
		{"10s-11s=429 Retry-After: 10", `status "429 Retry-After: 10": want a whole number`},
		{"10s-11s=429;", `header "": want NAME: VALUE, such as Retry-After: 10`},
		{"10s-11s=429;Retry-After 10", `header "Retry-After 10": want NAME: VALUE`},
		{"10s-11s=429;Retry-After=10", `header "Retry-After=10": want NAME: VALUE`},
		{"10s-11s=429;Retry After: 10", `header "Retry After: 10": "Retry After" is no header name`},
		{"10s-11s=429;: 10", `header ": 10": "" is no header name`},
		{"10s-11s=429;Retry-After:", `header "Retry-After": an empty VALUE`},
		{"10s-11s=429;X-A: b\x01c", `header "X-A": a VALUE with control characters`},
		{"10s-11s=429;Retry-After: 10s", `Retry-After "10s": neither whole seconds nor an HTTP-date, which the relay ignores`},
		{"10s-11s=429;Retry-After: -1", `Retry-After "-1": neither whole seconds nor an HTTP-date`},
		{"10s-11s=429;Retry-After: tomorrow", `Retry-After "tomorrow": neither`},
		{`0s-1h=200;RateLimit-Policy: "p";q=x;w=1`, `ratelimit: RateLimit-Policy: `},
		{`0s-1h=200;RateLimit: "p";r=0;t=soon`, `ratelimit: RateLimit: `},
		{"0s-1h=200;X-RateLimit-Remaining: none", `ratelimit: X-RateLimit`},
	}
	for _, tt := range bad {
		_, err := ParseAnswer(tt.in)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "--answer ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseAnswer(%q): got %v, want one line naming --answer with %q", tt.in, err, tt.want)
		}
	}
}

// wentStarts returns when the navigations that reached the site started.
func wentStarts(navs []Nav) []time.Duration {
	var out []time.Duration
	for _, n := range navs {
		if n.Deferred == "" {
			out = append(out, n.Start)
		}
	}
	return out
}

func mustAnswer(t *testing.T, s string) Answer {
	t.Helper()
	a, err := ParseAnswer(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// breakerConfig is --host-errors 5/1m without jitter.
func breakerConfig() breaker.Config {
	return breaker.Config{Failures: 5, Window: time.Minute, Jitter: -1}
}

func fixed(d time.Duration) limiter.Config {
	return limiter.Config{Mode: limiter.Fixed, Interval: d}
}

// TestReplayMaxWait: under --max-wait 2s, a 429 answered at 10 s with
// Retry-After: 10 moves the slot to 20 s; every navigation asked for while
// it lies more than 2 s ahead is deferred, answered at once with a
// Retry-After of the seconds to it, rounded up, and its page asks again
// --load later; the first asked within 2 s of it waits for it; the site
// sees nothing between 10 s and 20 s.
func TestReplayMaxWait(t *testing.T) {
	o := Options{Navigations: 60, Load: 500 * time.Millisecond, Phases: 1,
		Policy:  policy.Config{Default: limiter.Config{MaxWait: 2 * time.Second}},
		Answers: []Answer{mustAnswer(t, "10s-11s=429;Retry-After: 10")}}
	navs := Replay(o)
	if len(navs) != 60 {
		t.Fatalf("got %d navigations, want 60", len(navs))
	}
	var deferred []Nav
	for _, n := range navs {
		if n.Deferred != "" {
			deferred = append(deferred, n)
		}
	}
	if len(deferred) != 16 || deferred[0].Start != 10*time.Second || deferred[15].Start != 17500*time.Millisecond {
		t.Fatalf("deferred %d, from %v to %v; want 16, asked from 10s to 17.5s every 500ms", len(deferred), deferred[0].Start, deferred[len(deferred)-1].Start)
	}
	for _, n := range deferred {
		want := retryAfter(20*time.Second - n.Start)
		if n.Deferred != "max-wait" || n.RetryAfter != want || n.Status != 0 || n.Wait != 0 {
			t.Errorf("navigation %d asked at %v: %+v, want deferred (max-wait) at once with Retry-After %d", n.Nav, n.Start, n, want)
		}
	}
	if deferred[0].RetryAfter != 10 || deferred[15].RetryAfter != 3 {
		t.Errorf("Retry-After %d at 10s and %d at 17.5s, want 10 and 3 (2.5 s rounded up)", deferred[0].RetryAfter, deferred[15].RetryAfter)
	}
	starts := wentStarts(navs)
	for _, s := range starts {
		if s > 9500*time.Millisecond && s < 20*time.Second {
			t.Errorf("a navigation reached the site at %v, between the 429's and its Retry-After's end", s)
		}
	}
	next := navs[deferred[15].Nav] // the one after the last deferred
	if next.Deferred != "" || next.Start != 20*time.Second || next.Wait != 2*time.Second {
		t.Errorf("the navigation asked at 18s: %+v, want it held 2s, to 20s", next)
	}

	// Without --max-wait, the same navigation waits for its slot instead.
	o.Policy.Default.MaxWait = 0
	navs = Replay(o)
	if n := navs[20]; n.Deferred != "" || n.Start != 20*time.Second || n.Wait != 10*time.Second {
		t.Errorf("without --max-wait, the navigation asked at 10s: %+v, want it held 10s", n)
	}
}

// TestReplayAnswers: an answer's headers go through the readers the
// relay's do: RateLimit-Policy q=5;w=1 spaces a fixed 20 ms rule 200 ms
// (not under ratelimit-headers ignore); a spent quota (RateLimit r=0,
// X-RateLimit-Remaining 0 with a reset in seconds or an epoch time)
// holds the next until its reset; an HTTP-date Retry-After counts from
// Origin; --overload-header makes a 200 overload.
func TestReplayAnswers(t *testing.T) {
	gaps := func(navs []Nav) []time.Duration {
		s := wentStarts(navs)
		var out []time.Duration
		for i := 1; i < len(s); i++ {
			out = append(out, s[i]-s[i-1])
		}
		return out
	}
	pol := Options{Navigations: 30, Load: 10 * time.Millisecond, Phases: 1, Policy: policy.Config{Default: fixed(20 * time.Millisecond)},
		Answers: []Answer{mustAnswer(t, `0s-1h=200;RateLimit-Policy: "p";q=5;w=1`)}}
	g := gaps(Replay(pol))
	if least := slices.Min(g[1:]); least < 200*time.Millisecond {
		t.Errorf("under RateLimit-Policy q=5;w=1, gaps from the third navigation on: least %v, want ≥ 200ms: %v", least, g)
	}
	pol.Policy.Default.IgnoreServer = true
	if most := slices.Max(gaps(Replay(pol))); most > 20*time.Millisecond {
		t.Errorf("with --ratelimit-headers ignore, a gap of %v, want the rule's 20ms at most", most)
	}

	for _, tt := range []struct{ answer, what string }{
		{`1s-1.02s=200;RateLimit: "p";r=0;t=3`, "RateLimit r=0;t=3"},
		{"1s-1.02s=200;X-RateLimit-Remaining: 0;X-RateLimit-Reset: 3", "X-RateLimit-Reset in seconds"},
		{"1s-1.02s=200;X-RateLimit-Remaining: 0;X-RateLimit-Reset: 1767225604", "X-RateLimit-Reset at Origin + 4 s"},
		{"1s-1.1s=503;Retry-After: Thu, 01 Jan 2026 00:00:04 GMT", "an HTTP-date Retry-After 4 s after Origin"},
	} {
		o := Options{Navigations: 60, Load: 20 * time.Millisecond, Phases: 1, Policy: policy.Config{Default: fixed(20 * time.Millisecond)},
			Answers: []Answer{mustAnswer(t, tt.answer)}}
		if strings.Contains(tt.answer, "503") {
			o.Policy.Default = limiter.Config{} // statuses are heard in adaptive mode
		}
		navs := Replay(o)
		answeredAt := time.Duration(-1) // the first the site answered so
		for _, n := range navs {
			if n.Answer == 1 && answeredAt < 0 {
				answeredAt = n.Start + o.Load
			}
		}
		want := answeredAt + 3*time.Second
		if strings.Contains(tt.what, "4 s") {
			want = 4 * time.Second
		}
		s := wentStarts(navs)
		k := slices.IndexFunc(s, func(d time.Duration) bool { return d > answeredAt })
		if answeredAt < time.Second || answeredAt >= 1100*time.Millisecond || k < 0 || s[k] != want {
			t.Errorf("%s: answered at %v, next at %v, want %v", tt.what, answeredAt, s[max(k, 0)], want)
		}
	}

	challenge := Options{Navigations: 30, Load: 50 * time.Millisecond, Phases: 1, Answers: []Answer{mustAnswer(t, "1s-1.04s=200;cf-mitigated: challenge")}}
	plain := Replay(challenge)
	challenge.Policy.Default.OverloadHeaders = limiter.NewHeaders(limiter.Header{Name: "cf-mitigated", Value: "challenge"})
	counted := Replay(challenge)
	if plain[20].Pressure != counted[19].Pressure || counted[20].Pressure < plain[20].Pressure+45 {
		t.Errorf("a 200 with cf-mitigated: challenge at 1s: pressure %d then %d with --overload-header, %d without; want 50 more with it",
			counted[19].Pressure, counted[20].Pressure, plain[20].Pressure)
	}
}

// TestReplayBreakerAnswers: --answer replays a breaker too: a 429's
// Retry-After longer than the pause lengthens it, capped by
// --retry-after-max; a 200 with an overload header is a failure.
func TestReplayBreakerAnswers(t *testing.T) {
	o := BreakerOptions{
		Breaker:     breakerConfig(),
		Navigations: 200,
		Every:       time.Second,
		Load:        time.Second,
		Answers:     []Answer{mustAnswer(t, "0s-20s=429;Retry-After: 120")},
	}
	until := func(navs []BreakerNav) time.Duration { return navs[5].Until }
	if got := until(ReplayBreaker(o)); got != 65*time.Second {
		t.Errorf("Retry-After: 120 under the default --retry-after-max: deferred until %v, want 65s (5s + 60s)", got)
	}
	o.Policy.Default.RetryAfterMax = 5 * time.Minute
	if got := until(ReplayBreaker(o)); got != 125*time.Second {
		t.Errorf("Retry-After: 120 under --retry-after-max 5m: deferred until %v, want 125s", got)
	}
	o.Answers = []Answer{mustAnswer(t, "0s-20s=200;cf-mitigated: challenge")}
	if navs := ReplayBreaker(o); !navs[5].Went {
		t.Errorf("a challenge without --overload-header opened the breaker: %+v", navs[5])
	}
	o.Policy.Default.OverloadHeaders = limiter.NewHeaders(limiter.Header{Name: "cf-mitigated"})
	if navs := ReplayBreaker(o); navs[5].Went || !navs[4].Failed {
		t.Errorf("a challenge with --overload-header cf-mitigated: %+v then %+v, want a failure and the breaker open", navs[4], navs[5])
	}
}
