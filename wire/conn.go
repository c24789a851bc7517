package wire

import (
	"bufio"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Conn is one side of a relayed websocket connection, read and written
// frame by frame: toward a client a relay frames as the server did (a
// Pump passes the frames on as they came), toward the server as a client
// does (Puppeteer's way: one masked text frame a message). Its methods
// are safe for concurrent use; only its Pump reads it.
type Conn struct {
	NC   net.Conn // under the websocket: a *Batch when it batches
	R    *Reader  // read by this side's Pump only
	Side string   // "client" or "browser", for logs
	// ToServer is set on the server's side (the browser's): frames written
	// to it are masked, as a client's are, and text (a browser takes no
	// other).
	ToServer bool
	// wmu serialises what is written: a frame, or every frame of a
	// message relayed in pieces. Taken after no other lock of the relay's.
	wmu sync.Mutex
	// batch is NC when it batches the pump's writes (batch.go), else nil.
	batch *Batch
	// wbuf is a small message's frame as written; guarded by wmu.
	wbuf []byte
}

// NewConn is a side that reads frames from br, which reads nc, refusing a
// message over limit bytes (0: none); toServer says it is the server's.
func NewConn(nc net.Conn, br *bufio.Reader, side string, toServer bool, limit int64) *Conn {
	c := &Conn{NC: nc, R: NewReader(br), Side: side, ToServer: toServer}
	c.R.Limit = limit
	return c
}

// Pair links the sides of one relayed connection, so that each batches
// what its Pump relays to the other (Batch), when both are Batches.
func Pair(client, server *Conn) {
	client.batch, server.batch = PairBatches(client.NC, server.NC)
}

// header is the header of a frame written to this side: masked toward
// the server, with a key of its own.
func (c *Conn) header(fin bool, op Op, n int64) Header {
	h := Header{Fin: fin, Op: op, Len: n}
	if c.ToServer {
		h.Masked = true
		binary.LittleEndian.PutUint32(h.Key[:], rand.Uint32())
	}
	return h
}

// writeFrameLocked writes the frame in frame, whose first MaxHeader
// bytes are room for its header and the rest its payload (masked here
// in place when h is masked), in one write. Callers hold wmu.
func (c *Conn) writeFrameLocked(h Header, frame []byte, timeout time.Duration) error {
	payload := frame[MaxHeader:]
	start := MaxHeader - h.Size()
	h.Put(frame[start:])
	if h.Masked {
		Mask(h.Key, 0, payload)
	}
	c.NC.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.NC.Write(frame[start:])
	return err
}

// writeRelayed writes one frame for the pump relaying to this side:
// it may wait in the batch until the pump reads again. frame is as
// writeFrameLocked takes it.
func (c *Conn) writeRelayed(h Header, frame []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.batch != nil {
		c.batch.mark(true)
		defer c.batch.mark(false)
	}
	return c.writeFrameLocked(h, frame, timeout)
}

// WriteMessage writes a whole message of the relay's own (a held
// navigation let go, an answer) in one frame, within timeout.
func (c *Conn) WriteMessage(op Op, p []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	need := MaxHeader + len(p)
	if cap(c.wbuf) < need {
		c.wbuf = make([]byte, need)
	}
	frame := c.wbuf[:need]
	copy(frame[MaxHeader:], p)
	err := c.writeFrameLocked(c.header(true, op, int64(len(p))), frame, timeout)
	if cap(c.wbuf) > SmallMessage+MaxHeader {
		c.wbuf = nil // a big message's buffer is not kept
	}
	return err
}

// streamFrameLocked writes a frame of header h whose payload it reads
// from r, exactly h.Len bytes, through buf (of MaxHeader bytes and
// more): the header first, then each piece as it is read. An error
// writing is a WriteError. Callers hold wmu.
func (c *Conn) streamFrameLocked(h Header, r io.Reader, buf []byte, timeout time.Duration) error {
	hb := buf[:h.Size()]
	h.Put(hb)
	c.NC.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.NC.Write(hb); err != nil {
		return WriteError{err}
	}
	piece := buf[MaxHeader:]
	pos := 0
	for left := h.Len; left > 0; {
		n, err := io.ReadFull(r, piece[:min(left, int64(len(piece)))])
		if err != nil {
			return err // a Reader says io.ErrUnexpectedEOF of a frame cut short
		}
		left -= int64(n)
		if h.Masked {
			pos = Mask(h.Key, pos, piece[:n])
		}
		// A big message may take longer than one timeout; what matters
		// is that the peer keeps reading.
		c.NC.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := c.NC.Write(piece[:n]); err != nil {
			return WriteError{err}
		}
	}
	return nil
}

// writeFrames writes msg, a message relayed whole toward a client, in
// frames of the lengths its sender used.
func (c *Conn) writeFrames(op Op, msg []byte, lens []int64, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.batch != nil {
		c.batch.mark(true)
		defer c.batch.mark(false)
	}
	var hb [MaxHeader]byte
	off := int64(0)
	for i, n := range lens {
		h := c.header(i == len(lens)-1, op, n)
		op = Continuation
		c.NC.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := c.NC.Write(hb[:h.Put(hb[:])]); err != nil {
			return err
		}
		if _, err := c.NC.Write(msg[off : off+n]); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// flush sends what waits in the batch.
func (c *Conn) flush() error {
	if c.batch == nil {
		return nil
	}
	return c.batch.send()
}

// End ends this side as a peer's exit does: what waits is sent, then the
// connection's write side is shut (the peer reads its end, a TCP FIN,
// and no frame it would have to read), and the peer has CloseGrace to
// close its side before the connection is dropped. A write under way
// (to a peer that does not read) is given CloseGrace to finish.
func (c *Conn) End() {
	c.NC.SetWriteDeadline(time.Now().Add(CloseGrace))
	c.wmu.Lock()
	if c.flush() != nil {
		c.NC.Close()
	} else if cw, ok := c.NC.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
		c.NC.Close()
	}
	c.wmu.Unlock()
	c.NC.SetReadDeadline(time.Now().Add(CloseGrace))
}

// Drop sends what waits, within CloseGrace, and closes the connection:
// for a browser whose client is gone, as the client's exit would close
// it.
func (c *Conn) Drop() {
	c.NC.SetWriteDeadline(time.Now().Add(CloseGrace))
	c.wmu.Lock()
	c.flush()
	c.NC.Close()
	c.wmu.Unlock()
}

// SayClose sends this side a close frame with code and text, unless a
// write is under way (a peer that does not read), and gives the peer
// CloseGrace to answer and close before the connection is dropped.
func (c *Conn) SayClose(code int, text string) {
	if c.wmu.TryLock() {
		p := make([]byte, MaxHeader+2, MaxHeader+2+len(text))
		binary.BigEndian.PutUint16(p[MaxHeader:], uint16(code))
		p = append(p, text...)
		c.writeFrameLocked(c.header(true, Close, int64(len(p)-MaxHeader)), p, time.Second)
		c.flush()
		c.wmu.Unlock()
	}
	c.NC.SetReadDeadline(time.Now().Add(CloseGrace))
}
