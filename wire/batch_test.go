package wire

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeCounter counts the writes that reach a connection.
type writeCounter struct {
	net.Conn
	mu     sync.Mutex
	writes int
	fail   error
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	fail := w.fail
	w.mu.Unlock()
	if fail != nil {
		return 0, fail
	}
	return w.Conn.Write(p)
}

func (w *writeCounter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// readFor reads what arrives at c within d.
func readFor(c net.Conn, d time.Duration) []byte {
	var got []byte
	buf := make([]byte, 1<<20)
	c.SetReadDeadline(time.Now().Add(d))
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got
		}
	}
}

// batched returns a client and a browser side as the relay has them (the
// relay's ends, batching) and the ends of the client and the browser.
func batched(t *testing.T) (client, browser *Batch, bw *writeCounter, clientEnd, browserEnd net.Conn) {
	cr, ce := tcpPair(t)
	br, be := tcpPair(t)
	bw = &writeCounter{Conn: br}
	client, browser = PairBatches(&Batch{Conn: cr}, &Batch{Conn: bw})
	return client, browser, bw, ce, be
}

// relayed writes as the pump does what it relays to bc.
func relayed(bc *Batch, msgs ...string) {
	for _, m := range msgs {
		bc.mark(true)
		bc.Write([]byte(m))
		bc.mark(false)
	}
}

// TestBatchConn: what the pump relays to one side waits until it reads
// the other again, and goes out in one write; any other write goes out at
// once, after what waits; a write too big for a batch goes out alone; a
// failed write fails those after it; Close sends what is left.
func TestBatchConn(t *testing.T) {
	t.Run("the pump's writes wait for its next read", func(t *testing.T) {
		client, browser, bw, clientEnd, browserEnd := batched(t)
		relayed(browser, "one,", "two,", "three")
		if got := readFor(browserEnd, 50*time.Millisecond); len(got) != 0 {
			t.Fatalf("the browser got %q before the pump read again", got)
		}
		read := make(chan error, 1)
		go func() {
			_, err := client.Read(make([]byte, 64)) // sends the batch, then waits
			read <- err
		}()
		if got := readFor(browserEnd, 200*time.Millisecond); string(got) != "one,two,three" {
			t.Errorf("the browser got %q once the pump read again, want one,two,three", got)
		}
		if n := bw.count(); n != 1 {
			t.Errorf("%d writes reached the browser's connection, want 1", n)
		}
		clientEnd.Close()
		if err := <-read; !errors.Is(err, io.EOF) {
			t.Errorf("the pump's read: %v, want EOF", err)
		}
	})
	t.Run("any other write goes at once", func(t *testing.T) {
		_, browser, bw, _, browserEnd := batched(t)
		if _, err := browser.Write([]byte("alone")); err != nil {
			t.Fatal(err)
		}
		if got := readFor(browserEnd, 100*time.Millisecond); string(got) != "alone" || bw.count() != 1 {
			t.Fatalf("a write with nothing waiting: the browser got %q in %d writes, want it at once in 1", got, bw.count())
		}
		relayed(browser, "relayed,")
		browser.Write([]byte("let go")) // a held navigation, while the pump waits elsewhere
		if got := readFor(browserEnd, 100*time.Millisecond); string(got) != "relayed,let go" {
			t.Errorf("the browser got %q, want what waited and the write after it, at once", got)
		}
		if n := bw.count(); n != 2 {
			t.Errorf("%d writes reached the browser's connection, want 2", n)
		}
	})
	t.Run("too big for a batch", func(t *testing.T) {
		_, browser, _, _, browserEnd := batched(t)
		relayed(browser, "small,")
		relayed(browser, strings.Repeat("b", maxBatch))
		if got := readFor(browserEnd, 200*time.Millisecond); len(got) != len("small,")+maxBatch || string(got[:6]) != "small," {
			t.Errorf("the browser got %d bytes, want the small write and the big one, %d, in order, at once", len(got), 6+maxBatch)
		}
		relayed(browser, strings.Repeat("c", maxBatch-10), strings.Repeat("d", 20))
		if got := readFor(browserEnd, 200*time.Millisecond); len(got) != maxBatch-10 || got[0] != 'c' {
			t.Errorf("the browser got %d bytes, want the batch that was full, %d, sent when the next did not fit", len(got), maxBatch-10)
		}
	})
	t.Run("a failed write", func(t *testing.T) {
		client, browser, bw, _, _ := batched(t)
		relayed(browser, "waiting")
		broken := errors.New("broken pipe")
		bw.mu.Lock()
		bw.fail = broken
		bw.mu.Unlock()
		var we WriteError
		if _, err := client.Read(make([]byte, 8)); !errors.As(err, &we) || !errors.Is(we.Err, broken) {
			t.Errorf("the pump's read, sending a batch that failed: %v, want a WriteError of %v", err, broken)
		}
		if _, err := browser.Write([]byte("after")); !errors.Is(err, broken) {
			t.Errorf("a write after the failed batch: %v, want %v", err, broken)
		}
	})
	t.Run("close sends what is left", func(t *testing.T) {
		_, browser, _, _, browserEnd := batched(t)
		relayed(browser, "last words")
		browser.Close()
		if got := readFor(browserEnd, 200*time.Millisecond); string(got) != "last words" {
			t.Errorf("the browser got %q, want what the batch held when it closed", got)
		}
	})
}

// deadlineCounter counts the write deadlines that reach a connection.
type deadlineCounter struct {
	net.Conn
	mu  sync.Mutex
	set int
}

func (d *deadlineCounter) SetWriteDeadline(t time.Time) error {
	d.mu.Lock()
	d.set++
	d.mu.Unlock()
	return d.Conn.SetWriteDeadline(t)
}

func (d *deadlineCounter) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.set
}

// TestBatchConnDeadline: the deadline the websocket asks before each frame
// reaches the connection only when the one it has would leave a write
// less than half the time asked for; a sooner one (a close's) reaches it
// at once and ends a write under way; a write to a peer that does not
// read still fails by its deadline.
func TestBatchConnDeadline(t *testing.T) {
	t.Run("asked per frame, given when it matters", func(t *testing.T) {
		a, b := tcpPair(t)
		dc := &deadlineCounter{Conn: a}
		bc := &Batch{Conn: dc}
		for i := range 200 {
			bc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			bc.mark(true)
			bc.Write([]byte("m"))
			bc.mark(false)
			if i%10 == 9 {
				if err := bc.send(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := readFor(b, 200*time.Millisecond); len(got) != 200 {
			t.Fatalf("the peer read %d bytes, want 200", len(got))
		}
		if n := dc.count(); n != 1 {
			t.Errorf("the connection was given a deadline %d times for 200 frames in 20 writes, want once", n)
		}
	})
	t.Run("a sooner deadline ends a write under way", func(t *testing.T) {
		a, _ := tcpPair(t) // the peer never reads
		bc := &Batch{Conn: a}
		bc.SetWriteDeadline(time.Now().Add(time.Hour))
		done := make(chan error, 1)
		go func() {
			_, err := bc.Write(make([]byte, 64<<20))
			done <- err
		}()
		time.Sleep(200 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("the write to a peer that does not read ended: %v", err)
		default:
		}
		bc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the write ended with %v, want its deadline exceeded", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a sooner deadline did not end the write under way")
		}
	})
	t.Run("a later deadline is given once the one there is half spent", func(t *testing.T) {
		a, _ := tcpPair(t) // the peer never reads
		dc := &deadlineCounter{Conn: a}
		bc := &Batch{Conn: dc}
		bc.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		time.Sleep(200 * time.Millisecond) // two thirds of it spent
		start := time.Now()
		bc.SetWriteDeadline(start.Add(400 * time.Millisecond))
		_, err := bc.Write(make([]byte, 64<<20))
		took := time.Since(start)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the write ended with %v, want its deadline exceeded", err)
		}
		if took < 300*time.Millisecond {
			t.Errorf("the write failed after %v: it kept the old deadline, which left it less than half of the 400 ms asked", took)
		}
		if n := dc.count(); n != 2 {
			t.Errorf("the connection was given a deadline %d times, want 2", n)
		}
	})
}
