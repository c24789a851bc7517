package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
)

// conn is one side of a relayed connection.
type conn struct {
	c    *websocket.Conn
	side string // "client" or "browser", for logs
	// toBrowser is set on the browser side: the browser takes text frames only.
	toBrowser bool
	wmu       sync.Mutex // serialises data frames; control frames need no lock
	// batch is the connection under c when it batches the pump's writes
	// (batch.go); nil when it does not.
	batch *batchConn
}

// writeMessage writes one whole message within timeout.
func (c *conn) writeMessage(mt int, p []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.c.SetWriteDeadline(time.Now().Add(timeout))
	return c.c.WriteMessage(mt, p)
}

// writeRelayed is writeMessage for the pump relaying to this side: the
// message may wait in the batch until the pump reads again.
func (c *conn) writeRelayed(mt int, p []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.batch != nil {
		c.batch.mark(true)
		defer c.batch.mark(false)
	}
	c.c.SetWriteDeadline(time.Now().Add(timeout))
	return c.c.WriteMessage(mt, p)
}

// flush sends what waits in the batch.
func (c *conn) flush() error {
	if c.batch == nil {
		return nil
	}
	return c.batch.send()
}

// pair relays one client connection to its browser connection. Each side
// has one reading goroutine (its pump) and writes are serialised by the
// other side's wmu, so a held navigation can be written later without a
// queue: the browser side's writer is whoever holds its wmu.
type pair struct {
	p       *Proxy
	up      *upstream // the browser this client is relayed to
	client  *conn
	browser *conn
	log     zerolog.Logger
	path    string    // the websocket path the client asked for
	holds   hold.Conn // nil when no navigation is held
	share   *share    // what the client owns, and what it may do to the others

	ctx    context.Context // cancelled when the pair ends: held navigations give up
	cancel context.CancelFunc
	ended  chan struct{} // closed once both pumps and the held navigations are done
	held   sync.WaitGroup

	closing atomic.Bool // the first close has been sent on both sides
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
	if !p.upgrader.CheckOrigin(r) {
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
	// Dial first: a browser that refuses is answered with its own status,
	// before the client's connection is upgraded.
	bc, resp, err := p.clientDialer.DialContext(r.Context(), target, nil)
	if err != nil && (resp == nil || resp.StatusCode == http.StatusNotFound) {
		// The browser may have restarted under a new endpoint (on the same
		// port, Chromium answers the old one 404): look again.
		up.forget(target)
		if fresh, ferr := up.pageWS(r.Context(), r.URL.Path); ferr == nil && fresh != target {
			target = fresh
			bc, resp, err = p.clientDialer.DialContext(r.Context(), target, nil)
		}
	}
	if isBrowserFull(resp) && p.gate.BrowserCapacity(place.Browser) > 0 {
		// The place is the client's: the browser has not yet seen the
		// close of the connection that left it.
		for deadline := time.Now().Add(browserFullRetry); isBrowserFull(resp) && time.Now().Before(deadline) && r.Context().Err() == nil; {
			time.Sleep(50 * time.Millisecond)
			bc, resp, err = p.clientDialer.DialContext(r.Context(), target, nil)
		}
	}
	if err != nil {
		status, msg := http.StatusBadGateway, "cdp-throttle: browser refused the websocket: "+err.Error()
		if resp != nil {
			status = resp.StatusCode
			if body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096)); len(body) > 0 {
				msg = string(body)
			}
		}
		log.Warn().Err(err).Str("path", r.URL.Path).Int("status", status).Msg("browser refused the websocket")
		http.Error(w, msg, status)
		return
	}
	cc, err := p.upgrader.Upgrade(batchingWriter{w}, r, nil)
	if err != nil {
		bc.Close()
		log.Debug().Err(err).Msg("websocket upgrade failed")
		return
	}
	pr := p.newPair(cc, bc, up, r.URL.Path, id, log)
	if pr == nil {
		return
	}
	log.Debug().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Msg("client connected")
	pr.run()
}

func (p *Proxy) newPair(cc, bc *websocket.Conn, up *upstream, path string, id uint64, log zerolog.Logger) *pair {
	ctx, cancel := context.WithCancel(context.Background())
	pr := &pair{
		p:       p,
		client:  &conn{c: cc, side: "client"},
		browser: &conn{c: bc, side: "browser", toBrowser: true},
		up:      up,
		log:     log,
		path:    path,
		ctx:     ctx,
		cancel:  cancel,
		ended:   make(chan struct{}),
	}
	pr.client.batch, pr.browser.batch = pairBatches(cc.NetConn(), bc.NetConn())
	for _, c := range []*conn{pr.client, pr.browser} {
		c.c.SetReadLimit(p.MaxMessageSize)
		c.c.SetCloseHandler(func(int, string) error { return nil }) // the pumps pass closes on
	}
	// A client must answer pings; browsers are not asked to.
	pongWait := 2*p.PingInterval + 10*time.Second
	cc.SetReadDeadline(time.Now().Add(pongWait))
	cc.SetPongHandler(func(string) error { return cc.SetReadDeadline(time.Now().Add(pongWait)) })
	if up.holds != nil {
		pr.holds = up.holds.Conn(pr)
	}
	pr.share = newShare(pr, id)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cancel()
		cc.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "relay shutting down"), time.Now().Add(time.Second))
		bc.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), time.Now().Add(time.Second))
		cc.Close()
		bc.Close()
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
		pr.finish(pr.pump(pr.browser, pr.client))
		close(browserDone)
	}()
	pr.finish(pr.pump(pr.client, pr.browser))
	<-browserDone
	pr.cancel()
	pr.held.Wait()
	if pr.holds != nil {
		pr.holds.Ended()
	}
	pr.share.ended()
	pr.client.c.Close()
	pr.browser.c.Close()
	pr.p.mu.Lock()
	delete(pr.p.pairs, pr)
	pr.p.mu.Unlock()
	pr.p.Metrics.connection(-1)
	close(pr.ended)
}

// pumpEnd is why a pump stopped.
type pumpEnd struct {
	from *conn // the side that was being read
	to   *conn
	err  error
	// writeFailed is set when writing to the other side failed.
	writeFailed bool
}

// closeGrace is how long the other side gets to answer a close.
const closeGrace = 2 * time.Second

// pump copies messages from src to dst until src ends or a write fails.
// What it relays waits in dst's batch until it reads src again (or ends).
func (pr *pair) pump(src, dst *conn) pumpEnd {
	defer dst.flush()
	for {
		mt, r, err := src.c.NextReader()
		if err != nil {
			return pumpEnd{from: src, to: dst, err: err}
		}
		if err := pr.relayMessage(src, dst, mt, r); err != nil {
			var we writeError
			if errors.As(err, &we) {
				return pumpEnd{from: src, to: dst, err: we.err, writeFailed: true}
			}
			return pumpEnd{from: src, to: dst, err: err}
		}
	}
}

// writeError marks an error writing to the other side.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }

// smallMessage is the size up to which a message is read whole before it is
// written on; anything bigger is streamed through in pieces of this size.
const smallMessage = 64 << 10

// maxHeldCommand is the largest command read whole when navigations are
// held in the client stream: Chromium's longest URL (2 MiB) with room for
// the rest of a Page.navigate.
const maxHeldCommand = 4 << 20

var smallBufs = sync.Pool{New: func() any { b := make([]byte, smallMessage); return &b }}

// bigPiece is how much of a big message is read before it is written on.
const bigPiece = 1 << 20

var bigBufs = sync.Pool{New: func() any { b := make([]byte, bigPiece); return &b }}

// relayMessage copies the message being read from src to dst. A message up
// to smallMessage is read whole and written in one frame, as the browser
// wrote it; a bigger one is streamed, so the relay never holds it whole.
func (pr *pair) relayMessage(src, dst *conn, mt int, r io.Reader) error {
	bp := smallBufs.Get().(*[]byte)
	defer smallBufs.Put(bp)
	buf := *bp
	n, err := io.ReadFull(r, buf)
	if err == nil && (dst.toBrowser && (pr.holds != nil || pr.share.own != nil) || !dst.toBrowser && pr.holds != nil && pr.holds.ReadsAll()) {
		// A navigation's URL may be up to 2 MiB long, and so may a paused
		// request's or a new page's: read a message up to maxHeldCommand
		// whole, so that the holding and the share see it.
		rest, rerr := io.ReadAll(io.LimitReader(r, maxHeldCommand-smallMessage))
		switch {
		case rerr != nil:
			return rerr
		case len(rest) < maxHeldCommand-smallMessage:
			buf, n, err = append(buf[:n:n], rest...), n+len(rest), io.EOF
		default: // no navigation is that big: stream it on
			r = io.MultiReader(bytes.NewReader(rest), r)
		}
	}
	switch err {
	case io.EOF, io.ErrUnexpectedEOF: // the whole message is in buf[:n]
		msg := buf[:n]
		if dst.toBrowser {
			// Chromium drops a connection on a binary frame; CDP is JSON text,
			// and text the browser cannot parse it answers with an error.
			mt = websocket.TextMessage
		}
		if dst.toBrowser {
			if took, err := pr.fromClient(msg); took || err != nil {
				return err // held, or answered: written later by the holding or the share
			}
		} else if pr.fromBrowser(msg) {
			return nil // for the relay, not the client
		}
		if err := dst.writeRelayed(mt, msg, pr.p.WriteTimeout); err != nil {
			return writeError{err}
		}
		pr.p.Metrics.relayed(dst.toBrowser, n)
		return nil
	case nil: // bigger than buf: stream it
	default:
		return err
	}
	if dst.toBrowser {
		mt = websocket.TextMessage
	}
	dst.wmu.Lock()
	defer dst.wmu.Unlock()
	dst.c.SetWriteDeadline(time.Now().Add(pr.p.WriteTimeout))
	w, err := dst.c.NextWriter(mt)
	if err != nil {
		return writeError{err}
	}
	if _, err := w.Write(buf); err != nil {
		return writeError{err}
	}
	// The rest goes in big pieces: fewer frames and system calls for a
	// screenshot, and still a bounded fraction of the message in memory.
	bb := bigBufs.Get().(*[]byte)
	defer bigBufs.Put(bb)
	big := *bb
	total := len(buf)
	for {
		n, rerr := io.ReadFull(r, big)
		total += n
		if n > 0 {
			// A big message may take longer than one timeout; what matters
			// is that the peer keeps reading.
			dst.c.SetWriteDeadline(time.Now().Add(pr.p.WriteTimeout))
			if _, err := w.Write(big[:n]); err != nil {
				return writeError{err}
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := w.Close(); err != nil {
		return writeError{err}
	}
	pr.p.Metrics.relayed(dst.toBrowser, total)
	return nil
}

// fromClient shows a whole message from the client to the share and the
// holding, and reports whether one of them took it; an error ends the pair.
func (pr *pair) fromClient(msg []byte) (bool, error) {
	hd, err := cdp.Scan(msg)
	if err != nil {
		return false, nil // the browser refuses it whole
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

// finish passes a pump's ending on: the side that closed or failed is
// closed, and the other side gets the close code (or 1011/1001 when there
// was none to pass on), then a little time to answer before its
// connection is dropped.
func (pr *pair) finish(e pumpEnd) {
	if pr.closing.Swap(true) {
		return
	}
	code, text := websocket.CloseNormalClosure, ""
	var ce *websocket.CloseError
	level := pr.log.Debug()
	switch {
	case errors.Is(e.err, errClosedItsBrowser):
		code, text = websocket.CloseNormalClosure, ""
	case errors.As(e.err, &ce):
		code, text = ce.Code, ce.Text
		if code == websocket.CloseAbnormalClosure || code == websocket.CloseTLSHandshake {
			code, text = lostCode(e.from), e.from.side+" connection lost"
		}
	case e.writeFailed:
		// The other side did not take a message in time (or is gone).
		code, text = websocket.ClosePolicyViolation, e.to.side+" did not read in time"
		level = pr.log.Warn()
		e.from, e.to = e.to, e.from // the stalled side is the one closed without a word
	case errors.Is(e.err, websocket.ErrReadLimit):
		code, text = websocket.CloseMessageTooBig, "message over the read limit"
		level = pr.log.Warn()
	case isTimeout(e.err):
		code, text = lostCode(e.from), e.from.side+" stopped answering pings"
		level = pr.log.Warn()
	default:
		code, text = lostCode(e.from), e.from.side+" connection lost"
	}
	level.Str("from", e.from.side).Int("code", code).Str("reason", text).AnErr("err", quiet(e.err)).Msg("connection ending")
	deadline := time.Now().Add(closeGrace)
	msg := websocket.FormatCloseMessage(code, text)
	if code == websocket.CloseNoStatusReceived {
		msg = websocket.FormatCloseMessage(websocket.CloseNoStatusReceived, "")
	}
	// Answer the side that ended (a no-op when it is already gone), tell the
	// other side, and bound how long its pump may wait for the answer.
	_ = e.from.c.WriteControl(websocket.CloseMessage, msg, deadline)
	_ = e.to.c.WriteControl(websocket.CloseMessage, msg, deadline)
	e.from.c.SetReadDeadline(deadline)
	e.to.c.SetReadDeadline(deadline)
}

// shutdown closes both sides with code and reason, as at relay shutdown.
func (pr *pair) shutdown(code int, text string) {
	if pr.closing.Swap(true) {
		return
	}
	pr.log.Debug().Int("code", code).Str("reason", text).Msg("closing connection")
	deadline := time.Now().Add(closeGrace)
	msg := websocket.FormatCloseMessage(code, text)
	_ = pr.client.c.WriteControl(websocket.CloseMessage, msg, deadline)
	_ = pr.browser.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, ""), deadline)
	pr.client.c.SetReadDeadline(deadline)
	pr.browser.c.SetReadDeadline(deadline)
}

// lostCode is the code the other side gets when side's connection was lost:
// a client learns the browser failed (1011), a browser that its client went
// away (1001).
func lostCode(side *conn) int {
	if side.toBrowser {
		return websocket.CloseInternalServerErr
	}
	return websocket.CloseGoingAway
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// quiet drops the errors that are how connections normally end.
func quiet(err error) error {
	if errors.Is(err, errClosedItsBrowser) {
		return nil
	}
	var ce *websocket.CloseError
	if errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseGoingAway || ce.Code == websocket.CloseNoStatusReceived) {
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
func (pr *pair) writeText(side *conn, msg []byte) error {
	if err := side.writeMessage(websocket.TextMessage, msg, pr.p.WriteTimeout); err != nil {
		return err
	}
	pr.p.Metrics.relayed(side.toBrowser, len(msg))
	return nil
}
