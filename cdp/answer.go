package cdp

import (
	"strings"

	"github.com/chromedp/cdproto/fetch"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// PausedOutcome reads the answer a document request got from a
// Fetch.requestPaused event at the Response stage. ok is false for an event
// at the Request stage, which carries no answer yet.
func PausedOutcome(ev *fetch.EventRequestPaused) (o limiter.Outcome, ok bool) {
	if ev.ResponseErrorReason != "" {
		return limiter.Outcome{NoAnswer: NoAnswer(string(ev.ResponseErrorReason))}, true
	}
	if ev.ResponseStatusCode == 0 {
		return o, false
	}
	o.Status = int(ev.ResponseStatusCode)
	for _, h := range ev.ResponseHeaders {
		if h != nil && strings.EqualFold(h.Name, "Retry-After") {
			// The first counts, as where Network events join repeated headers.
			o.RetryAfter = h.Value
			break
		}
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
