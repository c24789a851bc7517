package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// fetchConn is the relay's own connection to the browser endpoint. It
// discovers targets, to tell a page's main frame (whose id is the page's
// target id) from an iframe, and enables Fetch for every document request
// of the browser: at the Request stage to hold a top-level navigation until
// its slot, at the Response stage to read the answer. The browser pauses
// the relay's interception after any a client set up itself, so clients
// that intercept keep seeing exactly what they asked for.
type fetchConn struct {
	h   *holder
	c   *websocket.Conn
	log zerolog.Logger

	wmu    sync.Mutex // serialises writes
	nextID int64      // guarded by wmu

	mu       sync.Mutex
	closed   bool                 // guarded by mu
	calls    map[int64]chan reply // guarded by mu; commands whose reply someone waits for
	pages    map[string]struct{}  // guarded by mu; target ids of pages
	notPages map[string]struct{}  // guarded by mu; frame ids known not to be pages
	hops     map[string]hop       // guarded by mu; interception id → navigation it belongs to
	readDone chan struct{}        // closed when the reader ends
	// held ends when the connection is closed: the navigations it holds
	// are given up (the browser releases their requests itself).
	held    context.Context
	dropAll context.CancelFunc
}

// hop is a document request of a top-level navigation under way.
type hop struct {
	host  string
	since time.Time
}

// documentPatterns pause every document request twice: before it goes
// out, and when its answer (or failure) is in.
var documentPatterns = []*fetch.RequestPattern{
	{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest},
	{URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageResponse},
}

// reply is the answer to one of the relay's own commands.
type reply struct {
	result json.RawMessage
	err    *cdp.Error
}

// connect dials the browser endpoint and enables discovery and Fetch.
func (h *holder) connect(ctx context.Context) (*fetchConn, error) {
	wsURL, err := h.up.browserWS(ctx)
	if err != nil {
		return nil, err
	}
	c, _, err := h.p.dialer.DialContext(ctx, wsURL, nil)
	if err != nil {
		h.up.forget(wsURL) // it may have restarted under a new endpoint
		return nil, fmt.Errorf("relay: dialing the browser endpoint: %w", err)
	}
	c.SetReadLimit(h.p.MaxMessageSize)
	fc := &fetchConn{
		h:        h,
		c:        c,
		log:      h.p.log.With().Str("conn", "relay").Str("upstream", h.up.name).Logger(),
		calls:    make(map[int64]chan reply),
		pages:    make(map[string]struct{}),
		notPages: make(map[string]struct{}),
		hops:     make(map[string]hop),
		readDone: make(chan struct{}),
	}
	fc.held, fc.dropAll = context.WithCancel(context.Background())
	go fc.read()
	if _, err := fc.call(ctx, "Target.setDiscoverTargets", &target.SetDiscoverTargetsParams{Discover: true}); err != nil {
		fc.close()
		return nil, fmt.Errorf("relay: browser refused target discovery: %w", err)
	}
	if _, err := fc.call(ctx, "Fetch.enable", &fetch.EnableParams{Patterns: documentPatterns}); err != nil {
		fc.close()
		return nil, fmt.Errorf("relay: browser refused browser-level Fetch: %w", err)
	}
	return fc, nil
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

// close ends the connection; the browser then releases every request the
// relay held, and the held navigations go at once.
func (fc *fetchConn) close() {
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return
	}
	fc.closed = true
	fc.mu.Unlock()
	fc.dropAll()
	fc.c.Close()
	<-fc.readDone
}

var errConnClosed = errors.New("relay: browser connection closed")

// send writes a command and returns its id; its reply goes to reply, or is
// only logged when reply is nil.
func (fc *fetchConn) send(method string, params any, answer chan reply) (int64, error) {
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.nextID++
	id := fc.nextID
	msg, err := cdp.Command(id, method, "", params)
	if err != nil {
		return 0, fmt.Errorf("relay: %s: %w", method, err)
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
	fc.c.SetWriteDeadline(time.Now().Add(fc.h.p.WriteTimeout))
	if err := fc.c.WriteMessage(websocket.TextMessage, msg); err != nil {
		fc.mu.Lock()
		delete(fc.calls, id)
		fc.mu.Unlock()
		return 0, fmt.Errorf("relay: %s: %w", method, err)
	}
	return id, nil
}

// call sends a command and waits for its reply.
// The result is nil when the browser did not answer.
func (fc *fetchConn) call(ctx context.Context, method string, params any) (*reply, error) {
	answer := make(chan reply, 1)
	id, err := fc.send(method, params, answer)
	if err != nil {
		return nil, err
	}
	select {
	case r, ok := <-answer:
		if !ok {
			return nil, errConnClosed
		}
		if r.err != nil {
			return &r, fmt.Errorf("relay: %s: %s (%d)", method, r.err.Message, r.err.Code)
		}
		return &r, nil
	case <-ctx.Done():
		fc.mu.Lock()
		delete(fc.calls, id)
		fc.mu.Unlock()
		return nil, fmt.Errorf("relay: %s: %w", method, ctx.Err())
	}
}

// release lets a paused request go on, at either stage.
func (fc *fetchConn) release(id string) {
	if _, err := fc.send("Fetch.continueRequest", &fetch.ContinueRequestParams{RequestID: fetch.RequestID(id)}, nil); err != nil && !errors.Is(err, errConnClosed) {
		fc.log.Debug().Err(err).Str("request", id).Msg("releasing a request failed")
	}
}

// read dispatches what the browser sends until the connection ends.
func (fc *fetchConn) read() {
	defer func() {
		fc.mu.Lock()
		fc.closed = true
		for id, ch := range fc.calls {
			if ch != nil {
				close(ch)
			}
			delete(fc.calls, id)
		}
		fc.mu.Unlock()
		close(fc.readDone)
	}()
	for {
		_, data, err := fc.c.ReadMessage()
		if err != nil {
			fc.log.Debug().Err(err).Msg("browser connection ended")
			return
		}
		hd, err := cdp.Scan(data)
		if err != nil {
			fc.log.Warn().Err(err).Int("size", len(data)).Msg("unreadable message from the browser")
			continue
		}
		if hd.HasID {
			fc.reply(hd.ID, data)
			continue
		}
		fc.event(string(hd.Method), hd.Params)
	}
}

func (fc *fetchConn) reply(id int64, msg []byte) {
	fc.mu.Lock()
	ch, ok := fc.calls[id]
	delete(fc.calls, id)
	fc.mu.Unlock()
	result, e, _ := cdp.ReadReply(msg)
	switch {
	case ok:
		ch <- reply{result: result, err: e}
	case e != nil:
		// A request whose page went away meanwhile; nothing to do.
		fc.log.Debug().Int64("id", id).Int64("code", e.Code).Msg("browser refused a release")
	}
}

func (fc *fetchConn) event(method string, params []byte) {
	switch method {
	case "Fetch.requestPaused":
		ev, ok := cdp.ReadRequestPaused(params)
		if !ok {
			fc.log.Warn().Msg("unreadable Fetch.requestPaused")
			return
		}
		fc.paused(&ev)
	case "Target.targetCreated", "Target.targetInfoChanged":
		if ti, ok := cdp.ReadTargetInfo(params); ok && ti.Type == "page" {
			fc.mu.Lock()
			fc.pages[ti.TargetID] = struct{}{}
			fc.mu.Unlock()
		}
	case "Target.targetDestroyed":
		if id, ok := cdp.ReadTargetID(params); ok {
			fc.mu.Lock()
			delete(fc.pages, id)
			fc.mu.Unlock()
		}
	}
}

// maxHops bounds the navigations remembered between their request and
// their answer; past it, those older than hopTTL are dropped (their pages
// closed or the client moved on before an answer came).
const (
	maxHops = 4096
	hopTTL  = 5 * time.Minute
)

// paused handles one paused document request.
func (fc *fetchConn) paused(ev *cdp.RequestPaused) {
	id := ev.RequestID
	if o, ok := ev.Outcome(); ok {
		fc.mu.Lock()
		hp, tracked := fc.hops[id]
		if tracked && !isRedirect(o.Status) {
			delete(fc.hops, id) // a redirect's entry stays until its next hop names it
		}
		fc.mu.Unlock()
		if tracked {
			fc.h.observe(hp.host, limiter.Outcome(o), &fc.log)
		}
		fc.release(id)
		return
	}
	host, ok := limiter.Key(ev.Request.URL)
	if !ok || limiter.Exempt(host) {
		// Counted once it is known to be a page's, below or in classify.
		fc.release(id)
		fc.countUnbooked(ev, ok)
		return
	}
	frame := ev.FrameID
	fc.mu.Lock()
	_, page := fc.pages[frame]
	_, notPage := fc.notPages[frame]
	fc.mu.Unlock()
	switch {
	case page:
		fc.hold(ev, host)
	case notPage:
		fc.release(id)
		fc.h.p.Metrics.navigation(navUntracked, 0)
	default:
		// A frame not announced as a page: an iframe, or a page whose
		// announcement has not arrived. Ask, without stopping the reader.
		go fc.classify(ev, host)
	}
}

// classify asks the browser whether frame is a page's main frame, then
// holds or releases the request.
func (fc *fetchConn) classify(ev *cdp.RequestPaused, host string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	frame := ev.FrameID
	r, err := fc.call(ctx, "Target.getTargetInfo", &target.GetTargetInfoParams{TargetID: target.ID(frame)})
	isPage := false
	if err == nil {
		ti, ok := cdp.ReadTargetInfo(r.result)
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
	if isPage {
		fc.hold(ev, host)
	} else {
		fc.release(ev.RequestID)
		fc.h.p.Metrics.navigation(navUntracked, 0)
	}
}

// countUnbooked counts a document request that books nothing: exempt when
// it is a page's navigation to an exempt host, untracked otherwise (not
// http, or an iframe's).
func (fc *fetchConn) countUnbooked(ev *cdp.RequestPaused, http bool) {
	if fc.h.p.Metrics == nil {
		return
	}
	fc.mu.Lock()
	_, page := fc.pages[ev.FrameID]
	fc.mu.Unlock()
	if http && page {
		fc.h.p.Metrics.navigation(navExempt, 0)
	} else {
		fc.h.p.Metrics.navigation(navUntracked, 0)
	}
}

// hold books the navigation's slot and releases its request when it comes.
// A redirect hop within the host of the hop before it books nothing.
func (fc *fetchConn) hold(ev *cdp.RequestPaused, host string) {
	id := ev.RequestID
	now := time.Now()
	fc.mu.Lock()
	prev, redirected := fc.hops[ev.RedirectedRequestID]
	if ev.RedirectedRequestID != "" {
		delete(fc.hops, ev.RedirectedRequestID)
	}
	if len(fc.hops) >= maxHops {
		for k, hp := range fc.hops {
			if now.Sub(hp.since) > hopTTL {
				delete(fc.hops, k)
			}
		}
	}
	fc.hops[id] = hop{host: host, since: now}
	fc.mu.Unlock()
	if redirected && prev.host == host {
		fc.release(id)
		return
	}
	fc.await(id, host, ev.Request.URL)
}

// await books host's slot for a held request and releases the request when
// the slot comes (at once if it has come already).
func (fc *fetchConn) await(id, host, rawURL string) {
	release := func() { fc.release(id) }
	if !fc.h.wait(fc.held, host, rawURL, &fc.log, release, nil) {
		release()
	}
}

func isRedirect(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}
