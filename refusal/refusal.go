// Package refusal is what the relay answers, itself, for a navigation it
// does not let reach its site: one robots.txt disallows fails as one its
// client blocked; one it defers (--max-wait, an open breaker) gets the
// relay's own 429, with a Retry-After and a header that says the relay
// made it, or, where no answer can be made, an errorText saying as much.
package refusal

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/chromedp/cdproto/fetch"
)

// BlockedByClient is the net error a refused navigation fails with, as
// Chromium names it in Page.navigate's errorText and Puppeteer throws it.
const BlockedByClient = "net::ERR_BLOCKED_BY_CLIENT"

// Reason is why a navigation is answered at once and never reaches its
// site (hold.Holding.Refused): its site's robots.txt disallows it, or the
// Limiter deferred it (limiter.Reservation.Deferred).
type Reason struct {
	// Deferred says why the Limiter deferred it: "max-wait" (its slot
	// lay further ahead than --max-wait), "breaker" (its host's breaker
	// is open); "" for a navigation robots.txt disallows.
	Deferred string
	// Until is when its host takes navigations again: its slot, or its
	// breaker's end. Zero when not deferred.
	Until time.Time
}

// Disallowed is the Reason of a navigation robots.txt disallows.
var Disallowed = Reason{}

// Status is the status of the answer the relay makes itself for
// a deferred navigation, as a site that limits its rate answers: clients'
// retry middlewares (Scrapy's, Crawlee's) already wait and retry on it.
const Status = 429

// Header names the header of that answer which says the relay
// made it, and why (its value: "deferred; reason=max-wait"): a client
// tells it from a 429 of the site.
const Header = "X-Cdp-Throttle"

// RetryAfter is the Retry-After of a deferred navigation's answer, in
// whole seconds until Until, at least 1: a client that waits that long
// finds its host taking navigations again.
func (r Reason) RetryAfter(now time.Time) int {
	return max(1, int(math.Ceil(r.Until.Sub(now).Seconds())))
}

// Fulfill is the answer the relay makes for the paused request id of a
// deferred navigation: its 429, Retry-After, the header that says the
// relay made it, and a line of text for whoever reads the page.
func (r Reason) Fulfill(id string, now time.Time) *fetch.FulfillRequestParams {
	after := r.RetryAfter(now)
	body := fmt.Sprintf("cdp-throttle deferred this navigation (%s): its host takes navigations again in %d s.\n", r.Deferred, after)
	return &fetch.FulfillRequestParams{RequestID: fetch.RequestID(id), ResponseCode: Status, ResponseHeaders: []*fetch.HeaderEntry{
		{Name: "Retry-After", Value: strconv.Itoa(after)},
		{Name: Header, Value: "deferred; reason=" + r.Deferred},
		{Name: "Content-Type", Value: "text/plain; charset=utf-8"},
		{Name: "Cache-Control", Value: "no-store"},
	}, Body: []byte(body)} // base64 on the wire, as Body is bytes
}

// ErrorText is the errorText of a deferred Page.navigate's answer, when
// the relay holds commands in the stream and no answer can be made.
func (r Reason) ErrorText(now time.Time) string {
	if r.Deferred == "" {
		return BlockedByClient
	}
	return fmt.Sprintf("net::ERR_HTTP_RESPONSE_CODE_FAILURE (cdp-throttle: %d deferred, reason=%s, retry after %d s)", Status, r.Deferred, r.RetryAfter(now))
}
