package relay

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/admission"
)

// The relay's part of admission: a websocket upgrade asks the gate for a
// place in a browser before it is completed, so that a client over
// capacity waits in the queue with its upgrade not yet answered (every
// client library just sees a slower connect), and one that gets no place
// is answered with an HTTP status, never a websocket closed after the
// upgrade. The HTTP endpoints never wait. Refusals are logged at debug
// only (a crowd would flood the log) and counted in /metrics.

// newGate makes the gate of the browsers in p.ups: each takes what it
// announces (a launched lightpanda serve's max_browser_connections),
// ClientsPerBrowser when that is less or nothing is announced.
func (p *Proxy) newGate() *admission.Gate {
	capacity := make([]int, len(p.ups))
	for i, up := range p.ups {
		if c, ok := up.ep.(capacityTeller); ok {
			capacity[i] = c.Capacity()
		}
		if n := p.ClientsPerBrowser; n > 0 && (capacity[i] <= 0 || n < capacity[i]) {
			capacity[i] = n
		}
	}
	return admission.New(admission.Options{MaxClients: p.MaxClients, Capacity: capacity, Queue: p.Queue,
		Timeout: p.QueueTimeout, OnWait: p.Metrics.clientWaited})
}

// admit finds the browser for a websocket path and a place in it, waiting
// in the gate's queue while there is none. When it cannot, it answers the
// request itself (404, 429, 503) and returns a nil place.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, log zerolog.Logger) (*upstream, *admission.Place) {
	accept, ok := p.acceptFor(r.Context(), r.URL.Path)
	if !ok {
		http.Error(w, "cdp-throttle: no browser has "+r.URL.Path, http.StatusNotFound)
		return nil, nil
	}
	place, err := p.gate.Enter(r.Context(), accept)
	var refusal *admission.Refusal
	switch {
	case err == nil:
		if place.Waited > 0 {
			log.Debug().Dur("waited", place.Waited).Msg("client got a place after waiting")
		}
		return p.ups[place.Browser], place
	case errors.As(err, &refusal):
		w.Header().Set("Retry-After", strconv.Itoa(int(refusal.RetryAfter/time.Second)))
		st := p.gate.Stats()
		if errors.Is(err, admission.ErrFull) {
			log.Debug().Int("capacity", st.Capacity).Int("queued", st.Queued).Msg("client refused: every place is taken and the queue is full (--queue)")
			http.Error(w, "cdp-throttle: every browser place is taken ("+strconv.Itoa(st.Capacity)+
				") and the queue is full (--queue "+strconv.Itoa(p.Queue)+"); try again later", http.StatusTooManyRequests)
			return nil, nil
		}
		log.Debug().Stringer("queue_timeout", p.queueTimeout()).Msg("client refused: no place freed in time (--queue-timeout)")
		http.Error(w, "cdp-throttle: no browser place freed within "+p.queueTimeout().String()+" (--queue-timeout); try again later", http.StatusServiceUnavailable)
	default: // the client left while it waited
		log.Debug().Err(err).Msg("client left while waiting for a place")
	}
	return nil, nil
}

func (p *Proxy) queueTimeout() time.Duration {
	if p.QueueTimeout > 0 {
		return p.QueueTimeout
	}
	return admission.DefaultTimeout
}

// acceptFor says which browsers a websocket path may go to: the one a
// browser or page id belongs to, or for a bare / any live one (any at all
// when none answers). ok is false when no browser has the id.
func (p *Proxy) acceptFor(ctx context.Context, path string) (accept func(int) bool, ok bool) {
	var only *upstream
	switch {
	case strings.HasPrefix(path, "/devtools/browser/"):
		only = p.byBrowserID(strings.TrimPrefix(path, "/devtools/browser/"))
	case strings.HasPrefix(path, "/devtools/page/"):
		only = p.owner(ctx, strings.TrimPrefix(path, "/devtools/page/"))
	default:
		return func(i int) bool {
			return p.ups[i].alive.Load() || !slices.ContainsFunc(p.ups, func(up *upstream) bool { return up.alive.Load() })
		}, true
	}
	if only == nil {
		return nil, false
	}
	return func(i int) bool { return p.ups[i] == only }, true
}

// browserFullRetry bounds how long an upgrade that got a place retries a
// browser that answers 503: lightpanda serve counts a connection the relay
// closed until it has seen the close, a moment after the place was freed.
const browserFullRetry = 2 * time.Second

// full reports whether the browser answered that it takes no more
// connections.
func (a *browserAnswer) full() bool {
	return a != nil && a.status == http.StatusServiceUnavailable
}
