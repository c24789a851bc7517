package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
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
	closed   bool                            // guarded by mu
	calls    map[int64]chan *cdproto.Message // guarded by mu; commands whose reply someone waits for
	pages    map[string]struct{}             // guarded by mu; target ids of pages
	notPages map[string]struct{}             // guarded by mu; frame ids known not to be pages
	hops     map[string]hop                  // guarded by mu; interception id → navigation it belongs to
	timers   map[*time.Timer]struct{}        // guarded by mu; held navigations
	readDone chan struct{}                   // closed when the reader ends
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
		calls:    make(map[int64]chan *cdproto.Message),
		pages:    make(map[string]struct{}),
		notPages: make(map[string]struct{}),
		hops:     make(map[string]hop),
		timers:   make(map[*time.Timer]struct{}),
		readDone: make(chan struct{}),
	}
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
	for t := range fc.timers {
		t.Stop()
	}
	fc.timers = nil
	fc.mu.Unlock()
	fc.c.Close()
	<-fc.readDone
}

var errConnClosed = errors.New("relay: browser connection closed")

// send writes a command and returns its id; its reply goes to reply, or is
// only logged when reply is nil.
func (fc *fetchConn) send(method string, params any, reply chan *cdproto.Message) (int64, error) {
	p, err := jsonv2.Marshal(params)
	if err != nil {
		return 0, fmt.Errorf("relay: %s: %w", method, err)
	}
	fc.wmu.Lock()
	defer fc.wmu.Unlock()
	fc.nextID++
	id := fc.nextID
	msg, err := jsonv2.Marshal(&cdproto.Message{ID: id, Method: cdproto.MethodType(method), Params: p})
	if err != nil {
		return 0, fmt.Errorf("relay: %s: %w", method, err)
	}
	fc.mu.Lock()
	if fc.closed {
		fc.mu.Unlock()
		return 0, errConnClosed
	}
	if reply != nil {
		fc.calls[id] = reply // a release waits for nothing: its reply is only logged
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
func (fc *fetchConn) call(ctx context.Context, method string, params any) (*cdproto.Message, error) {
	reply := make(chan *cdproto.Message, 1)
	id, err := fc.send(method, params, reply)
	if err != nil {
		return nil, err
	}
	select {
	case m := <-reply:
		if m == nil {
			return nil, errConnClosed
		}
		if m.Error != nil {
			return m, fmt.Errorf("relay: %s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m, nil
	case <-ctx.Done():
		fc.mu.Lock()
		delete(fc.calls, id)
		fc.mu.Unlock()
		return nil, fmt.Errorf("relay: %s: %w", method, ctx.Err())
	}
}

// release lets a paused request go on, at either stage.
func (fc *fetchConn) release(id fetch.RequestID) {
	if _, err := fc.send("Fetch.continueRequest", &fetch.ContinueRequestParams{RequestID: id}, nil); err != nil && !errors.Is(err, errConnClosed) {
		fc.log.Debug().Err(err).Str("request", string(id)).Msg("releasing a request failed")
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
		var m cdproto.Message
		if err := jsonv2.Unmarshal(data, &m); err != nil {
			fc.log.Warn().Err(err).Int("size", len(data)).Msg("unreadable message from the browser")
			continue
		}
		if m.ID != 0 {
			fc.reply(&m)
			continue
		}
		fc.event(&m)
	}
}

func (fc *fetchConn) reply(m *cdproto.Message) {
	fc.mu.Lock()
	ch, ok := fc.calls[m.ID]
	delete(fc.calls, m.ID)
	fc.mu.Unlock()
	switch {
	case ok:
		ch <- m
	case m.Error != nil:
		// A request whose page went away meanwhile; nothing to do.
		fc.log.Debug().Int64("id", m.ID).Int64("code", m.Error.Code).Msg("browser refused a release")
	}
}

func (fc *fetchConn) event(m *cdproto.Message) {
	switch m.Method {
	case "Fetch.requestPaused":
		var ev fetch.EventRequestPaused
		if err := jsonv2.Unmarshal(m.Params, &ev); err != nil || ev.Request == nil {
			fc.log.Warn().Err(err).Msg("unreadable Fetch.requestPaused")
			return
		}
		fc.paused(&ev)
	case "Target.targetCreated", "Target.targetInfoChanged":
		var ev target.EventTargetCreated // targetInfoChanged has the same shape
		if jsonv2.Unmarshal(m.Params, &ev) != nil || ev.TargetInfo == nil {
			return
		}
		if ev.TargetInfo.Type == "page" {
			fc.mu.Lock()
			fc.pages[string(ev.TargetInfo.TargetID)] = struct{}{}
			fc.mu.Unlock()
		}
	case "Target.targetDestroyed":
		var ev target.EventTargetDestroyed
		if jsonv2.Unmarshal(m.Params, &ev) != nil {
			return
		}
		fc.mu.Lock()
		delete(fc.pages, string(ev.TargetID))
		fc.mu.Unlock()
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
func (fc *fetchConn) paused(ev *fetch.EventRequestPaused) {
	id := string(ev.RequestID)
	if o, ok := cdp.PausedOutcome(ev); ok {
		fc.mu.Lock()
		hp, tracked := fc.hops[id]
		if tracked && !isRedirect(o.Status) {
			delete(fc.hops, id) // a redirect's entry stays until its next hop names it
		}
		fc.mu.Unlock()
		if tracked {
			fc.h.observe(hp.host, o, &fc.log)
		}
		fc.release(ev.RequestID)
		return
	}
	host, ok := limiter.Key(ev.Request.URL)
	if !ok || limiter.Exempt(host) {
		// Counted once it is known to be a page's, below or in classify.
		fc.release(ev.RequestID)
		fc.countUnbooked(ev, ok)
		return
	}
	frame := string(ev.FrameID)
	fc.mu.Lock()
	_, page := fc.pages[frame]
	_, notPage := fc.notPages[frame]
	fc.mu.Unlock()
	switch {
	case page:
		fc.hold(ev, host)
	case notPage:
		fc.release(ev.RequestID)
		fc.h.p.Metrics.navigation(navUntracked, 0)
	default:
		// A frame not announced as a page: an iframe, or a page whose
		// announcement has not arrived. Ask, without stopping the reader.
		go fc.classify(ev, host)
	}
}

// classify asks the browser whether frame is a page's main frame, then
// holds or releases the request.
func (fc *fetchConn) classify(ev *fetch.EventRequestPaused, host string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	frame := string(ev.FrameID)
	m, err := fc.call(ctx, "Target.getTargetInfo", &target.GetTargetInfoParams{TargetID: target.ID(frame)})
	isPage := false
	if err == nil {
		var res target.GetTargetInfoResult
		isPage = jsonv2.Unmarshal(m.Result, &res) == nil && res.TargetInfo != nil && res.TargetInfo.Type == "page"
	}
	fc.mu.Lock()
	if isPage {
		fc.pages[frame] = struct{}{}
	} else if m != nil { // only what the browser said: after no answer, ask again next time
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
func (fc *fetchConn) countUnbooked(ev *fetch.EventRequestPaused, http bool) {
	if fc.h.p.Metrics == nil {
		return
	}
	fc.mu.Lock()
	_, page := fc.pages[string(ev.FrameID)]
	fc.mu.Unlock()
	if http && page {
		fc.h.p.Metrics.navigation(navExempt, 0)
	} else {
		fc.h.p.Metrics.navigation(navUntracked, 0)
	}
}

// hold books the navigation's slot and releases its request when it comes.
// A redirect hop within the host of the hop before it books nothing.
func (fc *fetchConn) hold(ev *fetch.EventRequestPaused, host string) {
	id := string(ev.RequestID)
	now := time.Now()
	fc.mu.Lock()
	prev, redirected := fc.hops[string(ev.RedirectedRequestID)]
	if ev.RedirectedRequestID != "" {
		delete(fc.hops, string(ev.RedirectedRequestID))
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
		fc.release(ev.RequestID)
		return
	}
	fc.await(ev.RequestID, host)
}

// await books host's slot for a held request and releases the request when
// the slot comes (at once if it has come already).
func (fc *fetchConn) await(id fetch.RequestID, host string) {
	d, retry := fc.h.book(host, &fc.log)
	if d <= 0 && !retry {
		fc.release(id)
		return
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.closed {
		return // the browser releases it with the connection
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		fc.mu.Lock()
		_, live := fc.timers[t]
		delete(fc.timers, t)
		fc.mu.Unlock()
		switch {
		case !live:
		case retry:
			fc.await(id, host)
		default:
			fc.release(id)
		}
	})
	fc.timers[t] = struct{}{}
}

func isRedirect(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}
