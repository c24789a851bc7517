// Package session holds navigations through the relay's own interception
// in each client session: Lightpanda's way, and Chromium's when the
// relay's own connections cannot hold (sessionHold says how). It is one
// of the ways of package hold (hold.Ways.Session).
package session

import (
	"encoding/json"
	"maps"
	"strings"
	"time"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// sessionHold holds the navigations of one client connection through the
// relay's own interception in the client's page sessions: for browsers
// where the relay cannot watch pages from a connection of its own
// (Lightpanda gives every connection a browser of its own), and for
// Chromium as the fallback of Fetch (--intercept session).
//
// On each page session the relay enables Fetch (and Network, for the
// answers) with commands of its own, whose ids no client uses and whose
// answers never reach the client. A paused top-level document waits for
// its slot; every other paused request goes on at once. Network events the
// client did not enable are read and dropped.
//
// A browser keeps one set of Fetch patterns per session (Chromium) or per
// page (Lightpanda), and a client's own Fetch.enable would replace the
// relay's: the relay sends the union of the client's patterns and its own
// instead, and hands the client exactly the paused requests its own
// patterns ask for, a held document once its slot has come. The client's
// Fetch.disable and Network.disable are answered by the relay, which keeps
// its own interception on.
type sessionHold struct {
	w    *hold.Watch
	core hold.Core // what it asks of holding
	// patterns are the relay's own: only documents for Chromium; every
	// request for Lightpanda, whose older versions honour no other
	// pattern.
	patterns []pattern

	// mu guards the fields below, and the sessStates' fields. It takes no
	// lock of the Watch's while held; in hold.go's lock order it stands
	// where Watch.mu does, before Flight.mu (flights are made and ended
	// under it).
	mu        lockorder.Mutex[hold.RankConn]
	states    map[string]*sessState // guarded by mu; page sessions
	prebooked map[string]prebooked  // guarded by mu; URL of a held Target.createTarget → when it was let go
	held      int                   // guarded by mu; top-level documents waiting for their slot
}

// prebooked is a Target.createTarget held and let go: its page's first
// document books nothing more, and takes its place in flight.
type prebooked struct {
	at time.Time
	fl *hold.Flight
}

// sessDoc is a top-level document under way in a page session.
type sessDoc struct {
	host string
	fl   *hold.Flight
}

// sessState is what the relay keeps of one page session.
type sessState struct {
	target    string
	armed     bool
	client    *clientFetch            // the client's own Fetch here, nil when off
	network   bool                    // the client enabled Network here
	delivered map[string]*hold.Flight // paused requests handed to the client, not answered by it yet → the held document's flight (nil: not one)
	docs      map[string]sessDoc      // network id → the top-level document under way
	children  map[string]struct{}     // frames known to have a parent (iframes)
}

// clientFetch is a client's own Fetch.enable.
type clientFetch struct {
	patterns []pattern // nil: every request
	auth     bool      // handleAuthRequests
}

// pattern is a Fetch.RequestPattern.
type pattern struct {
	URLPattern   string `json:"urlPattern,omitempty"`
	ResourceType string `json:"resourceType,omitempty"`
	RequestStage string `json:"requestStage,omitempty"`
}

var (
	documentsPattern = []pattern{{URLPattern: "*", ResourceType: "Document", RequestStage: "Request"}}
	everyPattern     = []pattern{{URLPattern: "*", RequestStage: "Request"}}
)

// New is the session way of holding the navigations of one client
// connection (hold.Ways.Session).
func New(w *hold.Watch) hold.ConnWay {
	s := &sessionHold{w: w, core: w.Core(), states: make(map[string]*sessState), prebooked: make(map[string]prebooked), patterns: documentsPattern}
	if s.core.IsLightpanda() {
		s.patterns = everyPattern
	}
	return s
}

// Arm arms every page session the client has.
func (s *sessionHold) Arm() {
	sessions := s.w.PageSessions()
	for _, id := range sessions {
		s.arm(id)
	}
}

// arm enables the relay's interception on a page session, once.
func (s *sessionHold) arm(session string) {
	w := s.w
	si, ok := w.Session(session)
	if !ok || si.Type != "page" {
		return
	}
	s.mu.Lock()
	st := s.states[session]
	if st == nil {
		if len(s.states) >= hold.MaxTracked {
			for _, old := range s.states {
				old.endDocs()
			}
			clear(s.states)
		}
		st = &sessState{target: si.Target, delivered: map[string]*hold.Flight{}, docs: map[string]sessDoc{}, children: map[string]struct{}{}}
		s.states[session] = st
	}
	if st.armed {
		s.mu.Unlock()
		return
	}
	st.armed = true
	enable := s.enableParams(st)
	network := st.network
	s.mu.Unlock()
	if _, err := w.Send(session, "Fetch.enable", enable, nil); err != nil {
		w.Log().Debug().Err(err).Msg("could not enable the relay's interception")
	}
	if !network {
		w.Send(session, "Network.enable", struct{}{}, nil)
	}
}

// enableParams is the Fetch.enable the session needs: the client's
// patterns and the relay's. Callers hold s.mu.
func (s *sessionHold) enableParams(st *sessState) any {
	type params struct {
		Patterns           []pattern `json:"patterns"`
		HandleAuthRequests bool      `json:"handleAuthRequests,omitempty"`
	}
	p := params{Patterns: append([]pattern(nil), s.patterns...)}
	if c := st.client; c != nil {
		every := c.patterns
		if every == nil {
			every = []pattern{{URLPattern: "*"}}
		}
		p.Patterns = append(append([]pattern(nil), every...), s.patterns...)
		p.HandleAuthRequests = c.auth
	}
	return p
}

// state returns the relay's state of a page session, nil for a session it
// does not hold in.
func (s *sessionHold) state(session string) *sessState {
	st := s.states[session]
	if st == nil || !st.armed {
		return nil
	}
	return st
}

// FromClient is fromClient, with the header by value (hold.ConnWay): a pointer
// to the watch's would escape through the interface, one allocation
// more for every message the relay scans.
func (s *sessionHold) FromClient(hd cdp.Header, msg []byte) bool { return s.fromClient(&hd, msg) }

// fromClient looks at a client's command; it reports true when the relay
// took it (and writes it, rewritten, or answers it itself).
func (s *sessionHold) fromClient(hd *cdp.Header, msg []byte) bool {
	w := s.w
	session := string(hd.SessionID)
	switch string(hd.Method) {
	case "Target.createTarget":
		return s.createTarget(hd, msg)
	case "Fetch.enable":
		var p struct {
			Patterns           json.RawMessage `json:"patterns"`
			HandleAuthRequests bool            `json:"handleAuthRequests"`
		}
		if hd.Params != nil && json.Unmarshal(hd.Params, &p) != nil {
			return false // the browser answers what it cannot read
		}
		c := &clientFetch{auth: p.HandleAuthRequests}
		if len(p.Patterns) > 0 && string(p.Patterns) != "null" {
			c.patterns = []pattern{}
			if json.Unmarshal(p.Patterns, &c.patterns) != nil {
				return false
			}
		}
		s.mu.Lock()
		st := s.state(session)
		if st == nil {
			s.mu.Unlock()
			return false
		}
		st.client = c
		params := s.enableParams(st)
		s.mu.Unlock()
		out, err := cdp.Command(hd.ID, "Fetch.enable", session, params)
		if err != nil {
			return false
		}
		w.Pass(out)
		return true
	case "Fetch.disable":
		s.mu.Lock()
		st := s.state(session)
		if st == nil {
			s.mu.Unlock()
			return false
		}
		st.client = nil
		waiting := maps.Clone(st.delivered)
		clear(st.delivered)
		params := s.enableParams(st)
		s.mu.Unlock()
		// What the client held goes on, as Fetch.disable would have let it.
		for id, fl := range waiting {
			s.goOnFollowed(session, id, fl)
		}
		w.Send(session, "Fetch.enable", params, nil)
		w.Answer(session, hd.ID, "{}")
		return true
	case "Fetch.continueRequest", "Fetch.failRequest", "Fetch.fulfillRequest", "Fetch.continueWithAuth", "Fetch.continueResponse":
		var p struct {
			RequestID string `json:"requestId"`
		}
		if json.Unmarshal(hd.Params, &p) == nil {
			var departs *hold.Flight
			s.mu.Lock()
			if st := s.state(session); st != nil {
				fl := st.delivered[p.RequestID]
				delete(st.delivered, p.RequestID)
				if fl.Followed() != nil && string(hd.Method) == "Fetch.continueRequest" {
					departs = fl
				}
			}
			s.mu.Unlock()
			if departs != nil {
				// A held document the client lets go itself: the answer
				// says when it left, as goOnFollowed's does.
				w.Departs(hold.CmdKey{Session: session, ID: hd.ID}, departs)
			}
		}
	case "Network.enable":
		s.mu.Lock()
		if st := s.state(session); st != nil {
			st.network = true
		}
		s.mu.Unlock()
	case "Network.disable":
		s.mu.Lock()
		st := s.state(session)
		if st != nil {
			st.network = false
		}
		s.mu.Unlock()
		if st != nil {
			w.Answer(session, hd.ID, "{}") // the relay reads the answers from Network
			return true
		}
	}
	return false
}

// createTarget holds a Target.createTarget that opens a page on a URL: the
// page's first request may leave before the relay's interception is on
// in the new page's session, so the command itself waits for the slot,
// and the document it loads books nothing more.
func (s *sessionHold) createTarget(hd *cdp.Header, msg []byte) bool {
	p, ok := cdp.NavigateParams(hd.Params)
	if !ok {
		return false
	}
	host, ok := limiter.Key(p.URL)
	if !ok || s.core.Exempt(host) {
		return false
	}
	w := s.w
	w.Held().Add(1)
	fl := s.core.NewFlight(w.Context())
	s.core.Hold(w.Context(), hold.Request{Flight: fl, Host: host, URL: p.URL, Log: w.Log(), Refusable: true},
		createHold{s: s, url: p.URL, fl: fl, msg: append([]byte(nil), msg...), session: string(hd.SessionID), id: hd.ID})
	return true
}

// createHold is a Target.createTarget with a URL, held for its slot.
type createHold struct {
	hold.NoHolding
	s       *sessionHold
	url     string
	fl      *hold.Flight
	msg     []byte // the command, written on at the slot
	session string
	id      int64
}

func (c createHold) Refused(r refusal.Reason) {
	// Answered as in the stream: its result has no room for an error.
	c.fl.End()
	c.s.w.AnswerError(c.session, c.id, r.ErrorText(time.Now()))
}

// Release lets the command go, and leaves its place in flight to the
// page's document, which books nothing more; if it never shows, the
// place goes back once it cannot come any more.
func (c createHold) Release() {
	s, w, fl := c.s, c.s.w, c.fl
	s.mu.Lock()
	if len(s.prebooked) >= hold.MaxTracked {
		for _, pb := range s.prebooked {
			pb.fl.End()
		}
		clear(s.prebooked)
	}
	s.prebooked[c.url] = prebooked{at: time.Now(), fl: fl}
	s.mu.Unlock()
	time.AfterFunc(hold.ClaimWait, func() {
		s.mu.Lock()
		pb, waiting := s.prebooked[c.url]
		if waiting && pb.fl == fl {
			delete(s.prebooked, c.url)
		}
		s.mu.Unlock()
		if waiting && pb.fl == fl {
			fl.End()
		}
	})
	w.Pass(c.msg)
}

func (c createHold) Done() { c.s.w.Held().Done() }

// FromBrowser is fromBrowser, with the header by value (hold.ConnWay): a pointer
// to the watch's would escape through the interface, one allocation
// more for every message the relay scans.
func (s *sessionHold) FromBrowser(hd cdp.Header, msg []byte) bool { return s.fromBrowser(&hd, msg) }

// fromBrowser looks at what the browser sends the client; it reports true
// for what the client must not see.
func (s *sessionHold) fromBrowser(hd *cdp.Header, msg []byte) bool {
	w := s.w
	session := string(hd.SessionID)
	method := string(hd.Method)
	switch {
	case method == "Target.attachedToTarget":
		if sid, _, ok := cdp.AttachedTarget(hd.Params); ok {
			s.arm(sid) // before the client hears of the session
		}
		return false
	case method == "Target.detachedFromTarget":
		if sid, ok := cdp.DetachedSession(hd.Params); ok {
			s.mu.Lock()
			if st := s.states[sid]; st != nil {
				st.endDocs() // the page went, or the client left it
			}
			delete(s.states, sid)
			s.mu.Unlock()
		}
		return false
	case method == "Fetch.requestPaused":
		return s.paused(session, hd.Params, msg)
	case method == "Fetch.authRequired":
		s.mu.Lock()
		st := s.state(session)
		auth := st != nil && st.client != nil && st.client.auth
		s.mu.Unlock()
		if st == nil || auth {
			return false
		}
		var p struct {
			RequestID string `json:"requestId"`
		}
		json.Unmarshal(hd.Params, &p)
		w.Send(session, "Fetch.continueWithAuth", map[string]any{"requestId": p.RequestID,
			"authChallengeResponse": map[string]string{"response": "Default"}}, nil)
		return true
	case method == "Page.frameAttached":
		var p struct {
			FrameID       string `json:"frameId"`
			ParentFrameID string `json:"parentFrameId"`
		}
		if json.Unmarshal(hd.Params, &p) == nil && p.ParentFrameID != "" {
			s.mu.Lock()
			if st := s.state(session); st != nil && len(st.children) < hold.MaxTracked {
				st.children[p.FrameID] = struct{}{}
			}
			s.mu.Unlock()
		}
		return false
	case strings.HasPrefix(method, "Network."):
		s.mu.Lock()
		st := s.state(session)
		var doc sessDoc
		var answer cdp.Answer
		if st != nil && len(st.docs) > 0 && (method == "Network.responseReceived" || method == "Network.loadingFailed") && st.awaits(hd.Params) {
			var ok bool
			if answer, ok = cdp.DocumentAnswer(hd.Method, hd.Params, s.core.AnswerHeaders()); ok {
				doc = st.docs[answer.RequestID]
				delete(st.docs, answer.RequestID)
			}
		}
		drop := st != nil && !st.network
		s.mu.Unlock()
		if doc.host != "" {
			s.core.Observe(doc.fl, doc.host, answer.Outcome, w.NavLog(session))
			doc.fl.End()
		}
		return drop
	}
	return false
}

// paused decides on a request the browser paused in a client session.
func (s *sessionHold) paused(session string, params, msg []byte) bool {
	w := s.w
	ev, ok := cdp.ReadRequestPaused(params)
	s.mu.Lock()
	st := s.state(session)
	if !ok || st == nil {
		s.mu.Unlock()
		return false // not the relay's: the client's own
	}
	_, answered := ev.Outcome(nil)
	stage := "Request"
	if answered {
		stage = "Response"
	}
	wants := st.client.matches(&ev, stage)
	_, child := st.children[ev.FrameID]
	top := !answered && ev.ResourceType == "Document" &&
		(ev.FrameID == st.target || s.core.IsLightpanda() && !child) // Lightpanda opens popups as parentless frames of the page
	host, httpURL := limiter.Key(ev.Request.URL)
	if !top || !httpURL || s.core.Exempt(host) {
		if top {
			st.endDocs() // a navigation that is not held replaces the page's last one
			clear(st.docs)
		}
		s.mu.Unlock()
		if top {
			s.core.NotBooked(httpURL)
		}
		if wants {
			s.mu.Lock()
			st.delivered[ev.RequestID] = nil
			s.mu.Unlock()
			return false // the client's own, now
		}
		s.goOn(session, ev.RequestID)
		return true
	}
	chain := ev.NetworkID
	if chain == "" {
		chain = ev.RedirectedRequestID
	}
	prev, hop := st.docs[chain]
	if !hop {
		st.endDocs() // a new navigation of the page ends the one before
		clear(st.docs)
	}
	pb, ok := s.prebooked[ev.Request.URL]
	prebooked := ok && time.Since(pb.at) < hold.ClaimWait
	if prebooked {
		delete(s.prebooked, ev.Request.URL)
	}
	var fl *hold.Flight
	switch {
	case hop && prev.host == host:
		fl = prev.fl // a hop within the host keeps the place of the hop before it
	case prebooked:
		fl = pb.fl // the page of a held createTarget: its place
	default:
		if hop {
			prev.fl.End() // its answer was the redirect; the hop is a navigation of another host
		}
		fl = s.core.NewFlight(w.Context())
	}
	st.docs[networkOr(&ev)] = sessDoc{host: host, fl: fl}
	s.held++
	s.mu.Unlock()

	d := docHold{s: s, st: st, ev: ev, fl: fl, session: session, wants: wants, msg: append([]byte(nil), msg...)}
	n := hold.Request{Flight: fl, Host: host, URL: ev.Request.URL, Log: w.NavLog(session), Refusable: true}
	if hop && prev.host == host || prebooked {
		// A hop within the host, or the page of a held createTarget:
		// booked already, and asked about only now.
		s.core.CheckThen(w.Context(), n, d)
		return true
	}
	w.Held().Add(1)
	// On Lightpanda, the answer to the Fetch.continueRequest that lets the
	// document go, the relay's or the client's, says when it left
	// (goOnFollowed): pace follows it, as the Fetch strategy follows
	// Chromium's own timing.
	n.Depart = s.core.IsLightpanda()
	s.core.Hold(w.Context(), n, d)
	return true
}

// docHold is a document request paused in a client session, held for
// its slot.
type docHold struct {
	hold.NoHolding
	s       *sessionHold
	st      *sessState
	ev      cdp.RequestPaused
	fl      *hold.Flight
	session string
	wants   bool   // the client pauses it too: it gets msg at the slot
	msg     []byte // the pause, as the browser sent it
}

func (d docHold) Booked(_ time.Time, n *pace.Nav) { d.fl.Follow(n) }

func (d docHold) Release() {
	s, w := d.s, d.s.w
	s.mu.Lock()
	s.held--
	if d.wants {
		d.st.delivered[d.ev.RequestID] = d.fl
	}
	s.mu.Unlock()
	if d.wants {
		w.ToClient(d.msg)
	} else {
		s.goOnFollowed(d.session, d.ev.RequestID, d.fl)
	}
}

func (d docHold) Refused(r refusal.Reason) {
	s := d.s
	s.mu.Lock()
	s.held--
	if doc, ok := d.st.docs[networkOr(&d.ev)]; ok && doc.fl == d.fl {
		delete(d.st.docs, networkOr(&d.ev)) // its failure is no answer of the site
	}
	s.mu.Unlock()
	s.fail(d.session, d.ev.RequestID, r)
	d.fl.End()
}

func (d docHold) Done() { d.s.w.Held().Done() }

// endDocs ends the navigations of the documents under way. Callers hold
// the sessionHold's mu.
func (st *sessState) endDocs() {
	for _, d := range st.docs {
		d.fl.End()
	}
}

// awaits reports whether a Network event's params (one the browser sends
// for every request of the page) may be of a document under way: its
// requestId, read without decoding the rest when the browser wrote it
// first (Chromium and Lightpanda do), is one of docs. Callers hold
// the sessionHold's mu.
func (st *sessState) awaits(params []byte) bool {
	id, ok := cdp.NetworkRequestID(params)
	if !ok {
		return true // decode it whole
	}
	_, under := st.docs[id]
	return under
}

// goOn lets a request paused in a client session go on.
func (s *sessionHold) goOn(session, requestID string) {
	s.w.Send(session, "Fetch.continueRequest", cdp.StringParam("requestId", requestID), nil)
}

// goOnFollowed lets a paused request go on and, when fl follows the
// navigation's departure, has the answer tell it when the request left
// (watch.departs): Lightpanda answers Fetch.continueRequest once it has
// handed the request to its HTTP client, which sends it before it answers
// when one of its connections is free. (A request queued behind busy ones
// leaves later than its answer says, and pace cannot see that.)
func (s *sessionHold) goOnFollowed(session, requestID string, fl *hold.Flight) {
	if fl.Followed() == nil {
		fl = nil
	}
	s.w.SendDeparting(session, "Fetch.continueRequest", cdp.StringParam("requestId", requestID), fl)
}

// fail fails a paused request the Limiter refused, as one the client
// blocked: Chromium reports net::ERR_BLOCKED_BY_CLIENT; Lightpanda, which
// takes the reason, aborts the request.
func (s *sessionHold) fail(session, requestID string, r refusal.Reason) {
	if r.Deferred != "" {
		s.w.Send(session, "Fetch.fulfillRequest", r.Fulfill(requestID, time.Now()), nil)
		return
	}
	s.w.Send(session, "Fetch.failRequest", map[string]string{"requestId": requestID, "errorReason": "BlockedByClient"}, nil)
}

// networkOr names a paused request by what its Network events will call it.
func networkOr(ev *cdp.RequestPaused) string {
	if ev.NetworkID != "" {
		return ev.NetworkID
	}
	return ev.RequestID
}

// Ended counts what the relay still held when the client's connection
// closed: Chromium lets a detached session's paused requests go on to the
// network (Lightpanda drops them).
func (s *sessionHold) Ended() {
	s.mu.Lock()
	n := s.held
	s.held = 0
	s.mu.Unlock()
	if n > 0 && !s.core.IsLightpanda() {
		s.core.Unheld(n, "the client's connection closed while the relay held them, and the browser let them go")
	}
}

// matches reports whether a client's own patterns ask for a paused
// request at stage.
func (c *clientFetch) matches(ev *cdp.RequestPaused, stage string) bool {
	if c == nil {
		return false
	}
	if c.patterns == nil {
		return stage == "Request"
	}
	for _, p := range c.patterns {
		want := p.RequestStage
		if want == "" {
			want = "Request"
		}
		if want != stage || p.ResourceType != "" && p.ResourceType != ev.ResourceType {
			continue
		}
		if p.URLPattern == "" || glob(p.URLPattern, ev.Request.URL) {
			return true
		}
	}
	return false
}

// glob matches s against a Fetch URL pattern: '*' is any run of
// characters, '?' exactly one, and a backslash escapes the next.
func glob(pat, s string) bool {
	for len(pat) > 0 {
		switch pat[0] {
		case '*':
			for len(pat) > 0 && pat[0] == '*' {
				pat = pat[1:]
			}
			if pat == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if glob(pat, s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			pat, s = pat[1:], s[1:]
		case '\\':
			if len(pat) > 1 {
				pat = pat[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != pat[0] {
				return false
			}
			pat, s = pat[1:], s[1:]
		}
	}
	return s == ""
}
