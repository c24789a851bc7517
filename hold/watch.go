package hold

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

// Watch is what the relay follows of one client connection whose browser
// holds navigations: the client's sessions and the targets they are
// attached to, which pages the client creates and drives (its claims, for
// Fetch), and the relay's own commands on the connection. It hands the
// messages on to the way navigations are held now: in-stream (stream) or
// in the client's sessions (sess); in Fetch mode it holds navigation
// commands only while the relay's own connections are down. It is the
// Conn that BrowserHold.Conn returns.
//
// FromClient runs on the client's reader, Wants and FromBrowser on the
// browser's; state is guarded by mu.
type Watch struct {
	c       Client
	Browser *BrowserHold    // set once: the browser the connection is to
	ctx     context.Context // c's: ends when the connection does
	held    *sync.WaitGroup // c's: what the connection waits for before it ends
	log     *zerolog.Logger // c's

	// mu guards the fields below and nothing else (the ways held in the
	// connection, session and stream, guard their state with mutexes of
	// their own, of the same rank); the first of hold.go's lock order: it
	// may be held while fetch's, the flights' and the leaves' are taken,
	// never taken under any of them.
	mu       lockorder.Mutex[RankConn]
	way      via                    // guarded by mu; how navigations are held in this connection
	sessions map[string]SessionInfo // guarded by mu; "" is the connection's own session
	creates  map[CmdKey]func()      // guarded by mu; Target.createTarget commands not answered yet → what ends them (nil: nothing)
	own      map[int64]chan Reply   // guarded by mu; the relay's own commands on this connection
	nextOwn  int64                  // guarded by mu; negative: ids no client uses
	checks   map[CmdKey]navCheck    // guarded by mu; Page.navigate commands to check Fetch with
	departs  map[CmdKey]*Flight     // guarded by mu; Fetch.continueRequest commands (the relay's or a client's) of a held document whose answer tells its departure
	fetching map[string]bool        // guarded by mu; sessions where the client enabled Fetch itself → whether its patterns may pause a document before it leaves
	network  map[string]string      // guarded by mu; page sessions where the client enabled Network → their page
	gated    []gatedCmd             // guarded by mu; navigation commands waiting for Fetch to be back
	stream   ConnWay                // the in-stream strategy's state, nil until used
	sess     ConnWay                // the session strategy's state, nil until used
}

// Reply is the answer to one of the relay's own commands.
type Reply struct {
	Result json.RawMessage
	Err    *cdp.Error
}

// SessionInfo is a client session's target.
type SessionInfo struct {
	Target string
	Type   string // page, iframe, worker, tab…
}

// CmdKey names a command: its session and id.
type CmdKey struct {
	Session string
	ID      int64
}

// navCheck is a Page.navigate whose document the relay's own connection
// should see.
type navCheck struct {
	target string
	at     time.Time
}

// gatedCmd is a navigation command held until the relay can hold its
// navigation again.
type gatedCmd struct{ msg []byte }

// MaxTracked bounds each of the maps of a connection; a client that opens
// that many sessions or leaves that many commands unanswered has them
// forgotten.
const MaxTracked = 10_000

func newWatch(c Client, h *BrowserHold) *Watch {
	w := &Watch{
		c:        c,
		Browser:  h,
		ctx:      c.Context(),
		held:     c.Held(),
		log:      c.Log(),
		sessions: make(map[string]SessionInfo),
		creates:  make(map[CmdKey]func()),
		own:      make(map[int64]chan Reply),
		checks:   make(map[CmdKey]navCheck),
		departs:  make(map[CmdKey]*Flight),
		fetching: make(map[string]bool),
		network:  make(map[string]string),
	}
	if id, ok := strings.CutPrefix(c.Path(), "/devtools/page/"); ok {
		w.sessions[""] = SessionInfo{Target: id, Type: "page"}
		h.claims.Claim(id) // a client that opens a page's own socket drives it
	}
	w.way = h.via()
	return w
}

// Start arms the way navigations are held in this connection, before any
// client message is relayed (Conn.Start).
func (w *Watch) Start() {
	w.Browser.connsMu.Lock()
	w.Browser.conns[w] = struct{}{}
	w.Browser.connsMu.Unlock()
	w.switchTo(w.Browser.via())
}

// Ended lets go of what the connection left under way: pages it was
// creating, whose ids will never come (Conn.Ended).
func (w *Watch) Ended() {
	w.Browser.connsMu.Lock()
	delete(w.Browser.conns, w)
	w.Browser.connsMu.Unlock()
	w.mu.Lock()
	creates := w.creates
	w.creates = make(map[CmdKey]func())
	w.detachAllLocked()
	sess := w.sess
	w.mu.Unlock()
	for _, done := range creates {
		w.Browser.claims.Created("")
		if done != nil {
			done()
		}
	}
	if sess != nil {
		sess.Ended()
	}
}

// switchTo holds this connection's navigations another way.
func (w *Watch) switchTo(v via) {
	w.mu.Lock()
	w.way = v
	if v == viaSession && w.sess == nil {
		w.sess = w.Browser.Holder.Ways.Session(w)
	}
	if v == viaStream && w.stream == nil {
		w.stream = w.Browser.Holder.Ways.Stream(w)
	}
	sess := w.sess
	gated := w.gated
	w.gated = nil
	w.mu.Unlock()
	if v == viaSession {
		sess.Arm()
	}
	for _, g := range gated {
		w.Pass(g.msg)
	}
}

// via reports how this connection's navigations are held.
func (w *Watch) via() via {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.way
}

// ReadsAll reports whether the session and in-stream strategies read the
// browser's messages of every session now (Conn.ReadsAll).
func (w *Watch) ReadsAll() bool { return w.via() != viaFetch }

// isNavCommand reports whether a command navigates a page.
func isNavCommand(method []byte) bool {
	switch string(method) {
	case "Page.navigate", "Page.reload", "Page.navigateToHistoryEntry", "Target.createTarget":
		return true
	}
	return false
}

// FromClient looks at a command on its way to the browser, whose header
// is hd, and reports whether it took it: the relay then writes it (or its
// answer) itself, later or rewritten (Conn.FromClient).
func (w *Watch) FromClient(hd cdp.Header, msg []byte) bool {
	if !hd.HasID || !utf8.Valid(msg) {
		return false // the browser refuses all of it (-32700): nothing happens
	}
	session := string(hd.SessionID)
	key := CmdKey{session, hd.ID}
	w.mu.Lock()
	way, stream, sess := w.way, w.stream, w.sess
	var cover <-chan struct{}
	switch {
	case hd.IsMethod("Target.createTarget"):
		if len(w.creates) < MaxTracked {
			var done func()
			if f := w.Browser.fetch; way == viaFetch && f != nil && createsWithURL(hd.Params) {
				// Its first request leaves before any session can attach to
				// the new page: the relay's browser-level interception
				// pauses every document until the page is armed.
				cover, done = f.CreatingWithURL()
			}
			w.creates[key] = done
			w.Browser.claims.Creating()
		}
	case cdp.Drives(hd.Method):
		if si, ok := w.sessions[session]; ok && si.Type == "page" {
			w.Browser.claims.Claim(si.Target)
			if f := w.Browser.fetch; way == viaFetch && f != nil {
				// The page's interception is on before what the client
				// does there can navigate it.
				cover = f.Cover(si.Target, isNavCommand(hd.Method))
			}
		}
	}
	switch {
	case hd.IsMethod("Fetch.enable"):
		w.fetching[session] = cdp.FetchPausesDocuments(hd.Params)
	case hd.IsMethod("Fetch.disable"):
		delete(w.fetching, session)
	case hd.IsMethod("Network.enable"):
		if si, ok := w.sessions[session]; ok && si.Type == "page" {
			if _, on := w.network[session]; !on {
				w.network[session] = si.Target
				w.Browser.clientNetwork.add(si.Target, 1)
			}
		}
	case hd.IsMethod("Network.disable"):
		w.networkOffLocked(session)
	}
	if _, intercepts := w.fetching[session]; way == viaFetch && hd.IsMethod("Page.navigate") && !intercepts && len(w.checks) < MaxTracked {
		if si, ok := w.sessions[session]; ok && si.Type == "page" {
			if p, ok := cdp.NavigateParams(hd.Params); ok && strings.HasPrefix(p.URL, "http") &&
				(p.FrameID == "" || p.FrameID == si.Target) {
				w.checks[key] = navCheck{target: si.Target, at: time.Now()}
			}
		}
	}
	gate := (way == viaFetch || way == viaNone) && isNavCommand(hd.Method) && !w.Browser.IsArmed()
	if gate {
		w.gated = append(w.gated, gatedCmd{msg: bytes.Clone(msg)})
	}
	w.mu.Unlock()
	if cover != nil {
		w.awaitCover(cover)
	}
	if gate {
		w.awaitArmed()
		return true
	}
	switch way {
	case viaStream:
		return stream.FromClient(hd, msg)
	case viaSession:
		return sess.FromClient(hd, msg)
	}
	return false
}

// CoverWait bounds how long a client's command waits for the relay's
// interception of its page to be on.
const CoverWait = 5 * time.Second

// awaitCover waits, on the client's reader (so that the client's commands
// keep their order), until the relay's interception covers a page, within
// CoverWait and the life of the connection.
func (w *Watch) awaitCover(cover <-chan struct{}) {
	select {
	case <-cover:
		return
	default:
	}
	t := time.NewTimer(CoverWait)
	defer t.Stop()
	select {
	case <-cover:
	case <-t.C:
		w.log.Warn().Msg("the relay's interception of a page was not on in time: the client's command goes on")
	case <-w.ctx.Done():
	}
}

// createsWithURL reports whether Target.createTarget params open the new
// page on a URL that may reach the network.
func createsWithURL(params []byte) bool {
	p, ok := cdp.NavigateParams(params)
	return ok && p.URL != "" && p.URL != "about:blank"
}

// awaitArmed writes the gated navigation commands once navigations can be
// held again (or the connection ends).
func (w *Watch) awaitArmed() {
	w.mu.Lock()
	first := len(w.gated) == 1
	w.mu.Unlock()
	if !first {
		return // a goroutine waits already
	}
	w.log.Debug().Msg("navigation waits until the relay can hold it")
	w.held.Add(1)
	go func() {
		defer w.held.Done()
		select {
		case <-w.Browser.WhenArmed():
		case <-w.ctx.Done():
			return
		}
		w.mu.Lock()
		gated := w.gated
		w.gated = nil
		w.mu.Unlock()
		for _, g := range gated {
			w.Pass(g.msg)
		}
	}()
}

// Pass writes a client's message to the browser, as the relay would have.
func (w *Watch) Pass(msg []byte) {
	if err := w.c.ToBrowser(msg); err != nil {
		w.log.Debug().Err(err).Msg("held command not delivered")
	}
}

// ToClient writes a message to the client, as the relay would have.
func (w *Watch) ToClient(msg []byte) {
	if err := w.c.ToClient(msg); err != nil {
		w.log.Debug().Err(err).Msg("message for the client not delivered")
	}
}

// interesting reports, from its first bytes, whether a message from the
// browser may be one the watch follows, so that the rest of the stream is
// relayed without being scanned. Chromium writes an event's method and a
// reply's id first; anything else is scanned.
func (w *Watch) interesting(msg []byte) bool {
	if w.way != viaFetch && w.way != viaNone {
		return true // the other ways read events and answers of every session
	}
	switch {
	case bytes.HasPrefix(msg, []byte(`{"method":"Target.`)):
		return !w.clientAttachedChange(msg)
	case bytes.HasPrefix(msg, []byte(`{"method":"Network.`)):
		return w.Browser.fetch != nil && w.Browser.fetch.WantsEvent(msg)
	case bytes.HasPrefix(msg, []byte(`{"method":"`)):
		return false
	case bytes.HasPrefix(msg, []byte(`{"id":`)):
		return len(w.creates) > 0 || len(w.checks) > 0 || len(w.own) > 0
	}
	return true
}

// clientAttachedChange reports, from its first bytes, whether msg is a
// Target.targetCreated or Target.targetInfoChanged of a target one of the
// relay's clients is attached to: such a target is attached without the
// relay too, so FromBrowser has nothing to rewrite (FetchWay.Unattached), and every
// client hears of every change to every page.
func (w *Watch) clientAttachedChange(msg []byte) bool {
	id, ok := cdp.ChangedTargetID(msg)
	return ok && w.Browser.attachedClients.countOf(id) > 0
}

// Wants reports, from its first bytes, whether FromBrowser needs to see
// a message from the browser (Conn.Wants).
func (w *Watch) Wants(msg []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.interesting(msg)
}

// FromBrowser looks at a message on its way to the client, whose header
// is hd, and reports whether to drop it: an answer to the relay's own
// command, or an event the client did not ask for (Conn.FromBrowser).
func (w *Watch) FromBrowser(hd cdp.Header, msg []byte) bool {
	session := string(hd.SessionID)
	if hd.HasID {
		return w.answered(CmdKey{session, hd.ID}, msg)
	}
	switch string(hd.Method) {
	case "Network.requestWillBeSentExtraInfo", "Network.requestWillBeSent", "Network.responseReceived", "Network.loadingFailed":
		if f := w.Browser.fetch; f != nil {
			page := ""
			if hd.IsMethod("Network.loadingFailed") {
				// It names no frame: a request the pages connection
				// follows by its frame is known by the session's page.
				w.mu.Lock()
				page = w.sessions[session].Target
				w.mu.Unlock()
			}
			f.ClientEvent(hd.Method, hd.Params, page, time.Now())
		}
	case "Target.attachedToTarget":
		if ti, ok := cdp.ReadTargetInfo(hd.Params); ok {
			if sid, _, ok := cdp.AttachedTarget(hd.Params); ok {
				w.mu.Lock()
				if len(w.sessions) >= MaxTracked {
					w.detachAllLocked()
				}
				if _, known := w.sessions[sid]; !known {
					w.Browser.attachedClients.add(ti.TargetID, 1)
				}
				w.sessions[sid] = SessionInfo{Target: ti.TargetID, Type: ti.Type}
				w.mu.Unlock()
			}
		}
	case "Target.detachedFromTarget":
		if sid, ok := cdp.DetachedSession(hd.Params); ok {
			w.mu.Lock()
			if si, ok := w.sessions[sid]; ok {
				w.Browser.attachedClients.add(si.Target, -1)
			}
			delete(w.sessions, sid)
			delete(w.fetching, sid)
			w.networkOffLocked(sid)
			w.mu.Unlock()
		}
	case "Target.targetCreated", "Target.targetInfoChanged":
		if f := w.Browser.fetch; f != nil {
			if out, ok := f.Unattached(hd.Params, msg); ok {
				w.ToClient(out)
				return true
			}
		}
	}
	w.mu.Lock()
	way, stream, sess := w.way, w.stream, w.sess
	w.mu.Unlock()
	switch way {
	case viaStream:
		return stream.FromBrowser(hd, msg)
	case viaSession:
		return sess.FromBrowser(hd, msg)
	}
	return false
}

// detachAllLocked forgets every session of the connection. Callers hold mu.
func (w *Watch) detachAllLocked() {
	for _, si := range w.sessions {
		w.Browser.attachedClients.add(si.Target, -1)
	}
	clear(w.sessions)
	for session := range w.network {
		w.networkOffLocked(session)
	}
}

// networkOffLocked notes that the client's Network events of a page
// session stopped (Network.disable, the session or the connection gone):
// when it was the last client session to have them on the page, the
// relay reads the page's requests it follows in its own session from now
// on (FetchWay.ClientNetworkOff). Callers hold mu.
func (w *Watch) networkOffLocked(session string) {
	target, on := w.network[session]
	if !on {
		return
	}
	delete(w.network, session)
	if w.Browser.clientNetwork.add(target, -1) == 0 {
		if f := w.Browser.fetch; f != nil {
			go f.ClientNetworkOff(target)
		}
	}
}

// answered follows the answer to a command; it reports true for the
// answer to one of the relay's own, which the client never sees.
func (w *Watch) answered(key CmdKey, msg []byte) bool {
	w.mu.Lock()
	ch, own := w.own[key.ID]
	if own && key.ID < 0 {
		delete(w.own, key.ID)
	}
	done, create := w.creates[key]
	delete(w.creates, key)
	check, checking := w.checks[key]
	delete(w.checks, key)
	dep := w.departs[key]
	delete(w.departs, key)
	w.mu.Unlock()
	if dep != nil {
		if _, e, _ := cdp.ReadReply(msg); e == nil {
			dep.Followed().Departed(time.Now(), true)
		}
	}
	if own && key.ID < 0 {
		if ch != nil {
			result, e, _ := cdp.ReadReply(msg)
			ch <- Reply{Result: result, Err: e}
		}
		return true
	}
	if create {
		var r struct {
			TargetID string `json:"targetId"`
		}
		result, _, _ := cdp.ReadReply(msg)
		json.Unmarshal(result, &r)
		w.Browser.claims.Created(r.TargetID)
		if done != nil {
			w.Browser.coveredThen(r.TargetID, done)
		}
	}
	if f := w.Browser.fetch; checking && f != nil {
		f.CheckNavigate(check.target, check.at, msg)
	}
	return false
}

// Call sends one of the relay's own commands on this connection and waits
// for its answer, up to ctx. It must not run on the browser's reader.
func (w *Watch) Call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	ch := make(chan Reply, 1)
	id, err := w.Send(session, method, params, ch)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, errors.New("hold: " + method + ": " + r.Err.Message)
		}
		return r.Result, nil
	case <-ctx.Done():
		w.mu.Lock()
		delete(w.own, id)
		w.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Send writes one of the relay's own commands; its answer goes to ch, or
// is dropped when ch is nil.
func (w *Watch) Send(session, method string, params any, ch chan Reply) (int64, error) {
	return w.sendOwn(session, method, params, ch, nil)
}

// SendDeparting is send for a command whose answer tells when the request
// of fl's navigation left (departs); a nil fl follows nothing.
func (w *Watch) SendDeparting(session, method string, params any, fl *Flight) {
	w.sendOwn(session, method, params, nil, fl)
}

func (w *Watch) sendOwn(session, method string, params any, ch chan Reply, fl *Flight) (int64, error) {
	w.mu.Lock()
	w.nextOwn--
	id := w.nextOwn
	if len(w.own) >= MaxTracked {
		clear(w.own)
	}
	w.own[id] = ch
	if fl != nil && len(w.departs) < MaxTracked {
		w.departs[CmdKey{session, id}] = fl
	}
	w.mu.Unlock()
	msg, err := cdp.Command(id, method, session, params)
	if err == nil {
		err = w.c.ToBrowser(msg)
	}
	if err != nil {
		w.mu.Lock()
		delete(w.own, id)
		delete(w.departs, CmdKey{session, id})
		w.mu.Unlock()
		return 0, err
	}
	return id, nil
}

// Answer writes the relay's own Answer to a client command it took.
func (w *Watch) Answer(session string, id int64, result string) {
	msg, _ := cdp.Reply(id, session, json.RawMessage(result), nil)
	w.ToClient(msg)
}

// PageOf returns the page target of a session, "" when the session is not
// known to be a page's.
func (w *Watch) PageOf(session string) (target string, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	si, ok := w.sessions[session]
	if !ok {
		return "", false
	}
	if si.Type != "page" {
		return "", true
	}
	return si.Target, true
}

// NavLog is the log for the debug lines of a navigation in session, naming
// its page and the session as the browser named them when it attached the
// client (an id a client made up is not repeated).
func (w *Watch) NavLog(session string) *zerolog.Logger {
	if w.log.GetLevel() > zerolog.DebugLevel {
		return w.log
	}
	w.mu.Lock()
	si, ok := w.sessions[session]
	w.mu.Unlock()
	if !ok {
		return w.log
	}
	return PageLog(w.log, si.Target, session)
}

// The ways held in a client connection (session, stream) keep their
// state under locks of their own; what the watch follows they read
// through the methods below, each of which takes the watch's lock.

// Core is what the ways held in the connection ask of holding.
func (w *Watch) Core() Core { return w.Browser }

// Context ends when the connection does: every hold of it gives up.
func (w *Watch) Context() context.Context { return w.ctx }

// Held counts the work of holding on this connection (Client.Held).
func (w *Watch) Held() *sync.WaitGroup { return w.held }

// Log is the connection's logger.
func (w *Watch) Log() *zerolog.Logger { return w.log }

// Session is what the client's session is attached to.
func (w *Watch) Session(session string) (SessionInfo, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	si, ok := w.sessions[session]
	return si, ok
}

// PageSessions lists the client's page sessions.
func (w *Watch) PageSessions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for id, si := range w.sessions {
		if si.Type == "page" {
			ids = append(ids, id)
		}
	}
	return ids
}

// Departs follows the answer to a client's Fetch.continueRequest (key)
// of fl's held document: it tells when the request left. Call it before
// the command is written on.
func (w *Watch) Departs(key CmdKey, fl *Flight) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.departs) < MaxTracked {
		w.departs[key] = fl
	}
}

// Fetching reports whether the client enabled Fetch in session itself,
// and whether its patterns may pause a document before it leaves.
func (w *Watch) Fetching(session string) (pauses, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	pauses, on = w.fetching[session]
	return pauses, on
}

// Network reports whether the client enabled Network events in its page
// session.
func (w *Watch) Network(session string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, on := w.network[session]
	return on
}
