package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// frame encodes one frame the long way, as RFC 6455 section 5.2 draws it.
func frame(fin bool, op Op, masked bool, key [4]byte, payload []byte) []byte {
	b0 := byte(op)
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	var m byte
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		out = append(out, m|byte(n))
	case n < 1<<16:
		out = append(out, m|126, byte(n>>8), byte(n))
	default:
		out = append(out, m|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	if masked {
		out = append(out, key[:]...)
		for i, c := range payload {
			out = append(out, c^key[i%4])
		}
		return out
	}
	return append(out, payload...)
}

func TestHeaderRoundTrip(t *testing.T) {
	key := [4]byte{0xde, 0xad, 0xbe, 0xef}
	for _, n := range []int{0, 1, 125, 126, 127, 0xffff, 0x10000, 3 << 20} {
		for _, masked := range []bool{false, true} {
			for _, fin := range []bool{true, false} {
				payload := bytes.Repeat([]byte("abcdefg"), n/7+1)[:n]
				want := frame(fin, Text, masked, key, payload)
				h := Header{Fin: fin, Op: Text, Masked: masked, Len: int64(n)}
				if masked {
					h.Key = key
				}
				got := AppendHeader(nil, h)
				if h.Size() != len(got) || !bytes.Equal(got, want[:len(got)]) {
					t.Fatalf("n=%d masked=%v fin=%v: header %x (size %d), want %x", n, masked, fin, got, h.Size(), want[:h.Size()])
				}
				r := NewReader(bufio.NewReader(bytes.NewReader(want)))
				rh, err := r.Next()
				if err != nil || rh != h {
					t.Fatalf("n=%d masked=%v: Next = %+v, %v, want %+v", n, masked, rh, err, h)
				}
				body, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(body, payload) {
					t.Fatalf("n=%d masked=%v: payload of %d bytes, err %v; want %d bytes", n, masked, len(body), err, n)
				}
			}
		}
	}
}

func TestNextSkipsUnreadPayload(t *testing.T) {
	var in []byte
	in = append(in, frame(true, Text, false, [4]byte{}, []byte(strings.Repeat("x", 70000)))...)
	in = append(in, frame(true, Ping, true, [4]byte{1, 2, 3, 4}, []byte("hello"))...)
	r := NewReader(bufio.NewReaderSize(bytes.NewReader(in), 4096))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	io.ReadFull(r, make([]byte, 10))
	h, err := r.Next()
	if err != nil || h.Op != Ping || h.Len != 5 {
		t.Fatalf("got %+v, %v, want the ping", h, err)
	}
	if b, _ := io.ReadAll(r); string(b) != "hello" {
		t.Fatalf("got %q, want hello", b)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("got %v at the end, want io.EOF", err)
	}
}

func TestNextRefuses(t *testing.T) {
	long := bytes.Repeat([]byte("p"), 126)
	for name, tc := range map[string]struct {
		in    []byte
		limit int64
		want  error
	}{
		"reserved opcode":           {frame(true, 3, false, [4]byte{}, nil), 0, ErrProtocol},
		"RSV1 (compressed)":         {[]byte{0xc1, 0}, 0, ErrProtocol},
		"reserved control opcode":   {frame(true, 0xb, false, [4]byte{}, nil), 0, ErrProtocol},
		"fragmented ping":           {frame(false, Ping, false, [4]byte{}, nil), 0, ErrProtocol},
		"close over 125 bytes":      {frame(true, Close, false, [4]byte{}, long), 0, ErrProtocol},
		"length with top bit":       {[]byte{0x81, 127, 0x80, 0, 0, 0, 0, 0, 0, 1}, 0, ErrProtocol},
		"over the limit":            {frame(true, Text, false, [4]byte{}, long), 100, ErrTooBig},
		"cut in the header":         {[]byte{0x81, 126, 1}, 0, io.ErrUnexpectedEOF},
		"cut in the masking key":    {[]byte{0x81, 0x85, 1, 2}, 0, io.ErrUnexpectedEOF},
		"one byte then nothing":     {[]byte{0x81}, 0, io.ErrUnexpectedEOF},
		"nothing: a connection end": {nil, 0, io.EOF},
	} {
		t.Run(name, func(t *testing.T) {
			r := NewReader(bufio.NewReader(bytes.NewReader(tc.in)))
			r.Limit = tc.limit
			if _, err := r.Next(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestPayloadCut(t *testing.T) {
	in := frame(true, Text, false, [4]byte{}, []byte("0123456789"))
	r := NewReader(bufio.NewReader(bytes.NewReader(in[:7])))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); err != io.ErrUnexpectedEOF {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestMask(t *testing.T) {
	key := [4]byte{0x11, 0x22, 0x33, 0x44}
	for _, n := range []int{0, 1, 3, 7, 8, 15, 16, 17, 100, 1000} {
		for start := range 5 {
			p := bytes.Repeat([]byte{0xa5, 0x5a, 0x00, 0xff, 0x01}, n/5+1)[:n]
			want := make([]byte, n)
			for i, c := range p {
				want[i] = c ^ key[(start+i)%4]
			}
			got := bytes.Clone(p)
			// In two pieces, as a payload streamed through is.
			cut := n / 3
			pos := Mask(key, start, got[:cut])
			if pos = Mask(key, pos, got[cut:]); pos != (start+n)%4 {
				t.Fatalf("n=%d start=%d: position %d, want %d", n, start, pos, (start+n)%4)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("n=%d start=%d: got %x, want %x", n, start, got, want)
			}
		}
	}
}

// FuzzNext reads any bytes as frames: each payload is as long as its
// header says, a header encodes back to what Next read (when written
// with the shortest length), and nothing is read past the input.
func FuzzNext(f *testing.F) {
	f.Add(frame(true, Text, true, [4]byte{9, 8, 7, 6}, []byte(`{"id":1}`)))
	f.Add(append(frame(false, Text, false, [4]byte{}, []byte("ab")), frame(true, Continuation, false, [4]byte{}, []byte("c"))...))
	f.Add([]byte{0x81, 127, 0, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bufio.NewReader(bytes.NewReader(in)))
		r.Limit = 1 << 20
		for {
			h, err := r.Next()
			if err != nil {
				return
			}
			enc := AppendHeader(nil, h)
			back, err := NewReader(bufio.NewReader(bytes.NewReader(enc))).Next()
			if err != nil || back != h || len(enc) != h.Size() {
				t.Fatalf("%+v encodes as %x (Size %d), read back as %+v, %v", h, enc, h.Size(), back, err)
			}
			body, err := io.ReadAll(r)
			if err != nil {
				return
			}
			if int64(len(body)) != h.Len {
				t.Fatalf("payload %d bytes, header says %d", len(body), h.Len)
			}
		}
	})
}
