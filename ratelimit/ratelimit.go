// Package ratelimit reads what a server says of its own request limits in
// the headers of an answer: the fields of draft-ietf-httpapi-ratelimit-headers
// (RateLimit-Policy and RateLimit, Structured Field Lists since draft-08;
// draft-07's RateLimit Dictionary; the RateLimit-Limit, -Remaining and -Reset
// of the drafts up to -06, which many servers still send) and the de-facto
// X-RateLimit-Remaining and X-RateLimit-Reset. It knows nothing of the
// limiter: it says how far apart the server asks requests to be, and how
// long it asks to be left alone.
//
// What is read, and how:
//
//   - RateLimit-Policy: each policy "name";q=Q;w=W of requests (qu absent,
//     "requests" or "request") asks for requests at least W/Q seconds
//     apart; the strictest policy, the largest W/Q, counts. The drafts up
//     to -07 wrote the quota as the item itself (10;w=1): read the same. A
//     policy without w says no window (the draft gives none by default)
//     and is skipped, as is one counted in other units (content-bytes,
//     concurrent-requests) or with q=0, which gives no pace to keep.
//   - RateLimit-Limit: its items with a w parameter (100;w=60, drafts -00
//     to -03) are policies as above; a bare quota, with no window, says
//     nothing of a pace.
//   - RateLimit: an item with r=0 and t=T asks for nothing more for T
//     seconds; the longest such T counts. Without t there is no time to
//     wait for and nothing is read. draft-07's Dictionary, remaining=0 and
//     reset=T, reads the same.
//   - RateLimit-Remaining with RateLimit-Reset, and X-RateLimit-Remaining
//     with X-RateLimit-Reset: a remaining below 1 (0, or Reddit's 0.0)
//     asks for nothing more until the reset, which is a plain decimal
//     number told apart by its size (resetWait): seconds from the answer
//     below 1e9, seconds since the Unix epoch from 1e9, milliseconds since
//     it from 1e11; 1e14 and beyond is malformed.
//
// Every field may come in several header lines (Fields.Add, or one value
// with the lines joined by newlines, as Chromium's Network events join
// them): a List's lines are one List, as RFC 9651 says; of the others
// the first line counts, as for Retry-After. When several fields say the
// same thing, the strictest counts: the longest spacing, the longest wait.
// Nothing read is longer than Max. A field that is malformed, in whole or
// in one item, is ignored where it is, and said so in the *Error Read
// returns beside what the rest of the fields said.
package ratelimit

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// Max is the longest spacing or wait Read reports: a server's longer one
// is read as Max. An hour is as long as the relay ever holds a host for a
// server's word (the longest Retry-After it can be told to honour).
const Max = time.Hour

// The sizes that tell a reset's unit (resetWait): below epochSeconds it is
// seconds from the answer (1e9 s is 31 years, no server's delay; the Unix
// epoch passed 1e9 in 2001); below epochMillis, seconds since the epoch
// (1e11 s is the year 5138; the epoch in milliseconds passed 1e11 in
// 1973); below tooLarge, milliseconds since the epoch (1e14 ms is the
// year 5138 again).
const (
	epochSeconds = 1e9
	epochMillis  = 1e11
	tooLarge     = 1e14
)

// Fields holds the header fields of one answer that Read reads, as sent.
// The zero Fields holds none. Fields is comparable, so a struct carrying
// one stays comparable.
type Fields struct {
	policy     string // RateLimit-Policy
	rateLimit  string // RateLimit
	limit      string // RateLimit-Limit
	remaining  string // RateLimit-Remaining
	reset      string // RateLimit-Reset
	xRemaining string // X-RateLimit-Remaining
	xReset     string // X-RateLimit-Reset
}

// Add keeps the header name: value when name (in any case) is one Read
// reads, and reports whether it was. A name given again adds a line to
// its value, as a repeated header does.
func (f *Fields) Add(name, value string) bool {
	var field *string
	switch {
	case strings.EqualFold(name, "RateLimit-Policy"):
		field = &f.policy
	case strings.EqualFold(name, "RateLimit"):
		field = &f.rateLimit
	case strings.EqualFold(name, "RateLimit-Limit"):
		field = &f.limit
	case strings.EqualFold(name, "RateLimit-Remaining"):
		field = &f.remaining
	case strings.EqualFold(name, "RateLimit-Reset"):
		field = &f.reset
	case strings.EqualFold(name, "X-RateLimit-Remaining"):
		field = &f.xRemaining
	case strings.EqualFold(name, "X-RateLimit-Reset"):
		field = &f.xReset
	default:
		return false
	}
	if *field != "" {
		value = *field + "\n" + value
	}
	*field = value
	return true
}

// Named reports whether Read reads the header name (in any case): what a
// reader of headers keeps for Add.
func Named(name string) bool {
	var f Fields
	return f.Add(name, "")
}

// IsZero reports whether f holds no field.
func (f Fields) IsZero() bool { return f == Fields{} }

// Limits is what a server said of its limits in one answer. The zero
// Limits says nothing.
type Limits struct {
	// Spacing is how far apart the server's policies ask requests to be:
	// the largest window over quota among them; 0 when it sent none.
	Spacing time.Duration
	// Wait is how long after the answer the server asks for no request,
	// having said its quota is spent; 0 when it did not say so, or gave no
	// time.
	Wait time.Duration
}

// Error says which of an answer's fields, or which of their items, were
// malformed and ignored. Each problem names its field and never holds the
// field's value.
type Error struct {
	Problems []string
}

func (e *Error) Error() string { return "ratelimit: " + strings.Join(e.Problems, "; ") }

// problems gathers an answer's problems while Read reads it.
type problems []string

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, field+": "+fmt.Sprintf(format, args...))
}

// Read reads the fields of an answer received at now. It returns what
// the well-formed ones said, and an *Error when some were malformed
// (nil when none was).
func (f Fields) Read(now time.Time) (Limits, error) {
	var l Limits
	var errs problems
	if f.policy != "" {
		l.Spacing = max(l.Spacing, readPolicies("RateLimit-Policy", f.policy, false, &errs))
	}
	if f.limit != "" {
		l.Spacing = max(l.Spacing, readPolicies("RateLimit-Limit", f.limit, true, &errs))
	}
	if f.rateLimit != "" {
		l.Wait = max(l.Wait, readRateLimit(f.rateLimit, &errs))
	}
	if f.remaining != "" {
		l.Wait = max(l.Wait, readRemaining("RateLimit", f.remaining, f.reset, now, &errs))
	}
	if f.xRemaining != "" {
		l.Wait = max(l.Wait, readRemaining("X-RateLimit", f.xRemaining, f.xReset, now, &errs))
	}
	if len(errs) > 0 {
		return l, &Error{Problems: errs}
	}
	return l, nil
}

// readPolicies reads a List of quota policies and returns the longest
// spacing they ask for. windowed says that items without a window are
// bare quotas, expected and skipped (RateLimit-Limit).
func readPolicies(field, value string, windowed bool, errs *problems) time.Duration {
	items, err := parseList(lines(value))
	if err != nil {
		errs.add(field, "not a structured field list")
		return 0
	}
	var spacing time.Duration
	for i, it := range items {
		d, problem := policySpacing(it, windowed)
		if problem != "" {
			errs.add(field, "item %d: %s", i+1, problem)
			continue
		}
		spacing = max(spacing, d)
	}
	return spacing
}

// policySpacing returns the spacing one policy asks for, 0 when it asks
// for none, or what is wrong with it.
func policySpacing(it item, windowed bool) (time.Duration, string) {
	if it.val.kind == kInner {
		return 0, "an inner list, not a policy"
	}
	w, hasW := it.param("w")
	if windowed && !hasW {
		return 0, ""
	}
	q, ok := it.param("q")
	if !ok {
		if it.val.kind != kInteger {
			return 0, "no q"
		}
		q = it.val // the drafts up to -07: the quota is the item
	}
	if q.kind != kInteger || q.n < 0 {
		return 0, "q is not a non-negative integer"
	}
	if qu, ok := it.param("qu"); ok {
		if qu.kind != kString && qu.kind != kToken {
			return 0, "qu is not a string"
		}
		if qu.s != "requests" && qu.s != "request" {
			return 0, "" // a quota of bytes or of requests at once: no pace of requests
		}
	}
	if !hasW {
		return 0, "" // no window, and the draft sets none by default
	}
	if w.kind != kInteger || w.n <= 0 {
		return 0, "w is not a positive integer"
	}
	if q.n == 0 {
		return 0, "q=0 gives no pace"
	}
	return spacing(uint64(w.n), uint64(q.n)), ""
}

// spacing is w seconds over q, rounded up to the nanosecond, at most Max.
func spacing(w, q uint64) time.Duration {
	if w/q >= uint64(Max/time.Second) {
		return Max
	}
	// w < 3600·q, so w·1e9/q < 3.6e12 fits, and Div64's high word is below q.
	hi, lo := bits.Mul64(w, uint64(time.Second))
	quo, rem := bits.Div64(hi, lo, q)
	if rem != 0 {
		quo++
	}
	return min(time.Duration(quo), Max)
}

// readRateLimit reads a RateLimit field, a List (draft-08 on) or a
// Dictionary (draft-07), and returns the longest wait an exhausted quota
// asks for.
func readRateLimit(value string, errs *problems) time.Duration {
	const field = "RateLimit"
	value = lines(value)
	items, err := parseList(value)
	dict := false
	if err != nil {
		if items, err = parseDictionary(value); err != nil {
			errs.add(field, "not a structured field list")
			return 0
		}
		dict = true
	}
	if dict {
		return readDraft07(items, errs)
	}
	var wait time.Duration
	for i, it := range items {
		if it.val.kind == kInner {
			errs.add(field, "item %d: an inner list, not a service limit", i+1)
			continue
		}
		r, ok := it.param("r")
		if !ok {
			errs.add(field, "item %d: no r", i+1)
			continue
		}
		if r.kind != kInteger || r.n < 0 {
			errs.add(field, "item %d: r is not a non-negative integer", i+1)
			continue
		}
		t, ok := it.param("t")
		if !ok {
			continue
		}
		if t.kind != kInteger || t.n < 0 {
			errs.add(field, "item %d: t is not a non-negative integer", i+1)
			continue
		}
		if r.n == 0 {
			wait = max(wait, seconds(float64(t.n)))
		}
	}
	return wait
}

// readDraft07 reads draft-07's RateLimit Dictionary: limit, remaining
// and reset, integers.
func readDraft07(members []item, errs *problems) time.Duration {
	const field = "RateLimit"
	var remaining, reset bare
	for _, m := range members {
		switch m.key {
		case "remaining":
			remaining = m.val
		case "reset":
			reset = m.val
		}
	}
	if remaining.kind == 0 {
		errs.add(field, "not a structured field list")
		return 0
	}
	if remaining.kind != kInteger || remaining.n < 0 {
		errs.add(field, "remaining is not a non-negative integer")
		return 0
	}
	if remaining.n != 0 || reset.kind == 0 {
		return 0
	}
	if reset.kind != kInteger || reset.n < 0 {
		errs.add(field, "reset is not a non-negative integer")
		return 0
	}
	return seconds(float64(reset.n))
}

// readRemaining reads a remaining quota and, when it is spent, the reset
// beside it: prefix names the pair (RateLimit, X-RateLimit).
func readRemaining(prefix, remaining, reset string, now time.Time, errs *problems) time.Duration {
	r, ok := number(remaining)
	if !ok {
		errs.add(prefix+"-Remaining", "not a non-negative number")
		return 0
	}
	if r >= 1 || reset == "" {
		return 0 // quota left, or no time to wait for
	}
	v, ok := number(reset)
	if !ok {
		errs.add(prefix+"-Reset", "not a non-negative number")
		return 0
	}
	wait, ok := resetWait(v, now)
	if !ok {
		errs.add(prefix+"-Reset", "too large for seconds or an epoch time")
	}
	return wait
}

// resetWait reads a reset v as its size says (epochSeconds, epochMillis,
// tooLarge) and returns how long after now it falls; an epoch time
// already past is no wait.
func resetWait(v float64, now time.Time) (time.Duration, bool) {
	switch {
	case v < epochSeconds:
		return seconds(v), true
	case v < epochMillis:
		s := math.Floor(v)
		return clamp(time.Unix(int64(s), int64((v-s)*1e9)).Sub(now)), true
	case v < tooLarge:
		ms := math.Floor(v)
		return clamp(time.UnixMilli(int64(ms)).Add(time.Duration((v - ms) * 1e6)).Sub(now)), true
	}
	return 0, false
}

// seconds is s seconds as a duration, at most Max.
func seconds(s float64) time.Duration {
	if s >= Max.Seconds() {
		return Max
	}
	return time.Duration(math.Ceil(s * 1e9))
}

func clamp(d time.Duration) time.Duration { return min(max(d, 0), Max) }

// number reads the first line of a legacy field as a plain non-negative
// decimal number: digits, with at most one point among them.
func number(value string) (float64, bool) {
	value, _, _ = strings.Cut(value, "\n")
	value = strings.TrimSpace(value)
	if value == "" || len(value) > 32 {
		return 0, false
	}
	digits, points := 0, 0
	for i := 0; i < len(value); i++ {
		switch c := value[i]; {
		case isDigit(c):
			digits++
		case c == '.':
			points++
		default:
			return 0, false
		}
	}
	if digits == 0 || points > 1 {
		return 0, false
	}
	v, err := strconv.ParseFloat(value, 64)
	return v, err == nil
}

// lines makes a List's header lines, joined by newlines, one List.
func lines(value string) string { return strings.ReplaceAll(value, "\n", ",") }
