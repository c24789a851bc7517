package simulate

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// Origin is the instant a replay starts at, on its simulated clock: an
// HTTP-date in a Retry-After, or an epoch time in an X-RateLimit-Reset,
// is read against it (Thu, 01 Jan 2026 00:00:00 GMT; 1767225600 in
// seconds), so that a replay is the same whenever it runs.
var Origin = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Answer is how the site answers the documents it answers within a span
// of time from the run's start (--answer, and --down's 503s): with
// Status and Headers, as sent, in order. A document answered outside
// every span gets a 200 without headers.
type Answer struct {
	Span
	Status  int
	Headers []limiter.Header
}

// String writes a as a replay's header says it: 429 (Retry-After: 10)
// from 10s up to 11s.
func (a Answer) String() string {
	return a.What() + " from " + a.From.String() + " up to " + a.To.String()
}

// What writes a's status and headers: 429 (Retry-After: 10).
func (a Answer) What() string {
	s := strconv.Itoa(a.Status)
	if len(a.Headers) > 0 {
		var hs []string
		for _, h := range a.Headers {
			hs = append(hs, h.Name+": "+h.Value)
		}
		s += " (" + strings.Join(hs, "; ") + ")"
	}
	return s
}

// answerAt returns which of answers the site gives a document it
// answers at at (from the run's start), counted from 1: the first whose
// span holds it; 0 for none, a 200 without headers.
func answerAt(answers []Answer, at time.Duration) int {
	for i, a := range answers {
		if a.From <= at && at < a.To {
			return i + 1
		}
	}
	return 0
}

// AnswerSyntax is what --answer reads, for its help and errors.
const AnswerSyntax = "FROM-TO=STATUS[;NAME: VALUE]..."

// ParseAnswer reads one --answer: FROM-TO=STATUS[;NAME: VALUE]..., such
// as 10s-11s=429;Retry-After: 10. FROM and TO are Go durations from the
// run's start, FROM before TO; STATUS is 100 to 599. Each header follows
// a ';' and is NAME: VALUE; a ';' followed by anything but a header name
// and a colon belongs to the value before it, so that Structured Field
// parameters read as sent: RateLimit-Policy: "p";q=5;w=1. A Retry-After
// the relay would ignore (neither seconds nor an HTTP-date), or RateLimit
// fields package ratelimit finds malformed, are refused here: a replay of
// them would change nothing and say so nowhere. Errors quote the value
// and name --answer.
func ParseAnswer(s string) (Answer, error) {
	var a Answer
	fail := func(format string, args ...any) (Answer, error) {
		return Answer{}, fmt.Errorf("--answer %q: %s", s, fmt.Sprintf(format, args...))
	}
	span, rest, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(span) == "" {
		return fail("want %s, such as '10s-11s=429;Retry-After: 10'", AnswerSyntax)
	}
	var err error
	if a.Span, err = ParseSpan(span); err != nil {
		return fail("span %q: %v", strings.TrimSpace(span), err)
	}
	status, headers, hasHeaders := strings.Cut(rest, ";")
	a.Status, err = strconv.Atoi(strings.TrimSpace(status))
	if err != nil || a.Status < 100 || a.Status > 599 {
		return fail("status %q: want a whole number from 100 to 599", strings.TrimSpace(status))
	}
	if !hasHeaders {
		return a, nil
	}
	var lines []string
	for i, part := range strings.Split(headers, ";") {
		if i > 0 && !startsHeader(part) {
			lines[len(lines)-1] += ";" + part // a parameter of the value before
			continue
		}
		lines = append(lines, part)
	}
	for _, line := range lines {
		name, value, ok := strings.Cut(line, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok:
			return fail("header %q: want NAME: VALUE, such as Retry-After: 10", strings.TrimSpace(line))
		case !httpguts.ValidHeaderFieldName(name):
			return fail("header %q: %q is no header name (letters, digits and !#$%%&'*+-.^_`|~)", strings.TrimSpace(line), name)
		case value == "":
			return fail("header %q: an empty VALUE", name)
		case !httpguts.ValidHeaderFieldValue(value):
			return fail("header %q: a VALUE with control characters", name)
		}
		a.Headers = append(a.Headers, limiter.Header{Name: name, Value: value})
	}
	var fields ratelimit.Fields
	for _, h := range a.Headers {
		if strings.EqualFold(h.Name, "Retry-After") {
			if _, ok := limiter.ParseRetryAfter(h.Value, Origin, 0); !ok {
				return fail("Retry-After %q: neither whole seconds nor an HTTP-date, which the relay ignores", h.Value)
			}
		}
		fields.Add(h.Name, h.Value)
	}
	if _, err := fields.Read(Origin); err != nil {
		return fail("%v, which the relay ignores", err)
	}
	return a, nil
}

// startsHeader reports whether s, what follows a ';' in --answer's
// headers, starts a header: a header name, then a colon.
func startsHeader(s string) bool {
	name, _, ok := strings.Cut(s, ":")
	return ok && httpguts.ValidHeaderFieldName(strings.TrimSpace(name))
}

// ParseSpan reads FROM-TO, two Go durations from the run's start, FROM
// before TO: a span of --down or --answer.
func ParseSpan(s string) (Span, error) {
	from, to, ok := strings.Cut(strings.TrimSpace(s), "-")
	f, err1 := time.ParseDuration(strings.TrimSpace(from))
	t, err2 := time.ParseDuration(strings.TrimSpace(to))
	if !ok || err1 != nil || err2 != nil || f < 0 || t <= f {
		return Span{}, errors.New("want FROM-TO, two durations from the run's start, FROM before TO, such as 10s-11s")
	}
	return Span{From: f, To: t}, nil
}

// outcome is the answer a to a navigation of host, received at now
// after took, as the relay hands a document's answer to its policy:
// the first Retry-After as sent, the headers some setting reads
// (policy.Policy.AnswerHeaders), and what package ratelimit reads of
// its RateLimit fields when host's setting obeys them
// (policy.Policy.ReadsLimits). It is what cdp.RequestPaused.Outcome
// keeps of an answer and hold.BrowserHold.Observe makes of that; the
// limiter reads the Retry-After, and matches the headers, itself.
func outcome(pol *policy.Policy, host string, a Answer, took time.Duration, now time.Time) limiter.Outcome {
	o := limiter.Outcome{Status: a.Status, Took: took}
	keep := pol.AnswerHeaders()
	var fields ratelimit.Fields
	retryAfter := false
	for _, h := range a.Headers {
		switch {
		case !retryAfter && strings.EqualFold(h.Name, "Retry-After"):
			o.RetryAfter, retryAfter = h.Value, true
		case slices.ContainsFunc(keep, func(k string) bool { return strings.EqualFold(k, h.Name) }):
			o.Headers = append(o.Headers, h)
		}
		fields.Add(h.Name, h.Value)
	}
	if !fields.IsZero() && pol.ReadsLimits(host) {
		o.Server, _ = fields.Read(now) // ParseAnswer refused malformed fields
	}
	return o
}

// retryAfter is the Retry-After of the relay's own 429 for a navigation
// deferred until a slot d ahead (refusal.Reason.RetryAfter).
func retryAfter(d time.Duration) int {
	var at time.Time
	return refusal.Reason{Until: at.Add(d)}.RetryAfter(at)
}
