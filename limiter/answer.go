package limiter

import (
	"slices"
	"strconv"
	"strings"
)

// Statuses is a set of HTTP statuses, 100 to 599: the answers a setting
// reads as overload (Config.Overload). The zero Statuses is the default
// set, 429 and 503. It is comparable, so a Config stays comparable.
type Statuses struct {
	explicit bool       // the set was given; otherwise it is 429 and 503
	bits     [10]uint64 // bit s%64 of word s/64: status s is in the set
}

// DefaultOverload is the overload set of the zero Statuses.
var DefaultOverload = NewStatuses(429, 503)

// NewStatuses returns the set of codes; codes outside 100 to 599 are
// left out.
func NewStatuses(codes ...int) Statuses {
	s := Statuses{explicit: true}
	for _, c := range codes {
		if c >= 100 && c <= 599 {
			s.bits[c/64] |= 1 << (c % 64)
		}
	}
	return s
}

// Has reports whether code is in the set.
func (s Statuses) Has(code int) bool {
	if !s.explicit {
		return code == 429 || code == 503
	}
	return code >= 100 && code <= 599 && s.bits[code/64]&(1<<(code%64)) != 0
}

// Codes returns the set's statuses in order.
func (s Statuses) Codes() []int {
	var out []int
	for c := 100; c <= 599; c++ {
		if s.Has(c) {
			out = append(out, c)
		}
	}
	return out
}

// String writes the set as --overload-status reads it: 429,503.
func (s Statuses) String() string {
	codes := s.Codes()
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// IsDefault reports whether s is the default set, 429 and 503, however it
// was given.
func (s Statuses) IsDefault() bool { return slices.Equal(s.Codes(), []int{429, 503}) }

// Effect is what an answer does to its host's pressure under a setting
// (Config.Effect), and the class /metrics counts it in.
type Effect int

const (
	// Calm answers change nothing: 2xx, 3xx, 4xx outside the overload set,
	// a navigation the client aborted.
	Calm Effect = iota
	// Overload answers, the statuses of Config.Overload (429 and 503 by
	// default) and those carrying a header of Config.OverloadHeaders, add OverloadIntervals base intervals of spacing at once,
	// and their Retry-After is honoured.
	Overload
	// Failure answers, another 5xx or no answer at all, add
	// FailureIntervals base intervals.
	Failure
	// Slow answers, slower than the host's baseline allows (Outcome.Slow),
	// add FailureIntervals base intervals, as a failure does.
	Slow
)

func (e Effect) String() string {
	return [...]string{"ok", "overload", "failure", "slow"}[e]
}

// Pressure is how many units of pressure the effect adds in adaptive mode.
func (e Effect) Pressure() int {
	switch e {
	case Overload:
		return overloadPressure
	case Failure, Slow:
		return failurePressure
	}
	return 0
}

// Effect classifies the answer o as a booking made with c reads it: the
// statuses of c.Overload first, then c.OverloadHeaders (whatever the
// status), then another 5xx or no answer, then a slow answer. It says what the answer is, whatever the mode: only an adaptive
// setting lets it change the schedule.
func (c Config) Effect(o Outcome) Effect {
	switch {
	case o.Status != 0 && c.Overload.Has(o.Status), o.Headers != nil && c.OverloadHeaders.Match(o.Headers):
		return Overload
	case o.Status >= 500 && o.Status <= 599, o.NoAnswer:
		return Failure
	case o.Slow:
		return Slow
	}
	return Calm
}

// Header is one header of an answer, as the browser sent it.
type Header struct {
	Name, Value string
}

// Headers is a set of answer headers a setting looks for
// (Config.OverloadHeaders): each a name, matched whatever its value, or a
// name with a value, matched when one of the header's values (a repeated
// header's are joined by newlines) is that value. Names and values match
// whatever their case. The zero Headers matches nothing. It is comparable,
// so a Config stays comparable.
type Headers struct {
	list string // "name" or "name=value" lines, lower-case, in order given
}

// NewHeaders returns the set of the matches given. A match's Name must be
// a header name (no '=' nor newline) and its Value hold no newline;
// policy checks them.
func NewHeaders(matches ...Header) Headers {
	lines := make([]string, 0, len(matches))
	for _, m := range matches {
		line := strings.ToLower(m.Name)
		if m.Value != "" {
			line += "=" + strings.ToLower(m.Value)
		}
		if !slices.Contains(lines, line) {
			lines = append(lines, line)
		}
	}
	return Headers{list: strings.Join(lines, "\n")}
}

// Matches returns the set's matches in the order given, names and values
// lower-case.
func (h Headers) Matches() []Header {
	if h.list == "" {
		return nil
	}
	var out []Header
	for _, line := range strings.Split(h.list, "\n") {
		name, value, _ := strings.Cut(line, "=")
		out = append(out, Header{Name: name, Value: value})
	}
	return out
}

// Names returns the header names the set looks for, lower-case, each once:
// what a caller keeps of an answer for it (Outcome.Headers).
func (h Headers) Names() []string {
	var names []string
	for _, m := range h.Matches() {
		if !slices.Contains(names, m.Name) {
			names = append(names, m.Name)
		}
	}
	return names
}

// String writes the set as --overload-header reads it, one match after
// another: cf-mitigated=challenge,x-overloaded.
func (h Headers) String() string { return strings.ReplaceAll(h.list, "\n", ",") }

// Match reports whether one of headers is in the set.
func (h Headers) Match(headers []Header) bool {
	if h.list == "" {
		return false
	}
	for rest := h.list; rest != ""; {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		name, want, hasValue := strings.Cut(line, "=")
		for _, hd := range headers {
			if !strings.EqualFold(strings.TrimSpace(hd.Name), name) {
				continue
			}
			if !hasValue {
				return true
			}
			for values := hd.Value; ; {
				v, more, found := strings.Cut(values, "\n")
				if strings.EqualFold(strings.TrimSpace(v), want) {
					return true
				}
				if !found {
					break
				}
				values = more
			}
		}
	}
	return false
}
