package hold

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

// StateOf reports the state of b, a Browser that Holder.Arm returned.
func StateOf(b Browser) State {
	h, ok := b.(*BrowserHold)
	if !ok {
		return State{}
	}
	st := State{Waiting: int(h.waiting.Load())}
	if h.fetch != nil {
		h.fetch.State(&st)
	}
	return st
}
