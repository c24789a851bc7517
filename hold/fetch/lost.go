package fetch

import (
	"context"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
)

// orphanWait is how long a request held by a connection that dropped has
// to reach the relay's other connection before it is counted as released
// by the browser to the network.
const orphanWait = 2 * time.Second

// dropped handles a connection that ended: what pages held the browser
// hands to net; what net does not get within orphanWait went to the
// network unheld.
func (f *fetchHold) dropped(fc *fetchConn) {
	if !f.core.InFetch() || f.core.Closing() {
		f.endFlights() // no answer of a navigation followed here will come
		return         // stopped on purpose: navigations are held another way now, or not at all
	}
	// What cut one connection may have cut the other, unnoticed yet:
	// navigations wait until the other one answers.
	f.mu.Lock()
	f.confirmed = false
	f.mu.Unlock()
	f.core.SetArmed(false)
	if fc.role == rolePages {
		f.np.update() // net holds everything while pages is away
	}
	now := time.Now()
	f.mu.Lock()
	others := f.up()
	// Both went: the browser stopped (a normal shutdown looks the same on
	// the wire as a crash), restarts, or was cut off. Said once, though
	// each connection may find itself the last.
	gone := others == 0 && f.gone.CompareAndSwap(false, true)
	// What fc let go can no longer reach the other connection as an echo
	// (but for a request under way this very moment): a request with the
	// same frame and URL that reaches net from now on is a new one.
	for k, p := range f.passed {
		if p.by == fc {
			delete(f.passed, k)
		}
	}
	held := 0
	var lost []string // with no connection left, what any of them held is gone
	for k, hn := range f.held {
		switch {
		case others == 0 && !f.isUp(hn.by):
			delete(f.held, k)
			if hn.named {
				f.dropURLLocked(hn.url)
			}
			lost = append(lost, k.frame)
		case hn.by == fc:
			hn.orphaned = now
			held++
		}
	}
	f.mu.Unlock()
	if others == 0 {
		f.endFlights() // the browser is out of reach: no answer will come
	} else {
		fc.endReleased() // the answers fc was to read are lost with it
	}
	if others == 0 {
		if gone {
			f.cfg.Log.Warn().Str("upstream", f.core.Upstream().Name()).Int("held", len(lost)).
				Msg("the browser closed the relay's connections (it stopped, restarts or was cut off): navigations wait until it is back")
		}
		if len(lost) > 0 {
			time.AfterFunc(orphanWait, func() { f.countLost(lost) })
		}
		return
	}
	// When the browser goes away, the other connection drops a moment
	// later, and says so: this one is lost alone only if the other
	// still answers.
	go func() {
		if f.confirm() && !f.core.Closing() {
			f.cfg.Log.Info().Str("upstream", f.core.Upstream().Name()).Str("conn", fc.role.String()).Int("held", held).
				Msg("lost one of the relay's browser connections: the other one holds on")
		}
	}()
	if held == 0 {
		return
	}
	time.AfterFunc(orphanWait, func() {
		f.mu.Lock()
		var lost []string
		for k, hn := range f.held {
			if hn.by == fc {
				delete(f.held, k)
				if hn.named {
					f.dropURLLocked(hn.url)
				}
				lost = append(lost, k.frame)
				hn.fl.End()
			}
		}
		f.mu.Unlock()
		f.np.update()
		f.countLost(lost)
	})
}

// endReleased ends the navigations whose answer net connection fc was to
// read: those it let go. Those it still held go on to the relay's other
// connection. (The pages connection's are ended as it ends: endAllTracks.)
func (fc *fetchConn) endReleased() {
	if fc.nt == nil {
		return // pages: its tracks end as it ends (endAllTracks)
	}
	fc.nt.mu.Lock()
	var fls []*hold.Flight
	for _, hp := range fc.nt.hops {
		fls = append(fls, hp.fl)
	}
	fc.nt.mu.Unlock()
	fc.f.endUnheld(fls)
}

// endUnheld ends the navigations of fls that are not held: their
// connection is gone, and with it what it was to read of them. Those it
// held go on to the relay's other connection, and so do those the browser
// handed over before the relay saw it go (held by the other one already).
func (f *fetchHold) endUnheld(fls []*hold.Flight) {
	f.mu.Lock()
	held := make(map[*hold.Flight]bool)
	for _, hn := range f.held {
		held[hn.fl] = true
	}
	f.mu.Unlock()
	for _, fl := range fls {
		if !held[fl] {
			fl.End()
		}
	}
}

// countLost counts, as unheld, the navigations of pages that are still
// there among those held by connections that dropped: the browser let them
// go. A page that is gone (the browser died with it) sent nothing.
func (f *fetchHold) countLost(frames []string) {
	n := 0
	for _, frame := range frames {
		if f.pageAlive(frame) {
			n++
		}
	}
	f.core.Unheld(n, "the browser released what the relay's lost connections held")
}

// pageAlive reports whether the browser still has a page, as far as the
// relay can tell: yes unless a connection of the relay's is up and the
// browser says there is no such target.
func (f *fetchHold) pageAlive(target string) bool {
	for _, fc := range []*fetchConn{f.net.Load(), f.pages.Load()} {
		if fc == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(fc.held, orphanWait)
		r, err := fc.call(ctx, "", "Target.getTargetInfo", map[string]string{"targetId": target})
		cancel()
		return err == nil || r == nil
	}
	return true
}

// confirm arms holding again once one of the relay's connections answers.
func (f *fetchHold) confirm() bool {
	for _, fc := range []*fetchConn{f.pages.Load(), f.net.Load()} {
		if fc == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(fc.held, time.Second)
		_, err := fc.call(ctx, "", "Target.getTargets", struct{}{})
		cancel()
		if err == nil && f.isUp(fc) {
			f.mu.Lock()
			f.confirmed = true
			f.mu.Unlock()
			f.rearm()
			return true
		}
	}
	return false
}

// StopAll ends both connections for good: the browser releases what they
// held (nothing, when the relay falls over from a Fetch that never
// pauses).
func (f *fetchHold) StopAll() {
	if f.stop != nil {
		f.stop()
	}
}
