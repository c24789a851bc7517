package fetch

import (
	"bytes"
	"strings"
	"time"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/pace"
)

// Following the document requests the pages connection holds, hop by hop,
// through the Network events of its clients' sessions on their pages, or
// of its own where no client has them on (pages.go: events): when
// each hop left the browser (pace), and how it was answered (observe).

// track is a document request of a client's page that the pages
// connection follows through its Network events, hop by hop.
type track struct {
	session string
	hops    []*trackHop // in order; the first not ended is the one under way
}

// trackHop is one hop of a followed document request.
type trackHop struct {
	host   string
	booked bool         // its answer is fed back to the limiter
	nav    *pace.Nav    // its departure is followed; nil for a hop that booked nothing
	fl     *hold.Flight // the navigation it is a hop of; nil for one that books nothing
	sent   bool         // the browser said it is sending it
	ended  bool         // its answer or failure is in, or it was given up
}

// endLocked marks every hop of tr ended and adds those it ended to over.
// Callers hold pagesState.mu.
func (tr *track) endLocked(over []*trackHop) []*trackHop {
	for _, th := range tr.hops {
		if !th.ended {
			th.ended = true
			over = append(over, th)
		}
	}
	return over
}

// endHops ends what hops that are over followed: their departures and
// their navigations (places in flight). Every followed hop ends here, once.
func endHops(over []*trackHop) {
	for _, th := range over {
		th.nav.End()
		th.fl.End()
	}
}

// fly makes fl the navigation th is a hop of, unless th is over already
// (its page went away): then fl ends, and whatever holds it stops.
func (fc *fetchConn) fly(th *trackHop, fl *hold.Flight) {
	if !fc.unlessOver(th, func() { th.fl = fl }) {
		fl.End()
	}
}

// unlessOver runs set, which gives th something to end with it, under
// fc.pg.mu unless th is over already, and reports whether it ran: a caller
// whose th was over ends what it meant to give, since endHops will not.
func (fc *fetchConn) unlessOver(th *trackHop, set func()) bool {
	fc.pg.mu.Lock()
	defer fc.pg.mu.Unlock()
	if th.ended {
		return false
	}
	set()
	return true
}

// following reports whether ev is a hop of a request the connection
// follows.
func (fc *fetchConn) following(ev *cdp.RequestPaused) bool {
	if ev.RedirectedRequestID == "" {
		return false
	}
	fc.pg.mu.Lock()
	defer fc.pg.mu.Unlock()
	_, ok := fc.pg.tracks[trackKey(ev)]
	return ok
}

// trackKey is what a followed document request is known by: its network
// id, as its Network events name it. Chromium gives none to a request that
// started while no session had its page's Network events on (the first of
// a page created with a URL, or of a popup, before anyone could enable
// them): that one and its redirect hops go by their page's frame, whose
// navigation its answers name (cdp.NetworkEvent.NavFrame; its failure only
// comes in a session on the page). A page has one request at a time: a new
// one ends those before it (follow).
func trackKey(ev *cdp.RequestPaused) string {
	if ev.NetworkID != "" {
		return ev.NetworkID
	}
	return frameKey + ev.FrameID
}

// frameKey starts the key of a request followed by its frame: no network
// id has a colon.
const frameKey = "frame:"

// trackLocked follows tr under key. Callers hold fc.pg.mu.
func (fc *fetchConn) trackLocked(key string, tr *track) {
	if _, ok := fc.pg.tracks[key]; !ok && strings.HasPrefix(key, frameKey) {
		fc.pg.byFrame++
	}
	fc.pg.tracks[key] = tr
}

// untrackLocked stops following the request of key. Callers hold fc.pg.mu.
func (fc *fetchConn) untrackLocked(key string) {
	if _, ok := fc.pg.tracks[key]; ok && strings.HasPrefix(key, frameKey) {
		fc.pg.byFrame--
	}
	delete(fc.pg.tracks, key)
}

// follow starts following the hop of a document request paused at
// session, and returns it with the hop before it (nil for a request that
// is no redirect hop). A new request of a page ends whatever the page's
// requests before it left unfollowed.
func (fc *fetchConn) follow(session string, ev *cdp.RequestPaused) (th, prev *trackHop) {
	th = &trackHop{}
	var over []*trackHop
	key := trackKey(ev)
	fc.pg.mu.Lock()
	tr := fc.pg.tracks[key]
	if tr == nil || ev.RedirectedRequestID == "" {
		for old, otr := range fc.pg.tracks {
			if otr.session == session {
				over = otr.endLocked(over)
				fc.untrackLocked(old)
			}
		}
		tr = &track{session: session}
		if ev.FrameID != "" && len(fc.pg.tracks) < hold.MaxTracked {
			fc.trackLocked(key, tr)
		}
		fc.countTracksLocked()
	} else if n := len(tr.hops); n > 0 {
		prev = tr.hops[n-1]
	}
	tr.hops = append(tr.hops, th)
	fc.pg.mu.Unlock()
	endHops(over)
	return th, prev
}

// booked attaches the navigation a hop booked, unless the hop is over
// already (its page went away while it was being booked).
func (fc *fetchConn) booked(th *trackHop, nav *pace.Nav) {
	if !fc.unlessOver(th, func() { th.nav = nav }) {
		nav.End()
	}
}

// network reads the Network events of the document requests the pages
// connection follows: when each hop left, and how it was answered. Events
// of every other request are dropped unread. in is the page whose session
// the event came in, when known.
func (fc *fetchConn) network(method, params []byte, in string, at time.Time) {
	id, ok := cdp.NetworkRequestID(params)
	if ok {
		fc.pg.mu.Lock()
		_, followed := fc.pg.tracks[id]
		followed = followed || fc.pg.byFrame > 0 // it may be one followed by its frame
		fc.pg.mu.Unlock()
		if !followed {
			return
		}
	}
	ev, ok := cdp.ReadNetworkEvent(method, params, fc.core.AnswerHeaders())
	if !ok {
		return
	}
	var (
		departed   *trackHop
		departedAt time.Time
		exact      bool
		answered   *trackHop
		page       string
		over       []*trackHop
	)
	fc.pg.mu.Lock()
	key := ev.RequestID
	tr := fc.pg.tracks[key]
	if tr == nil {
		// One followed by its frame (trackKey): its answer names the frame,
		// its failure nothing but the session it comes in.
		switch {
		case ev.NavFrame != "":
			key = frameKey + ev.NavFrame
		case ev.Document && string(method) == "Network.loadingFailed" && in != "":
			key = frameKey + in
		}
		tr = fc.pg.tracks[key]
	}
	if tr == nil {
		fc.pg.mu.Unlock()
		return
	}
	fc.pg.clock.saw(ev.Timestamp, at)
	if ps := fc.pg.sessions[tr.session]; ps != nil {
		page = ps.target
	}
	var cur *trackHop
	for _, th := range tr.hops {
		if !th.ended {
			cur = th
			break
		}
	}
	switch {
	case cur == nil:
	case ev.Sending:
		for _, th := range tr.hops {
			if !th.ended && !th.sent {
				th.sent = true
				departed, departedAt = th, at
				break
			}
		}
	case ev.Ended:
		cur.sent, cur.ended = true, true
		if t, ok := fc.pg.clock.at(ev.Sent); ok {
			departed, departedAt, exact = cur, t, true
		}
		answered = cur
		if !ev.Redirect {
			over = tr.endLocked(over)
			fc.untrackLocked(key)
			fc.countTracksLocked()
		}
	}
	fc.pg.mu.Unlock()
	if departed != nil {
		departed.nav.Departed(departedAt, exact)
		departed.fl.LeftAt(departedAt) // its answer time counts from here
	}
	if answered != nil {
		if answered.booked {
			fc.core.Observe(answered.fl, answered.host, ev.Outcome, hold.PageLog(&fc.log, page, ""))
		}
		answered.nav.End() // a redirect's navigation goes on with its next hop, in flight
		if !ev.Redirect {
			answered.fl.End()
		}
	}
	endHops(over)
}

// countTracksLocked publishes how many requests the connection follows,
// for following. Callers hold fc.pg.mu.
func (fc *fetchConn) countTracksLocked() { fc.f.tracked.Store(int64(len(fc.pg.tracks))) }

// Following reports whether the pages connection follows a request now:
// only then do the relay's clients' Network events need a look.
func (f *fetchHold) following() bool { return f.tracked.Load() > 0 }

// ClientEvent reads a Network event a client's page session received, as
// the pages connection reads those of its own sessions: of the requests it
// follows, when each left and how it was answered. Several clients may
// have the same event: the first one counts. page is the page of the
// session it came in, when known.
func (f *fetchHold) ClientEvent(method, params []byte, page string, at time.Time) {
	if fc := f.pages.Load(); fc != nil {
		fc.network(method, params, page, at)
	}
}

// ClientNetworkOff is told that no client session has the Network events
// of a page on any more: if the pages connection follows a request of the
// page, it reads them in its own session from now on.
func (f *fetchHold) ClientNetworkOff(target string) {
	fc := f.pages.Load()
	if fc == nil {
		return
	}
	fc.pg.mu.Lock()
	ps := fc.pg.byTarget[target]
	following := false
	if ps != nil {
		for _, tr := range fc.pg.tracks {
			if tr.session == ps.id {
				following = true
				break
			}
		}
	}
	fc.pg.mu.Unlock()
	if following {
		fc.events(ps)
	}
}

// WantsEvent reports, from its first bytes, whether a client's Network
// event is one the relay reads of the document requests it follows now
// (hold.FetchWay).
func (f *fetchHold) WantsEvent(msg []byte) bool {
	return f.following() && followedEvent(msg[len(`{"method":"`):])
}

// followedEvent reports, from its first bytes, whether a Network event
// (its method and what follows, msg past `{"method":"`) is one the Fetch
// strategy reads of the document requests it follows.
func followedEvent(msg []byte) bool {
	for _, m := range [...]string{`Network.requestWillBeSentExtraInfo"`, `Network.requestWillBeSent"`, `Network.responseReceived"`, `Network.loadingFailed"`} {
		if bytes.HasPrefix(msg, []byte(m)) {
			return true
		}
	}
	return false
}
