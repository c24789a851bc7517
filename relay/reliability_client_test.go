package relay

// Reliability cases of a client that misbehaves: it vanishes while its
// navigation is held, or stops reading.

import (
	"errors"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestClientVanishesWhileHeld drops a client whose navigation is held and
// checks that nothing is written for it afterwards, nothing is left
// waiting, and its booked slot is not given to another navigation.
func TestClientVanishesWhileHeld(t *testing.T) {
	t.Run("navigate", func(t *testing.T) {
		var rec *holdtest.Recorder
		tp, fb, c, fc := relayClient(t, holdtest.Fixed(time.Hour), navigateInStream, recordBookings(&rec))
		holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/1"}}`))
		fc.Next(t)
		holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"}}`))
		for len(rec.Bookings()) < 2 {
			time.Sleep(time.Millisecond)
		}
		c.UnderlyingConn().Close() // gone without a close frame
		var ce *websocket.CloseError
		if err := fc.Ended(t); !errors.As(err, &ce) || ce.Code != ended {
			t.Errorf("browser got %v, want its connection ended, as the client's was", err)
		}
		waitConns(t, tp, 0)
		if n := len(fc.Received()); n != 1 {
			t.Errorf("browser got %d messages, want only the first navigation", n)
		}
		if n := len(tp.logs.Lines("held navigation not delivered")); n != 0 {
			t.Errorf("relay tried to deliver the vanished client's navigation")
		}
		// Another client's navigation books the next slot, not the vanished one's.
		c2 := tp.dial(t, "/", nil)
		fb.Accept(t)
		holdtest.WriteClient(t, c2, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/3"}}`))
		for len(rec.Bookings()) < 3 {
			time.Sleep(time.Millisecond)
		}
		b := rec.Bookings()
		if b[2].Start.Sub(b[1].Start) < time.Hour-time.Minute {
			t.Errorf("third navigation booked %v after the vanished one, want a slot of its own an hour later", b[2].Start.Sub(b[1].Start))
		}
	})
	t.Run("fetch", func(t *testing.T) {
		tp, fb, rec, hc, c := fetchRelay(t)
		chain := fb.FetchRec.Chain(t, "/page?first")
		hc.MustPlay(t, chain)
		held := make(chan []fakebrowser.Hops, 1)
		go func() { held <- hc.MustPlay(t, chain) }()
		for len(rec.Bookings()) < 2 {
			time.Sleep(time.Millisecond)
		}
		c.UnderlyingConn().Close()
		waitConns(t, tp, 0)
		hops := <-held // the browser still has the request: it goes at its slot
		if len(hops) != len(chain) {
			t.Fatalf("got %d hops, want %d", len(hops), len(chain))
		}
		if n, want := len(fakebrowser.Commands(hc, "Fetch.continueRequest")), 2*len(chain); n != want {
			t.Errorf("relay continued %d pauses, want %d: each once", n, want)
		}
		if n := len(rec.Bookings()); n != 2 {
			t.Errorf("got %d bookings, want 2", n)
		}
		if lines := tp.logs.Lines(`"level":"warn"`); len(lines) > 0 {
			t.Errorf("relay warned: %q", lines)
		}
	})
}

// flood makes the browser side of a client's connection write big
// messages until writing fails, and returns a function that waits for it.
func flood(fc *fakebrowser.Conn, n int) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		big := payload(1<<20, 11)
		for range n {
			if fc.WriteFrame(websocket.TextMessage, big) != nil {
				return
			}
		}
	}()
	return func() { <-done }
}

// TestSlowClientBounded checks that a client that stops reading costs the
// relay a bounded amount of memory however much the browser sends it (the
// relay queues nothing: the browser is slowed down instead), is dropped
// with a logged reason, the browser's connection ended, and that a
// client beside it is served meanwhile.
func TestSlowClientBounded(t *testing.T) {
	tp, fb := relayNew(t, limiter.Config{Mode: limiter.Off}, func(p *Proxy) { p.WriteTimeout = 300 * time.Millisecond })
	by := newBystander(t, tp, fb)
	tp.dial(t, "/", nil) // never reads
	fc := fb.Accept(t)
	peak := heapPeak()
	wait := flood(fc, 256) // 256 MiB
	by.check(t)
	var ce *websocket.CloseError
	if err := fc.Ended(t); !errors.As(err, &ce) || ce.Code != ended {
		t.Errorf("browser got %v, want its connection ended", err)
	}
	wait()
	grew := peak()
	const bound = 32 << 20
	t.Logf("heap grew by at most %.1f MiB while 256 MiB were sent to a client that did not read", float64(grew)/(1<<20))
	if grew > bound {
		t.Errorf("heap grew by %d MiB, want at most %d MiB", grew>>20, bound>>20)
	}
	if n := len(tp.logs.Lines(`"level":"warn"`, "client did not read in time")); n != 1 {
		t.Errorf("got %d warnings, want 1", n)
	}
	by.check(t)
	waitConns(t, tp, 1)
}

// TestCloseWithStalledClients checks that closing the relay with clients
// that do not read is bounded, and that the others' connections end.
func TestCloseWithStalledClients(t *testing.T) {
	tp, fb, healthy, _ := relayClient(t, limiter.Config{Mode: limiter.Off}) // default WriteTimeout: 30 s
	var waits []func()
	for range 10 {
		tp.dial(t, "/", nil)
		waits = append(waits, flood(fb.Accept(t), 64))
	}
	time.Sleep(200 * time.Millisecond) // let the floods fill the sockets
	start := time.Now()
	tp.p.Close()
	took := time.Since(start)
	for _, w := range waits {
		w()
	}
	// Ten stalled clients one after another cost 10 × 2 s of close grace,
	// and their writes 30 s; the bound is well under either.
	if took > 10*time.Second {
		t.Errorf("Close took %v, want it bounded by the close grace (2 s)", took)
	}
	if ce := fakebrowser.CloseOf(t, healthy); ce.Code != ended {
		t.Errorf("healthy client got close %d, want its connection ended", ce.Code)
	}
}
