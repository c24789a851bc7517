package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
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
	pr := p.newPair(newConn(cc, cr, "client", p.MaxMessageSize), newConn(a.nc, a.br, "browser", p.MaxMessageSize), up, r.URL.Path, id, log)
	if pr == nil {
		return
	}
	log.Debug().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Msg("client connected")
	pr.run()
}

// newPair makes the pair of a client's connection and its browser's,
// or closes both when the relay is shutting down.
func (p *Proxy) newPair(client, browser *conn, up *upstream, path string, id uint64, log zerolog.Logger) *pair {
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
	pr.client.batch, pr.browser.batch = pairBatches(client.nc, browser.nc)
	if up.holds != nil {
		pr.holds = up.holds.Conn(pr)
	}
	pr.share = newShare(pr, id)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		cancel()
		client.end()
		browser.sayClose(closeGoingAway, "")
		client.nc.Close()
		browser.nc.Close()
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
	pr.client.nc.Close()
	pr.browser.nc.Close()
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

// closeGrace is how long a peer gets to close its connection once the
// relay passed an ending on, or a close frame passed.
const closeGrace = 2 * time.Second

// Close codes the relay sends itself, toward the browser or toward a
// client that sent more than it reads.
const (
	closeNormal     = 1000
	closeGoingAway  = 1001
	closeMessageBig = 1009
)

// pump relays frames from src to dst until src ends or a write to dst
// fails. What it relays waits in dst's batch until it reads src again
// (or ends).
func (pr *pair) pump(src, dst *conn) pumpEnd {
	defer dst.flush()
	for {
		h, err := src.r.Next()
		if err == nil {
			switch {
			case h.Op.Control():
				err = pr.relayControl(src, dst, h, false)
			case h.Op == wire.Continuation:
				err = fmt.Errorf("relay: %w: a continuation frame with no message begun", wire.ErrProtocol)
			default:
				err = pr.relayMessage(src, dst, h)
			}
		}
		if err != nil {
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

// Pooled buffers hold a frame as writeFrameLocked takes it: room for the
// header, then the payload.
var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, wire.MaxHeader+smallMessage); return &b }}
	bigBufs   = sync.Pool{New: func() any { b := make([]byte, wire.MaxHeader+bigPiece); return &b }}
)

// bigPiece is how much of a big message is read before it is written on.
const bigPiece = 1 << 20

// relayControl passes a control frame on: a client's ping reaches the
// browser, which answers it (Chromium and Lightpanda do), a close
// reaches the other side, whose answer comes back the same way. After a
// close both peers have closeGrace to close their connections. locked
// is set when the caller holds dst's wmu (in the middle of a message).
func (pr *pair) relayControl(src, dst *conn, h wire.Header, locked bool) error {
	var b [wire.MaxHeader + wire.MaxControl]byte
	frame := b[:wire.MaxHeader+h.Len]
	if _, err := io.ReadFull(src.r, frame[wire.MaxHeader:]); err != nil {
		return err
	}
	if !locked {
		dst.wmu.Lock()
		defer dst.wmu.Unlock()
	}
	if err := dst.writeFrameLocked(dst.header(true, h.Op, h.Len), frame, pr.p.WriteTimeout); err != nil {
		return writeError{err}
	}
	if err := dst.flush(); err != nil {
		return writeError{err}
	}
	if h.Op == wire.Close {
		pr.log.Debug().Str("from", src.side).Int("code", closeCode(frame[wire.MaxHeader:])).Msg("close passed on")
		deadline := time.Now().Add(closeGrace)
		src.nc.SetReadDeadline(deadline)
		dst.nc.SetReadDeadline(deadline)
	}
	return nil
}

// closeCode is the code of a close frame's payload, 1005 for none.
func closeCode(p []byte) int {
	if len(p) < 2 {
		return 1005
	}
	return int(p[0])<<8 | int(p[1])
}

// readsWhole reports whether the messages relayed to dst are read whole
// up to maxHeldCommand, for the holding or the share to see: a
// navigation's URL may be up to 2 MiB long, and so may a paused
// request's or a new page's.
func (pr *pair) readsWhole(dst *conn) bool {
	if dst.toBrowser {
		return pr.holds != nil || pr.share.own != nil
	}
	return pr.holds != nil && pr.holds.ReadsAll()
}

// relayMessage relays the message whose first frame's header is h. A
// message up to smallMessage (maxHeldCommand where readsWhole) is read
// whole, shown to the share and the holding, and written on in the
// frames its sender used (toward the browser in one, as Puppeteer
// writes); a bigger one is streamed through frame by frame, each with
// its length, so that the relay never holds it whole.
func (pr *pair) relayMessage(src, dst *conn, h wire.Header) error {
	whole := int64(smallMessage)
	if pr.readsWhole(dst) {
		whole = maxHeldCommand
	}
	if !h.Fin {
		return pr.relayFragments(src, dst, h, whole)
	}
	if h.Len > whole {
		return pr.stream(src, dst, h, nil)
	}
	bp, frame := frameBuf(h.Len)
	defer putFrameBuf(bp)
	if _, err := io.ReadFull(src.r, frame[wire.MaxHeader:]); err != nil {
		return err
	}
	return pr.deliver(dst, h.Op, frame, nil)
}

// frameBuf returns a pooled buffer holding a frame of n bytes' payload
// (a new one past smallMessage), and the frame in it.
func frameBuf(n int64) (*[]byte, []byte) {
	if n <= smallMessage {
		bp := smallBufs.Get().(*[]byte)
		return bp, (*bp)[:wire.MaxHeader+n]
	}
	b := make([]byte, wire.MaxHeader+n)
	return nil, b
}

func putFrameBuf(bp *[]byte) {
	if bp != nil {
		smallBufs.Put(bp)
	}
}

// deliver shows a whole message, in frame after the header's room, to
// the share and the holding, and writes it on unless one of them took
// it: toward the browser in one text frame (the browser takes no
// other: Chromium drops a connection on a binary frame), toward the
// client in frames of lens (one when nil) with the opcode it came with.
func (pr *pair) deliver(dst *conn, op wire.Op, frame []byte, lens []int64) error {
	msg := frame[wire.MaxHeader:]
	if dst.toBrowser {
		if took, err := pr.fromClient(msg); took || err != nil {
			return err // held, or answered: written later by the holding or the share
		}
		op, lens = wire.Text, nil
	} else if pr.fromBrowser(msg) {
		return nil // for the relay, not the client
	}
	var err error
	if len(lens) <= 1 {
		err = dst.writeRelayed(dst.header(true, op, int64(len(msg))), frame, pr.p.WriteTimeout)
	} else {
		err = dst.writeFrames(op, msg, lens, pr.p.WriteTimeout)
	}
	if err != nil {
		return writeError{err}
	}
	pr.p.Metrics.relayed(dst.toBrowser, len(msg))
	return nil
}

// relayFragments relays a message sent in several frames, the first's
// header h: read whole while it stays within whole bytes, then
// delivered; past that, streamed on frame by frame. Control frames
// between its frames are passed on as they come.
func (pr *pair) relayFragments(src, dst *conn, h wire.Header, whole int64) error {
	op := h.Op
	buf := make([]byte, wire.MaxHeader, wire.MaxHeader+min(h.Len, whole))
	var lens []int64
	for {
		if src.r.Limit > 0 && int64(len(buf)-wire.MaxHeader)+h.Len > src.r.Limit {
			return fmt.Errorf("%w: a message of over %d bytes", wire.ErrTooBig, src.r.Limit)
		}
		if int64(len(buf)-wire.MaxHeader)+h.Len > whole {
			return pr.stream(src, dst, h, &fragments{op: op, payload: buf[wire.MaxHeader:], lens: lens})
		}
		n := len(buf)
		buf = slices.Grow(buf, int(h.Len))[:n+int(h.Len)]
		if _, err := io.ReadFull(src.r, buf[n:]); err != nil {
			return err
		}
		lens = append(lens, h.Len)
		if h.Fin {
			return pr.deliver(dst, op, buf, lens)
		}
		var err error
		if h, err = pr.nextFragment(src, dst, false); err != nil {
			return err
		}
	}
}

// nextFragment reads the header of a message's next frame, passing on
// the control frames before it.
func (pr *pair) nextFragment(src, dst *conn, locked bool) (wire.Header, error) {
	for {
		h, err := src.r.Next()
		if err != nil {
			return h, err
		}
		if !h.Op.Control() {
			if h.Op != wire.Continuation {
				return h, fmt.Errorf("relay: %w: a %s frame in the middle of a message", wire.ErrProtocol, h.Op)
			}
			return h, nil
		}
		if err := pr.relayControl(src, dst, h, locked); err != nil {
			return h, err
		}
	}
}

// fragments are the frames of a message read before it was found too
// big to read whole.
type fragments struct {
	op      wire.Op
	payload []byte
	lens    []int64
}

// stream relays a message frame by frame, from the frame whose header
// h was just read: each frame is written with its length, then its
// payload as it is read, in pieces of bigPiece. pre are frames of it
// read before. dst's wmu is held throughout, so that nothing else is
// written in the middle of the message.
func (pr *pair) stream(src, dst *conn, h wire.Header, pre *fragments) error {
	dst.wmu.Lock()
	defer dst.wmu.Unlock()
	if dst.batch != nil {
		dst.batch.mark(true)
		defer dst.batch.mark(false)
	}
	bb := bigBufs.Get().(*[]byte)
	defer bigBufs.Put(bb)
	timeout := pr.p.WriteTimeout
	op := h.Op
	if dst.toBrowser {
		op = wire.Text // the browser takes no other
	}
	total := int64(0)
	if pre != nil {
		op = pre.op
		if dst.toBrowser {
			op = wire.Text
		}
		off := int64(0)
		for _, n := range pre.lens {
			if err := dst.streamFrameLocked(dst.header(false, op, n), bytes.NewReader(pre.payload[off:off+n]), *bb, timeout); err != nil {
				return err
			}
			op, off = wire.Continuation, off+n
		}
		total = off
	}
	for {
		if src.r.Limit > 0 && total+h.Len > src.r.Limit {
			// Every frame within the limit, the message over it.
			return fmt.Errorf("%w: a message of over %d bytes", wire.ErrTooBig, src.r.Limit)
		}
		if err := dst.streamFrameLocked(dst.header(h.Fin, op, h.Len), src.r, *bb, timeout); err != nil {
			return err
		}
		total += h.Len
		if h.Fin {
			break
		}
		var err error
		if h, err = pr.nextFragment(src, dst, true); err != nil {
			return err
		}
		op = wire.Continuation
	}
	pr.p.Metrics.relayed(dst.toBrowser, int(total))
	return nil
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
	level, why := pr.log.Debug(), e.from.side+" connection ended"
	switch {
	case errors.Is(e.err, errClosedItsBrowser):
		why = "the client closed its browser"
	case e.writeFailed:
		level, why = pr.log.Warn(), e.to.side+" did not read in time"
	case errors.Is(e.err, wire.ErrTooBig):
		level, why = pr.log.Warn(), "message over the read limit"
	case errors.Is(e.err, wire.ErrProtocol):
		level, why = pr.log.Warn(), e.from.side+" broke the websocket protocol"
	case isTimeout(e.err):
		why = e.from.side + " did not close its connection in time"
	case errors.As(e.err, new(errPanicked)):
		level, why = pr.log.Warn(), "a panic in the relay's code for this connection"
	}
	level.Str("from", e.from.side).Str("reason", why).AnErr("err", quiet(e.err)).Msg("connection ending")
	switch {
	case errors.Is(e.err, errClosedItsBrowser):
		e.from.end() // first: the browser's answer to the close is not the client's
		e.to.sayClose(closeNormal, "")
	case e.writeFailed:
		// The other side did not take a message in time (or is gone).
		e.to.nc.Close()
		e.from.end()
	case errors.Is(e.err, wire.ErrTooBig):
		e.from.sayClose(closeMessageBig, "message over the read limit")
		e.to.end()
	case errors.Is(e.err, wire.ErrProtocol), errors.As(e.err, new(errPanicked)):
		e.from.nc.Close()
		e.to.end()
	case e.to.toBrowser:
		e.to.drop() // nothing the browser sends now has anywhere to go
	default:
		e.to.end() // the client reads what was relayed before the end
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
	pr.client.end() // first: the browser's answer to the close is not the client's
	pr.browser.sayClose(closeGoingAway, "")
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
func (pr *pair) writeText(side *conn, msg []byte) error {
	if err := side.writeMessage(wire.Text, msg, pr.p.WriteTimeout); err != nil {
		return err
	}
	pr.p.Metrics.relayed(side.toBrowser, len(msg))
	return nil
}
