package cdp

import (
	"iter"
	"net/netip"
	"strings"

	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// Outcome is the answer a document request got, as the browser told it.
// The relay reads it into a limiter.Outcome, with the answer's time,
// without this package knowing the limiter. The zero Outcome (an aborted
// load, for one) says nothing about the host.
type Outcome struct {
	// Status is the HTTP status of the answer, 0 when there was none.
	Status int
	// RetryAfter is the answer's Retry-After header as sent, "" when absent.
	RetryAfter string
	// Headers are the answer's headers the reader was asked to keep
	// besides Retry-After (its keep names), "" when none was.
	Headers Kept
	// NoAnswer reports that the request got no answer at all: the connection
	// was refused, reset or closed, or it timed out.
	NoAnswer bool
	// RemoteIP is the server address the browser connected to for the
	// answer (Chromium's response.remoteIPAddress), invalid when it did not
	// say: a failure, an answer from its cache or a service worker, a
	// browser that does not tell (Lightpanda), the Fetch Response stage.
	RemoteIP netip.Addr
	// Limits are the answer's fields that say the server's own limits
	// (RateLimit-Policy, RateLimit, X-RateLimit-…), as sent, for package
	// ratelimit to read; none when absent.
	Limits ratelimit.Fields
}

// Kept is what a reader kept of an answer's headers: each header's name
// and value as sent, each followed by a NUL (which no header holds), in
// the order read; a header a browser sends with its repeats joined by
// newlines (Network events) stays one. A string, so that an Outcome
// stays comparable; All walks it.
type Kept string

// All yields each header kept, name and value.
func (k Kept) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for rest := string(k); rest != ""; {
			var name, value string
			name, rest, _ = strings.Cut(rest, "\x00")
			value, rest, _ = strings.Cut(rest, "\x00")
			if !yield(name, value) {
				return
			}
		}
	}
}

// keeps reports whether keep names the header name, whatever its case.
func keeps(keep []string, name string) bool {
	for _, k := range keep {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// kept is k with the header name: value added.
func (k Kept) kept(name, value string) Kept {
	return k + Kept(name+"\x00"+value+"\x00")
}

// RequestPaused is what the relay reads of a Fetch.requestPaused event
// (readRequestPaused; the tags name the members as the browser writes
// them, and the tests read them with encoding/json to compare).
type RequestPaused struct {
	RequestID           string `json:"requestId"`
	FrameID             string `json:"frameId"`
	ResourceType        string `json:"resourceType"`
	RedirectedRequestID string `json:"redirectedRequestId"`
	NetworkID           string `json:"networkId"`
	Request             struct {
		URL    string `json:"url"`
		Method string `json:"method"`
	} `json:"request"`
	ResponseStatusCode  int     `json:"responseStatusCode"`
	ResponseErrorReason string  `json:"responseErrorReason"`
	ResponseHeaders     []entry `json:"responseHeaders"`
}

type entry struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ReadRequestPaused reads the params of a Fetch.requestPaused event.
func ReadRequestPaused(params []byte) (RequestPaused, bool) {
	ev, ok := readRequestPaused(params)
	if !ok || ev.RequestID == "" {
		return RequestPaused{}, false
	}
	return ev, true
}

// readRequestPaused reads what Fetch.requestPaused params hold; ok is
// false when they are not what encoding/json would read into a
// RequestPaused.
func readRequestPaused(params []byte) (ev RequestPaused, ok bool) {
	ok = readFields(params,
		field{"requestId", &ev.RequestID},
		field{"frameId", &ev.FrameID},
		field{"resourceType", &ev.ResourceType},
		field{"redirectedRequestId", &ev.RedirectedRequestID},
		field{"networkId", &ev.NetworkID},
		field{"request", func(v []byte) bool {
			return string(v) == "null" || readFields(v, field{"url", &ev.Request.URL}, field{"method", &ev.Request.Method})
		}},
		field{"responseStatusCode", &ev.ResponseStatusCode},
		field{"responseErrorReason", &ev.ResponseErrorReason},
		field{"responseHeaders", func(v []byte) (ok bool) {
			ev.ResponseHeaders, ok = readEntries(v)
			return ok
		}})
	return ev, ok
}

// readEntries reads an array of header entries ({"name","value"}); null
// reads nil.
func readEntries(val []byte) ([]entry, bool) {
	if string(val) == "null" {
		return nil, true
	}
	var es []entry
	read := elements(val, func(v []byte) bool {
		var e entry
		ok := string(v) == "null" || readFields(v, field{"name", &e.Name}, field{"value", &e.Value})
		es = append(es, e)
		return ok
	})
	return es, read
}

// Outcome reads the answer of a request paused at the Response stage,
// with the headers keep names (Outcome.Headers). ok is false at the
// Request stage, where there is no answer yet.
func (ev *RequestPaused) Outcome(keep []string) (o Outcome, ok bool) {
	if ev.ResponseErrorReason != "" {
		return Outcome{NoAnswer: NoAnswer(ev.ResponseErrorReason)}, true
	}
	if ev.ResponseStatusCode == 0 {
		return o, false
	}
	o.Status = ev.ResponseStatusCode
	retryAfter := false
	for _, h := range ev.ResponseHeaders {
		switch {
		case !retryAfter && strings.EqualFold(h.Name, "Retry-After"):
			// The first counts, as where Network events join repeated headers.
			o.RetryAfter, retryAfter = h.Value, true
		case len(keep) > 0 && keeps(keep, h.Name):
			o.Headers = o.Headers.kept(h.Name, h.Value)
		}
		o.Limits.Add(h.Name, h.Value) // kept when it says the server's limits
	}
	return o, true
}

// NoAnswer reports whether a failed request got no answer from its host:
// it was refused, reset, closed or timed out. reason is a Fetch or Network
// ErrorReason (ConnectionRefused), a Chromium net error
// (net::ERR_CONNECTION_REFUSED) or a Lightpanda error name
// (CouldntConnect). An aborted or blocked request, or a name that did not
// resolve, never reached the host and is not counted.
func NoAnswer(reason string) bool {
	reason = strings.TrimPrefix(reason, "net::")
	switch reason {
	case "Failed", "TimedOut", "ConnectionClosed", "ConnectionReset", "ConnectionRefused",
		"ConnectionAborted", "ConnectionFailed", "AddressUnreachable",
		"ERR_FAILED", "ERR_TIMED_OUT", "ERR_CONNECTION_TIMED_OUT", "ERR_CONNECTION_CLOSED",
		"ERR_CONNECTION_RESET", "ERR_CONNECTION_REFUSED", "ERR_CONNECTION_ABORTED",
		"ERR_CONNECTION_FAILED", "ERR_ADDRESS_UNREACHABLE", "ERR_EMPTY_RESPONSE",
		"CouldntConnect", "OperationTimedout", "GotNothing", "RecvError", "SendError":
		return true
	}
	return false
}
