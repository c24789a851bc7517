package hold_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// heard records what Observe was told of each host's server limits.
type heard struct {
	hold.Limiter
	mu     sync.Mutex
	server map[string]ratelimit.Limits
}

func (l *heard) Observe(host string, o limiter.Outcome, now time.Time) limiter.Effect {
	l.mu.Lock()
	l.server[host] = o.Server
	l.mu.Unlock()
	return l.Limiter.Observe(host, o, now)
}

// ReadsLimits passes on the policy's: heard wraps the Limiter, so it
// must say what the Limiter says.
func (l *heard) ReadsLimits(host string) bool { return l.Limiter.(hold.LimitsReader).ReadsLimits(host) }

// TestAnswerLimitsRead: a document answer's RateLimit headers reach the
// Limiter (limiter.Outcome.Server), a malformed one warned about once a
// host; a host whose setting ignores them (--ratelimit-headers ignore, a
// rule's ratelimit-headers:ignore) or is never spaced has them neither
// read nor warned about.
func TestAnswerLimitsRead(t *testing.T) {
	for _, tt := range []struct {
		name  string
		flags policy.Flags
		host  string
		reads bool
	}{
		{"obeyed by default", policy.Flags{Delay: "100ms"}, "a.test", true},
		{"ignored by the flag", policy.Flags{Delay: "100ms", RateLimitHeaders: "ignore"}, "a.test", false},
		{"ignored by a rule", policy.Flags{Rules: []string{"a.test=ratelimit-headers:ignore"}}, "a.test", false},
		{"obeyed by a rule over the flag", policy.Flags{RateLimitHeaders: "ignore", Rules: []string{"a.test=ratelimit-headers:obey"}}, "a.test", true},
		{"never spaced", policy.Flags{Rules: []string{"a.test=off"}, Delay: "100ms"}, "a.test", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := policy.FromFlags(tt.flags)
			if err != nil {
				t.Fatal(err)
			}
			var logs fakebrowser.Logs // Observe's goroutines write to it
			log := zerolog.New(&logs).Level(zerolog.WarnLevel)
			lim := &heard{Limiter: policy.New(cfg, limiter.New(cfg.Default)), server: map[string]ratelimit.Limits{}}
			hd, h := armWith(t, lim, &log)
			var answer cdp.Outcome
			answer.Status = 200
			answer.Limits.Add("RateLimit-Policy", `"p";q=5;w=1`)
			answer.Limits.Add("RateLimit", `"p";r=zero`) // malformed
			for range 3 {
				h.Observe(nil, tt.host, answer, &log)
			}
			hd.Wait()
			lim.mu.Lock()
			got := lim.server[tt.host]
			lim.mu.Unlock()
			want := ratelimit.Limits{}
			if tt.reads {
				want.Spacing = 200 * time.Millisecond
			}
			if got != want {
				t.Errorf("the Limiter was told %+v, want %+v", got, want)
			}
			warnings := strings.Count(logs.String(), "malformed RateLimit headers ignored")
			if tt.reads && warnings != 1 || !tt.reads && warnings != 0 {
				t.Errorf("%d warnings of malformed RateLimit headers for 3 answers, want %d", warnings, map[bool]int{true: 1}[tt.reads])
			}
		})
	}
}
