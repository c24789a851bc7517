package holdtest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Recorder is a Limiter that records every booking the Limiter under it
// makes.
type Recorder struct {
	hold.Limiter
	mu     sync.Mutex // guards booked; takes no other
	booked []Booking  // guarded by mu
}

// Booking is one Reserve call and the slot it got.
type Booking struct {
	Host      string
	At, Start time.Time
}

// Reserve books through the Limiter under it, and records the booking.
func (r *Recorder) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	res := r.Limiter.Reserve(ctx, host, rawURL, now)
	r.mu.Lock()
	r.booked = append(r.booked, Booking{Host: host, At: now, Start: res.Start})
	r.mu.Unlock()
	return res
}

// Bookings returns the bookings made so far.
func (r *Recorder) Bookings() []Booking {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.booked)
}

// HostsSince returns the hosts booked after the first n bookings, in
// order.
func (r *Recorder) HostsSince(n int) []string {
	var out []string
	for _, b := range r.Bookings()[n:] {
		out = append(out, b.Host)
	}
	return out
}

// RecordBookings makes a Holder book through a Recorder, stored in *rec.
func RecordBookings(rec **Recorder) func(*hold.Holder) {
	return func(hd *hold.Holder) {
		*rec = &Recorder{Limiter: hd.Limiter}
		hd.Limiter = *rec
	}
}
