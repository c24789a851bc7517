package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// holder books navigations in the limiter and holds them until their slot,
// either through its own browser connection (Fetch) or, as a fallback, in
// each client's stream (navHold).
type holder struct {
	p        *Proxy
	up       *upstream
	inStream atomic.Bool // navigations are held in the client streams
	conn     atomic.Pointer[fetchConn]
	waiting  atomic.Int64 // navigations waiting for their slot now
}

func (h *holder) inStreamMode() bool { return h.inStream.Load() }

// fallback switches to holding navigations in the client streams and says
// once what that cannot see.
func (h *holder) fallback(browser, why string) {
	h.inStream.Store(true)
	h.p.log.Warn().Str("upstream", h.up.name).Str("browser", browser).Str("why", why).
		Msg("holding navigations in the client stream: only Page.navigate, Page.reload and Target.createTarget " +
			"are held; link clicks, form submissions, script navigations, redirects and popups go unheld, " +
			"and answers are read only from the Network events a client enabled itself")
}

// start opens the relay's own browser connection with Fetch interception
// and keeps it open, reconnecting when it drops, until bg ends. The first
// connection must succeed within ctx.
func (h *holder) start(ctx, bg context.Context, wg *sync.WaitGroup) error {
	fc, err := h.connect(ctx)
	if err != nil {
		return err
	}
	h.conn.Store(fc)
	h.p.log.Info().Msg("holding top-level navigations through the relay's own browser connection (Fetch)")
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.supervise(bg, fc)
	}()
	return nil
}

// startLater keeps trying to open the Fetch connection of a browser that
// was not up at start, until bg ends.
func (h *holder) startLater(bg context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.supervise(bg, nil)
	}()
}

// supervise keeps a Fetch connection up until bg ends; fc nil starts by
// reconnecting.
func (h *holder) supervise(bg context.Context, fc *fetchConn) {
	for {
		if fc != nil {
			fc.keepalive(bg, h.p.PingInterval, h.p.WriteTimeout)
			h.conn.Store(nil)
			if bg.Err() != nil {
				return
			}
			h.p.log.Warn().Str("upstream", h.up.name).Msg("lost the relay's browser connection: navigations pass unheld until it is back")
		}
		for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			select {
			case <-bg.Done():
				return
			case <-time.After(backoff):
			}
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			next, err := h.connect(ctx)
			cancel()
			if err == nil {
				if fc == nil {
					h.p.log.Info().Str("upstream", h.up.name).Msg("relay's browser connection is up: holding navigations")
				} else {
					h.p.log.Info().Str("upstream", h.up.name).Msg("relay's browser connection is back: holding navigations again")
				}
				fc = next
				h.conn.Store(fc)
				break
			}
			h.p.log.Debug().Err(err).Msg("browser still unreachable")
		}
	}
}

// book reserves the slot of a navigation to rawURL (whose host is host)
// wanted now and returns how long it must wait, logging the first delay of
// each host. retry is set when nothing could be booked (a shared store that
// holds navigations while it is unreachable): the navigation waits d and
// then books again. Booking may block for the site's robots.txt, never
// past ctx.
func (h *holder) book(ctx context.Context, host, rawURL string, log *zerolog.Logger) (d time.Duration, retry bool) {
	r := h.p.Limiter.Reserve(ctx, host, rawURL, time.Now())
	d = time.Until(r.Start)
	if r.Retry {
		log.Debug().Str("host", host).Float64("retry_in_ms", limiter.Millis(d)).Msg("navigation held until the store answers")
		return max(d, time.Millisecond), true
	}
	if !r.Tracked {
		h.p.Metrics.navigation(navExempt, 0)
		return 0, false
	}
	h.p.Metrics.navigation(navBooked, d)
	if d <= 0 {
		return 0, false
	}
	if h.p.warned.first(host) {
		// Adaptive spacing surprises; a fixed one was asked for.
		ev := h.p.log.Warn()
		if r.Mode != limiter.Adaptive {
			ev = h.p.log.Debug()
		}
		if r.Bucket != host {
			ev = ev.Str("bucket", r.Bucket)
		}
		ev = ev.Str("host", host).Float64("delay_ms", limiter.Millis(d)).Str("mode", r.Mode.String()).Str("source", r.Source)
		switch r.Source {
		case "", "flag":
			ev = ev.Str("tip", "use --http-nav-delay 0 to disable")
		default:
			ev = ev.Str("rule", r.Rule)
		}
		ev.Msg("spacing out navigations to this host")
	}
	log.Debug().Str("host", host).Str("bucket", r.Bucket).Float64("delay_ms", limiter.Millis(d)).Int("pressure", r.Pressure).
		Float64("spacing_ms", limiter.Millis(r.Spacing)).Str("source", r.Source).Msg("navigation held")
	return d, false
}

// wait books host's slot for a navigation to rawURL and calls release when
// the slot comes, booking again while a shared store asks to retry. It
// reports false, calling nothing, when the navigation may go at once. When
// ctx ends first, release is never called. done, when set, is called once
// the hold is over, either way.
func (h *holder) wait(ctx context.Context, host, rawURL string, log *zerolog.Logger, release, done func()) bool {
	d, retry := h.book(ctx, host, rawURL, log)
	if d <= 0 && !retry {
		return false
	}
	h.waiting.Add(1)
	after(ctx, d, func() {
		h.waiting.Add(-1)
		if retry && h.wait(ctx, host, rawURL, log, release, done) {
			return
		}
		release()
		if done != nil {
			done()
		}
	}, func() {
		h.waiting.Add(-1)
		if done != nil {
			done()
		}
	})
	return true
}

// after calls fire once d has passed, or cancelled (when set) if ctx ends
// first: exactly one of them, exactly once. No goroutine waits meanwhile.
func after(ctx context.Context, d time.Duration, fire, cancelled func()) {
	ready := make(chan struct{})
	var stop func() bool
	t := time.AfterFunc(d, func() {
		<-ready
		if stop() { // ctx had not ended, and now its hook never runs
			fire()
		} else if cancelled != nil {
			cancelled()
		}
	})
	stop = context.AfterFunc(ctx, func() {
		if t.Stop() && cancelled != nil { // the timer had not fired, and now never will
			cancelled()
		}
	})
	close(ready)
}

// observe feeds the answer to a navigation of host back to the limiter.
func (h *holder) observe(host string, o limiter.Outcome, log *zerolog.Logger) {
	h.p.Limiter.Observe(host, o, time.Now())
	h.p.Metrics.feedback(o)
	if o.NoAnswer || o.Status >= 500 || o.Status == 429 {
		log.Debug().Str("host", host).Int("status", o.Status).Bool("no_answer", o.NoAnswer).
			Str("retry_after", o.RetryAfter).Msg("host pushed back")
	}
}

// warnOnce remembers the hosts already warned about, so each is warned
// once for the life of the process. Memory is bounded: past max hosts the
// older half is forgotten, and a host from it may be warned once more.
type warnOnce struct {
	mu       sync.Mutex
	cur, old map[string]struct{} // guarded by mu
}

const maxWarned = 100_000

// first reports whether host has not been warned about, and marks it.
func (w *warnOnce) first(host string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.cur[host]; ok {
		return false
	}
	if _, ok := w.old[host]; ok {
		return false
	}
	if w.cur == nil || len(w.cur) >= maxWarned/2 {
		w.old, w.cur = w.cur, make(map[string]struct{})
	}
	w.cur[host] = struct{}{}
	return true
}
