package refusal

import (
	"strings"
	"testing"
	"time"
)

// TestRetryAfter: whole seconds until Until, rounded up, at least 1,
// whatever the clock reads (the replay's starts in 2026, the relay's now).
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		until time.Duration
		want  int
	}{{10 * time.Second, 10}, {9*time.Second + time.Millisecond, 10}, {time.Millisecond, 1}, {0, 1}, {-time.Minute, 1}, {10 * time.Minute, 600}} {
		if got := (Reason{Deferred: "max-wait", Until: now.Add(tt.until)}).RetryAfter(now); got != tt.want {
			t.Errorf("%v ahead: Retry-After %d, want %d", tt.until, got, tt.want)
		}
	}
}

// TestFulfill: a deferred navigation's answer is the relay's 429, with
// its Retry-After, the header that says the relay made it and why, a
// text that is never cached, and the request's id.
func TestFulfill(t *testing.T) {
	now := time.Now()
	p := Reason{Deferred: "breaker", Until: now.Add(29500 * time.Millisecond)}.Fulfill("req-7", now)
	if p.RequestID != "req-7" || p.ResponseCode != Status || Status != 429 {
		t.Fatalf("answer %s %d, want req-7 429", p.RequestID, p.ResponseCode)
	}
	h := map[string]string{}
	for _, e := range p.ResponseHeaders {
		h[e.Name] = e.Value
	}
	want := map[string]string{"Retry-After": "30", Header: "deferred; reason=breaker", "Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-store"}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s %q, want %q", k, h[k], v)
		}
	}
	if len(h) != len(want) {
		t.Errorf("headers %v, want only %v", h, want)
	}
	if body := string(p.Body); !strings.Contains(body, "(breaker)") || !strings.Contains(body, "in 30 s") {
		t.Errorf("body %q, want the reason and the 30 s", body)
	}
}

// TestErrorText: with no answer to make (--intercept navigate), a
// deferred navigation fails with an error that says the 429, why and how
// long; a disallowed one as one its client blocked.
func TestErrorText(t *testing.T) {
	now := time.Now()
	if got, want := (Reason{Deferred: "max-wait", Until: now.Add(10 * time.Second)}).ErrorText(now),
		"net::ERR_HTTP_RESPONSE_CODE_FAILURE (cdp-throttle: 429 deferred, reason=max-wait, retry after 10 s)"; got != want {
		t.Errorf("deferred: %q, want %q", got, want)
	}
	if got := Disallowed.ErrorText(now); got != BlockedByClient {
		t.Errorf("disallowed: %q, want %q", got, BlockedByClient)
	}
}
