package fetch

import "github.com/cdp-throttle/cdp-throttle/hold"

// State is what the holding of one browser keeps at a moment: for tests,
// and for a reader chasing what a crawl left behind.
type State struct {
	// Pages and Net report whether the relay's own Fetch connections to
	// the browser are up (both false outside Fetch mode).
	Pages, Net bool
	// Commands are the relay's own commands on those connections whose
	// answer it still waits for.
	Commands int
	// Followed are the document requests and redirect hops those
	// connections follow.
	Followed int
	// Waiting are the navigations waiting for their slot.
	Waiting int
	// Unarmed are the client pages the pages connection could not arm.
	Unarmed int
}

// StateOf reports the state of b, a Browser that Holder.Arm returned (a
// hold.FetchCore, as hold.BrowserHold is).
func StateOf(b hold.Browser) State {
	c, ok := b.(hold.FetchCore)
	if !ok {
		return State{}
	}
	st := State{Waiting: c.Waiting()}
	f, ok := c.Fetch().(*fetchHold)
	if !ok {
		return st
	}
	for _, fc := range []*fetchConn{f.pages.Load(), f.net.Load()} {
		if fc == nil {
			continue
		}
		fc.mu.Lock()
		st.Commands += len(fc.calls)
		fc.mu.Unlock()
		if fc.nt != nil {
			fc.nt.mu.Lock()
			st.Followed += len(fc.nt.hops)
			fc.nt.mu.Unlock()
		}
		if fc.pg != nil {
			fc.pg.mu.Lock()
			st.Followed += len(fc.pg.tracks)
			fc.pg.mu.Unlock()
		}
	}
	st.Pages, st.Net = f.pages.Load() != nil, f.net.Load() != nil
	f.mu.Lock()
	st.Unarmed = f.holes
	f.mu.Unlock()
	return st
}
