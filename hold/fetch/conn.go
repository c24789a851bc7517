package fetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
	"github.com/cdp-throttle/cdp-throttle/refusal"
)

// connRole is what one of the relay's own connections to a Chromium does.
type connRole int

const (
	// rolePages attaches to every page and intercepts the documents of
	// the relay's clients' pages in their sessions (pages.go).
	rolePages connRole = iota
	// roleNet intercepts at the browser level, behind every page session:
	// only what pages holds, or every document while pages cannot hold.
	roleNet
)

func (r connRole) String() string { return [...]string{"pages", "net"}[r] }

// fetchConn is one of the relay's own connections to the browser endpoint.
type fetchConn struct {
	f     *fetchHold
	core  hold.FetchCore // f's: what it asks of holding
	role  connRole
	c     *websocket.Conn
	log   zerolog.Logger
	since time.Time // set once, before its Fetch was enabled

	// wmu serialises writes and guards nextID; taken after fetchHold's
	// mutexes, before mu (hold.go's lock order).
	wmu    lockorder.Mutex[hold.RankFetchWrite]
	nextID int64 // guarded by wmu

	// mu guards the fields below: the transport's own, and what it knows
	// of the browser's targets. Taken after wmu and after the role's own
	// lock (pg.mu, nt.mu), before the flights' (hold.go's lock order).
	mu       lockorder.Mutex[hold.RankFetchWire]
	closed   bool                       // guarded by mu
	calls    map[int64]func(hold.Reply) // guarded by mu; commands whose reply someone waits for
	pages    map[string]struct{}        // guarded by mu; target ids of pages
	notPages map[string]struct{}        // guarded by mu; frame ids known not to be pages
	readDone chan struct{}              // closed when the reader ends
	// held ends when the connection is closed or lost: the navigations
	// it holds are given up (the browser hands their requests on).
	held    context.Context
	dropAll context.CancelFunc

	// What the connection's role owns, each under its own lock: the pages
	// connection's sessions and the document requests it follows
	// (pages.go), or the net connection's requests under way (net.go).
	pg *pagesState // nil on net
	nt *netState   // nil on pages
}

// hop is a document request of a page under way, at the net connection.
type hop struct {
	host   string
	frame  string
	booked bool         // its answer is fed back: this connection booked it
	fl     *hold.Flight // the navigation, when this connection holds it or reads its answer
}

// documentPattern pauses every document request where it is enabled: on a
// client's page session, and at the browser level while the pages
// connection cannot hold.
var documentPattern = []*fetch.RequestPattern{
	{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest},
}

// dial dials the browser endpoint for one of the relay's connections.
func (f *fetchHold) dial(ctx context.Context, role connRole) (*fetchConn, error) {
	up := f.core.Upstream()
	dial := up.Dial
	if g, ok := up.(hold.Guarded); ok && role == rolePages {
		dial = g.DialGuarded // what it holds outlives the relay's process
	}
	c, err := dial(ctx)
	if err != nil {
		return nil, err
	}
	fc := &fetchConn{
		f:        f,
		core:     f.core,
		role:     role,
		c:        c,
		since:    time.Now(), // before its Fetch takes effect: what it pauses, the other one let go after this
		log:      f.cfg.Log.With().Str("conn", "relay-"+role.String()).Str("upstream", up.Name()).Logger(),
		calls:    make(map[int64]func(hold.Reply)),
		pages:    make(map[string]struct{}),
		notPages: make(map[string]struct{}),
		readDone: make(chan struct{}),
	}
	if role == rolePages {
		fc.pg = &pagesState{sessions: make(map[string]*pageSess), byTarget: make(map[string]*pageSess), tracks: make(map[string]*track)}
		fc.pg.clock.ref = fc.since
	} else {
		fc.nt = &netState{hops: make(map[string]hop)}
	}
	fc.held, fc.dropAll = context.WithCancel(context.Background())
	go fc.read()
	return fc, nil
}

// refusedOrSilent says why a command of the relay's own connection failed: an
// error answer is a refusal; no answer in time is silence (a refusal when
// Fetch is required: Start then fails with it).
func refusedOrSilent(what string, r *hold.Reply, err error, mode hold.Intercept) error {
	err = fmt.Errorf("hold: %s: %w", what, err)
	switch {
	case r != nil:
		return errRefused{err}
	case errors.Is(err, context.DeadlineExceeded) && mode == hold.InterceptFetch:
		return errRefused{err}
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", errSilent, err)
	}
	return err
}

// keepalive pings the browser until the connection ends or ctx does, and
// then closes it.
func (fc *fetchConn) keepalive(ctx context.Context, every, timeout time.Duration) {
	pongWait := 2*every + 10*time.Second
	fc.c.SetReadDeadline(time.Now().Add(pongWait))
	fc.c.SetPongHandler(func(string) error { return fc.c.SetReadDeadline(time.Now().Add(pongWait)) })
	t := time.NewTicker(every)
	defer t.Stop()
	defer fc.close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fc.readDone:
			return
		case <-t.C:
			if err := fc.c.WriteControl(websocket.PingMessage, nil, time.Now().Add(timeout)); err != nil {
				return
			}
		}
	}
}

// close ends the connection; the browser then hands every request the
// connection held on, to the relay's other connection when it is up.
func (fc *fetchConn) close() {
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return
	}
	fc.closed = true
	fc.mu.Unlock()
	fc.dropAll()
	// A close frame says the relay meant it (a guardian between takes a
	// connection that ends without one for the relay's death).
	fc.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	fc.c.Close()
	<-fc.readDone
}

var errConnClosed = errors.New("hold: browser connection closed")

// send writes a command on session ("" for the browser's) and returns its
// id; its reply goes to answer, or is only logged when answer is nil.
// answer runs on the connection's reader and must not block; when the
// connection ends first it gets the zero reply with a nil result.
func (fc *fetchConn) send(session, method string, params any, answer func(hold.Reply)) (int64, error) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.nextID++
	id := fc.nextID
	msg, err := cdp.Command(id, method, session, params)
	if err != nil {
		return 0, fmt.Errorf("hold: %s: %w", method, err)
	}
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return 0, errConnClosed
	}
	if answer != nil {
		fc.calls[id] = answer // a release waits for nothing: its reply is only logged
	}
	fc.mu.Unlock()
	fc.c.SetWriteDeadline(time.Now().Add(fc.f.cfg.WriteTimeout))
	if err := fc.c.WriteMessage(websocket.TextMessage, msg); err != nil {
		fc.mu.Lock()
		delete(fc.calls, id)
		fc.mu.Unlock()
		return 0, fmt.Errorf("hold: %s: %w", method, err)
	}
	return id, nil
}

// call sends a command on session and waits for its reply. The reply is
// nil when the browser did not answer; with an error reply, both are set.
func (fc *fetchConn) call(ctx context.Context, session, method string, params any) (*hold.Reply, error) {
	answer := make(chan hold.Reply, 1)
	id, err := fc.send(session, method, params, func(r hold.Reply) { answer <- r })
	if err != nil {
		return nil, err
	}
	select {
	case r := <-answer:
		if r.Result == nil && r.Err == nil {
			return nil, errConnClosed
		}
		if r.Err != nil {
			return &r, fmt.Errorf("hold: %s: %s (%d)", method, r.Err.Message, r.Err.Code)
		}
		return &r, nil
	case <-ctx.Done():
		fc.mu.Lock()
		delete(fc.calls, id)
		fc.mu.Unlock()
		return nil, fmt.Errorf("hold: %s: %w", method, ctx.Err())
	}
}

// release lets a paused request go on, at either stage.
func (fc *fetchConn) release(session, id string) { fc.continueRequest(session, id, false) }

// refuse answers a paused document request the Limiter refused: one
// robots.txt disallows fails as one its client blocked (Chromium reports
// net::ERR_BLOCKED_BY_CLIENT), one it deferred gets the relay's own 429
// (refusal.Reason); and it ends its navigation fl. th, its hop when the
// pages connection follows it (nil otherwise), books nothing: its
// answer is no answer of the site.
func (fc *fetchConn) refuse(session, id string, th *trackHop, fl *hold.Flight, r refusal.Reason) {
	if th != nil {
		fc.pg.mu.Lock()
		th.booked = false
		fc.pg.mu.Unlock()
	}
	method, p := "Fetch.failRequest", any(&fetch.FailRequestParams{RequestID: fetch.RequestID(id), ErrorReason: network.ErrorReasonBlockedByClient})
	if r.Deferred != "" {
		method, p = "Fetch.fulfillRequest", r.Fulfill(id, time.Now())
	}
	if _, err := fc.send(session, method, p, nil); err != nil && !errors.Is(err, errConnClosed) {
		fc.log.Debug().Err(err).Str("request", id).Str("method", method).Msg("refusing a request failed")
	}
	fl.End()
}

// continueRequest lets a paused request go on, asking for its answer when
// answer is set.
func (fc *fetchConn) continueRequest(session, id string, answer bool) {
	p := &fetch.ContinueRequestParams{RequestID: fetch.RequestID(id)}
	if answer {
		p.InterceptResponse = &answer
	}
	if _, err := fc.send(session, "Fetch.continueRequest", p, nil); err != nil && !errors.Is(err, errConnClosed) {
		fc.log.Debug().Err(err).Str("request", id).Msg("releasing a request failed")
	}
}

// read dispatches what the browser sends until the connection ends. A
// panic in what it calls ends the connection as a lost one (its holds
// handed on as the browser hands them), not the relay: it is logged with
// its stack and counted, and the connection is made again.
func (fc *fetchConn) read() {
	defer func() {
		if v := recover(); v != nil {
			fc.f.cfg.Metrics.Panicked()
			fc.log.Error().Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).
				Msg("a panic in reading the relay's own browser connection: it is ended as a lost one, the relay goes on")
			fc.c.Close()
		}
	}()
	defer func() {
		// What the connection holds can no longer be let go through it:
		// its holds end, and the browser hands their requests on.
		fc.dropAll()
		fc.mu.Lock()
		fc.closed = true
		calls := fc.calls
		fc.calls = make(map[int64]func(hold.Reply))
		fc.mu.Unlock()
		for _, answer := range calls {
			answer(hold.Reply{})
		}
		if fc.role == rolePages {
			fc.endAllTracks()
		}
		close(fc.readDone)
	}()
	for {
		_, data, err := fc.c.ReadMessage()
		if err != nil {
			fc.log.Debug().Err(err).Msg("browser connection ended")
			return
		}
		at := time.Now()
		hd, err := cdp.Scan(data)
		if err != nil {
			fc.log.Warn().Err(err).Int("size", len(data)).Msg("unreadable message from the browser")
			continue
		}
		if hd.HasID {
			fc.reply(hd.ID, data)
			continue
		}
		if len(hd.SessionID) > 0 {
			fc.sessionEvent(string(hd.SessionID), hd.Method, hd.Params, at)
			continue
		}
		fc.event(string(hd.Method), hd.Params)
	}
}

func (fc *fetchConn) reply(id int64, msg []byte) {
	fc.mu.Lock()
	answer, ok := fc.calls[id]
	delete(fc.calls, id)
	fc.mu.Unlock()
	result, e, _ := cdp.ReadReply(msg)
	switch {
	case ok:
		if result == nil && e == nil {
			result = json.RawMessage("{}")
		}
		answer(hold.Reply{Result: result, Err: e})
	case e != nil:
		// A request whose page went away meanwhile; nothing to do.
		fc.log.Debug().Int64("id", id).Int64("code", e.Code).Msg("browser refused a command of the relay's")
	}
}

// event handles an event of the browser's own session.
func (fc *fetchConn) event(method string, params []byte) {
	switch method {
	case "Fetch.requestPaused":
		ev, ok := cdp.ReadRequestPaused(params)
		if !ok {
			fc.log.Warn().Msg("unreadable Fetch.requestPaused")
			return
		}
		if fc.nt == nil {
			// Only net's Fetch is the browser's: nothing pauses here on
			// pages. Let it go, as a pause nobody asked for.
			fc.release("", ev.RequestID)
			return
		}
		fc.paused(&ev)
	case "Target.targetCreated", "Target.targetInfoChanged":
		ti, ok := cdp.ReadTargetInfo(params)
		if !ok || ti.Type != "page" {
			return
		}
		fc.mu.Lock()
		fc.pages[ti.TargetID] = struct{}{}
		fc.mu.Unlock()
		if ti.OpenerID != "" && fc.core.Claimed(ti.OpenerID) {
			fc.core.Claims().Claim(ti.TargetID) // a popup of a client's page
		}
	case "Target.targetDestroyed":
		if id, ok := cdp.ReadTargetID(params); ok {
			fc.mu.Lock()
			delete(fc.pages, id)
			delete(fc.notPages, id)
			fc.mu.Unlock()
			fc.nt.dropFrameHops(id)
			fc.f.forgetPage(id)
		}
	case "Target.attachedToTarget":
		if fc.role == rolePages {
			fc.attached(params)
		}
	case "Target.detachedFromTarget":
		if fc.role == rolePages {
			if sid, ok := cdp.DetachedSession(params); ok {
				fc.detached(sid)
			}
		}
	}
}

// monoClock maps the browser's monotonic clock (the timestamps of its
// Network events, in seconds) onto the relay's. Its methods are safe for
// concurrent use.
type monoClock struct {
	ref time.Time // set once: a reading of the relay's clock

	// mu guards off and set; a leaf (taken under pagesState.mu, takes
	// none).
	mu  lockorder.Mutex[lockorder.Leaf]
	off time.Duration // guarded by mu; relay time − ref − browser time, at least; the least seen
	set bool          // guarded by mu
}

// saw notes an event of browser time mono received at at: the event
// happened at or before at, so the offset is at most what this says.
func (c *monoClock) saw(mono float64, at time.Time) {
	if mono <= 0 {
		return
	}
	off := at.Sub(c.ref) - time.Duration(mono*float64(time.Second))
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set || off < c.off {
		c.off, c.set = off, true
	}
}

// at is browser time mono on the relay's clock: never earlier than it
// happened, later at most by the quickest delivery of an event seen.
func (c *monoClock) at(mono float64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set || mono <= 0 {
		return time.Time{}, false
	}
	return c.ref.Add(time.Duration(mono*float64(time.Second)) + c.off), true
}
