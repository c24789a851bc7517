package relay

import (
	"bufio"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/cdp-throttle/cdp-throttle/wire"
)

// conn is one side of a relayed connection, read and written frame by
// frame (package wire): toward a client the relay frames as the browser
// did, toward the browser as a client does (Puppeteer's way: one masked
// text frame a message).
type conn struct {
	nc   net.Conn     // under the websocket: a batchConn when it batches
	r    *wire.Reader // read by this side's pump only
	side string       // "client" or "browser", for logs
	// toBrowser is set on the browser side: frames written to it are
	// masked, as a client's are, and text (the browser takes no other).
	toBrowser bool
	// wmu serialises what is written: a frame, or every frame of a
	// message relayed in pieces. Taken after no other lock of the pair.
	wmu sync.Mutex
	// batch is nc when it batches the pump's writes (batch.go), else nil.
	batch *batchConn
	// wbuf is a small message's frame as written; guarded by wmu.
	wbuf []byte
}

// newConn reads frames from br, which reads nc.
func newConn(nc net.Conn, br *bufio.Reader, side string, limit int64) *conn {
	c := &conn{nc: nc, r: wire.NewReader(br), side: side, toBrowser: side == "browser"}
	c.r.Limit = limit
	return c
}

// header is the header of a frame written to this side: masked toward
// the browser, with a key of its own.
func (c *conn) header(fin bool, op wire.Op, n int64) wire.Header {
	h := wire.Header{Fin: fin, Op: op, Len: n}
	if c.toBrowser {
		h.Masked = true
		binary.LittleEndian.PutUint32(h.Key[:], rand.Uint32())
	}
	return h
}

// writeFrameLocked writes the frame in frame, whose first wire.MaxHeader
// bytes are room for its header and the rest its payload (masked here
// in place when h is masked), in one write. Callers hold wmu.
func (c *conn) writeFrameLocked(h wire.Header, frame []byte, timeout time.Duration) error {
	payload := frame[wire.MaxHeader:]
	start := wire.MaxHeader - h.Size()
	h.Put(frame[start:])
	if h.Masked {
		wire.Mask(h.Key, 0, payload)
	}
	c.nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.nc.Write(frame[start:])
	return err
}

// writeRelayed writes one frame for the pump relaying to this side:
// it may wait in the batch until the pump reads again. frame is as
// writeFrameLocked takes it.
func (c *conn) writeRelayed(h wire.Header, frame []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.batch != nil {
		c.batch.mark(true)
		defer c.batch.mark(false)
	}
	return c.writeFrameLocked(h, frame, timeout)
}

// writeMessage writes a whole message of the relay's own (a held
// navigation let go, an answer) in one frame, within timeout.
func (c *conn) writeMessage(op wire.Op, p []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	need := wire.MaxHeader + len(p)
	if cap(c.wbuf) < need {
		c.wbuf = make([]byte, need)
	}
	frame := c.wbuf[:need]
	copy(frame[wire.MaxHeader:], p)
	err := c.writeFrameLocked(c.header(true, op, int64(len(p))), frame, timeout)
	if cap(c.wbuf) > smallMessage+wire.MaxHeader {
		c.wbuf = nil // a big message's buffer is not kept
	}
	return err
}

// streamFrameLocked writes a frame of header h whose payload it reads
// from r, exactly h.Len bytes, through buf (of wire.MaxHeader bytes and
// more): the header first, then each piece as it is read. An error
// writing is a writeError. Callers hold wmu.
func (c *conn) streamFrameLocked(h wire.Header, r io.Reader, buf []byte, timeout time.Duration) error {
	hb := buf[:h.Size()]
	h.Put(hb)
	c.nc.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.nc.Write(hb); err != nil {
		return writeError{err}
	}
	piece := buf[wire.MaxHeader:]
	pos := 0
	for left := h.Len; left > 0; {
		n, err := io.ReadFull(r, piece[:min(left, int64(len(piece)))])
		if err != nil {
			return err // a wire.Reader says io.ErrUnexpectedEOF of a frame cut short
		}
		left -= int64(n)
		if h.Masked {
			pos = wire.Mask(h.Key, pos, piece[:n])
		}
		// A big message may take longer than one timeout; what matters
		// is that the peer keeps reading.
		c.nc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := c.nc.Write(piece[:n]); err != nil {
			return writeError{err}
		}
	}
	return nil
}

// writeFrames writes msg, a message relayed whole toward a client, in
// frames of the lengths its sender used.
func (c *conn) writeFrames(op wire.Op, msg []byte, lens []int64, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.batch != nil {
		c.batch.mark(true)
		defer c.batch.mark(false)
	}
	var hb [wire.MaxHeader]byte
	off := int64(0)
	for i, n := range lens {
		h := c.header(i == len(lens)-1, op, n)
		op = wire.Continuation
		c.nc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := c.nc.Write(hb[:h.Put(hb[:])]); err != nil {
			return err
		}
		if _, err := c.nc.Write(msg[off : off+n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// flush sends what waits in the batch.
func (c *conn) flush() error {
	if c.batch == nil {
		return nil
	}
	return c.batch.send()
}

// end ends this side as a peer's exit does: what waits is sent, then the
// connection's write side is shut (the peer reads its end, a TCP FIN,
// and no frame it would have to read), and the peer has closeGrace to
// close its side before the connection is dropped. A write under way
// (to a peer that does not read) is given closeGrace to finish.
func (c *conn) end() {
	c.nc.SetWriteDeadline(time.Now().Add(closeGrace))
	c.wmu.Lock()
	if c.flush() != nil {
		c.nc.Close()
	} else if cw, ok := c.nc.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
		c.nc.Close()
	}
	c.wmu.Unlock()
	c.nc.SetReadDeadline(time.Now().Add(closeGrace))
}

// drop sends what waits, within closeGrace, and closes the connection:
// for a browser whose client is gone, as the client's exit would close
// it.
func (c *conn) drop() {
	c.nc.SetWriteDeadline(time.Now().Add(closeGrace))
	c.wmu.Lock()
	c.flush()
	c.nc.Close()
	c.wmu.Unlock()
}

// sayClose sends this side a close frame with code and text, unless a
// write is under way (a peer that does not read), and gives the peer
// closeGrace to answer and close before the connection is dropped.
func (c *conn) sayClose(code int, text string) {
	if c.wmu.TryLock() {
		p := make([]byte, wire.MaxHeader+2, wire.MaxHeader+2+len(text))
		binary.BigEndian.PutUint16(p[wire.MaxHeader:], uint16(code))
		p = append(p, text...)
		c.writeFrameLocked(c.header(true, wire.Close, int64(len(p)-wire.MaxHeader)), p, time.Second)
		c.flush()
		c.wmu.Unlock()
	}
	c.nc.SetReadDeadline(time.Now().Add(closeGrace))
}

// Keepalive finds a peer whose host is gone without asking it for
// anything a browser would not: TCP keepalive probes after
// keepaliveIdle of silence, every keepaliveInterval, and the connection
// closed after keepaliveCount unanswered, keepaliveIdle +
// keepaliveCount × keepaliveInterval (30 s) after the peer was last
// heard; userTimeout closes one whose data goes unacknowledged that
// long, when keepalive, which waits while data is unacknowledged, would
// not.
const (
	keepaliveIdle     = 15 * time.Second
	keepaliveInterval = 5 * time.Second
	keepaliveCount    = 3
	userTimeout       = keepaliveIdle + keepaliveCount*keepaliveInterval
)

// keepAlive sets up keepalive and the user timeout on nc, when it is a
// TCP connection.
func keepAlive(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle, Interval: keepaliveInterval, Count: keepaliveCount})
	setUserTimeout(tc, userTimeout)
}
