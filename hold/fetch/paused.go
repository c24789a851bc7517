package fetch

import (
	"context"
	"time"

	"github.com/chromedp/cdproto/target"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// holdPage holds a client page's document request paused in the pages
// connection's session: net's patterns name it while it waits, so that
// losing pages hands it to net.
func (f *fetchHold) holdPage(fc *fetchConn, session string, ev *cdp.RequestPaused, host string, th *trackHop) {
	id := ev.RequestID
	key := navKey{frame: ev.FrameID, method: ev.Request.Method, url: ev.Request.URL}
	fl := f.newFlight()
	fc.fly(th, fl)
	hn := &heldNav{by: fc, session: session, url: ev.Request.URL, booked: make(chan struct{}), fl: fl}
	f.mu.Lock()
	if old := f.held[key]; old != nil && old.named {
		f.dropURLLocked(old.url) // one of a browser that died: forgotten
	}
	f.held[key] = hn
	f.mu.Unlock()
	context.AfterFunc(fl.Context(), func() { f.forget(key, hn) })
	f.core.Hold(fc.held, hold.Request{Flight: fl, Host: host, URL: ev.Request.URL, Log: hold.PageLog(&fc.log, ev.FrameID, ""), Depart: true, Refusable: true},
		pagedHold{f: f, fc: fc, key: key, hn: hn, session: session, id: id, th: th})
}

// pagedHold is a client page's document request held in pages. The wait
// for a place in flight lasts as long as the navigation, the one for its
// slot as long as this connection: when it drops, net gets the request
// and holds it on hn.
type pagedHold struct {
	hold.NoHolding
	f           *fetchHold
	fc          *fetchConn
	key         navKey
	hn          *heldNav
	session, id string
	th          *trackHop
}

func (p pagedHold) Booked(start time.Time, nav *pace.Nav) {
	p.hn.start = start
	close(p.hn.booked)
	p.fc.booked(p.th, nav)
}

// Waits names the request in net's patterns while it Waits, so that
// losing pages hands it to net. (One that goes at once is let go before
// an update could reach the browser: pages lost while it is being booked
// lets it out, counted unheld.)
func (p pagedHold) Waits() {
	f := p.f
	if !f.cfg.HoldBackup {
		return // net is off: losing pages lets it go (counted)
	}
	f.mu.Lock()
	if f.held[p.key] == p.hn && !p.hn.named {
		p.hn.named = true
		f.addURLLocked(p.hn.url)
	}
	f.mu.Unlock()
	f.np.update()
}

func (p pagedHold) Refused(r refusal.Reason) {
	p.f.mu.Lock()
	p.hn.refused = &r // handed to net meanwhile: net answers it (handedOver)
	p.f.mu.Unlock()
	p.fc.refuse(p.session, p.id, p.th, p.hn.fl, r)
}

func (p pagedHold) Release() { p.f.let(p.fc, p.key, p.hn, p.session, p.id) }

// forget drops a held request whose navigation ended before its release
// (its page went, a later navigation replaced it, the browser was lost
// while it waited for a place in flight): net's patterns stop naming it.
// After a release it finds nothing to do.
func (f *fetchHold) forget(key navKey, hn *heldNav) {
	f.mu.Lock()
	if f.held[key] != hn {
		f.mu.Unlock()
		return
	}
	delete(f.held, key)
	named := hn.named
	if named {
		f.dropURLLocked(hn.url)
		hn.named = false
	}
	f.mu.Unlock()
	if named {
		f.np.update()
	}
}

// let releases a held document request from the connection that holds it
// now. Released from pages, it is taken out of net's patterns first, so
// that it goes straight to the network (noted for net when net may pause
// it all the same); released from net, its answer is asked for.
func (f *fetchHold) let(fc *fetchConn, key navKey, hn *heldNav, session, id string) {
	f.mu.Lock()
	if hn.by != fc || !hn.orphaned.IsZero() {
		// Handed on by the browser, and the connection that has it now
		// lets it go; or fc dropped, and the browser let it go unless it
		// hands it on: dropped counts it then.
		f.mu.Unlock()
		return
	}
	named := hn.named
	if f.held[key] == hn {
		delete(f.held, key)
		if named {
			f.dropURLLocked(hn.url)
			hn.named = false
		}
	}
	// Net may pause it all the same (the browser applies the update that
	// drops it after the release, or net pauses every document): it then
	// lets it go at once.
	f.passLocked(key, fc, time.Now())
	f.mu.Unlock()
	if fc.role == roleNet {
		fc.continueRequest("", id, true)
		return
	}
	if named {
		f.np.update()
	}
	fc.release(session, id)
}

// pass notes a document request fc let go at once, for the other
// connection, when the other may pause it.
func (f *fetchHold) pass(key navKey, fc *fetchConn) {
	f.mu.Lock()
	f.passLocked(key, fc, time.Now())
	f.mu.Unlock()
}

// maxPassed bounds the documents remembered as let go; they matter for
// echoWindow only.
const maxPassed = 4096

func (f *fetchHold) passLocked(key navKey, fc *fetchConn, now time.Time) {
	if len(f.passed) >= maxPassed {
		for k, p := range f.passed {
			if now.Sub(p.at) >= echoWindow {
				delete(f.passed, k)
			}
		}
		if len(f.passed) >= maxPassed {
			clear(f.passed)
		}
	}
	f.passed[key] = passedNav{by: fc, at: now}
}

// sawPause notes that a page's document request paused at the relay.
func (f *fetchHold) sawPause(frame string) {
	f.mu.Lock()
	if len(f.paused) >= hold.MaxClaims {
		clear(f.paused)
	}
	f.paused[frame] = time.Now()
	f.mu.Unlock()
}

// pausedSince reports whether a document request of the page paused at the
// relay at or after t.
func (f *fetchHold) pausedSince(frame string, t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.paused[frame]
	return ok && !at.Before(t)
}

// pausedLinger is how long a destroyed page's last pause is kept: the
// answer to its Page.navigate comes on the client's connection, and may
// reach the relay after its own connections heard that the page was
// destroyed (a page closed while its navigation was under way, as a stop
// closes its clients' pages). CheckNavigate reads the pause then.
const pausedLinger = 10 * time.Second

// forgetPage drops what is known of a page that is gone, its last pause
// pausedLinger later.
func (f *fetchHold) forgetPage(frame string) {
	now := time.Now()
	f.mu.Lock()
	n := 0
	for _, g := range f.gonePages {
		if now.Sub(g.at) < pausedLinger && len(f.gonePages)-n < hold.MaxClaims {
			break
		}
		delete(f.paused, g.frame)
		n++
	}
	f.gonePages = append(f.gonePages[n:], gonePage{frame: frame, at: now})
	f.mu.Unlock()
	f.core.Claims().Forget(frame)
	f.np.update() // the clients' last page may have gone: net's Fetch goes off after NetLinger
}

// The net connection: browser-level pauses.

// paused handles one document request paused at the browser level (net).
func (fc *fetchConn) paused(ev *cdp.RequestPaused) {
	id := ev.RequestID
	if o, ok := ev.Outcome(fc.core.AnswerHeaders()); ok {
		fc.nt.mu.Lock()
		hp, tracked := fc.nt.hops[id]
		if tracked && !isRedirect(o.Status) {
			delete(fc.nt.hops, id) // a redirect's entry stays until its next hop names it
		}
		fc.nt.mu.Unlock()
		if tracked && hp.booked {
			fc.core.Observe(hp.fl, hp.host, o, hold.PageLog(&fc.log, hp.frame, ""))
		}
		if tracked && !isRedirect(o.Status) {
			hp.fl.End() // answered or failed; a redirect's place goes on with its hop
		}
		fc.release("", id)
		return
	}
	frame := ev.FrameID
	fc.mu.Lock()
	_, page := fc.pages[frame]
	_, notPage := fc.notPages[frame]
	fc.mu.Unlock()
	switch {
	case page:
		fc.decide(ev)
	case notPage:
		fc.release("", id)
		fc.f.cfg.Metrics.Navigation(hold.NavUntracked, 0)
	default:
		// A frame not announced as a page: an iframe, or a page whose
		// announcement has not arrived. Ask, without stopping the reader.
		go fc.classify(ev)
	}
}

// classify asks the browser whether a frame is a page's main frame, then
// decides on its request.
func (fc *fetchConn) classify(ev *cdp.RequestPaused) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	frame := ev.FrameID
	r, err := fc.call(ctx, "", "Target.getTargetInfo", &target.GetTargetInfoParams{TargetID: target.ID(frame)})
	isPage := false
	var ti cdp.TargetInfo
	if err == nil {
		var ok bool
		ti, ok = cdp.ReadTargetInfo(r.Result)
		isPage = ok && ti.Type == "page"
	}
	fc.mu.Lock()
	if isPage {
		fc.pages[frame] = struct{}{}
	} else if r != nil { // only what the browser said: after no answer, ask again next time
		if len(fc.notPages) >= 10_000 {
			clear(fc.notPages)
		}
		fc.notPages[frame] = struct{}{}
	}
	fc.mu.Unlock()
	if isPage && ti.OpenerID != "" && fc.core.Claimed(ti.OpenerID) {
		fc.core.Claims().Claim(frame)
	}
	if isPage {
		fc.decide(ev)
		return
	}
	fc.release("", ev.RequestID)
	fc.f.cfg.Metrics.Navigation(hold.NavUntracked, 0)
}

// decide holds a page's document request when the page is a client's, and
// lets it go at once otherwise.
func (fc *fetchConn) decide(ev *cdp.RequestPaused) {
	fc.f.sawPause(ev.FrameID)
	// A request held by pages that reaches net was handed over: pages is
	// gone, though the relay may not know yet (a frame's earlier request
	// let go by pages, with the same URL, is cancelled by the held one).
	if fc.f.handedOver(fc, ev) || fc.f.echo(fc, ev) {
		return
	}
	if fc.core.Claimed(ev.FrameID) {
		fc.ours(ev)
		return
	}
	if !fc.core.Claims().Unsure() {
		fc.foreign(ev)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(fc.held, hold.ClaimWait)
		defer cancel()
		if fc.core.Claims().Decide(ctx, ev.FrameID) {
			fc.ours(ev)
		} else {
			fc.foreign(ev)
		}
	}()
}

// foreign lets a document request of a page that is not a client's go.
func (fc *fetchConn) foreign(ev *cdp.RequestPaused) {
	fc.release("", ev.RequestID)
	fc.f.cfg.Metrics.Navigation(hold.NavForeign, 0)
}

// ours holds a document request of a client's page for its slot.
func (fc *fetchConn) ours(ev *cdp.RequestPaused) {
	host, ok := limiter.Key(ev.Request.URL)
	if !ok || fc.core.Exempt(host) {
		if prev, redirected := fc.hopFor(ev); redirected {
			prev.fl.End() // a redirect to a host that is not held: its place goes back
		}
		fc.release("", ev.RequestID)
		fc.core.NotBooked(ok)
		return
	}
	fc.f.holdNet(fc, ev, host)
}
