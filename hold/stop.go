package hold

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
)

// A stop that fails closed. Chromium continues every request paused in
// a Fetch session whose connection goes away, so a relay that simply
// exits lets everything it held reach the site at once. The relay stops
// in two steps instead: Drain, during which each held navigation is
// still let go at its slot, and any whose slot lies past the drain's end
// is answered at once with the relay's own 429 (refusal reason
// Stopping), booking nothing; then Refuse, after which every navigation
// still held, and every one held from then on, is answered the same way
// rather than let go. Only then does the relay close its connections.

// Stopping is the refusal.Reason Deferred of a navigation the relay
// answers itself because it is stopping.
const Stopping = "stopping"

// ErrStopping is the cause of a hold's context once its Holder refuses
// everything it holds (Refuse).
var ErrStopping = errors.New("hold: the relay is stopping")

// Drain starts the relay's stop: held navigations are still let go at
// their slots, but one whose slot comes after end is answered at once
// (refusal reason Stopping), and one booked from now on whose slot would
// come after end books nothing and is answered the same way. Call Refuse
// at end.
func (hd *Holder) Drain(end time.Time) {
	hd.drainEnd.Store(end.UnixNano())
	hd.stopMu.Lock()
	defer hd.stopMu.Unlock()
	for st := range hd.stops {
		if !st.slot.IsZero() && st.slot.After(end) {
			st.cancel(ErrStopping)
		}
	}
}

// Refuse ends the drain: every navigation still held is answered at once
// with the relay's own refusal (reason Stopping), never let go, and so is
// every navigation held after it, before it books anything.
func (hd *Holder) Refuse() {
	hd.drainEnd.Store(time.Now().UnixNano())
	hd.stopMu.Lock()
	defer hd.stopMu.Unlock()
	hd.refusing = true
	for st := range hd.stops {
		st.cancel(ErrStopping)
	}
}

// Held reports how many navigations are held now, over every browser:
// waiting for a place in flight, for their slot, or for the one before
// them to leave.
func (hd *Holder) Held() int { return int(hd.held.Load()) }

// stopped reports whether Refuse was called.
func (hd *Holder) stopped() bool {
	hd.stopMu.Lock()
	defer hd.stopMu.Unlock()
	return hd.refusing
}

// drainDeadline is the drain's end, zero while the relay is not stopping.
func (hd *Holder) drainDeadline() time.Time {
	if ns := hd.drainEnd.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// stopper is one wait of a hold that a stop may end: Drain ends it when
// its slot lies past the drain's end, Refuse in any case.
type stopper struct {
	cancel context.CancelCauseFunc
	slot   time.Time // guarded by Holder.stopMu; zero until booked
}

// stoppable returns ctx, ending also (with ErrStopping) when a stop ends
// the wait, the stopper to tell its slot (booked), and the func that
// lets go of it once the wait is over.
func (hd *Holder) stoppable(ctx context.Context) (context.Context, *stopper, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	st := &stopper{cancel: cancel}
	hd.stopMu.Lock()
	if hd.refusing {
		cancel(ErrStopping)
	} else {
		if hd.stops == nil {
			hd.stops = make(map[*stopper]struct{})
		}
		hd.stops[st] = struct{}{}
	}
	hd.stopMu.Unlock()
	return ctx, st, func() {
		hd.stopMu.Lock()
		delete(hd.stops, st)
		hd.stopMu.Unlock()
		cancel(nil)
	}
}

// booked tells the stopper its slot: a drain that ends before it
// answers the navigation at once.
func (hd *Holder) bookedSlot(st *stopper, slot time.Time) {
	hd.stopMu.Lock()
	st.slot = slot
	end := hd.drainDeadline()
	hd.stopMu.Unlock()
	if !end.IsZero() && slot.After(end) {
		st.cancel(ErrStopping) // booked as the drain began
	}
}

// isStopping reports whether ctx, made by stoppable, was ended by a stop.
func isStopping(ctx context.Context) bool { return errors.Is(context.Cause(ctx), ErrStopping) }

// stoppedOne counts and logs a navigation of host answered because the
// relay is stopping; slot is when it would have gone, zero when it had
// not been booked yet.
func (hd *Holder) stoppedOne(host string, slot time.Time, log *zerolog.Logger) {
	d := max(time.Until(slot), 0)
	hd.Metrics.Navigation(NavStopped, d)
	ev := log.Debug()
	if host != "" {
		ev = ev.Str("host", host)
	}
	if !slot.IsZero() {
		ev = ev.Time("slot", slot)
	}
	ev.Msg("navigation answered with the relay's 429: the relay is stopping")
}
