package relay

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// batchConn is one side's network connection under its websocket. It
// lets the pump that relays to this side send what it relays from one
// read of the other side in one system call, as a byte-copying proxy
// does, instead of one per message: a busy browser's events come many to
// a read.
//
// Only the pump's own relayed messages wait: the pump marks them
// (conn.writeRelayed), and they are sent when the pump reads its side
// again (the read of the other side's batchConn sends them before it can
// block) or when the pump ends. Every other write (a held navigation let
// go, the relay's own command, an answer of the share, a ping or a close)
// is sent at once, after what waits before it, so nobody waiting for an
// answer waits for the pump. A control frame written while the pump is
// between its mark and its write may join the batch; the pump is writing
// then, and sends it when it reads again.
//
// A batch holds at most maxBatch bytes. A write that fails fails every
// write after it; a batch that fails ends the read of the pump that sent
// it with a writeError, as its own write's failure would.
type batchConn struct {
	net.Conn
	// out is the connection the pump reading this one relays to: a read
	// here sends out's batch first. Set once, before either side is read.
	out *batchConn

	mu       sync.Mutex
	batching bool   // guarded by mu; the pump's relayed message is being written
	pending  []byte // guarded by mu
	err      error  // guarded by mu; the write that failed

	dmu      sync.Mutex
	deadline time.Time // guarded by dmu; the write deadline last asked for
	applied  time.Time // guarded by dmu; the one the connection has
}

// maxBatch bounds what a batch holds.
const maxBatch = 64 << 10

// pairBatches links the connections under a client's websocket and its
// browser's, when both are batchConns, and returns them (nil for one that
// is not).
func pairBatches(client, browser net.Conn) (*batchConn, *batchConn) {
	c, ok1 := client.(*batchConn)
	b, ok2 := browser.(*batchConn)
	if !ok1 || !ok2 {
		return nil, nil
	}
	c.out, b.out = b, c
	return c, b
}

// Read sends the batch of the pump reading here, then reads.
func (bc *batchConn) Read(p []byte) (int, error) {
	if bc.out != nil {
		if err := bc.out.send(); err != nil {
			return 0, writeError{err}
		}
	}
	return bc.Conn.Read(p)
}

// mark starts (true) or ends (false) the pump's write of a relayed
// message: what is written in between joins the batch.
func (bc *batchConn) mark(on bool) {
	bc.mu.Lock()
	bc.batching = on
	bc.mu.Unlock()
}

func (bc *batchConn) Write(p []byte) (int, error) {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	if bc.err != nil {
		return 0, bc.err
	}
	if !bc.batching && len(bc.pending) == 0 || len(p) >= maxBatch {
		if err := bc.sendLocked(); err != nil {
			return 0, err
		}
		bc.refreshDeadline()
		n, err := bc.Conn.Write(p)
		if err != nil {
			bc.err = err
		}
		return n, err
	}
	if len(bc.pending)+len(p) > maxBatch {
		if err := bc.sendLocked(); err != nil {
			return 0, err
		}
	}
	bc.pending = append(bc.pending, p...)
	if !bc.batching {
		if err := bc.sendLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// SetWriteDeadline notes the deadline for the writes after it. The
// websocket sets one before every frame it writes, most of which only
// join a batch (and asking the connection costs a timer's update, 5% of
// the relay's CPU in a crawl of 100 pages): the connection gets a later
// deadline when it writes, and only once the one it has would leave the
// write less than half the time asked for. A sooner one it gets at once,
// so that a close's short deadline ends a write under way, as it would
// without batching.
func (bc *batchConn) SetWriteDeadline(t time.Time) error {
	bc.dmu.Lock()
	defer bc.dmu.Unlock()
	bc.deadline = t
	if !t.IsZero() && (bc.applied.IsZero() || t.Before(bc.applied)) {
		bc.applied = t
		return bc.Conn.SetWriteDeadline(t)
	}
	return nil
}

// refreshDeadline gives the connection the deadline last asked for, before
// it writes, unless the one it has leaves at least half as long.
func (bc *batchConn) refreshDeadline() {
	bc.dmu.Lock()
	defer bc.dmu.Unlock()
	want := bc.deadline
	if want.Equal(bc.applied) {
		return
	}
	if !want.IsZero() {
		now := time.Now()
		if bc.applied.Sub(now) >= want.Sub(now)/2 {
			return
		}
	}
	bc.applied = want
	bc.Conn.SetWriteDeadline(want)
}

// send writes what the batch holds.
func (bc *batchConn) send() error {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return bc.sendLocked()
}

// sendLocked writes what the batch holds. Callers hold mu.
func (bc *batchConn) sendLocked() error {
	if bc.err != nil || len(bc.pending) == 0 {
		return bc.err
	}
	bc.refreshDeadline()
	_, err := bc.Conn.Write(bc.pending)
	bc.pending = bc.pending[:0]
	if err != nil {
		bc.err = err
	}
	return err
}

// Close sends what the batch holds, within closeSend, then closes. While
// a write is under way (a peer that does not read), it closes at once:
// closing is what ends that write.
func (bc *batchConn) Close() error {
	if bc.mu.TryLock() {
		if len(bc.pending) > 0 {
			bc.SetWriteDeadline(time.Now().Add(closeSend))
			bc.sendLocked()
		}
		bc.mu.Unlock()
	}
	return bc.Conn.Close()
}

// CloseWrite sends what the batch holds and shuts the connection's
// write side (a TCP FIN), when the connection can.
func (bc *batchConn) CloseWrite() error {
	cw, ok := bc.Conn.(interface{ CloseWrite() error })
	if !ok {
		return bc.Close()
	}
	if err := bc.send(); err != nil {
		return err
	}
	return cw.CloseWrite()
}

// closeSend bounds how long Close waits to send what a batch holds.
const closeSend = time.Second

// dialBatching dials a browser's websocket connection as a batchConn.
func dialBatching(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &batchConn{Conn: c}, nil
}

// batchingWriter hands the websocket upgrade its connection as a
// batchConn.
type batchingWriter struct{ http.ResponseWriter }

func (w batchingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &batchConn{Conn: c}, brw, nil
}

func (w batchingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
