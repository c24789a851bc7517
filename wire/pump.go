package wire

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// CloseGrace is how long a peer gets to close its connection once a
// relay passed an ending on, or a close frame passed.
const CloseGrace = 2 * time.Second

// SmallMessage is the size up to which a Pump reads a message whole by
// default before it is written on; anything bigger is streamed through in
// pieces of bigPiece.
const SmallMessage = 64 << 10

// bigPiece is how much of a big message is read before it is written on.
const bigPiece = 1 << 20

// WriteError marks an error writing to the other side: the peer did not
// read in time, or is gone.
type WriteError struct{ Err error }

func (e WriteError) Error() string { return e.Err.Error() }
func (e WriteError) Unwrap() error { return e.Err }

// Pooled buffers hold a frame as writeFrameLocked takes it: room for the
// header, then the payload.
var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, MaxHeader+SmallMessage); return &b }}
	bigBufs   = sync.Pool{New: func() any { b := make([]byte, MaxHeader+bigPiece); return &b }}
)

// Pump passes the frames From reads on to To, one goroutine a direction,
// as the sender framed them: a control frame as it comes (a close sets
// both sides' read deadlines CloseGrace ahead: the peers' own closing
// follows), a message up to Whole bytes read whole and shown to Deliver,
// then written on unless Deliver took it (toward a server in one masked
// text frame, as a client writes; toward a client in the frames its
// sender used), and a bigger one streamed frame by frame without ever
// being held whole. What it relays waits in To's Batch, when it has one,
// until it reads From again or ends.
//
// Pump knows nothing of what the messages say: the relay's hooks do.
// Nil hooks do nothing; Whole nil means SmallMessage.
type Pump struct {
	From, To *Conn
	// WriteTimeout bounds each write to To.
	WriteTimeout time.Duration
	// Whole is asked, for each message, how big it may be and still be
	// read whole and shown to Deliver.
	Whole func() int64
	// Deliver is shown each message read whole and reports whether it
	// took it (it then writes it, or answers it, itself); an error ends
	// the pump. Called on the pump's goroutine.
	Deliver func(msg []byte) (took bool, err error)
	// Relayed is told the length of each message written on.
	Relayed func(n int)
	// ClosePassed is told the code of each close frame passed on.
	ClosePassed func(code int)
}

// Run relays until From ends or a write to To fails, and returns why:
// a write's failure as a WriteError.
func (p *Pump) Run() error {
	src, dst := p.From, p.To
	defer dst.flush()
	for {
		h, err := src.R.Next()
		if err == nil {
			switch {
			case h.Op.Control():
				err = p.control(h, false)
			case h.Op == Continuation:
				err = fmt.Errorf("relay: %w: a continuation frame with no message begun", ErrProtocol)
			default:
				err = p.message(h)
			}
		}
		if err != nil {
			return err
		}
	}
}

// control passes a control frame on: a client's ping reaches the
// server, which answers it (Chromium and Lightpanda do), a close reaches
// the other side, whose answer comes back the same way. locked is set
// when the caller holds To's wmu (in the middle of a message).
func (p *Pump) control(h Header, locked bool) error {
	src, dst := p.From, p.To
	var b [MaxHeader + MaxControl]byte
	frame := b[:MaxHeader+h.Len]
	if _, err := io.ReadFull(src.R, frame[MaxHeader:]); err != nil {
		return err
	}
	if !locked {
		dst.wmu.Lock()
		defer dst.wmu.Unlock()
	}
	if err := dst.writeFrameLocked(dst.header(true, h.Op, h.Len), frame, p.WriteTimeout); err != nil {
		return WriteError{err}
	}
	if err := dst.flush(); err != nil {
		return WriteError{err}
	}
	if h.Op == Close {
		if p.ClosePassed != nil {
			p.ClosePassed(closeCode(frame[MaxHeader:]))
		}
		deadline := time.Now().Add(CloseGrace)
		src.NC.SetReadDeadline(deadline)
		dst.NC.SetReadDeadline(deadline)
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

// message relays the message whose first frame's header is h.
func (p *Pump) message(h Header) error {
	whole := int64(SmallMessage)
	if p.Whole != nil {
		whole = p.Whole()
	}
	if !h.Fin {
		return p.fragments(h, whole)
	}
	if h.Len > whole {
		return p.stream(h, nil)
	}
	bp, frame := frameBuf(h.Len)
	defer putFrameBuf(bp)
	if _, err := io.ReadFull(p.From.R, frame[MaxHeader:]); err != nil {
		return err
	}
	return p.deliver(h.Op, frame, nil)
}

// frameBuf returns a pooled buffer holding a frame of n bytes' payload
// (a new one past SmallMessage), and the frame in it.
func frameBuf(n int64) (*[]byte, []byte) {
	if n <= SmallMessage {
		bp := smallBufs.Get().(*[]byte)
		return bp, (*bp)[:MaxHeader+n]
	}
	b := make([]byte, MaxHeader+n)
	return nil, b
}

func putFrameBuf(bp *[]byte) {
	if bp != nil {
		smallBufs.Put(bp)
	}
}

// deliver shows a whole message, in frame after the header's room, to
// Deliver, and writes it on unless Deliver took it: toward a server in
// one text frame (Chromium drops a connection on a binary frame),
// toward a client in frames of lens (one when nil) with the opcode it
// came with.
func (p *Pump) deliver(op Op, frame []byte, lens []int64) error {
	dst := p.To
	msg := frame[MaxHeader:]
	if p.Deliver != nil {
		if took, err := p.Deliver(msg); took || err != nil {
			return err
		}
	}
	if dst.ToServer {
		op, lens = Text, nil
	}
	var err error
	if len(lens) <= 1 {
		err = dst.writeRelayed(dst.header(true, op, int64(len(msg))), frame, p.WriteTimeout)
	} else {
		err = dst.writeFrames(op, msg, lens, p.WriteTimeout)
	}
	if err != nil {
		return WriteError{err}
	}
	if p.Relayed != nil {
		p.Relayed(len(msg))
	}
	return nil
}

// fragments relays a message sent in several frames, the first's
// header h: read whole while it stays within whole bytes, then
// delivered; past that, streamed on frame by frame. Control frames
// between its frames are passed on as they come.
func (p *Pump) fragments(h Header, whole int64) error {
	src := p.From
	op := h.Op
	buf := make([]byte, MaxHeader, MaxHeader+min(h.Len, whole))
	var lens []int64
	for {
		if src.R.Limit > 0 && int64(len(buf)-MaxHeader)+h.Len > src.R.Limit {
			return fmt.Errorf("%w: a message of over %d bytes", ErrTooBig, src.R.Limit)
		}
		if int64(len(buf)-MaxHeader)+h.Len > whole {
			return p.stream(h, &begun{op: op, payload: buf[MaxHeader:], lens: lens})
		}
		n := len(buf)
		buf = slices.Grow(buf, int(h.Len))[:n+int(h.Len)]
		if _, err := io.ReadFull(src.R, buf[n:]); err != nil {
			return err
		}
		lens = append(lens, h.Len)
		if h.Fin {
			return p.deliver(op, buf, lens)
		}
		var err error
		if h, err = p.nextFragment(false); err != nil {
			return err
		}
	}
}

// nextFragment reads the header of a message's next frame, passing on
// the control frames before it.
func (p *Pump) nextFragment(locked bool) (Header, error) {
	for {
		h, err := p.From.R.Next()
		if err != nil {
			return h, err
		}
		if !h.Op.Control() {
			if h.Op != Continuation {
				return h, fmt.Errorf("relay: %w: a %s frame in the middle of a message", ErrProtocol, h.Op)
			}
			return h, nil
		}
		if err := p.control(h, locked); err != nil {
			return h, err
		}
	}
}

// begun are the frames of a message read before it was found too big to
// read whole.
type begun struct {
	op      Op
	payload []byte
	lens    []int64
}

// stream relays a message frame by frame, from the frame whose header
// h was just read: each frame is written with its length, then its
// payload as it is read, in pieces of bigPiece. pre are frames of it
// read before. To's wmu is held throughout, so that nothing else is
// written in the middle of the message.
func (p *Pump) stream(h Header, pre *begun) error {
	src, dst := p.From, p.To
	dst.wmu.Lock()
	defer dst.wmu.Unlock()
	if dst.batch != nil {
		dst.batch.mark(true)
		defer dst.batch.mark(false)
	}
	bb := bigBufs.Get().(*[]byte)
	defer bigBufs.Put(bb)
	timeout := p.WriteTimeout
	op := h.Op
	total := int64(0)
	if pre != nil {
		op = pre.op
		if dst.ToServer {
			op = Text // a browser takes no other
		}
		off := int64(0)
		for _, n := range pre.lens {
			if err := dst.streamFrameLocked(dst.header(false, op, n), bytes.NewReader(pre.payload[off:off+n]), *bb, timeout); err != nil {
				return err
			}
			op, off = Continuation, off+n
		}
		total = off
	} else if dst.ToServer {
		op = Text
	}
	for {
		if src.R.Limit > 0 && total+h.Len > src.R.Limit {
			// Every frame within the limit, the message over it.
			return fmt.Errorf("%w: a message of over %d bytes", ErrTooBig, src.R.Limit)
		}
		if err := dst.streamFrameLocked(dst.header(h.Fin, op, h.Len), src.R, *bb, timeout); err != nil {
			return err
		}
		total += h.Len
		if h.Fin {
			break
		}
		var err error
		if h, err = p.nextFragment(true); err != nil {
			return err
		}
		op = Continuation
	}
	if p.Relayed != nil {
		p.Relayed(int(total))
	}
	return nil
}
