package limiter

import (
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 10, 21, 7, 28, 0, 0, time.UTC) // a Wednesday
	tests := []struct {
		in     string
		most   time.Duration
		want   time.Duration
		wantOK bool
	}{
		{"3", 0, 3 * time.Second, true},
		{" 10 ", 0, 10 * time.Second, true},
		{"\t10\r\n", 0, 10 * time.Second, true},
		{"0", 0, 0, true},
		{"60", 0, 60 * time.Second, true},
		{"61", 0, 60 * time.Second, true},
		{"61", 90 * time.Second, 61 * time.Second, true},
		{"7200", 2 * time.Hour, time.Hour, true}, // the limit
		{"99999999999999999999999", 0, 60 * time.Second, true},
		{"99999999999999999999999", time.Hour, time.Hour, true},
		{"", 0, 0, false},
		{"   ", 0, 0, false},
		{"-5", 0, 0, false},
		{"1.5", 0, 0, false},
		{"+5", 0, 0, false},
		{"5s", 0, 0, false},
		{"1 2", 0, 0, false},
		{"soon", 0, 0, false},

		// HTTP-dates: the date less now.
		{"Wed, 21 Oct 2026 07:28:03 GMT", 0, 3 * time.Second, true},
		{" Wed, 21 Oct 2026 07:28:03 GMT ", 0, 3 * time.Second, true},
		{"Wednesday, 21-Oct-26 07:28:30 GMT", 0, 30 * time.Second, true}, // RFC 850
		{"Wed Oct 21 07:28:45 2026", 0, 45 * time.Second, true},          // asctime
		{"Wed Oct  1 07:28:45 2026", 0, 0, true},                         // asctime, a day of one digit: past
		{"Wed, 21 Oct 2026 07:28:00 GMT", 0, 0, true},                    // now
		{"Wed, 21 Oct 2026 07:27:00 GMT", 0, 0, true},                    // past
		{"Thu, 01 Jan 1970 00:00:00 GMT", 0, 0, true},
		{"Wed, 21 Oct 2026 07:30:00 GMT", 0, 60 * time.Second, true},              // capped
		{"Wed, 21 Oct 2026 07:30:00 GMT", 5 * time.Minute, 2 * time.Minute, true}, // under a longer cap
		{"Fri, 31 Dec 9999 23:59:59 GMT", time.Hour, time.Hour, true},
		{"wed, 21 oct 2026 07:28:03 gmt", 0, 0, false}, // the forms are case-sensitive, as net/http's
		{"Wed, 21 Oct 2026 07:28:03", 0, 0, false},
		{"Wed, 21 Oct 2026 07:28:03 +0000", 0, 0, false},
		{"2026-10-21T07:28:03Z", 0, 0, false},
		{"Wed, 32 Oct 2026 07:28:03 GMT", 0, 0, false},
		{"Wed, 21 Oct 2026 25:28:03 GMT", 0, 0, false},
		{"Wed,", 0, 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.in, now, tt.most)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q, %v): got %v, %v, want %v, %v", tt.in, tt.most, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestRetryAfterDateRoundsNothing: a date between two seconds of now waits
// to the date itself, not to a whole second.
func TestRetryAfterDateRoundsNothing(t *testing.T) {
	now := time.Date(2026, 10, 21, 7, 28, 0, 250_000_000, time.UTC)
	if got, ok := ParseRetryAfter("Wed, 21 Oct 2026 07:28:03 GMT", now, 0); !ok || got != 2750*time.Millisecond {
		t.Errorf("got %v, %v, want 2.75s, true", got, ok)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"3", "Wed, 21 Oct 2026 07:28:03 GMT", "Wednesday, 21-Oct-26 07:28:30 GMT", "Wed Oct 21 07:28:45 2026", "-1", ""} {
		f.Add(s, int64(0))
	}
	now := time.Date(2026, 10, 21, 7, 28, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string, most int64) {
		got, ok := ParseRetryAfter(v, now, time.Duration(most))
		limit := Config{RetryAfterMax: time.Duration(most)}.retryAfterMax()
		if got < 0 || got > limit || !ok && got != 0 {
			t.Fatalf("ParseRetryAfter(%q, %v): got %v, %v: want a wait from 0 to %v", v, time.Duration(most), got, ok, limit)
		}
	})
}

func TestHeaders(t *testing.T) {
	h := NewHeaders(Header{Name: "CF-Mitigated", Value: "Challenge"}, Header{Name: "X-Overloaded"}, Header{Name: "cf-mitigated", Value: "challenge"})
	if got, want := h.String(), "cf-mitigated=challenge,x-overloaded"; got != want {
		t.Errorf("String: got %q, want %q", got, want)
	}
	if got := h.Names(); len(got) != 2 || got[0] != "cf-mitigated" || got[1] != "x-overloaded" {
		t.Errorf("Names: got %q, want [cf-mitigated x-overloaded]", got)
	}
	if h != NewHeaders(Header{Name: "cf-mitigated", Value: "CHALLENGE"}, Header{Name: "x-overloaded"}) {
		t.Error("the same matches in another case make another set")
	}
	tests := []struct {
		name    string
		headers []Header
		want    bool
	}{
		{"none", nil, false},
		{"the value", []Header{{"cf-mitigated", "challenge"}}, true},
		{"another case", []Header{{"CF-MITIGATED", "Challenge"}}, true},
		{"spaces around the value", []Header{{"cf-mitigated", " challenge "}}, true},
		{"another value", []Header{{"cf-mitigated", "managed"}}, false},
		{"a value that holds it", []Header{{"cf-mitigated", "challenged"}}, false},
		{"repeated, joined by a newline", []Header{{"cf-mitigated", "managed\nchallenge"}}, true},
		{"any value of a name alone", []Header{{"x-overloaded", "1"}}, true},
		{"an empty value of a name alone", []Header{{"x-overloaded", ""}}, true},
		{"another header", []Header{{"server", "cloudflare"}, {"cf-ray", "x"}}, false},
	}
	for _, tt := range tests {
		if got := h.Match(tt.headers); got != tt.want {
			t.Errorf("%s: Match(%q): got %v, want %v", tt.name, tt.headers, got, tt.want)
		}
	}
	var zero Headers
	if zero.Match([]Header{{"cf-mitigated", "challenge"}}) || zero.Names() != nil || zero.String() != "" {
		t.Error("the zero Headers matches something")
	}
	c := Config{OverloadHeaders: h}
	for _, tt := range []struct {
		o    Outcome
		want Effect
	}{
		{Outcome{Status: 200, Headers: []Header{{"cf-mitigated", "challenge"}}}, Overload},
		{Outcome{Status: 403, Headers: []Header{{"cf-mitigated", "challenge"}}}, Overload},
		{Outcome{Status: 500, Headers: []Header{{"x-overloaded", "yes"}}}, Overload},
		{Outcome{Status: 500, Headers: []Header{{"cf-mitigated", "managed"}}}, Failure},
		{Outcome{Status: 200, Headers: []Header{{"cf-mitigated", "managed"}}}, Calm},
		{Outcome{Status: 200}, Calm},
	} {
		if got := c.Effect(tt.o); got != tt.want {
			t.Errorf("Effect(%+v): got %v, want %v", tt.o, got, tt.want)
		}
	}
}
