// Package stream holds the commands that navigate in each client's
// stream: the last resort, when no interception can hold (streamHold
// says what it sees and what it does not). It is one of the ways of
// package hold (hold.Ways.Stream).
package stream

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/pace"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// streamHold is the last resort, for browsers where neither the relay's
// own connection nor the client's sessions can pause a document request:
// it holds the commands that navigate (Page.navigate, Page.reload,
// Page.navigateToHistoryEntry, Target.createTarget) of one client
// connection until their slot, and reads the answers from the Network
// events of main-frame documents that the client enabled itself. It sees
// nothing else: a link click, a form submission or a redirect goes unheld,
// and is counted as such when the client's Network events show it. A
// held navigation's departure is when those events show its document
// request started (Network.requestWillBeSent): a late one moves its
// bucket's schedule, and the next is let go only once it started (package
// pace), so that the site sees the spacing however long the browser takes
// to start a navigation it was sent. What the request waits for after
// that (Chromium's connection for it: six per host, shared with a busy
// crawl's subresources) the relay does not see in time: Chromium's
// Network.requestWillBeSentExtraInfo, sent as the request is, reaches the
// client after the document's answer as often as not. A client that
// intercepts its own requests (Fetch on in its session, as Puppeteer's
// setRequestInterception and Playwright's page.route do) gets a document
// paused after it started, and may sit on it: where the client's
// patterns may pause documents, the departure is when the client lets it
// go (Fetch.continueRequest), or, where it did not pause this one after
// all (its URL pattern did not match), unknown until its answer.
type streamHold struct {
	w    *hold.Watch
	core hold.Core // what it asks of holding

	// mu guards the fields below. It takes no lock of the Watch's while
	// held; in hold.go's lock order it stands where Watch.mu does, before
	// Flight.mu (a flight ended under it).
	mu     lockorder.Mutex[hold.RankConn]
	queues map[string][]*heldCmd   // guarded by mu; session → its navigation commands, the first one booked
	docs   map[string]streamDoc    // guarded by mu; session+" "+requestId → a main-frame document under way
	let    map[string][]letNav     // guarded by mu; host → held navigations to it let go, not seen yet
	urls   map[string]string       // guarded by mu; session → URL its main frame last committed
	last   map[string]*hold.Flight // guarded by mu; session → its last navigation let go
	// paused are the main-frame documents the client's own interception
	// paused before they left: session+" "+its Fetch requestId → the
	// document's (session+" "+its network requestId, a key of docs).
	// Guarded by mu.
	paused map[string]string
}

// streamDoc is a main-frame document under way, seen in the client's
// Network events.
type streamDoc struct {
	host string
	fl   *hold.Flight // nil for a redirect to another host, which is booked but not held
}

// letNav is a held navigation let go, whose document is expected.
type letNav struct {
	at time.Time
	fl *hold.Flight
}

// heldCmd is a navigation command waiting for its slot.
type heldCmd struct {
	id      int64
	method  string
	session string
	msg     []byte
	url     string // "" when the browser must be asked (a reload, a history entry)
	entry   int64  // the history entry, -1 for none
	ctx     context.Context
	cancel  context.CancelFunc
	fl      *hold.Flight // the navigation, from its hold to its answer
	waiting bool         // guarded by the streamHold's mu; booked, for a slot still to come
}

// New is the in-stream way of holding the navigations of one client
// connection (hold.Ways.Stream).
func New(w *hold.Watch) hold.ConnWay {
	return &streamHold{
		w:      w,
		core:   w.Core(),
		queues: make(map[string][]*heldCmd),
		docs:   make(map[string]streamDoc),
		let:    make(map[string][]letNav),
		urls:   make(map[string]string),
		last:   make(map[string]*hold.Flight),
		paused: make(map[string]string),
	}
}

// letWindow is how long after a held navigation was let go its document
// request is expected.
const letWindow = 30 * time.Second

// lookupWait bounds asking the browser which URL a reload or a history
// entry goes to.
const lookupWait = 5 * time.Second

// Arm does nothing: commands are held as they come (hold.ConnWay).
func (s *streamHold) Arm() {}

// Ended does nothing: the connection's end ends every command it holds
// (hold.ConnWay).
func (s *streamHold) Ended() {}

// FromClient is fromClient, with the header by value (hold.ConnWay): a pointer
// to the watch's would escape through the interface, one allocation
// more for every message the relay scans.
func (s *streamHold) FromClient(hd cdp.Header, msg []byte) bool { return s.fromClient(&hd, msg) }

// fromClient holds a navigation command until its slot; it reports true
// when it took the command.
func (s *streamHold) fromClient(hd *cdp.Header, msg []byte) bool {
	w := s.w
	session := string(hd.SessionID)
	method := string(hd.Method)
	var rawURL string
	var entry int64 = -1
	switch method {
	case "Page.navigate":
		p, ok := cdp.NavigateParams(hd.Params)
		if !ok {
			return false
		}
		target, known := w.PageOf(session)
		if known && target == "" || p.FrameID != "" && known && p.FrameID != target {
			return false // not a page's main frame: an iframe, a worker
		}
		rawURL = p.URL
		s.mu.Lock()
		s.setURL(session, p.URL)
		s.mu.Unlock()
	case "Page.reload":
		if target, known := w.PageOf(session); known && target == "" {
			return false
		}
		s.mu.Lock()
		rawURL = s.urls[session] // where its main frame is, as last seen; asked for when unknown
		s.mu.Unlock()
	case "Page.navigateToHistoryEntry":
		if target, known := w.PageOf(session); known && target == "" {
			return false
		}
		var p struct {
			EntryID *int64 `json:"entryId"`
		}
		if json.Unmarshal(hd.Params, &p) != nil || p.EntryID == nil {
			return false // the browser refuses it
		}
		entry = *p.EntryID
	case "Target.createTarget":
		p, ok := cdp.NavigateParams(hd.Params)
		if !ok {
			return false
		}
		rawURL = p.URL
	case "Fetch.continueRequest", "Fetch.fulfillRequest", "Fetch.failRequest":
		s.clientLets(session, method, hd.Params)
		return false
	default:
		return false
	}
	if rawURL != "" {
		s.mu.Lock()
		queued := len(s.queues[session]) > 0
		s.mu.Unlock()
		host, ok := limiter.Key(rawURL)
		if (!ok || s.core.Exempt(host)) && (!queued || method == "Target.createTarget") {
			s.core.NotBooked(ok)
			return false // nothing to hold, nothing to keep in order with
		}
	}
	cmd := &heldCmd{id: hd.ID, method: method, session: session, msg: append([]byte(nil), msg...), url: rawURL, entry: entry}
	cmd.ctx, cmd.cancel = context.WithCancel(w.Context())
	cmd.fl = s.core.NewFlight(w.Context())
	if method == "Target.createTarget" {
		s.start(cmd) // opens a page of its own: nothing to keep in order with
		return true
	}
	s.mu.Lock()
	q := s.queues[session]
	q = append(q, cmd)
	var overtaken []*heldCmd
	if q[0].waiting {
		// Every command before the new one waits for a slot the new one
		// makes pointless: answer them as the browser answers a
		// navigation a later one interrupts. Written later, they would
		// take the page away from where the client has since moved it.
		overtaken, q = q[:len(q)-1], q[len(q)-1:]
	}
	s.queues[session] = q
	head := len(q) == 1
	s.mu.Unlock()
	for _, old := range overtaken {
		s.supersede(old)
	}
	if head {
		s.start(cmd)
	}
	return true
}

// start books a held command's slot (finding out first where a reload or
// history navigation goes) and lets it go when the slot comes.
func (s *streamHold) start(cmd *heldCmd) {
	w := s.w
	w.Held().Add(1)
	go func() {
		defer w.Held().Done()
		defer cmd.cancel()
		u := cmd.url
		if u == "" {
			if u = s.lookup(cmd.ctx, cmd.session, cmd.entry); cmd.ctx.Err() != nil {
				return // overtaken, or the connection ended
			}
		}
		host, ok := limiter.Key(u)
		if !ok || s.core.Exempt(host) {
			s.core.NotBooked(ok)
			s.release(cmd, "")
			return
		}
		// Its departure is followed (package pace) where the client's
		// Network events show it: the browser sends a navigation
		// command's request when it gets to it, tens or hundreds of
		// milliseconds after the command when busy, and the next one is
		// let go no sooner than that moves it.
		events := w.Network(cmd.session)
		done := make(chan struct{})
		s.core.Hold(cmd.ctx, hold.Request{Flight: cmd.fl, Host: host, URL: u, Log: w.NavLog(cmd.session), Depart: events, Refusable: true},
			cmdHold{s: s, cmd: cmd, host: host, over: done})
		<-done
	}()
}

// cmdHold is a navigation command held in the client's stream.
type cmdHold struct {
	hold.NoHolding
	s    *streamHold
	cmd  *heldCmd
	host string
	over chan struct{} // closed when the hold is over
}

// Booked follows the command's departure (without the client's Network
// events, nav is nil), counting the browser's whole lag as late: it
// starts the navigation when it gets to the command. A command that
// waits makes the ones queued before it in its session pointless.
func (c cmdHold) Booked(start time.Time, n *pace.Nav) {
	if n != nil {
		n.WholeLag()
		c.cmd.fl.Follow(n)
	}
	if time.Until(start) <= 0 {
		return
	}
	s := c.s
	s.mu.Lock()
	c.cmd.waiting = true
	q := s.queues[c.cmd.session]
	behind := len(q) > 1 && q[0] == c.cmd
	s.mu.Unlock()
	if behind {
		c.s.overtake(c.cmd.session) // a later navigation arrived while this one was booked
	}
}

func (c cmdHold) Refused(r refusal.Reason) { c.s.refuse(c.cmd, r) }
func (c cmdHold) Release()                 { c.s.release(c.cmd, c.host) }
func (c cmdHold) Done()                    { close(c.over) }

// overtake answers every queued command of a session but the last, which
// it starts.
func (s *streamHold) overtake(session string) {
	s.mu.Lock()
	q := s.queues[session]
	if len(q) < 2 {
		s.mu.Unlock()
		return
	}
	overtaken, last := q[:len(q)-1], q[len(q)-1]
	s.queues[session] = []*heldCmd{last}
	s.mu.Unlock()
	for _, old := range overtaken {
		s.supersede(old)
	}
	s.start(last)
}

// supersede answers a held navigation command that a later one on the same
// session overtook, as the browser answers a navigation a later one
// interrupts, and drops it.
func (s *streamHold) supersede(old *heldCmd) {
	old.cancel()
	old.fl.End()
	result := "{}"
	if old.method == "Page.navigate" {
		target, _ := s.w.PageOf(old.session)
		f, _ := json.Marshal(target)
		result = `{"frameId":` + string(f) + `,"errorText":"net::ERR_ABORTED"}`
	}
	s.w.Answer(old.session, old.id, result)
}

// release writes a held command to the browser, unless a later one
// overtook it, expects its document, and starts the session's next one.
func (s *streamHold) release(cmd *heldCmd, host string) {
	w := s.w
	s.mu.Lock()
	next, ok := s.dequeueLocked(cmd)
	if !ok {
		s.mu.Unlock()
		return // overtaken, and answered already
	}
	var ended []*hold.Flight
	if host == "" {
		ended = append(ended, cmd.fl) // nothing held, nothing to follow
	} else {
		if len(s.let) >= hold.MaxTracked {
			for _, ls := range s.let {
				for _, l := range ls {
					ended = append(ended, l.fl)
				}
			}
			clear(s.let)
		}
		now := time.Now()
		lets := s.let[host]
		for len(lets) > 0 && now.Sub(lets[0].at) > letWindow {
			ended = append(ended, lets[0].fl) // never seen: the client did not enable Network
			lets = lets[1:]
		}
		s.let[host] = append(lets, letNav{at: now, fl: cmd.fl})
		if cmd.method != "Target.createTarget" {
			// The page's last navigation is replaced by this one.
			if prev := s.last[cmd.session]; prev != nil {
				ended = append(ended, prev)
			}
			if len(s.last) >= hold.MaxTracked {
				clear(s.last)
			}
			s.last[cmd.session] = cmd.fl
		}
	}
	s.mu.Unlock()
	for _, fl := range ended {
		fl.End()
	}
	w.Pass(cmd.msg)
	if next != nil {
		s.start(next)
	}
}

// dequeueLocked takes cmd off its session's queue and returns the
// command after it; false when cmd is not at its head (overtaken, and
// answered already). Callers hold s.mu.
func (s *streamHold) dequeueLocked(cmd *heldCmd) (next *heldCmd, ok bool) {
	if cmd.method == "Target.createTarget" {
		return nil, true // in no queue
	}
	q := s.queues[cmd.session]
	if len(q) == 0 || q[0] != cmd {
		return nil, false
	}
	q = q[1:]
	if len(q) == 0 {
		delete(s.queues, cmd.session)
	} else {
		s.queues[cmd.session], next = q, q[0]
	}
	return next, true
}

// refuse answers a held command whose navigation the Limiter refused,
// without writing it to the browser, and starts the session's next one.
// A Page.navigate gets what Chromium answers for a navigation blocked in
// it, a result whose errorText is net::ERR_BLOCKED_BY_CLIENT (Puppeteer's
// goto throws it); a reload, history navigation or Target.createTarget,
// whose results carry no error, get a CDP error with that message.
func (s *streamHold) refuse(cmd *heldCmd, r refusal.Reason) {
	w := s.w
	s.mu.Lock()
	next, ok := s.dequeueLocked(cmd)
	s.mu.Unlock()
	if !ok {
		return
	}
	cmd.fl.End()
	if cmd.method == "Page.navigate" {
		target, _ := w.PageOf(cmd.session)
		f, _ := json.Marshal(target)
		e, _ := json.Marshal(r.ErrorText(time.Now()))
		w.Answer(cmd.session, cmd.id, `{"frameId":`+string(f)+`,"errorText":`+string(e)+`}`)
	} else {
		w.AnswerError(cmd.session, cmd.id, r.ErrorText(time.Now()))
	}
	if next != nil {
		s.start(next)
	}
}

// lookup asks the browser where a reload (entry < 0) or a history entry
// goes: the URL of the current or the given entry of the page's history.
func (s *streamHold) lookup(ctx context.Context, session string, entry int64) string {
	ctx, cancel := context.WithTimeout(ctx, lookupWait)
	defer cancel()
	result, err := s.w.Call(ctx, session, "Page.getNavigationHistory", struct{}{})
	var h struct {
		CurrentIndex int `json:"currentIndex"`
		Entries      []struct {
			ID  int64  `json:"id"`
			URL string `json:"url"`
		} `json:"entries"`
	}
	if err == nil && json.Unmarshal(result, &h) == nil {
		for i, e := range h.Entries {
			if entry < 0 && i == h.CurrentIndex || entry >= 0 && e.ID == entry {
				return e.URL
			}
		}
	}
	return ""
}

// FromBrowser is fromBrowser, with the header by value (hold.ConnWay): a pointer
// to the watch's would escape through the interface, one allocation
// more for every message the relay scans.
func (s *streamHold) FromBrowser(hd cdp.Header, msg []byte) bool { return s.fromBrowser(&hd, msg) }

// fromBrowser follows where main frames navigate and how their documents
// end; it never drops anything.
func (s *streamHold) fromBrowser(hd *cdp.Header, msg []byte) bool {
	w := s.w
	session := string(hd.SessionID)
	switch string(hd.Method) {
	case "Page.frameNavigated":
		var p struct {
			Frame struct {
				ID       string `json:"id"`
				ParentID string `json:"parentId"`
				URL      string `json:"url"`
			} `json:"frame"`
		}
		if json.Unmarshal(hd.Params, &p) == nil && p.Frame.ParentID == "" && s.mainFrame(session, p.Frame.ID) {
			s.mu.Lock()
			s.setURL(session, p.Frame.URL)
			s.mu.Unlock()
		}
	case "Network.requestWillBeSent":
		ev, ok := cdp.RequestWillBeSent(hd.Params, s.core.AnswerHeaders())
		if !ok || ev.Type != "Document" || !s.mainFrame(session, ev.FrameID) {
			return false
		}
		key := session + " " + ev.RequestID
		s.mu.Lock()
		prev, had := s.docs[key]
		s.mu.Unlock()
		if target, known := w.PageOf(session); !had && known && target != "" && !s.core.Claimed(target) {
			// Another's page (another relay's client's, a direct
			// client's), which a client of this relay attached to as
			// Playwright attaches to every page: not this relay's to
			// hold, count or hear the answer of.
			return false
		}
		if ev.Redirect != nil && had {
			s.core.Observe(prev.fl, prev.host, *ev.Redirect, w.NavLog(session))
		}
		host, ok := limiter.Key(ev.URL)
		if !ok || s.core.Exempt(host) {
			s.mu.Lock()
			delete(s.docs, key)
			s.mu.Unlock()
			prev.fl.End()
			return false
		}
		doc := streamDoc{host: host}
		switch {
		case ev.Redirect != nil && host != prev.host:
			// The browser follows redirects by itself: book the new host so
			// its schedule counts the request, though it cannot be held (nor
			// take a place in flight).
			prev.fl.End()
			go s.core.Book(w.Context(), host, ev.URL, w.NavLog(session))
		case ev.Redirect != nil:
			doc.fl = prev.fl
		default:
			var expected bool
			if doc.fl, expected = s.expected(host); !expected {
				s.core.Unheld(1, "a navigation the relay cannot hold in the client stream (a link click, a form, a script)")
			}
			// The browser tells of the request as it starts it, unless
			// the client's own interception may pause it: then it
			// leaves when the client lets it go (clientLets).
			pauses, _ := w.Fetching(session)
			if !pauses {
				doc.fl.Followed().Departed(time.Now(), true)
			}
		}
		s.mu.Lock()
		if len(s.docs) >= hold.MaxTracked {
			for _, d := range s.docs {
				d.fl.End()
			}
			clear(s.docs)
		}
		s.docs[key] = doc
		s.mu.Unlock()
	case "Fetch.requestPaused":
		ev, ok := cdp.ReadRequestPaused(hd.Params)
		if !ok || ev.ResourceType != "Document" || ev.NetworkID == "" || ev.ResponseStatusCode != 0 || ev.ResponseErrorReason != "" {
			return false // not a document the client holds before it leaves
		}
		s.mu.Lock()
		if len(s.paused) >= hold.MaxTracked {
			clear(s.paused)
		}
		s.paused[session+" "+ev.RequestID] = session + " " + ev.NetworkID
		s.mu.Unlock()
	case "Network.responseReceived", "Network.loadingFailed":
		ev, ok := cdp.DocumentAnswer(hd.Method, hd.Params, s.core.AnswerHeaders())
		if !ok {
			return false
		}
		key := session + " " + ev.RequestID
		s.mu.Lock()
		doc, tracked := s.docs[key]
		delete(s.docs, key)
		s.mu.Unlock()
		if tracked {
			s.core.Observe(doc.fl, doc.host, ev.Outcome, w.NavLog(session))
			doc.fl.End()
		}
	case "Target.detachedFromTarget":
		if sid, ok := cdp.DetachedSession(hd.Params); ok {
			s.mu.Lock()
			delete(s.urls, sid)
			last := s.last[sid]
			delete(s.last, sid)
			s.mu.Unlock()
			last.End() // the page went, or the client left it
		}
	}
	return false
}

// clientLets reads a client's answer to a request its own interception
// paused: a main-frame document the relay let go and the client continues
// leaves now; one the client answers or fails itself never reaches the
// site, and its flight ends with its answer or failure.
func (s *streamHold) clientLets(session, method string, params []byte) {
	var p struct {
		RequestID string `json:"requestId"`
	}
	if json.Unmarshal(params, &p) != nil {
		return // the browser refuses it
	}
	key := session + " " + p.RequestID
	s.mu.Lock()
	doc, ok := s.paused[key]
	delete(s.paused, key)
	fl := s.docs[doc].fl
	s.mu.Unlock()
	if ok && method == "Fetch.continueRequest" {
		fl.Followed().Departed(time.Now(), true)
	}
}

// setURL notes where a session's page is. Callers hold s.mu.
func (s *streamHold) setURL(session, u string) {
	if len(s.urls) >= hold.MaxTracked {
		clear(s.urls)
	}
	s.urls[session] = u
}

// expected reports whether a document request to host is one of a
// navigation the relay held and let go, marks it seen and returns that
// navigation's flight.
func (s *streamHold) expected(host string) (*hold.Flight, bool) {
	s.mu.Lock()
	lets := s.let[host]
	var aged []*hold.Flight
	for len(lets) > 0 && time.Since(lets[0].at) > letWindow {
		aged = append(aged, lets[0].fl)
		lets = lets[1:]
	}
	var fl *hold.Flight
	ok := len(lets) > 0
	if ok {
		fl, lets = lets[0].fl, lets[1:]
	}
	if len(lets) == 0 {
		delete(s.let, host)
	} else {
		s.let[host] = lets
	}
	s.mu.Unlock()
	for _, a := range aged {
		a.End()
	}
	return fl, ok
}

// mainFrame reports whether frame is the main frame of session's page;
// when the session is unknown it gives the frame the benefit of the doubt.
func (s *streamHold) mainFrame(session, frame string) bool {
	target, known := s.w.PageOf(session)
	return !known || target == frame
}
