package relay

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/ownership"
)

// The relay's own end. Chromium lets go every request paused in a Fetch
// session whose connection goes away, so a relay that simply closed its
// connections would send everything it held at once, and leave its
// clients' pages open in a shared browser, held by nobody. A stop (Serve's
// context ending: SIGTERM, Ctrl-C) fails closed instead:
//
//  1. The relay stops taking clients: websocket upgrades and /json/* are
//     answered 503 with a Retry-After, /healthz says "stopping" (503), so
//     that a load balancer or an orchestrator sends clients elsewhere.
//  2. It drains for DrainTimeout: held navigations go at their slots, and
//     one whose slot lies past the drain's end is answered at once with
//     the relay's own 429 (X-Cdp-Throttle: deferred; reason=stopping),
//     booking nothing. The drain ends early once nothing is held, and at
//     once when Hurry ends (a second signal).
//  3. Every navigation still held is answered the same way (hold.Holder.Refuse),
//     and so is any held after it.
//  4. The pages and browser contexts the relay's clients created are
//     closed, as orphans would be (a negative OrphanTimeout keeps them).
//  5. Only then are the connections closed.

// DefaultDrainTimeout is Proxy.DrainTimeout's default: under the grace
// that `docker stop` gives a container before it kills it (10 s), which
// is also the least of systemd's (90 s) and Kubernetes' (30 s), so that
// the relay ends by its own hand, with a second to close pages, rather
// than being killed with navigations held.
const DefaultDrainTimeout = 8 * time.Second

// stopCloseWait bounds closing the clients' pages at the end of a stop,
// looking again for those the browser kept (stillOpen) included.
const stopCloseWait = time.Second

// afterRefusal is how long the clients' pages are left after the end of
// a drain answered navigations: Chromium (156) answers success to a
// Target.closeTarget sent within about 10 ms of the relay's answer to
// that page's navigation (Fetch.fulfillRequest), and keeps the page open.
const afterRefusal = 100 * time.Millisecond

// stopPoll is how often a drain looks whether anything is still held.
const stopPoll = 10 * time.Millisecond

// drain runs steps 1 to 4 of a stop; Close does the rest.
func (p *Proxy) drain() {
	timeout := p.DrainTimeout
	if timeout == 0 {
		timeout = DefaultDrainTimeout
	}
	began := time.Now()
	end := began.Add(max(timeout, 0))
	p.drainEnd.Store(end.UnixNano())
	held := 0
	if p.holder != nil {
		held = p.holder.Held()
		p.holder.Drain(end)
		p.log.Info().Int("held", held).Stringer("drain_timeout", max(timeout, 0)).
			Msg("stopping: no new clients; held navigations go at their slots until the drain ends, the rest get the relay's own 429")
		p.waitHeld(end, p.Hurry)
		left := p.holder.Held()
		p.holder.Refuse()
		p.waitHeld(time.Now().Add(time.Second), nil) // refused as their holds see it
		if left > 0 {
			p.log.Info().Int("refused", left).Msg("stopping: navigations still held answered with the relay's own 429 (reason=stopping)")
			time.Sleep(afterRefusal)
		}
	}
	closed := p.closeCreated()
	if p.report != nil {
		p.report.Bye() // closed by the relay itself: nothing left for its guardian
	}
	p.log.Info().Int("pages_closed", closed.pages).Int("contexts_closed", closed.contexts).Int("not_closed", closed.failed).
		Float64("took_ms", float64(time.Since(began).Microseconds())/1000).Msg("stopping: the clients' pages closed; closing their connections")
}

// waitHeld waits until nothing is held, until, or hurry is closed.
func (p *Proxy) waitHeld(until time.Time, hurry <-chan struct{}) {
	t := time.NewTicker(stopPoll)
	defer t.Stop()
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	for p.holder.Held() > 0 {
		select {
		case <-t.C:
		case <-deadline.C:
			return
		case <-hurry:
			p.log.Info().Msg("stopping at once: a second signal")
			return
		}
	}
}

// closeCreated closes the pages and browser contexts the relay's clients
// created, in every browser it shares with others, and counts them.
func (p *Proxy) closeCreated() closed {
	var (
		mu  sync.Mutex
		all closed
		wg  sync.WaitGroup
	)
	if p.OrphanTimeout < 0 {
		return all // kept, as the browser would
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopCloseWait)
	defer cancel()
	for _, up := range p.ups {
		if up.owners == nil {
			continue // Lightpanda: each connection's browser ends with it
		}
		l := up.owners.Created()
		if l.Empty() {
			continue
		}
		wg.Go(func() {
			r := p.closeLeftovers(ctx, up, l, "stop")
			if again := up.stillOpen(ctx, l); !again.Empty() {
				// Chromium took a close for one and kept it (afterRefusal):
				// once more.
				r2 := p.closeLeftovers(ctx, up, again, "stop")
				p.log.Debug().Int("pages", len(again.Pages)).Int("closed", r2.pages).Msg("stopping: pages still open after their close, closed again")
				r.pages, r.failed = r.pages-len(again.Pages)+r2.pages, r.failed+r2.failed // they were counted closed
			}
			if r.err != nil {
				p.log.Warn().Err(r.err).Str("upstream", up.name).Msg("stopping: closing the clients' pages")
			}
			mu.Lock()
			all.pages, all.contexts, all.failed = all.pages+r.pages, all.contexts+r.contexts, all.failed+r.failed
			mu.Unlock()
		})
	}
	wg.Wait()
	return all
}

// stillOpenWait is how long after closing its clients' pages the stop
// looks whether the browser kept any.
const stillOpenWait = 200 * time.Millisecond

// stillOpen returns the pages of l the browser still has stillOpenWait
// after they were closed (none when it cannot tell within ctx).
func (up *upstream) stillOpen(ctx context.Context, l ownership.Leftovers) ownership.Leftovers {
	var again ownership.Leftovers
	if len(l.Pages) == 0 {
		return again
	}
	select {
	case <-time.After(stillOpenWait):
	case <-ctx.Done():
		return again
	}
	c, err := up.dialBrief(ctx)
	if err != nil {
		return again
	}
	defer c.Close()
	msg, _ := cdp.Command(1, "Target.getTargets", "", nil)
	if c.WriteMessage(websocket.TextMessage, msg) != nil {
		return again
	}
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return again
		}
		if hd, err := cdp.Scan(msg); err != nil || !hd.HasID || hd.ID != 1 {
			continue
		}
		var reply struct {
			Result struct {
				TargetInfos []struct {
					TargetID string `json:"targetId"`
				} `json:"targetInfos"`
			} `json:"result"`
		}
		json.Unmarshal(msg, &reply)
		for _, ti := range reply.Result.TargetInfos {
			if slices.Contains(l.Pages, ti.TargetID) {
				again.Pages = append(again.Pages, ti.TargetID)
			}
		}
		return again
	}
}

// stopping reports whether a stop began: clients are refused.
func (p *Proxy) stopping() bool { return p.drainEnd.Load() != 0 }

// refuseStopping answers a client while the relay stops: 503, with a
// Retry-After of the drain's remaining seconds (at least 1).
func (p *Proxy) refuseStopping(w http.ResponseWriter) {
	left := time.Until(time.Unix(0, p.drainEnd.Load())).Seconds()
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(left)))))
	http.Error(w, "cdp-throttle: the relay is stopping; connect to another, or again once it is back", http.StatusServiceUnavailable)
}
