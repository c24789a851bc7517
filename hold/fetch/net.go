package fetch

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// echoWindow is how long after one connection let a request go the other
// may see it: about a millisecond on an idle machine, much more on a busy
// one. Only the other connection, up since before, takes it for the same
// request, so a long window mistakes nothing.
const echoWindow = 10 * time.Second

// handOverLate is how far past its slot a handed-over navigation may still
// go on it.
const handOverLate = 10 * time.Millisecond

// maxNetPatterns bounds the URLs net's patterns name; with more held at
// once, net pauses every document instead.
const maxNetPatterns = 256

// maxPatternURL bounds the part of a URL a pattern names; the rest is a
// wildcard.
const maxPatternURL = 512

// noMatch is a pattern no request matches: net's Fetch stays on, so that
// a request of a client's page that starts now passes it, and can be held
// there later.
var noMatch = []*fetch.RequestPattern{{URLPattern: "cdp-throttle:none", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest}}

// netState is what the net connection owns: the document requests under
// way that it pauses. mu guards it; it is taken after fetchHold.mu and the
// connection's wmu, before the connection's own mu and the flights'
// (hold.go's lock order).
type netState struct {
	mu   lockorder.Mutex[hold.RankFetchConn]
	hops map[string]hop // guarded by mu; interception id → document request under way
}

// netPatterns is what the relay asked of its net connection's Fetch
// patterns and what net took: the updates, written one at a time and in
// order, and the answers they got. Its methods are safe for concurrent
// use. What the patterns name is fetchHold's (urls, and what makes net
// pause every document: wideLocked), read under fetchHold.mu.
type netPatterns struct {
	f *fetchHold

	// mu serialises the pattern updates, each written in order, and
	// guards the fields below; in hold.go's lock order it comes before
	// fetchHold.mu.
	mu        lockorder.Mutex[hold.RankFetchNet]
	seq       int64       // guarded by mu; pattern updates written to net
	busy      *fetchConn  // guarded by mu; the connection an update is under way on
	dirty     bool        // guarded by mu; what net should pause changed since that update
	clientsAt time.Time   // guarded by mu; when net last saw the clients with a page
	recheck   *time.Timer // guarded by mu; turns net's Fetch off once NetLinger is over

	// ackMu, a leaf, guards what was asked of net and what it took: the
	// fields below.
	ackMu     lockorder.Mutex[lockorder.Leaf]
	wideAsked bool          // guarded by ackMu; the last patterns written to net were wide
	wideSince int64         // guarded by ackMu; the pattern update that made net wide
	wideAcked int64         // guarded by ackMu; the last pattern update net answered (named for the wide one it may be)
	onAsked   bool          // guarded by ackMu; the last update written to net enabled its Fetch
	onSince   int64         // guarded by ackMu; the update that enabled net's Fetch, 0 while off
	taken     chan struct{} // guarded by ackMu; closed and replaced when net takes an update
}

// patternsLocked returns net's patterns: every document, the URLs held, or
// none (nil: Fetch off) while no client has a page. Callers hold np.mu and
// fetchHold.mu.
func (np *netPatterns) patternsLocked() ([]*fetch.RequestPattern, bool) {
	f := np.f
	if f.wideLocked() {
		return documentPattern, true
	}
	if len(f.urls) == 0 {
		if !np.clientsLocked() {
			return nil, false
		}
		return noMatch, false
	}
	out := make([]*fetch.RequestPattern, 0, len(f.urls))
	for u := range f.urls {
		out = append(out, &fetch.RequestPattern{URLPattern: u, ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest})
	}
	return out, false
}

// clientsLocked reports whether net's Fetch must be on for the relay's
// clients: they have a page, or had one within Holder.NetLinger, after which it
// looks again. Callers hold np.mu.
func (np *netPatterns) clientsLocked() bool {
	f := np.f
	if !f.cfg.HoldBackup {
		return false
	}
	now := time.Now()
	if f.core.Claims().Any() {
		np.clientsAt = now
		return true
	}
	left := f.cfg.NetLinger - now.Sub(np.clientsAt)
	if left <= 0 {
		return false
	}
	if np.recheck == nil {
		np.recheck = time.AfterFunc(left, func() {
			np.mu.Lock()
			np.recheck = nil
			np.mu.Unlock()
			np.update()
		})
	}
	return true
}

// urlPattern is the Fetch pattern that matches rawURL: wildcards and the
// escape character escaped, and a wildcard for what is past maxPatternURL.
func urlPattern(rawURL string) string {
	tail := ""
	if len(rawURL) > maxPatternURL {
		rawURL, tail = rawURL[:maxPatternURL], "*"
	}
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`).Replace(rawURL) + tail
}

// enable enables net's Fetch on fc, a new net connection, with the
// patterns in force (a pattern no request matches when none is: the
// update attach writes then turns it off), and returns the browser's
// reply.
func (np *netPatterns) enable(ctx context.Context, fc *fetchConn) (*hold.Reply, error) {
	np.mu.Lock()
	defer np.mu.Unlock()
	np.f.mu.Lock()
	patterns, wide := np.patternsLocked()
	if patterns == nil {
		// Enabled once all the same, to learn that the browser can.
		patterns = noMatch
	}
	np.seq++
	seq := np.seq
	np.ackMu.Lock()
	np.onAsked, np.onSince = true, seq
	np.ackMu.Unlock()
	np.f.mu.Unlock()
	r, err := fc.call(ctx, "", "Fetch.enable", &fetch.EnableParams{Patterns: patterns})
	if err == nil {
		np.acked(seq, wide)
	}
	return r, err
}

// update writes net's patterns as they should be now (or turns its
// Fetch off). One update
// is under way at a time: while one is, the next waits for its answer and
// then carries the patterns of that moment, so that a crawl of many held
// navigations writes what changed, not every change. They reach the
// browser in order.
func (np *netPatterns) update() {
	np.mu.Lock()
	defer np.mu.Unlock()
	nc := np.f.net.Load()
	if nc == nil {
		return
	}
	np.f.mu.Lock()
	defer np.f.mu.Unlock()
	if np.busy == nc {
		np.dirty = true
		return
	}
	np.writeLocked(nc)
}

// writeLocked writes net's patterns to nc. Callers hold np.mu and
// fetchHold.mu.
func (np *netPatterns) writeLocked(nc *fetchConn) {
	patterns, wide := np.patternsLocked()
	on := patterns != nil
	np.ackMu.Lock()
	if !on && !np.onAsked {
		np.ackMu.Unlock()
		return // off, and net knows
	}
	np.wideAsked = wide
	np.seq++
	seq := np.seq
	if wide && np.wideSince == 0 {
		np.wideSince = seq
	}
	if !wide {
		np.wideSince = 0
	}
	if on && !np.onAsked {
		np.onSince = seq
	}
	if !on {
		np.onSince = 0
	}
	np.onAsked = on
	np.ackMu.Unlock()
	np.busy, np.dirty = nc, false
	method, params := "Fetch.enable", any(&fetch.EnableParams{Patterns: patterns})
	if !on {
		method, params = "Fetch.disable", struct{}{}
	}
	_, err := nc.send("", method, params, func(r hold.Reply) {
		if r.Err == nil && r.Result != nil {
			np.acked(seq, wide)
		}
		np.mu.Lock()
		np.f.mu.Lock()
		if np.busy == nc {
			np.busy = nil
			if np.dirty && np.f.net.Load() == nc {
				np.writeLocked(nc)
			}
		}
		np.f.mu.Unlock()
		np.mu.Unlock()
	})
	if err != nil {
		np.busy = nil
		if !errors.Is(err, errConnClosed) {
			nc.log.Debug().Err(err).Msg("updating the relay's browser-level patterns failed")
		}
	}
}

// acked notes that net took pattern update seq.
func (np *netPatterns) acked(seq int64, wide bool) {
	np.ackMu.Lock()
	np.wideAcked = max(np.wideAcked, seq)
	if wide && np.wideSince == 0 {
		np.wideSince = seq
	}
	close(np.taken)
	np.taken = make(chan struct{})
	np.ackMu.Unlock()
	if wide {
		np.f.rearm()
	}
}

// wide reports whether net pauses every document now: it took the
// update that made it wide, and no narrower one was written since.
func (np *netPatterns) wide() bool {
	np.ackMu.Lock()
	defer np.ackMu.Unlock()
	return np.f.net.Load() != nil && np.wideAsked && np.wideSince > 0 && np.wideAcked >= np.wideSince
}

// on reports whether net's Fetch is on: net took the update that
// enabled it, and none turned it off since.
func (np *netPatterns) on() bool {
	np.ackMu.Lock()
	defer np.ackMu.Unlock()
	return np.f.net.Load() != nil && np.onAsked && np.onSince > 0 && np.wideAcked >= np.onSince
}

// wake has those waiting for net (when) ask again, as when it takes an
// update: net is gone.
func (np *netPatterns) wake() {
	np.ackMu.Lock()
	defer np.ackMu.Unlock()
	close(np.taken)
	np.taken = make(chan struct{})
}

// takenChan is a channel closed when net takes its next update.
func (np *netPatterns) takenChan() <-chan struct{} {
	np.ackMu.Lock()
	defer np.ackMu.Unlock()
	return np.taken
}

// covering turns net's Fetch on for a client's page, and returns a
// channel closed once it is on, or net is down (pages holds alone then),
// within CoverWait. Nil means it is on already.
func (np *netPatterns) covering() <-chan struct{} {
	f := np.f
	if !f.cfg.HoldBackup {
		return nil
	}
	if f.net.Load() == nil || np.on() {
		return nil
	}
	np.update()
	return np.when(func() bool { return f.net.Load() == nil || np.on() }, hold.CoverWait)
}

// when returns a channel closed once ok holds (asked again each time
// net takes an update), or within is over.
func (np *netPatterns) when(ok func() bool, within time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	limiting := np.f.cfg.Limiting
	limiting.Add(1)
	go func() {
		defer limiting.Done()
		defer close(ch)
		t := time.NewTimer(within)
		defer t.Stop()
		for {
			changed := np.takenChan() // before ok: an update taken meanwhile closes it
			if ok() {
				return
			}
			select {
			case <-t.C:
				return
			case <-changed:
			}
		}
	}()
	return ch
}

// addURLLocked adds a held URL to net's patterns. Callers hold mu.
func (f *fetchHold) addURLLocked(rawURL string) {
	f.urls[urlPattern(rawURL)]++
}

// dropURLLocked takes a held URL out of net's patterns. Callers hold mu.
func (f *fetchHold) dropURLLocked(rawURL string) {
	p := urlPattern(rawURL)
	if f.urls[p]--; f.urls[p] <= 0 {
		delete(f.urls, p)
	}
}

// echo lets go at once a request the pages connection let go a moment ago,
// which net pauses all the same: the browser applied the update that
// dropped it from net's patterns after the release (net's pauses are
// decided apart from its answers, so the order on its socket does not
// tell), or net pauses every document. It reports whether it did. While
// pages is up, a client page's request reaches net only past pages: one
// with a frame and URL pages let go is that one. Pages' entries go when
// it does.
func (f *fetchHold) echo(fc *fetchConn, ev *cdp.RequestPaused) bool {
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	f.mu.Lock()
	p, ok := f.passed[key]
	if !ok || p.by == fc || !fc.since.Before(p.at) || time.Since(p.at) >= echoWindow {
		f.mu.Unlock()
		return false
	}
	delete(f.passed, key)
	f.mu.Unlock()
	fc.release("", ev.RequestID)
	return true
}

// handedOver holds on a request that the connection holding it let go by
// dropping (the relay may not have noticed yet), which the browser handed
// to fc: until the slot already booked. It reports whether the request
// was one. A connection that came up since cannot be handed anything: the
// request is then one of a browser that died, and this one is new.
func (f *fetchHold) handedOver(fc *fetchConn, ev *cdp.RequestPaused) bool {
	id := ev.RequestID
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	f.mu.Lock()
	hn, ok := f.held[key]
	if !ok || hn.by == fc || !hn.orphaned.IsZero() && !fc.since.Before(hn.orphaned) {
		f.mu.Unlock()
		return false
	}
	hn.by, hn.session = fc, ""
	hn.orphaned = time.Time{}
	f.mu.Unlock()
	host, _ := limiter.Key(ev.Request.URL)
	fc.hopFor(ev)
	fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: true, fl: hn.fl})
	f.cfg.Limiting.Add(1)
	go func() {
		defer f.cfg.Limiting.Done()
		select {
		case <-hn.booked:
		case <-fc.held.Done():
			return
		case <-hn.fl.Context().Done(): // its page went while it waited, or it was refused
			f.mu.Lock()
			refused := hn.refused
			f.mu.Unlock()
			if refused != nil {
				fc.refuse("", id, nil, hn.fl, *refused)
			}
			return
		}
		if late := time.Since(hn.start); late > handOverLate {
			// Its slot went by while the browser handed it over: going now
			// would come too close to the navigation after it. It takes
			// the next slot instead.
			log := hold.PageLog(&fc.log, ev.FrameID, "")
			log.Debug().Str("host", host).Float64("late_ms", limiter.ShownMillis(late)).Msg("handed-over navigation booked again")
			f.core.Hold(fc.held, hold.Request{Flight: hn.fl, Host: host, URL: ev.Request.URL, Log: log}, netLet{f: f, fc: fc, key: key, hn: hn, id: id})
			return
		}
		f.core.HoldUntil(fc.held, hn.fl, hn.start, netLet{f: f, fc: fc, key: key, hn: hn, id: id})
	}()
	return true
}

// holdNet books and holds a client page's document request paused at the
// browser level, while net pauses every document.
func (f *fetchHold) holdNet(fc *fetchConn, ev *cdp.RequestPaused, host string) {
	id := ev.RequestID
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	prev, redirected := fc.hopFor(ev)

	f.mu.Lock()
	if redirected && prev.host == host {
		// A hop within the host of the hop before it books nothing, and
		// keeps that hop's place in flight.
		f.passLocked(key, fc, time.Now())
		f.mu.Unlock()
		fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: prev.booked, fl: prev.fl})
		f.core.CheckThen(fc.held, hold.Request{Host: host, URL: ev.Request.URL, Log: hold.PageLog(&fc.log, ev.FrameID, ""), Refusable: true},
			netHold{netLet: netLet{fc: fc, id: id}, hop: hop{host: host, frame: ev.FrameID, booked: prev.booked, fl: prev.fl}})
		return
	}
	f.mu.Unlock()
	if redirected {
		prev.fl.End() // its answer was the redirect; the hop is a navigation of another host
	}
	fl := f.newFlight()
	f.mu.Lock()
	hn := &heldNav{by: fc, url: ev.Request.URL, booked: make(chan struct{}), named: true, fl: fl}
	if old := f.held[key]; old != nil && old.named {
		f.dropURLLocked(old.url) // one of a browser that died: forgotten
	}
	f.held[key] = hn
	f.addURLLocked(hn.url)
	f.mu.Unlock()
	context.AfterFunc(fl.Context(), func() { f.forget(key, hn) })
	fc.setHop(id, hop{host: host, frame: ev.FrameID, booked: true, fl: fl})
	f.core.Hold(fc.held, hold.Request{Flight: fl, Host: host, URL: ev.Request.URL, Log: hold.PageLog(&fc.log, ev.FrameID, ""), Refusable: true},
		netHold{netLet: netLet{f: f, fc: fc, key: key, hn: hn, id: id}, hop: hop{host: host, frame: ev.FrameID, booked: true, fl: fl}})
}

// netLet lets go a document request net holds, once its slot came.
type netLet struct {
	hold.NoHolding
	f   *fetchHold
	fc  *fetchConn
	key navKey
	hn  *heldNav
	id  string
}

func (l netLet) Release() { l.f.let(l.fc, l.key, l.hn, "", l.id) }

// netHold is a document request net holds: booked on hn (when it has
// one: a redirect hop within its host books nothing, and is continued
// where the hop before it was booked), refused or let go.
type netHold struct {
	netLet
	hop hop // the request's hop, as fc follows it
}

func (n netHold) Booked(start time.Time, _ *pace.Nav) {
	n.hn.start = start
	close(n.hn.booked)
}

func (n netHold) Refused(r refusal.Reason) {
	n.fc.setHop(n.id, hop{host: n.hop.host, frame: n.hop.frame, fl: n.hop.fl})
	n.fc.refuse("", n.id, nil, n.hop.fl, r)
}

func (n netHold) Release() {
	if n.hn == nil {
		n.fc.continueRequest("", n.id, n.hop.booked) // a hop: its answer is read where the hop before was booked
		return
	}
	n.netLet.Release()
}

// hopFor returns the document request a redirect hop follows, and forgets
// it (its entry is replaced by the hop's). A request that follows none
// starts a new navigation of its frame, which ends every chain the frame
// had: so what is remembered is bounded by the requests under way.
func (fc *fetchConn) hopFor(ev *cdp.RequestPaused) (hop, bool) {
	if ev.RedirectedRequestID == "" {
		fc.nt.dropFrameHops(ev.FrameID)
		return hop{}, false
	}
	fc.nt.mu.Lock()
	defer fc.nt.mu.Unlock()
	prev, ok := fc.nt.hops[ev.RedirectedRequestID]
	delete(fc.nt.hops, ev.RedirectedRequestID)
	return prev, ok
}

func (fc *fetchConn) setHop(id string, hp hop) {
	fc.nt.mu.Lock()
	fc.nt.hops[id] = hp
	fc.nt.mu.Unlock()
}

// dropFrameHops forgets the requests under way of a frame that navigates
// anew or is gone, and ends their navigations; nothing on a connection
// with no net state (pages).
func (nt *netState) dropFrameHops(frame string) {
	if nt == nil {
		return
	}
	var ended []*hold.Flight
	nt.mu.Lock()
	for k, hp := range nt.hops {
		if hp.frame == frame {
			delete(nt.hops, k)
			ended = append(ended, hp.fl)
		}
	}
	nt.mu.Unlock()
	for _, fl := range ended {
		fl.End()
	}
}

func isRedirect(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}
