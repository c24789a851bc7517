package wire

import (
	"net"
	"sync"
	"time"
)

// Batch is one side's network connection under its websocket, made by
// Batching. It lets the Pump that relays to this side send what it
// relays from one read of the other side in one system call, as a
// byte-copying proxy does, instead of one per message: a busy browser's
// events come many to a read.
//
// Only the pump's own relayed messages wait: the pump marks them
// (Conn.writeRelayed), and they are sent when the pump reads its side
// again (the read of the other side's Batch sends them before it can
// block) or when the pump ends. Every other write (a held navigation let
// go, the relay's own command, an answer of the share, a ping or a close)
// is sent at once, after what waits before it, so nobody waiting for an
// answer waits for the pump. A control frame written while the pump is
// between its mark and its write may join the batch; the pump is writing
// then, and sends it when it reads again.
//
// A batch holds at most maxBatch bytes. A write that fails fails every
// write after it; a batch that fails ends the read of the pump that sent
// it with a WriteError, as its own write's failure would.
type Batch struct {
	net.Conn
	// out is the connection the pump reading this one relays to: a read
	// here sends out's batch first. Set once, before either side is read.
	out *Batch

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

// PairBatches links the connections under a client's websocket and its
// browser's, when both are Batchs, and returns them (nil for one that
// is not).
func PairBatches(client, browser net.Conn) (*Batch, *Batch) {
	c, ok1 := client.(*Batch)
	b, ok2 := browser.(*Batch)
	if !ok1 || !ok2 {
		return nil, nil
	}
	c.out, b.out = b, c
	return c, b
}

// Read sends the batch of the pump reading here, then reads.
func (bc *Batch) Read(p []byte) (int, error) {
	if bc.out != nil {
		if err := bc.out.send(); err != nil {
			return 0, WriteError{err}
		}
	}
	return bc.Conn.Read(p)
}

// mark starts (true) or ends (false) the pump's write of a relayed
// message: what is written in between joins the batch.
func (bc *Batch) mark(on bool) {
	bc.mu.Lock()
	bc.batching = on
	bc.mu.Unlock()
}

func (bc *Batch) Write(p []byte) (int, error) {
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
func (bc *Batch) SetWriteDeadline(t time.Time) error {
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
func (bc *Batch) refreshDeadline() {
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
func (bc *Batch) send() error {
	bc.mu.Lock()
	defer bc.mu.Unlock()
	return bc.sendLocked()
}

// sendLocked writes what the batch holds. Callers hold mu.
func (bc *Batch) sendLocked() error {
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
func (bc *Batch) Close() error {
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
func (bc *Batch) CloseWrite() error {
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

// Batching makes c a Batch.
func Batching(c net.Conn) *Batch { return &Batch{Conn: c} }
