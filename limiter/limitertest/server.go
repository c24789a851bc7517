package limitertest

import (
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// told is an answer with status code whose headers said server of the
// server's own limits (limiter.Outcome.Server).
func told(code int, server ratelimit.Limits) *limiter.Outcome {
	return &limiter.Outcome{Status: code, Server: server}
}

// hourMS is limiter.ServerPolicyLife in ms.
const hourMS = float64(limiter.ServerPolicyLife / time.Millisecond)

var (
	serverPolicy = ratelimit.Limits{Spacing: 200 * time.Millisecond} // "p";q=5;w=1
	serverSpent  = ratelimit.Limits{Wait: 3 * time.Second}           // "p";r=0;t=3
)

// ServerCases are the steps of what a server says of its own limits: its
// policy is the host's least spacing, with no burst, for
// limiter.ServerPolicyLife after the last answer that sent it; a spent
// quota holds the next slot as a Retry-After does; the stricter of the
// rule and the server wins; in Adaptive and Fixed mode, whatever the
// status, unless the setting ignores them.
var ServerCases = []Case{
	{"no headers: the rule's burst, as before", limiter.Config{}, []Step{
		{0, "", told(200, ratelimit.Limits{}), 0},
		{0, "", nil, 0}, {0, "", nil, 0}, {0, "", nil, 0},
	}},
	{"a policy is the least spacing, with no burst", limiter.Config{}, []Step{
		{0, "", told(200, serverPolicy), 0},
		{0, "", nil, 0}, {0, "", nil, 200}, {0, "", nil, 400}, {1000, "", nil, 1000}, {1000, "", nil, 1200},
	}},
	{"a policy on a host already booked", limiter.Config{}, []Step{
		{0, "", nil, 0}, {0, "", nil, 0},
		{10, "", told(200, serverPolicy), 0},
		// The policy's spacing after the last one booked, then 200 ms
		// apart (issue 47: the burst's tat, 40 ms, let a sixth document
		// into the policy's first second).
		{10, "", nil, 200}, {10, "", nil, 400},
	}},
	{"the rule when stricter", limiter.Config{Mode: limiter.Fixed, Interval: time.Second, Burst: 1}, []Step{
		{0, "", told(200, serverPolicy), 0},
		{0, "", nil, 0}, {0, "", nil, 1000},
	}},
	{"the server when stricter than a fixed rule", limiter.Config{Mode: limiter.Fixed, Interval: 50 * time.Millisecond}, []Step{
		{0, "", told(200, serverPolicy), 0},
		{0, "", nil, 0}, {0, "", nil, 200},
	}},
	{"a policy lasts an hour after it was last seen", limiter.Config{}, []Step{
		{0, "", told(200, serverPolicy), 0},
		{hourMS - 1000, "", nil, hourMS - 1000}, {hourMS - 1000, "", nil, hourMS - 800},
		{hourMS, "", nil, hourMS}, {hourMS, "", nil, hourMS}, // expired: the burst again
	}},
	{"a policy sent again lasts an hour from then", limiter.Config{}, []Step{
		{0, "", told(200, serverPolicy), 0},
		{1800_000, "", told(200, serverPolicy), 0},
		{hourMS, "", nil, hourMS}, {hourMS, "", nil, hourMS + 200},
		{1800_000 + hourMS, "", nil, 1800_000 + hourMS}, {1800_000 + hourMS, "", nil, 1800_000 + hourMS},
	}},
	{"the latest policy replaces the one before", limiter.Config{}, []Step{
		{0, "", told(200, ratelimit.Limits{Spacing: time.Second}), 0},
		{0, "", told(200, serverPolicy), 0},
		{0, "", nil, 0}, {0, "", nil, 200},
	}},
	{"a policy and a Crawl-delay: the longer", limiter.Config{Floor: 300 * time.Millisecond}, []Step{
		{0, "", told(200, serverPolicy), 0},
		{0, "", nil, 0}, {0, "", nil, 300},
		{0, "b.example", told(200, ratelimit.Limits{Spacing: 500 * time.Millisecond}), 0},
		{0, "b.example", nil, 0}, {0, "b.example", nil, 500},
	}},
	{"r=0 holds the next slot, whatever the status", limiter.Config{}, []Step{
		{0, "", told(200, serverSpent), 0},
		{0, "", nil, 3000}, {0, "", nil, 3020}, // then the rule's spacing, as after a Retry-After
	}},
	{"r=0 under a policy", limiter.Config{}, []Step{
		{0, "", told(200, ratelimit.Limits{Spacing: 200 * time.Millisecond, Wait: 3 * time.Second}), 0},
		{0, "", nil, 3000}, {0, "", nil, 3200},
	}},
	{"r=0 in fixed mode", limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1}, []Step{
		{0, "", nil, 0},
		{50, "", told(200, ratelimit.Limits{Wait: 2 * time.Second}), 0},
		{60, "", nil, 2050},
	}},
	{"fixed mode hears the server's wait, not a Retry-After beside it", limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1}, []Step{
		{0, "", nil, 0},
		{50, "", &limiter.Outcome{Status: 429, RetryAfter: "5", Server: ratelimit.Limits{Wait: 2 * time.Second}}, 0},
		{60, "", nil, 2050}, {60, "", nil, 2150},
	}},
	{"Retry-After longer than t: the later", limiter.Config{}, []Step{
		{0, "", &limiter.Outcome{Status: 429, RetryAfter: "5", Server: serverSpent}, 0},
		{0, "", nil, 5000},
	}},
	{"t longer than Retry-After: the later", limiter.Config{}, []Step{
		{0, "", &limiter.Outcome{Status: 429, RetryAfter: "1", Server: serverSpent}, 0},
		{0, "", nil, 3000},
	}},
	{"ignored", limiter.Config{IgnoreServer: true}, []Step{
		{0, "", told(200, ratelimit.Limits{Spacing: time.Second, Wait: 3 * time.Second}), 0},
		{0, "", nil, 0}, {0, "", nil, 0},
	}},
	{"off", limiter.Config{Mode: limiter.Off}, []Step{
		{0, "", told(200, ratelimit.Limits{Spacing: time.Second, Wait: 3 * time.Second}), 0},
		{0, "", nil, 0}, {0, "", nil, 0},
	}},
}

// ServerLimits runs ServerCases, each against a fresh implementation.
func ServerLimits(t *testing.T, newL New) {
	for _, tt := range ServerCases {
		t.Run(tt.Name, func(t *testing.T) {
			RunSteps(t, newL(t, tt.Config), tt.Steps)
		})
	}
}
