package hold

import (
	"context"
	"net/url"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/redact"
	"github.com/cdp-throttle/cdp-throttle/refusal"
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
			w.Refused(refusal.Disallowed)
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
