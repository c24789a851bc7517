package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// holdingStore stands in for a shared store that cannot book for a while
// (store.Redis with --store-fallback closed while Redis is down): for down
// from the first booking it is asked for, every Reserve is a hold, asked
// again after retry.
type holdingStore struct {
	*limiter.Limiter
	retry, down time.Duration

	mu    sync.Mutex
	up    time.Time // guarded by mu; set by the first Reserve
	holds int       // guarded by mu
}

func (s *holdingStore) Reserve(_ context.Context, host, _ string, now time.Time) limiter.Reservation {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up.IsZero() {
		s.up = now.Add(s.down)
	}
	if now.Before(s.up) {
		s.holds++
		return limiter.Reservation{Start: now.Add(s.retry), Retry: true}
	}
	return s.Limiter.Reserve(host, now)
}

func (s *holdingStore) Observe(host string, o limiter.Outcome, now time.Time) limiter.Effect {
	s.Limiter.Observe(host, o, now)
	return limiter.Config{}.Effect(o)
}

// TestStoreHoldsUntilBack: a navigation the store cannot book is held, and
// asked about again, until the store books it; then it goes at once.
func TestStoreHoldsUntilBack(t *testing.T) {
	for _, mode := range []hold.Intercept{hold.InterceptFetch, hold.InterceptNavigate} {
		t.Run(mode.String(), func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{})
			st := &holdingStore{Limiter: limiter.New(limiter.Config{}), retry: 50 * time.Millisecond, down: 400 * time.Millisecond}
			tp := relayTo(t, fb, limiter.Config{}, func(p *Proxy) {
				p.Limiter = st
				p.Intercept = mode
			})
			var paused, released time.Time
			if mode == hold.InterceptFetch {
				hc := fb.Holder(t)
				fakebrowser.AnnouncePages(t, fb, hc, false)
				driveRecorded(t, tp.dial(t, "/", nil), fb.Accept(t), fb)
				hops := hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first"))
				paused, released = hops[0].Paused, hops[0].Continued
			} else {
				c := tp.dial(t, "/", nil)
				bc := fb.Accept(t)
				paused = time.Now()
				if err := c.WriteMessage(1, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/"}}`)); err != nil {
					t.Fatal(err)
				}
				m := bc.Next(t)
				if m.Wire.Method != "Page.navigate" {
					t.Fatalf("browser got %s first, want the navigation", m.Wire.Method)
				}
				released = m.At
			}
			if held := released.Sub(paused); held < 400*time.Millisecond {
				t.Errorf("navigation released %v after it was asked for, want it held until the store books it (≥ 400 ms)", held)
			}
			st.mu.Lock()
			holds := st.holds
			st.mu.Unlock()
			if holds < 4 {
				t.Errorf("the store was asked %d times while it could not book, want it asked again every %v", holds, st.retry)
			}
			if st.Len() != 1 {
				t.Errorf("the store booked %d hosts once back, want a.test", st.Len())
			}
		})
	}
}
