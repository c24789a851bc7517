package hold

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"

	"github.com/chromedp/cdproto/fetch"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/redact"
)

// Refuser is what a Limiter adds when it refuses some navigations
// outright (*policy.Policy does with --robots obey: those its site's
// robots.txt disallows). The relay asks it before a navigation takes a
// place in flight or books a slot; a refused navigation books nothing and
// fails in the browser as one its client blocked
// (net::ERR_BLOCKED_BY_CLIENT). Its methods must be safe for concurrent
// use.
type Refuser interface {
	// Refuses reports whether any navigation may be refused: then
	// navigations are held, to be asked about, even where nothing is
	// spaced or capped.
	Refuses() bool
	// Allowed reports whether a navigation to rawURL, whose host is
	// limiter.Key(rawURL), may go; rule says what refused it. It may
	// block (to read robots.txt), never past ctx.
	Allowed(ctx context.Context, host, rawURL string) (ok bool, rule string)
}

// BlockedByClient is the net error a refused navigation fails with, as
// Chromium names it in Page.navigate's errorText and Puppeteer throws it.
const BlockedByClient = "net::ERR_BLOCKED_BY_CLIENT"

// Refusal is why a navigation is answered at once and never reaches its
// site (Holding.Refused): its site's robots.txt disallows it, or the
// Limiter deferred it (limiter.Reservation.Deferred).
type Refusal struct {
	// Deferred says why the Limiter deferred it: "max-wait" (its slot
	// lay further ahead than --max-wait), "breaker" (its host's breaker
	// is open); "" for a navigation robots.txt disallows.
	Deferred string
	// Until is when its host takes navigations again: its slot, or its
	// breaker's end. Zero when not deferred.
	Until time.Time
}

// Disallowed is the Refusal of a navigation robots.txt disallows.
var Disallowed = Refusal{}

// DeferredStatus is the status of the answer the relay makes itself for
// a deferred navigation, as a site that limits its rate answers: clients'
// retry middlewares (Scrapy's, Crawlee's) already wait and retry on it.
const DeferredStatus = 429

// DeferredHeader names the header of that answer which says the relay
// made it, and why (its value: "deferred; reason=max-wait"): a client
// tells it from a 429 of the site.
const DeferredHeader = "X-Cdp-Throttle"

// RetryAfter is the Retry-After of a deferred navigation's answer, in
// whole seconds until Until, at least 1: a client that waits that long
// finds its host taking navigations again.
func (r Refusal) RetryAfter(now time.Time) int {
	return max(1, int(math.Ceil(r.Until.Sub(now).Seconds())))
}

// Fulfill is the answer the relay makes for the paused request id of a
// deferred navigation: its 429, Retry-After, the header that says the
// relay made it, and a line of text for whoever reads the page.
func (r Refusal) Fulfill(id string, now time.Time) *fetch.FulfillRequestParams {
	after := r.RetryAfter(now)
	body := fmt.Sprintf("cdp-throttle deferred this navigation (%s): its host takes navigations again in %d s.\n", r.Deferred, after)
	return &fetch.FulfillRequestParams{RequestID: fetch.RequestID(id), ResponseCode: DeferredStatus, ResponseHeaders: []*fetch.HeaderEntry{
		{Name: "Retry-After", Value: strconv.Itoa(after)},
		{Name: DeferredHeader, Value: "deferred; reason=" + r.Deferred},
		{Name: "Content-Type", Value: "text/plain; charset=utf-8"},
		{Name: "Cache-Control", Value: "no-store"},
	}, Body: []byte(body)} // base64 on the wire, as Body is bytes
}

// ErrorText is the errorText of a deferred Page.navigate's answer, when
// the relay holds commands in the stream and no answer can be made.
func (r Refusal) ErrorText(now time.Time) string {
	if r.Deferred == "" {
		return BlockedByClient
	}
	return fmt.Sprintf("net::ERR_HTTP_RESPONSE_CODE_FAILURE (cdp-throttle: %d deferred, reason=%s, retry after %d s)", DeferredStatus, r.Deferred, r.RetryAfter(now))
}

// refuser returns the Limiter as a Refuser when it refuses anything.
func (hd *Holder) refuser() Refuser {
	if r, ok := hd.Limiter.(Refuser); ok && r.Refuses() {
		return r
	}
	return nil
}

// refused asks the Limiter whether a navigation to rawURL must be
// refused, and when it must, counts it and says so, once per host.
func (h *BrowserHold) refused(ctx context.Context, host, rawURL string, log *zerolog.Logger) bool {
	r := h.Holder.refuser()
	if r == nil {
		return false
	}
	ok, rule := r.Allowed(ctx, host, rawURL)
	if ok || ctx.Err() != nil {
		return false
	}
	h.Holder.Metrics.Navigation(NavDisallowed, 0)
	path := "/"
	if u, err := url.Parse(redact.URL(rawURL)); err == nil && u.Path != "" {
		path = u.Path
	}
	if h.Holder.refusedWarned.first(host) {
		h.Holder.log.Warn().Str("host", host).Str("path", path).Str("source", "robots.txt").Str("rule", rule).
			Msg("navigation refused: robots.txt disallows it")
	}
	log.Debug().Str("host", host).Str("path", path).Str("rule", rule).Msg("navigation refused")
	return true
}

// CheckThen lets a navigation that books nothing more go (w.Release: a
// redirect hop within its host, the page of a held Target.createTarget)
// unless the Limiter refuses it (w.Refused). Asking may block, so it is
// done on a goroutine of its own when the Limiter refuses anything; at
// once otherwise, and at once for n not refusable. Neither is called
// when ctx ends first, and Done never: nothing was held.
func (h *BrowserHold) CheckThen(ctx context.Context, n Request, w Holding) {
	if !n.Refusable || h.Holder.refuser() == nil {
		w.Release()
		return
	}
	if n.Log == nil {
		n.Log = h.Holder.Logger()
	}
	h.Holder.limiting.Add(1)
	go func() {
		defer h.Holder.limiting.Done()
		switch {
		case h.refused(ctx, n.Host, n.URL, n.Log):
			w.Refused(Disallowed)
		case ctx.Err() == nil:
			w.Release()
		}
	}()
}

// AnswerError answers a client's command with a CDP error, as the
// browser would answer one it could not carry out.
func (w *Watch) AnswerError(session string, id int64, message string) {
	msg, _ := cdp.Reply(id, session, nil, &cdp.Error{Code: -32000, Message: message})
	w.ToClient(msg)
}
