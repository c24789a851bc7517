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
)

// watch is what the relay follows of one client connection whose browser
// holds navigations: the client's sessions and the targets they are
// attached to, which pages the client creates and drives (its claims, for
// Fetch), and the relay's own commands on the connection. It hands the
// messages on to the way navigations are held now: in-stream (stream) or
// in the client's sessions (sess); in Fetch mode it holds navigation
// commands only while the relay's own connections are down. It is the
// Conn that browserHold.Conn returns.
//
// FromClient runs on the client's reader, Wants and FromBrowser on the
// browser's; state is guarded by mu.
type watch struct {
	c    Client
	h    *browserHold
	ctx  context.Context // c's: ends when the connection does
	held *sync.WaitGroup // c's: what the connection waits for before it ends
	log  *zerolog.Logger // c's

	// mu guards the fields below; the first of hold.go's lock order: it
	// may be held while fetchHold's, the connections', the flights' and
	// the leaves' are taken, never taken under any of them.
	mu       sync.Mutex
	way      via                    // guarded by mu; how navigations are held in this connection
	sessions map[string]sessionInfo // guarded by mu; "" is the connection's own session
	creates  map[cmdKey]func()      // guarded by mu; Target.createTarget commands not answered yet → what ends them (nil: nothing)
	own      map[int64]chan reply   // guarded by mu; the relay's own commands on this connection
	nextOwn  int64                  // guarded by mu; negative: ids no client uses
	checks   map[cmdKey]navCheck    // guarded by mu; Page.navigate commands to check Fetch with
	departs  map[cmdKey]*flight     // guarded by mu; Fetch.continueRequest commands (the relay's or a client's) of a held document whose answer tells its departure
	fetching map[string]bool        // guarded by mu; sessions where the client enabled Fetch itself → whether its patterns may pause a document before it leaves
	network  map[string]string      // guarded by mu; page sessions where the client enabled Network → their page
	gated    []gatedCmd             // guarded by mu; navigation commands waiting for Fetch to be back
	stream   *streamHold            // the in-stream strategy's state, nil until used
	sess     *sessionHold           // the session strategy's state, nil until used
	misses   int                    // guarded by mu; navigations Fetch should have seen and did not
}

// sessionInfo is a client session's target.
type sessionInfo struct {
	target string
	typ    string // page, iframe, worker, tab…
}

// cmdKey names a command: its session and id.
type cmdKey struct {
	session string
	id      int64
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

// maxTracked bounds each of the maps of a connection; a client that opens
// that many sessions or leaves that many commands unanswered has them
// forgotten.
const maxTracked = 10_000

func newWatch(c Client, h *browserHold) *watch {
	w := &watch{
		c:        c,
		h:        h,
		ctx:      c.Context(),
		held:     c.Held(),
		log:      c.Log(),
		sessions: make(map[string]sessionInfo),
		creates:  make(map[cmdKey]func()),
		own:      make(map[int64]chan reply),
		checks:   make(map[cmdKey]navCheck),
		departs:  make(map[cmdKey]*flight),
		fetching: make(map[string]bool),
		network:  make(map[string]string),
	}
	if id, ok := strings.CutPrefix(c.Path(), "/devtools/page/"); ok {
		w.sessions[""] = sessionInfo{target: id, typ: "page"}
		h.claims.claim(id) // a client that opens a page's own socket drives it
	}
	w.way = h.via()
	return w
}

// Start arms the way navigations are held in this connection, before any
// client message is relayed (Conn.Start).
func (w *watch) Start() {
	w.h.connsMu.Lock()
	w.h.conns[w] = struct{}{}
	w.h.connsMu.Unlock()
	w.switchTo(w.h.via())
}

// Ended lets go of what the connection left under way: pages it was
// creating, whose ids will never come (Conn.Ended).
func (w *watch) Ended() {
	w.h.connsMu.Lock()
	delete(w.h.conns, w)
	w.h.connsMu.Unlock()
	w.mu.Lock()
	creates := w.creates
	w.creates = make(map[cmdKey]func())
	w.detachAllLocked()
	w.mu.Unlock()
	for _, done := range creates {
		w.h.claims.created("")
		if done != nil {
			done()
		}
	}
	if w.sess != nil {
		w.sess.ended()
	}
}

// switchTo holds this connection's navigations another way.
func (w *watch) switchTo(v via) {
	w.mu.Lock()
	w.way = v
	if v == viaSession && w.sess == nil {
		w.sess = newSessionHold(w)
	}
	if v == viaStream && w.stream == nil {
		w.stream = newStreamHold(w)
	}
	sess := w.sess
	gated := w.gated
	w.gated = nil
	w.mu.Unlock()
	if v == viaSession {
		sess.armAll()
	}
	for _, g := range gated {
		w.pass(g.msg)
	}
}

// via reports how this connection's navigations are held.
func (w *watch) via() via {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.way
}

// ReadsAll reports whether the session and in-stream strategies read the
// browser's messages of every session now (Conn.ReadsAll).
func (w *watch) ReadsAll() bool { return w.via() != viaFetch }

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
func (w *watch) FromClient(hd cdp.Header, msg []byte) bool {
	if !hd.HasID || !utf8.Valid(msg) {
		return false // the browser refuses all of it (-32700): nothing happens
	}
	session := string(hd.SessionID)
	key := cmdKey{session, hd.ID}
	w.mu.Lock()
	way := w.way
	var cover <-chan struct{}
	switch {
	case hd.IsMethod("Target.createTarget"):
		if len(w.creates) < maxTracked {
			var done func()
			if f := w.h.fetch; way == viaFetch && f != nil && createsWithURL(hd.Params) {
				// Its first request leaves before any session can attach to
				// the new page: the relay's browser-level interception
				// pauses every document until the page is armed.
				cover, done = f.creatingWithURL()
			}
			w.creates[key] = done
			w.h.claims.creating()
		}
	case cdp.Drives(hd.Method):
		if si, ok := w.sessions[session]; ok && si.typ == "page" {
			w.h.claims.claim(si.target)
			if f := w.h.fetch; way == viaFetch && f != nil {
				// The page's interception is on before what the client
				// does there can navigate it.
				cover = f.cover(si.target, isNavCommand(hd.Method))
			}
		}
	}
	switch {
	case hd.IsMethod("Fetch.enable"):
		w.fetching[session] = cdp.FetchPausesDocuments(hd.Params)
	case hd.IsMethod("Fetch.disable"):
		delete(w.fetching, session)
	case hd.IsMethod("Network.enable"):
		if si, ok := w.sessions[session]; ok && si.typ == "page" {
			if _, on := w.network[session]; !on {
				w.network[session] = si.target
				w.h.clientNetwork.add(si.target, 1)
			}
		}
	case hd.IsMethod("Network.disable"):
		w.networkOffLocked(session)
	}
	if _, intercepts := w.fetching[session]; way == viaFetch && hd.IsMethod("Page.navigate") && !intercepts && len(w.checks) < maxTracked {
		if si, ok := w.sessions[session]; ok && si.typ == "page" {
			if p, ok := cdp.NavigateParams(hd.Params); ok && strings.HasPrefix(p.URL, "http") &&
				(p.FrameID == "" || p.FrameID == si.target) {
				w.checks[key] = navCheck{target: si.target, at: time.Now()}
			}
		}
	}
	gate := (way == viaFetch || way == viaNone) && isNavCommand(hd.Method) && !w.h.isArmed()
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
		return w.stream.fromClient(&hd, msg)
	case viaSession:
		return w.sess.fromClient(&hd, msg)
	}
	return false
}

// coverWait bounds how long a client's command waits for the relay's
// interception of its page to be on.
const coverWait = 5 * time.Second

// awaitCover waits, on the client's reader (so that the client's commands
// keep their order), until the relay's interception covers a page, within
// coverWait and the life of the connection.
func (w *watch) awaitCover(cover <-chan struct{}) {
	select {
	case <-cover:
		return
	default:
	}
	t := time.NewTimer(coverWait)
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
func (w *watch) awaitArmed() {
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
		case <-w.h.whenArmed():
		case <-w.ctx.Done():
			return
		}
		w.mu.Lock()
		gated := w.gated
		w.gated = nil
		w.mu.Unlock()
		for _, g := range gated {
			w.pass(g.msg)
		}
	}()
}

// pass writes a client's message to the browser, as the relay would have.
func (w *watch) pass(msg []byte) {
	if err := w.c.ToBrowser(msg); err != nil {
		w.log.Debug().Err(err).Msg("held command not delivered")
	}
}

// toClient writes a message to the client, as the relay would have.
func (w *watch) toClient(msg []byte) {
	if err := w.c.ToClient(msg); err != nil {
		w.log.Debug().Err(err).Msg("message for the client not delivered")
	}
}

// interesting reports, from its first bytes, whether a message from the
// browser may be one the watch follows, so that the rest of the stream is
// relayed without being scanned. Chromium writes an event's method and a
// reply's id first; anything else is scanned.
func (w *watch) interesting(msg []byte) bool {
	if w.way != viaFetch && w.way != viaNone {
		return true // the other ways read events and answers of every session
	}
	switch {
	case bytes.HasPrefix(msg, []byte(`{"method":"Target.`)):
		return !w.clientAttachedChange(msg)
	case bytes.HasPrefix(msg, []byte(`{"method":"Network.`)):
		return w.h.fetch != nil && w.h.fetch.following() && followedEvent(msg[len(`{"method":"`):])
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
// relay too, so FromBrowser has nothing to rewrite (unattached), and every
// client hears of every change to every page.
func (w *watch) clientAttachedChange(msg []byte) bool {
	id, ok := cdp.ChangedTargetID(msg)
	return ok && w.h.attachedClients.countOf(id) > 0
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

// Wants reports, from its first bytes, whether FromBrowser needs to see
// a message from the browser (Conn.Wants).
func (w *watch) Wants(msg []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.interesting(msg)
}

// FromBrowser looks at a message on its way to the client, whose header
// is hd, and reports whether to drop it: an answer to the relay's own
// command, or an event the client did not ask for (Conn.FromBrowser).
func (w *watch) FromBrowser(hd cdp.Header, msg []byte) bool {
	session := string(hd.SessionID)
	if hd.HasID {
		return w.answered(cmdKey{session, hd.ID}, msg)
	}
	switch string(hd.Method) {
	case "Network.requestWillBeSentExtraInfo", "Network.requestWillBeSent", "Network.responseReceived", "Network.loadingFailed":
		if f := w.h.fetch; f != nil {
			page := ""
			if hd.IsMethod("Network.loadingFailed") {
				// It names no frame: a request the pages connection
				// follows by its frame is known by the session's page.
				w.mu.Lock()
				page = w.sessions[session].target
				w.mu.Unlock()
			}
			f.clientEvent(hd.Method, hd.Params, page, time.Now())
		}
	case "Target.attachedToTarget":
		if ti, ok := cdp.ReadTargetInfo(hd.Params); ok {
			if sid, _, ok := cdp.AttachedTarget(hd.Params); ok {
				w.mu.Lock()
				if len(w.sessions) >= maxTracked {
					w.detachAllLocked()
				}
				if _, known := w.sessions[sid]; !known {
					w.h.attachedClients.add(ti.TargetID, 1)
				}
				w.sessions[sid] = sessionInfo{target: ti.TargetID, typ: ti.Type}
				w.mu.Unlock()
			}
		}
	case "Target.detachedFromTarget":
		if sid, ok := cdp.DetachedSession(hd.Params); ok {
			w.mu.Lock()
			if si, ok := w.sessions[sid]; ok {
				w.h.attachedClients.add(si.target, -1)
			}
			delete(w.sessions, sid)
			delete(w.fetching, sid)
			w.networkOffLocked(sid)
			w.mu.Unlock()
		}
	case "Target.targetCreated", "Target.targetInfoChanged":
		if out, ok := w.unattached(&hd, msg); ok {
			w.toClient(out)
			return true
		}
	}
	switch w.via() {
	case viaStream:
		return w.stream.fromBrowser(&hd, msg)
	case viaSession:
		return w.sess.fromBrowser(&hd, msg)
	}
	return false
}

// unattached rewrites a target's info that says it is attached only
// because the relay's own connection is (Fetch mode attaches the relay to
// its clients' pages): a client sees it attached as it would without the
// relay, by none of the relay's clients; chromedp, for one, takes only an
// unattached target for a new one. It reports false when msg is as it
// should be.
func (w *watch) unattached(hd *cdp.Header, msg []byte) ([]byte, bool) {
	f := w.h.fetch
	attached := []byte(`"attached":true`)
	if f == nil || !bytes.Contains(msg, attached) {
		return nil, false
	}
	// The id alone tells most: the relay attaches to pages only, so a
	// target it is attached to is a page.
	id, ok := cdp.LeadingTargetID(hd.Params)
	target := string(id)
	if !ok {
		ti, ok := cdp.ReadTargetInfo(hd.Params)
		if !ok || ti.Type != "page" {
			return nil, false
		}
		target = ti.TargetID
	}
	if !f.relayAttached(target) || w.h.attachedClients.count(target) > 0 {
		return nil, false
	}
	return bytes.Replace(msg, attached, []byte(`"attached":false`), 1), true
}

// detachAllLocked forgets every session of the connection. Callers hold mu.
func (w *watch) detachAllLocked() {
	for _, si := range w.sessions {
		w.h.attachedClients.add(si.target, -1)
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
// on (fetchHold.clientNetworkOff). Callers hold mu.
func (w *watch) networkOffLocked(session string) {
	target, on := w.network[session]
	if !on {
		return
	}
	delete(w.network, session)
	if w.h.clientNetwork.add(target, -1) == 0 {
		if f := w.h.fetch; f != nil {
			go f.clientNetworkOff(target)
		}
	}
}

// answered follows the answer to a command; it reports true for the
// answer to one of the relay's own, which the client never sees.
func (w *watch) answered(key cmdKey, msg []byte) bool {
	w.mu.Lock()
	ch, own := w.own[key.id]
	if own && key.id < 0 {
		delete(w.own, key.id)
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
			dep.followed().Departed(time.Now(), true)
		}
	}
	if own && key.id < 0 {
		if ch != nil {
			result, e, _ := cdp.ReadReply(msg)
			ch <- reply{result: result, err: e}
		}
		return true
	}
	if create {
		var r struct {
			TargetID string `json:"targetId"`
		}
		result, _, _ := cdp.ReadReply(msg)
		json.Unmarshal(result, &r)
		w.h.claims.created(r.TargetID)
		if done != nil {
			w.h.coveredThen(r.TargetID, done)
		}
	}
	if checking {
		w.checkFetch(check, msg)
	}
	return false
}

// checkFetch confirms that the relay's own connection saw the document
// request of a page's Page.navigate: a browser that acknowledges Fetch and
// never pauses would leave every navigation unheld.
func (w *watch) checkFetch(c navCheck, msg []byte) {
	f := w.h.fetch
	if f == nil || w.h.via() != viaFetch || partOff("pauses") {
		return
	}
	result, e, _ := cdp.ReadReply(msg)
	var r struct {
		LoaderID  string `json:"loaderId"`
		ErrorText string `json:"errorText"`
	}
	if e != nil || json.Unmarshal(result, &r) != nil || r.LoaderID == "" || r.ErrorText != "" {
		return // no new document: nothing went to the network
	}
	if f.pausedSince(c.target, c.at) {
		return
	}
	if !f.upSince(c.at) {
		// The relay's connections went away meanwhile: the browser let
		// the request go with them, and nothing says Fetch does not work.
		w.h.unheld(1, "the relay's own connections were lost while a navigation went out")
		return
	}
	w.h.unheld(1, "the browser did not pause the document request for the relay's own connection")
	w.h.fallOver("the browser acknowledged Fetch on the relay's own connection but did not pause a page's document request")
}

// call sends one of the relay's own commands on this connection and waits
// for its answer, up to ctx. It must not run on the browser's reader.
func (w *watch) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	ch := make(chan reply, 1)
	id, err := w.send(session, method, params, ch)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, errors.New("hold: " + method + ": " + r.err.Message)
		}
		return r.result, nil
	case <-ctx.Done():
		w.mu.Lock()
		delete(w.own, id)
		w.mu.Unlock()
		return nil, ctx.Err()
	}
}

// send writes one of the relay's own commands; its answer goes to ch, or
// is dropped when ch is nil.
func (w *watch) send(session, method string, params any, ch chan reply) (int64, error) {
	return w.sendOwn(session, method, params, ch, nil)
}

// sendDeparting is send for a command whose answer tells when the request
// of fl's navigation left (departs); a nil fl follows nothing.
func (w *watch) sendDeparting(session, method string, params any, fl *flight) {
	w.sendOwn(session, method, params, nil, fl)
}

func (w *watch) sendOwn(session, method string, params any, ch chan reply, fl *flight) (int64, error) {
	w.mu.Lock()
	w.nextOwn--
	id := w.nextOwn
	if len(w.own) >= maxTracked {
		clear(w.own)
	}
	w.own[id] = ch
	if fl != nil && len(w.departs) < maxTracked {
		w.departs[cmdKey{session, id}] = fl
	}
	w.mu.Unlock()
	msg, err := cdp.Command(id, method, session, params)
	if err == nil {
		err = w.c.ToBrowser(msg)
	}
	if err != nil {
		w.mu.Lock()
		delete(w.own, id)
		delete(w.departs, cmdKey{session, id})
		w.mu.Unlock()
		return 0, err
	}
	return id, nil
}

// answer writes the relay's own answer to a client command it took.
func (w *watch) answer(session string, id int64, result string) {
	msg, _ := cdp.Reply(id, session, json.RawMessage(result), nil)
	w.toClient(msg)
}

// pageOf returns the page target of a session, "" when the session is not
// known to be a page's.
func (w *watch) pageOf(session string) (target string, known bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	si, ok := w.sessions[session]
	if !ok {
		return "", false
	}
	if si.typ != "page" {
		return "", true
	}
	return si.target, true
}

// navLog is the log for the debug lines of a navigation in session, naming
// its page and the session as the browser named them when it attached the
// client (an id a client made up is not repeated).
func (w *watch) navLog(session string) *zerolog.Logger {
	if w.log.GetLevel() > zerolog.DebugLevel {
		return w.log
	}
	w.mu.Lock()
	si, ok := w.sessions[session]
	w.mu.Unlock()
	if !ok {
		return w.log
	}
	return pageLog(w.log, si.target, session)
}
