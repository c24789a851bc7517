// Package wire reads and writes websocket frames (RFC 6455) one at a
// time, so that a relay can pass each frame on as its sender framed it:
// the same opcode, the same FIN bit, the same length, a payload streamed
// through without holding the message whole. It also reads and writes
// the opening handshake's HTTP head byte for byte (handshake.go).
//
// On top of frames it relays: a Conn is one side of a relayed
// connection (conn.go), a Pump passes one side's frames on to the other
// (pump.go), handing each message read whole to its caller's Deliver
// hook, and a Batch lets what a Pump relays from one read go out in one
// system call (batch.go).
//
// It knows nothing of CDP and makes no policy: which messages to pass,
// hold or answer is the caller's. Nothing here starts a goroutine; a
// Reader is for one goroutine, a Conn's writes are serialised by a lock
// of its own, taken after every lock of the caller's.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Op is a frame's opcode.
type Op byte

// The opcodes of RFC 6455, section 5.2.
const (
	Continuation Op = 0x0
	Text         Op = 0x1
	Binary       Op = 0x2
	Close        Op = 0x8
	Ping         Op = 0x9
	Pong         Op = 0xa
)

// Control reports whether op is a control frame's (close, ping, pong).
func (op Op) Control() bool { return op&0x8 != 0 }

func (op Op) String() string {
	switch op {
	case Continuation:
		return "continuation"
	case Text:
		return "text"
	case Binary:
		return "binary"
	case Close:
		return "close"
	case Ping:
		return "ping"
	case Pong:
		return "pong"
	}
	return fmt.Sprintf("op%#x", byte(op))
}

// Header is a frame's header.
type Header struct {
	Fin bool
	// Rsv holds the RSV1-3 bits where the first byte has them (0x70).
	// A Reader takes none: it negotiates no extension.
	Rsv    byte
	Op     Op
	Masked bool
	Key    [4]byte // the masking key, when Masked
	Len    int64   // the payload's length
}

// MaxHeader is the longest header: two bytes, an eight-byte length and
// a four-byte masking key.
const MaxHeader = 14

// MaxControl is the longest payload of a control frame.
const MaxControl = 125

// Errors Next returns for a frame it will not read.
var (
	// ErrProtocol is a frame no websocket peer may send: a reserved
	// opcode, a fragmented or over-long control frame, a length with its
	// top bit set.
	ErrProtocol = errors.New("wire: websocket protocol error")
	// ErrTooBig is a frame longer than the Reader's Limit.
	ErrTooBig = errors.New("wire: frame over the read limit")
)

// Size returns the length of h's encoding.
func (h Header) Size() int {
	n := 2
	switch {
	case h.Len > 0xffff:
		n += 8
	case h.Len > 125:
		n += 2
	}
	if h.Masked {
		n += 4
	}
	return n
}

// Put encodes h into b, which must hold h.Size() bytes, and returns the
// length written.
func (h Header) Put(b []byte) int {
	b0 := byte(h.Op&0xf) | h.Rsv&0x70
	if h.Fin {
		b0 |= 0x80
	}
	b[0] = b0
	var m byte
	if h.Masked {
		m = 0x80
	}
	n := 2
	switch {
	case h.Len > 0xffff:
		b[1] = m | 127
		binary.BigEndian.PutUint64(b[2:10], uint64(h.Len))
		n = 10
	case h.Len > 125:
		b[1] = m | 126
		binary.BigEndian.PutUint16(b[2:4], uint16(h.Len))
		n = 4
	default:
		b[1] = m | byte(h.Len)
	}
	if h.Masked {
		n += copy(b[n:], h.Key[:])
	}
	return n
}

// AppendHeader appends h's encoding to b.
func AppendHeader(b []byte, h Header) []byte {
	var hb [MaxHeader]byte
	return append(b, hb[:h.Put(hb[:])]...)
}

// Reader reads frames one at a time: Next reads a header, Read its
// payload, unmasked.
type Reader struct {
	br *bufio.Reader
	// Limit is the longest payload Next accepts; zero means any.
	Limit int64

	h    Header
	left int64 // what is left of the current frame's payload
	pos  int   // where in the masking key the next payload byte is
}

// NewReader reads frames from br.
func NewReader(br *bufio.Reader) *Reader { return &Reader{br: br} }

// Next reads the next frame's header, first skipping whatever of the
// current frame's payload was not read.
func (r *Reader) Next() (Header, error) {
	if r.left > 0 {
		if _, err := r.br.Discard(int(min(r.left, 1<<62))); err != nil {
			return Header{}, unexpected(err)
		}
		r.left = 0
	}
	b, err := r.br.Peek(2)
	if err != nil {
		if len(b) > 0 {
			err = unexpected(err)
		}
		return Header{}, err
	}
	h := Header{Fin: b[0]&0x80 != 0, Rsv: b[0] & 0x70, Op: Op(b[0] & 0xf), Masked: b[1]&0x80 != 0}
	n := 2
	switch l := b[1] & 0x7f; l {
	case 126:
		n += 2
	case 127:
		n += 8
	default:
		h.Len = int64(l)
	}
	if h.Masked {
		n += 4
	}
	b, err = r.br.Peek(n)
	if err != nil {
		return Header{}, unexpected(err)
	}
	switch n - 2 - 4*btoi(h.Masked) {
	case 2:
		h.Len = int64(binary.BigEndian.Uint16(b[2:4]))
	case 8:
		l := binary.BigEndian.Uint64(b[2:10])
		if l>>63 != 0 {
			return Header{}, fmt.Errorf("%w: a length with its top bit set", ErrProtocol)
		}
		h.Len = int64(l)
	}
	if h.Masked {
		copy(h.Key[:], b[n-4:n])
	}
	r.br.Discard(n)
	switch {
	case h.Rsv != 0:
		return Header{}, fmt.Errorf("%w: RSV bits %#x with no extension", ErrProtocol, h.Rsv)
	case h.Op > Binary && h.Op < Close || h.Op > Pong:
		return Header{}, fmt.Errorf("%w: reserved opcode %#x", ErrProtocol, byte(h.Op))
	case h.Op.Control() && (!h.Fin || h.Len > MaxControl):
		return Header{}, fmt.Errorf("%w: a %s frame fragmented or over %d bytes", ErrProtocol, h.Op, MaxControl)
	case r.Limit > 0 && h.Len > r.Limit:
		return Header{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooBig, h.Len, r.Limit)
	}
	r.h, r.left, r.pos = h, h.Len, 0
	return h, nil
}

// Read reads the current frame's payload, unmasked; it returns io.EOF
// once the payload is all read.
func (r *Reader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.br.Read(p)
	r.left -= int64(n)
	if r.h.Masked {
		r.pos = Mask(r.h.Key, r.pos, p[:n])
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// Buffered is how many bytes of what follows have been read from the
// connection already.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Mask masks (or unmasks) p with key, p[0] being byte pos of the
// payload, and returns the position after p.
func Mask(key [4]byte, pos int, p []byte) int {
	k := key
	if pos&3 != 0 {
		// Rotate the key so that p[0] takes key[0].
		s := pos & 3
		k = [4]byte{key[s], key[(s+1)&3], key[(s+2)&3], key[(s+3)&3]}
	}
	i := 0
	if len(p) >= 16 {
		k32 := binary.LittleEndian.Uint32(k[:])
		k64 := uint64(k32)<<32 | uint64(k32)
		for ; i+8 <= len(p); i += 8 {
			binary.LittleEndian.PutUint64(p[i:], binary.LittleEndian.Uint64(p[i:])^k64)
		}
	}
	for ; i < len(p); i++ {
		p[i] ^= k[i&3]
	}
	return (pos + len(p)) & 3
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// unexpected turns the end of the connection in the middle of a frame
// into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
