package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/wire"
)

// pair relays one client connection to its browser connection. Each side
// has one reading goroutine (its pump) and writes are serialised by the
// other side's wmu, so a held navigation can be written later without a
// queue: the browser side's writer is whoever holds its wmu.
type pair struct {
	p       *Proxy
	up      *upstream // the browser this client is relayed to
	client  *wire.Conn
	browser *wire.Conn
	log     zerolog.Logger
	path    string    // the websocket path the client asked for
	holds   hold.Conn // nil when no navigation is held
	share   *share    // what the client owns, and what it may do to the others

	ctx    context.Context // cancelled when the pair ends: held navigations give up
	cancel context.CancelFunc
	ended  chan struct{} // closed once both pumps and the held navigations are done
	held   sync.WaitGroup

	closing atomic.Bool // the pair's ending has been passed on (finish or shutdown ran)
}

var connSeq atomic.Uint64

// serveWebsocket relays one client websocket to the browser.
func (p *Proxy) serveWebsocket(w http.ResponseWriter, r *http.Request) {
	// A client's lines name its connection; a page's socket names the page
	// too (its path is said once, when it connects: for most clients it is
	// / or the browser's, which names nothing).
	id := connSeq.Add(1)
	lc := p.log.With().Uint64("conn", id)
	if page, ok := strings.CutPrefix(r.URL.Path, "/devtools/page/"); ok {
		lc = lc.Str("page", page)
	}
	log := lc.Logger()
	if !p.checkOrigin(r) {
		http.Error(w, "cdp-throttle: websocket upgrade refused: Origin "+r.Header.Get("Origin")+" is not allowed; allow it with --allow-origin", http.StatusForbidden)
		return
	}
	// A place in a browser first: over capacity the client waits here,
	// its upgrade not answered yet, or is refused with an HTTP status.
	up, place := p.admit(w, r, log)
	if place == nil {
		return
	}
	defer place.Leave()
	// Counted from now, so that clients arriving together spread out.
	up.conns.Add(1)
	defer up.conns.Add(-1)
	log = log.With().Str("upstream", up.name).Logger()
	target, err := up.pageWS(r.Context(), r.URL.Path)
	if err != nil {
		log.Warn().Err(err).Str("path", r.URL.Path).Msg("browser endpoint unknown")
		http.Error(w, "cdp-throttle: browser unreachable: "+err.Error(), http.StatusBadGateway)
		return
	}
	// The browser answers the client's upgrade first (handshake.go): a
	// browser that refuses is answered with its own status and words.
	a, err := p.dialBrowser(r.Context(), target, r)
	if err != nil || a.status == http.StatusNotFound {
		// The browser may have restarted under a new endpoint (on the same
		// port, Chromium answers the old one 404): look again.
		up.forget(target)
		if fresh, ferr := up.pageWS(r.Context(), r.URL.Path); ferr == nil && fresh != target {
			target = fresh
			a.close()
			a, err = p.dialBrowser(r.Context(), target, r)
		}
	}
	if a.full() && p.gate.BrowserCapacity(place.Browser) > 0 {
		// The place is the client's: the browser has not yet seen the
		// close of the connection that left it.
		for deadline := time.Now().Add(browserFullRetry); err == nil && a.full() && time.Now().Before(deadline) && r.Context().Err() == nil; {
			time.Sleep(50 * time.Millisecond)
			a, err = p.dialBrowser(r.Context(), target, r)
		}
	}
	if err != nil {
		log.Warn().Err(err).Str("path", r.URL.Path).Msg("browser unreachable")
		http.Error(w, "cdp-throttle: browser refused the websocket: "+err.Error(), http.StatusBadGateway)
		return
	}
	if !a.upgraded() {
		log.Warn().Str("path", r.URL.Path).Int("status", a.status).Msg("browser refused the websocket")
		if err := passRefusal(w, a); err != nil {
			log.Debug().Err(err).Msg("the browser's refusal not passed on")
		}
		return
	}
	cc, cr, err := takeClient(w, a)
	if err != nil {
		a.close()
		log.Debug().Err(err).Msg("websocket upgrade failed")
		return
	}
	pr := p.newPair(wire.NewConn(cc, cr, "client", false, p.MaxMessageSize), wire.NewConn(a.nc, a.br, "browser", true, p.MaxMessageSize), up, r.URL.Path, id, log)
	if pr == nil {
		return
	}
	log.Debug().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Msg("client connected")
	pr.run()
}

// newPair makes the pair of a client's connection and its browser's,
// or closes both when the relay is shutting down.
func (p *Proxy) newPair(client, browser *wire.Conn, up *upstream, path string, id uint64, log zerolog.Logger) *pair {
	ctx, cancel := context.WithCancel(context.Background())
	pr := &pair{
		p:       p,
		client:  client,
		browser: browser,
		up:      up,
		log:     log,
		path:    path,
		ctx:     ctx,
		cancel:  cancel,
		ended:   make(chan struct{}),
	}
	wire.Pair(client, browser)
	if up.holds != nil {
		pr.holds = up.holds.Conn(pr)
	}
	pr.share = newShare(pr, id)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cancel()
		client.End()
		browser.SayClose(closeGoingAway, "")
		client.NC.Close()
		browser.NC.Close()
		return nil
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	p.Metrics.connection(1)
	return pr
}

// run relays until either side ends, passes the ending on to the other
// side, and returns when both pumps and every held navigation are done.
func (pr *pair) run() {
	if pr.holds != nil {
		pr.holds.Start()
	}
	browserDone := make(chan struct{})
	go func() {
		pr.finish(pr.safePump(pr.browser, pr.client))
		close(browserDone)
	}()
	pr.finish(pr.safePump(pr.client, pr.browser))
	<-browserDone
	pr.cancel()
	pr.held.Wait()
	if pr.holds != nil {
		pr.holds.Ended()
	}
	pr.share.ended()
	pr.client.NC.Close()
	pr.browser.NC.Close()
	pr.p.mu.Lock()
	delete(pr.p.pairs, pr)
	pr.p.mu.Unlock()
	pr.p.Metrics.connection(-1)
	close(pr.ended)
}

// pumpEnd is why a pump stopped.
type pumpEnd struct {
	from *wire.Conn // the side that was being read
	to   *wire.Conn
	err  error
	// writeFailed is set when writing to the other side failed.
	writeFailed bool
}

// closeGrace is how long a peer gets to close its connection once the
// relay passed an ending on, or a close frame passed.
const closeGrace = wire.CloseGrace

// Close codes the relay sends itself, toward the browser or toward a
// client that sent more than it reads.
const (
	closeNormal     = 1000
	closeGoingAway  = 1001
	closeMessageBig = 1009
)

// pump relays frames from src to dst until src ends or a write to dst
// fails (package wire), showing each message read whole to the share
// and the holding. What it relays waits in dst's batch until it reads
// src again (or ends).
func (pr *pair) pump(src, dst *wire.Conn) pumpEnd {
	deliver := func(msg []byte) (bool, error) { return pr.fromBrowser(msg), nil }
	if dst.ToServer {
		deliver = pr.fromClient
	}
	p := wire.Pump{From: src, To: dst, WriteTimeout: pr.p.WriteTimeout, Deliver: deliver,
		Whole: func() int64 {
			if pr.readsWhole(dst) {
				return maxHeldCommand
			}
			return wire.SmallMessage
		},
		Relayed: func(n int) { pr.p.Metrics.relayed(dst.ToServer, n) },
		ClosePassed: func(code int) {
			pr.log.Debug().Str("from", src.Side).Int("code", code).Msg("close passed on")
		},
	}
	err := p.Run()
	var we wire.WriteError
	if errors.As(err, &we) {
		return pumpEnd{from: src, to: dst, err: we.Err, writeFailed: true}
	}
	return pumpEnd{from: src, to: dst, err: err}
}

// maxHeldCommand is the largest command read whole when navigations are
// held in the client stream: Chromium's longest URL (2 MiB) with room for
// the rest of a Page.navigate.
const maxHeldCommand = 4 << 20

// readsWhole reports whether the messages relayed to dst are read whole
// up to maxHeldCommand, for the holding or the share to see: a
// navigation's URL may be up to 2 MiB long, and so may a paused
// request's or a new page's.
func (pr *pair) readsWhole(dst *wire.Conn) bool {
	if dst.ToServer {
		return pr.holds != nil || pr.share.own != nil
	}
	return pr.holds != nil && pr.holds.ReadsAll()
}

// fromClient shows a whole message from the client to the share and the
// holding, and reports whether one of them took it; an error ends the pair.
func (pr *pair) fromClient(msg []byte) (bool, error) {
	hd, err := cdp.Scan(msg)
	if err != nil {
		return false, nil // the browser refuses it whole
	}
	if faultHook != nil {
		faultHook(&hd)
	}
	if took, err := pr.share.fromClient(&hd, msg); took || err != nil {
		return took, err
	}
	return pr.holds != nil && pr.holds.FromClient(hd, msg), nil
}

// fromBrowser shows a whole message from the browser to the share and the
// holding, scanned once when either wants it, and reports whether to drop
// it.
func (pr *pair) fromBrowser(msg []byte) bool {
	share, holds := pr.share.wants(msg), pr.holds != nil && pr.holds.Wants(msg)
	if !share && !holds {
		return false
	}
	hd, err := cdp.Scan(msg)
	if err != nil {
		return false
	}
	if share {
		pr.share.fromBrowser(&hd, msg)
	}
	return holds && pr.holds.FromBrowser(hd, msg)
}

// finish passes a pump's ending on, as the peers themselves would see
// it without a relay between them (RELIABILITY.md, "on the wire"):
//   - a side whose connection ended (its peer exited, crashed or cut
//     it) or that sent what no websocket peer may: the other side's
//     connection is ended, a TCP FIN, no close frame (Chromium sends a
//     client none when it exits, and go-rod reads every frame as a
//     message); a browser whose client is gone is closed at once, a
//     client whose browser is gone reads what was relayed first;
//   - a side that did not read in time: it is dropped, the other ended;
//   - a side that sent a frame over the read limit: it gets a close
//     (1009), the other is ended;
//   - a client whose Browser.close the relay answered itself: it is
//     ended, as Chromium's exit ends it, and the browser told 1000, as
//     Puppeteer's disconnect does.
//
// Close frames are not endings: they pass through (relayControl), and
// the peers' own closing follows.
func (pr *pair) finish(e pumpEnd) {
	if pr.closing.Swap(true) {
		return
	}
	// Said first: whoever sees the ending may look for why.
	level, why := pr.log.Debug(), e.from.Side+" connection ended"
	switch {
	case errors.Is(e.err, errClosedItsBrowser):
		why = "the client closed its browser"
	case e.writeFailed:
		level, why = pr.log.Warn(), e.to.Side+" did not read in time"
	case errors.Is(e.err, wire.ErrTooBig):
		level, why = pr.log.Warn(), "message over the read limit"
	case errors.Is(e.err, wire.ErrProtocol):
		level, why = pr.log.Warn(), e.from.Side+" broke the websocket protocol"
	case isTimeout(e.err):
		why = e.from.Side + " did not close its connection in time"
	case errors.As(e.err, new(errPanicked)):
		level, why = pr.log.Warn(), "a panic in the relay's code for this connection"
	}
	level.Str("from", e.from.Side).Str("reason", why).AnErr("err", quiet(e.err)).Msg("connection ending")
	switch {
	case errors.Is(e.err, errClosedItsBrowser):
		e.from.End() // first: the browser's answer to the close is not the client's
		e.to.SayClose(closeNormal, "")
	case e.writeFailed:
		// The other side did not take a message in time (or is gone).
		e.to.NC.Close()
		e.from.End()
	case errors.Is(e.err, wire.ErrTooBig):
		e.from.SayClose(closeMessageBig, "message over the read limit")
		e.to.End()
	case errors.Is(e.err, wire.ErrProtocol), errors.As(e.err, new(errPanicked)):
		e.from.NC.Close()
		e.to.End()
	case e.to.ToServer:
		e.to.Drop() // nothing the browser sends now has anywhere to go
	default:
		e.to.End() // the client reads what was relayed before the end
	}
}

// shutdown ends both sides as the relay stops: the client as a browser
// that exits (its connection ends), the browser as a client that
// disconnects (a close, 1001).
func (pr *pair) shutdown() {
	if pr.closing.Swap(true) {
		return
	}
	pr.log.Debug().Msg("relay shutting down: ending the connection")
	pr.client.End() // first: the browser's answer to the close is not the client's
	pr.browser.SayClose(closeGoingAway, "")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// quiet drops the errors that are how connections normally end.
func quiet(err error) error {
	if errors.Is(err, errClosedItsBrowser) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// The pair is the hold.Client of its connection's holding.

// Path is the websocket path the client asked for.
func (pr *pair) Path() string { return pr.path }

// Context ends when the pair does.
func (pr *pair) Context() context.Context { return pr.ctx }

// Held is what the pair waits for, once its context ended, before it ends.
func (pr *pair) Held() *sync.WaitGroup { return &pr.held }

// Log is the connection's logger.
func (pr *pair) Log() *zerolog.Logger { return &pr.log }

// ToBrowser writes a message to the browser and counts it.
func (pr *pair) ToBrowser(msg []byte) error { return pr.writeText(pr.browser, msg) }

// ToClient writes a message to the client and counts it.
func (pr *pair) ToClient(msg []byte) error { return pr.writeText(pr.client, msg) }

// writeText writes a whole text message to one side and counts it.
func (pr *pair) writeText(side *wire.Conn, msg []byte) error {
	if err := side.WriteMessage(wire.Text, msg, pr.p.WriteTimeout); err != nil {
		return err
	}
	pr.p.Metrics.relayed(side.ToServer, len(msg))
	return nil
}
