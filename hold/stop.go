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
// their slots, but one whose slot would come after end is answered at
// once (refusal reason Stopping) and books nothing. Call Refuse at end.
func (hd *Holder) Drain(end time.Time) { hd.drainEnd.Store(end.UnixNano()) }

// Refuse ends the drain: every navigation still held is answered at once
// with the relay's own refusal (reason Stopping), never let go, and so is
// every navigation held after it, before it books anything.
func (hd *Holder) Refuse() {
	hd.Drain(time.Now())
	if hd.refuse != nil {
		hd.refuse(ErrStopping)
	}
}

// Held reports how many navigations are held now, over every browser:
// waiting for a place in flight, for their slot, or for the one before
// them to leave.
func (hd *Holder) Held() int { return int(hd.held.Load()) }

// refusing reports whether Refuse was called.
func (hd *Holder) refusing() bool { return hd.stopped != nil && hd.stopped.Err() != nil }

// drainDeadline is the drain's end, zero while the relay is not stopping.
func (hd *Holder) drainDeadline() time.Time {
	if ns := hd.drainEnd.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// stoppable returns ctx, ending also (with ErrStopping) when Refuse is
// called, and the func that lets go of it once the hold is over.
func (hd *Holder) stoppable(ctx context.Context) (context.Context, func()) {
	if hd.stopped == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(hd.stopped, func() { cancel(ErrStopping) })
	return ctx, func() {
		unhook()
		cancel(nil)
	}
}

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
