// Package limiter spaces out top-level navigations to the same host with an
// adaptive, per-host pressure rule: near-zero delay for an idle host, a delay
// that grows while the host keeps being hit, more when it answers 429, 503 or
// 5xx, Retry-After honoured, and a slow return to zero when it is left alone.
//
// The rule is a generic cell rate algorithm (GCRA) whose emission interval
// grows with a per-host pressure counter. Each host keeps tat, the time its
// booked slots run out; a navigation at now may start at
// max(now, tat-tau) and pushes tat on by the current spacing. tau, the burst
// allowance, lets an idle host run a few navigations ahead before anything
// waits.
//
// The package knows nothing of CDP or websockets: callers turn a URL into a
// bucket with Key, book a slot with Reserve (or Wait) and report the answer
// with Observe. Time always comes in from outside, so the schedule can be
// replayed on a simulated clock.
package limiter

import (
	"cmp"
	"context"
	"hash/maphash"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// The rule's constants, with the names and values of the design the limiter
// reproduces. Every duration is a multiple of AdaptiveInterval, so the rule
// reads in base intervals:
//
//	spacing  = AdaptiveInterval × (1 + pressure/RampBursts), at most MaxIntervals of them
//	cooldown = CooldownIntervals × AdaptiveInterval: elapsed time that forgives one unit
//
// One navigation adds one unit and one cooldown removes one, so a host hit
// back to back settles where the spacing equals the cooldown: 100 ms, ten
// navigations a second, whatever the burst.
const (
	// AdaptiveInterval is the base interval in adaptive mode.
	AdaptiveInterval = 20 * time.Millisecond
	// RampBursts is how many units of pressure add one base interval to the spacing.
	RampBursts = 10
	// CooldownIntervals is how many base intervals of elapsed time forgive one
	// unit of pressure (100 ms); it sets the sustained rate.
	CooldownIntervals = 5
	// MaxIntervals caps the spacing, in base intervals (1200 ms).
	MaxIntervals = 60
	// OverloadIntervals is the spacing, in base intervals, that a 429 or 503
	// adds at once (OverloadIntervals × RampBursts = 50 units of pressure).
	OverloadIntervals = 5
	// FailureIntervals is the spacing, in base intervals, that another 5xx or
	// no answer at all adds at once (10 units of pressure).
	FailureIntervals = 1
	// DefaultRetryAfterMax is the longest Retry-After honoured unless a
	// setting says otherwise (Config.RetryAfterMax, --retry-after-max).
	DefaultRetryAfterMax = 60 * time.Second
	// RetryAfterMaxLimit is the longest a setting may honour: an hour, so
	// that a typo or a hostile header never stops a host for a day.
	RetryAfterMaxLimit = time.Hour
	// DefaultBurst is how many navigations an idle host absorbs at once.
	DefaultBurst = 10
	// ServerPolicyLife is how long a server's policy (Outcome.Server's
	// Spacing) stays a host's least spacing after the last answer that
	// carried it.
	ServerPolicyLife = time.Hour
)

// Derived from the constants above.
const (
	cooldown         = CooldownIntervals * AdaptiveInterval
	maxSpacing       = MaxIntervals * AdaptiveInterval
	maxPressure      = (MaxIntervals - 1) * RampBursts // the pressure at which the spacing reaches maxSpacing
	overloadPressure = OverloadIntervals * RampBursts
	failurePressure  = FailureIntervals * RampBursts
)

// Mode selects how the spacing is chosen.
type Mode uint8

const (
	// Adaptive spaces navigations by pressure, starting near zero (the default).
	Adaptive Mode = iota
	// Fixed spaces navigations by Config.Interval, with no ramp and no feedback.
	Fixed
	// Off never delays nor tracks anything.
	Off
)

func (m Mode) String() string {
	switch m {
	case Adaptive:
		return "adaptive"
	case Fixed:
		return "fixed"
	case Off:
		return "off"
	}
	return "unknown"
}

// Config configures a Limiter, and is the setting one booking is made with
// (ReserveWith). The zero Config is the adaptive limiter with the default
// burst.
type Config struct {
	// Mode is Adaptive, Fixed or Off.
	Mode Mode
	// Interval is the spacing in Fixed mode; it is ignored in the other modes.
	// A Fixed limiter with an Interval ≤ 0 behaves as Off.
	Interval time.Duration
	// Burst is how many navigations an idle host absorbs before any waits.
	// Zero means DefaultBurst; negative values act as 1.
	Burst int
	// Floor is the least spacing in Adaptive and Fixed mode: a site's
	// robots.txt Crawl-delay. A host with a floor gets no burst, since
	// Crawl-delay asks for that much time between any two requests. Zero
	// means none; Off ignores it.
	Floor time.Duration
	// Overload are the answer statuses that add the overload pressure and
	// whose Retry-After is honoured (--overload-status); other 5xx add the
	// failure pressure. The zero Statuses is 429 and 503.
	Overload Statuses
	// RetryAfterMax is the longest Retry-After of an overload answer that
	// is honoured (--retry-after-max); a longer one waits this long. Zero
	// means DefaultRetryAfterMax; above RetryAfterMaxLimit it acts as that
	// limit (callers check it: policy does).
	RetryAfterMax time.Duration
	// OverloadHeaders are answer headers that make an answer overload
	// whatever its status (--overload-header), its Retry-After honoured
	// as a 429's. The zero Headers matches none. Only what the caller
	// kept of the answer (Outcome.Headers) is read.
	OverloadHeaders Headers
	// Jitter, F in [0, 1), moves each slot the limiter holds a navigation
	// for by a random amount within ±F × its spacing, never closer to the
	// navigation before than (1 − F) × spacing nor further than
	// (1 + F) × spacing (jitter.go). The host's schedule itself (tat) is not
	// moved, so the mean rate is the same. Zero, the default, moves
	// nothing: the schedule is exactly the rule's. Values outside [0, 1)
	// act as 0; callers check them (policy does).
	Jitter float64
	// MaxWait bounds how far ahead a navigation's slot may lie
	// (--max-wait): one whose slot is further is not booked at all
	// (Reservation.Deferred), so that the caller can answer it at once
	// rather than outwait its client. Zero: no bound.
	MaxWait time.Duration
	// IgnoreServer leaves out what answers say of the server's own limits
	// (Outcome.Server): --ratelimit-headers ignore. The zero Config obeys
	// them.
	IgnoreServer bool
}

// setting is a Config normalised for booking: the mode it really has, and
// its durations in nanoseconds.
type setting struct {
	shape
	mode Mode
	// jitter is Config.Jitter when it is in (0, 1), else 0.
	jitter float64
	// maxWait is Config.MaxWait, 0 for none.
	maxWait int64
}

// shape is what a host keeps of its last booking's setting, besides its
// mode, for Busiest: what a booking alone uses (jitter, maxWait) stays
// out of the host's record, which a million hosts pay for.
type shape struct {
	base  int64 // spacing unit: AdaptiveInterval, or Interval when fixed
	tau   int64 // burst allowance: (burst-1) × base, 0 with a floor
	floor int64
}

func (c Config) setting() setting {
	s := setting{mode: c.Mode, jitter: c.jitter(), maxWait: int64(max(c.MaxWait, 0))}
	s.base = int64(AdaptiveInterval)
	if s.mode == Fixed {
		if c.Interval > 0 {
			s.base = int64(c.Interval)
		} else {
			s.mode = Off
		}
	}
	if c.Floor > 0 {
		s.floor = int64(c.Floor)
		return s
	}
	s.tau = int64(c.burst()-1) * s.base
	return s
}

// Params returns what c books with, as the limiter reads it: the mode it
// really has (Off for Fixed without an Interval), the base interval, the
// burst allowance tau ((burst−1) × base, 0 with a floor), the floor and
// the jitter (0 unless in (0, 1)). A shared store applies the same rule
// with them.
func (c Config) Params() (mode Mode, base, tau, floor time.Duration, jitter float64) {
	s := c.setting()
	return s.mode, time.Duration(s.base), time.Duration(s.tau), time.Duration(s.floor), s.jitter
}

// burst is Burst as the rule reads it.
func (c Config) burst() int {
	switch {
	case c.Burst == 0:
		return DefaultBurst
	case c.Burst < 1:
		return 1
	}
	return c.Burst
}

// spacing is how far a booking at pressure p pushes the schedule.
func (s setting) spacing(p int32) time.Duration {
	d := time.Duration(s.base)
	if s.mode == Adaptive {
		d = min(d*time.Duration(1+p/RampBursts), maxSpacing)
	}
	return max(d, time.Duration(s.floor))
}

// Name names the configuration the way the tables of the limiter's
// published measurement do: off, fixed100 (the spacing in ms), adaptive.
func (c Config) Name() string {
	if c.Mode == Fixed {
		return "fixed" + strconv.FormatInt(c.Interval.Milliseconds(), 10)
	}
	return c.Mode.String()
}

// Quantum is the unit the enforced gaps of a schedule are read in: the
// base interval of the configuration.
func (c Config) Quantum() time.Duration {
	if c.Mode == Fixed && c.Interval > 0 {
		return c.Interval
	}
	return AdaptiveInterval
}

// Millis is d in (fractional) milliseconds, the unit the rule, its tables
// and the relay's reports speak in.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ShownMillis is d in milliseconds to a tenth, as logs and status pages show
// a wait: 21.3, not 21.285157 (the clocks and timers behind it are not that
// exact).
func ShownMillis(d time.Duration) float64 { return math.Round(Millis(d)*10) / 10 }

// Outcome is the answer a throttled navigation got, as Observe reads it.
// The zero Outcome (an aborted navigation, for one) changes nothing.
type Outcome struct {
	// Status is the HTTP status of the answer, 0 when there was none.
	Status int
	// RetryAfter is the answer's Retry-After header as sent, "" when absent.
	RetryAfter string
	// Headers are the answer's headers a setting reads besides
	// Retry-After (Config.OverloadHeaders), as the caller kept them: a
	// repeated header once, its values joined by newlines, as Chromium and
	// Lightpanda join them. Nil when none was kept.
	Headers []Header
	// NoAnswer reports that the request got no answer at all: the connection
	// was refused, reset or closed, or it timed out.
	NoAnswer bool
	// Took is how long the answer took, from the navigation's release to
	// its response headers; 0 when unknown. Only a latency baseline reads
	// it (Baselines).
	Took time.Duration
	// Slow reports that the answer came slower than its host's baseline
	// allows (Baselines.Answer): it adds the failure pressure, as a 5xx
	// does. A policy sets it; the rule never measures time itself.
	Slow bool
	// Addr is the server address the browser reached the host at, when
	// it said (Chromium's remoteIPAddress). Only a policy that buckets
	// hosts by address reads it; the rule does not.
	Addr netip.Addr
	// Server is what the answer's RateLimit headers said of the server's
	// own limits (package ratelimit): its Spacing becomes the host's least
	// spacing for ServerPolicyLife, its Wait holds the host's next slot
	// that long, whatever the answer's status, in Adaptive and Fixed mode,
	// unless the setting ignores them (Config.IgnoreServer).
	Server ratelimit.Limits
}

// PastDeadline is the Reservation.Deferred of a navigation whose slot
// lies past the deadline its caller can wait until (a relay that is
// stopping): a policy defers it as one past MaxWait, and names it so.
const PastDeadline = "deadline"

// Reservation is a slot booked by Reserve.
type Reservation struct {
	// Start is when the navigation may go; it is never before the now given to Reserve.
	Start time.Time
	// Spacing is how far this booking pushed the host's schedule.
	Spacing time.Duration
	// Pressure is the host's pressure once the booking is made.
	Pressure int
	// Slack is how much sooner than the host's steady schedule (its tat
	// before the booking) the burst allowance let the navigation start:
	// it may leave that much later than Start and the navigations after
	// it keep their schedule. 0 with a burst of 1, or a host that was idle.
	Slack time.Duration
	// Headroom is how much later than the earliest the rule allowed
	// (tat − tau) the navigation starts, because it was asked for later: a
	// push of the host's schedule (Push) by no more than that leaves its
	// start where it is.
	Headroom time.Duration
	// Tracked is false when nothing was booked: the limiter is off or the
	// host is exempt.
	Tracked bool
	// Retry is set by a shared store that cannot book right now and holds
	// navigations until it can: nothing was booked, and the navigation must
	// wait until Start and then ask again. The in-process limiter never
	// sets it.
	Retry bool
	// Skew bounds how much later than the schedule's own slot Start is: a
	// shared store's slot is counted from when its answer came back, so
	// Start is late by the answer's way back, at most the whole round trip
	// Skew gives. 0 for the in-process limiter, whose Start is the slot.
	Skew time.Duration
	// Deferred says why nothing was booked and the navigation must not
	// wait for its slot: "max-wait", its slot (Start) lies more than the
	// setting's MaxWait ahead; "breaker", its bucket's breaker is open
	// until Start (a policy sets it); PastDeadline, its slot lies past
	// the deadline its caller can wait until (a policy sets it). ""
	// otherwise.
	Deferred string
	// Pushed is how far, in all, late departures had pushed the bucket's
	// schedule when it was booked, in a shared store (Shared): the pushes
	// made after are what a slot booked before them waits out too, as the
	// store says them later. 0 in process.
	Pushed time.Duration
	// Shared is set when the booking was made in a shared store (not its
	// local fallback, nor the in-process limiter).
	Shared bool
	// Probe says the navigation goes as its bucket's breaker probe (a
	// policy sets it): the relay tells the policy when it ends with no
	// answer, so that another may go at once.
	Probe bool
	// Mode is the mode the booking was made in; Off when nothing was booked.
	Mode Mode
	// Bucket is the schedule that was booked: the host, or the site it
	// belongs to when a policy groups hosts by site; "" when nothing was
	// booked.
	Bucket string
	// Source says where the booking's setting came from, for logs and the
	// status page: "flag" (the global flags), "rule N" (the N-th rule),
	// "robots.txt" (a Crawl-delay set the spacing), "server" (the
	// server's own policy did: Server), "loopback" or "exempt-host". The
	// limiter leaves it empty; a policy fills it in.
	Source string
	// Rule is the text of what Source names: the rule as written, the
	// Crawl-delay, the server's policy, the exempt host pattern. Empty
	// for the flags.
	Rule string
	// Server is the least spacing the host's server asked for
	// (Outcome.Server's Spacing) that the booking kept to, while it
	// holds (ServerPolicyLife); 0 when none held. A policy reads it to
	// say the server set the spacing (Spacing == Server).
	Server time.Duration
}

// Limiter books navigation slots per host. It is safe for concurrent use by
// many goroutines. Each host has its own lock and hosts are found through
// read-only maps, so navigations to different hosts share no memory that is
// written and run in parallel; no lock covers more than one shard of hosts.
// Create it with New.
type Limiter struct {
	def   setting   // what Reserve and Observe book with
	cfg   Config    // def as given, for the overload statuses
	epoch time.Time // origin of the int64 nanosecond clock kept per host
	seed  maphash.Seed
	rand  *Rand    // the jitter's randomness; set once before use (SetRand), nil for math/rand/v2's
	_     [64]byte // keep the read-mostly fields above off the first shard's lines
	shard [shardCount]shard
}

// host is one host's schedule. Times are nanoseconds since Limiter.epoch.
type host struct {
	tat      int64   // when the host's booked slots run out
	clock    int64   // up to when elapsed time has been credited against pressure
	set      shape   // of the host's last booking, with mode, for Busiest
	last     int64   // start of the host's last booking, as jitter moved it; noLast when none
	srv      *server // what its server said of its own limits; nil when it said nothing
	pressure int32
	mode     Mode // of the host's last booking
	gone     bool // the record was forgotten by its shard: look the host up again
}

// server is what a host's server said of its own limits (Outcome.Server):
// floor, the least spacing its policy asks for, until until (0 when none),
// and reset, when the quota it said was spent resets, for Busiest (0 when
// none was). A record points to one only once its server said so, and
// never writes it in place: Busiest reads it after the record's lock.
type server struct{ floor, until, reset int64 }

// server returns what h's server said, zero when nothing.
func (h *host) server() server {
	if h.srv == nil {
		return server{}
	}
	return *h.srv
}

// setting returns what h keeps of its last booking's setting.
func (h *host) setting() setting { return setting{shape: h.set, mode: h.mode} }

// New returns a limiter that books with cfg unless a booking brings a
// setting of its own (ReserveWith).
func New(cfg Config) *Limiter {
	l := &Limiter{def: cfg.setting(), cfg: cfg, epoch: time.Now(), seed: maphash.MakeSeed()}
	for i := range l.shard {
		l.shard[i].init()
	}
	return l
}

// Mode reports the limiter's mode.
func (l *Limiter) Mode() Mode { return l.def.mode }

// Interval reports the base interval: the spacing in Fixed mode, the unit of
// the adaptive ramp otherwise.
func (l *Limiter) Interval() time.Duration { return time.Duration(l.def.base) }

// Burst reports how many navigations an idle host absorbs at once.
func (l *Limiter) Burst() int { return int(l.def.tau/l.def.base) + 1 }

// Reserve books the next slot of host for a navigation wanted at now and
// returns it; the navigation may go at the reservation's Start. host is a
// bucket as returned by Key. Exempt hosts and an Off limiter get now and
// leave no state behind.
func (l *Limiter) Reserve(hostname string, now time.Time) Reservation {
	if Exempt(hostname) {
		return Reservation{Start: now, Mode: Off}
	}
	return l.reserve(hostname, l.def, now)
}

// ReserveWith is Reserve with the setting cfg instead of the limiter's
// own: a policy that gives each site a rule of its own books every host of
// one limiter with the rule that applies to it. The setting travels with
// the booking: a host booked under two settings keeps one schedule, each
// booking spaced by its own setting. It books whatever bucket it is given,
// loopback too: the policy decides what is exempt (a rule may name
// 127.0.0.1).
func (l *Limiter) ReserveWith(hostname string, cfg Config, now time.Time) Reservation {
	return l.reserve(hostname, cfg.setting(), now)
}

func (l *Limiter) reserve(hostname string, set setting, now time.Time) Reservation {
	if set.mode == Off {
		return Reservation{Start: now, Mode: Off}
	}
	var u float64
	if set.jitter > 0 {
		u = l.rand.Uniform() // one draw per booking, as the Redis store draws
	}
	t := l.nanos(now)
	s := l.shardFor(hostname)
	rec := s.lock(hostname, t)
	if rec == nil { // s.mu is held
		spacing := set.spacing(0)
		h := host{tat: t + int64(spacing), clock: t, set: set.shape, mode: set.mode, last: t}
		if set.mode == Adaptive {
			h.pressure = 1
		}
		s.insert(hostname, h, t)
		s.mu.Unlock()
		return Reservation{Start: now, Spacing: spacing, Pressure: int(h.pressure), Headroom: time.Duration(set.tau), Tracked: true, Mode: set.mode, Bucket: hostname}
	}
	h := &rec.host
	h.drain(t)
	h.set, h.mode = set.shape, set.mode
	spacing := set.spacing(h.pressure)
	floor, tau := set.floor, set.tau
	var server time.Duration
	if h.underServer(t) {
		// The stricter of the rule and the server; a server's policy, as
		// a Crawl-delay, leaves no burst.
		server = time.Duration(h.srv.floor)
		spacing, floor, tau = max(spacing, server), max(floor, h.srv.floor), 0
	}
	start := max(t, h.tat-tau)
	if server > 0 && h.last != noLast {
		// From the one before too, booked perhaps before the policy was heard.
		start = max(start, h.last+int64(server))
	}
	slack, headroom := max(0, h.tat-start), start-(h.tat-tau)
	tat := max(h.tat, start) + int64(spacing)
	if set.jitter > 0 && start > t {
		// A slot the schedule holds the navigation for moves; tat stays
		// on the grid. The navigations after it are spaced from where it
		// really starts, so one that leaves late moves them (no slack).
		start, slack = jittered(start, t, h.last, int64(spacing), floor, set.jitter, u), 0
	}
	if set.maxWait > 0 && start-t > set.maxWait {
		// Too far ahead to wait for: nothing is booked, and the host is
		// as it was (its pressure drained to now).
		pressure := int(h.pressure)
		rec.mu.Unlock()
		return Reservation{Start: now.Add(time.Duration(start - t)), Pressure: pressure, Mode: set.mode, Bucket: hostname, Deferred: "max-wait"}
	}
	h.tat = tat
	if set.mode == Adaptive {
		h.pressure = min(h.pressure+1, maxPressure)
	}
	h.last = start
	pressure := int(h.pressure)
	rec.mu.Unlock()
	return Reservation{Start: now.Add(time.Duration(start - t)), Spacing: spacing, Pressure: pressure, Slack: time.Duration(slack), Headroom: time.Duration(headroom),
		Tracked: true, Mode: set.mode, Bucket: hostname, Server: server}
}

// Observe feeds the answer to a navigation of host, received at now, back
// into the host's pressure: a 429 or 503 adds 50 units and may carry a
// Retry-After that pushes the next slot, another 5xx or no answer at all adds
// 10, anything else nothing. Only an adaptive limiter listens to statuses;
// what the server says of its own limits (Outcome.Server) is heard in
// Fixed mode too.
func (l *Limiter) Observe(hostname string, o Outcome, now time.Time) {
	if Exempt(hostname) {
		return
	}
	l.observe(hostname, l.def, l.cfg, o, now)
}

// ObserveWith is Observe for a host booked with the setting cfg
// (ReserveWith): only an adaptive setting listens to statuses, and
// cfg.Overload says which are overload (Config.Effect); a fixed one
// hears the server's limits alone, unless cfg.IgnoreServer.
func (l *Limiter) ObserveWith(hostname string, cfg Config, o Outcome, now time.Time) {
	l.observe(hostname, cfg.setting(), cfg, o, now)
}

func (l *Limiter) observe(hostname string, set setting, cfg Config, o Outcome, now time.Time) {
	var srv ratelimit.Limits
	if set.mode != Off && !cfg.IgnoreServer {
		srv = o.Server
	}
	effect := cfg.Effect(o)
	var add int32
	if set.mode == Adaptive {
		add = int32(effect.Pressure())
	}
	if add == 0 && srv == (ratelimit.Limits{}) {
		return
	}
	var wait time.Duration
	var hasWait bool
	if effect == Overload && set.mode == Adaptive {
		// Only an adaptive setting hears statuses; a fixed one is here
		// for the server's limits alone.
		wait, hasWait = cfg.RetryAfter(o, now)
	}
	t := l.nanos(now)
	s := l.shardFor(hostname)
	rec := s.lock(hostname, t)
	h := host{tat: t, clock: t, set: set.shape, mode: set.mode, last: noLast}
	if rec != nil {
		h = rec.host
		h.drain(t)
	}
	h.pressure = min(h.pressure+add, maxPressure)
	if srv != (ratelimit.Limits{}) {
		said := h.server()
		if srv.Spacing > 0 {
			// The policy the server sends now is its policy: it replaces
			// the one before, and lasts while the server keeps sending it.
			said.floor, said.until = int64(srv.Spacing), t+int64(ServerPolicyLife)
		}
		if srv.Wait > 0 {
			// The server's spent quota holds the host as a Retry-After
			// does; with both, the later.
			wait, hasWait = max(wait, srv.Wait), true
			if reset := t + int64(srv.Wait); said.reset == 0 || reset > said.reset {
				said.reset = reset // the later, as tat keeps
			}
		}
		h.srv = &said
	}
	if hasWait {
		// The wait is measured from the answer and the burst allowance must
		// not shorten it: the next start, max(now, tat-tau), lands at t+wait
		// (with no burst under a server's policy, as reserve books).
		tau := set.tau
		if h.underServer(t) {
			tau = 0
		}
		h.tat = max(h.tat, t+int64(wait)+tau)
		if set.jitter > 0 {
			// Nor may jitter: spaced from the end of the wait, the next
			// slot comes at least (1 − F) × spacing after it.
			h.last = max(h.last, t+int64(wait))
		}
	}
	if rec != nil {
		rec.host = h
		rec.mu.Unlock()
		return
	}
	s.insert(hostname, h, t) // s.mu is held
	s.mu.Unlock()
}

// Push moves host's schedule later by by: the navigations booked after it
// start that much later. The relay pushes a host whose navigation left the
// browser late (package pace), so that the next ones keep their distance
// from it at the site. A host the limiter does not know (never booked, or
// forgotten as idle) has no schedule to move.
func (l *Limiter) Push(hostname string, by time.Duration, now time.Time) {
	if by <= 0 || Exempt(hostname) {
		return
	}
	t := l.nanos(now)
	s := l.shardFor(hostname)
	rec := s.lock(hostname, t)
	if rec == nil { // s.mu is held
		s.mu.Unlock()
		return
	}
	rec.host.tat += int64(by)
	if rec.host.last != noLast {
		rec.host.last += int64(by) // the navigation that left late: the next ones are spaced from it
	}
	rec.mu.Unlock()
}

// Wait books a slot for host as Reserve does at time.Now and blocks until the
// slot starts or ctx is done, returning ctx's error in that case. A cancelled
// wait keeps its slot booked: the host's schedule never runs ahead of what
// was promised to navigations already waiting.
func (l *Limiter) Wait(ctx context.Context, hostname string) (Reservation, error) {
	now := time.Now()
	r := l.Reserve(hostname, now)
	d := r.Start.Sub(now)
	if d <= 0 {
		return r, nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return r, nil
	case <-ctx.Done():
		return r, ctx.Err()
	}
}

// Len reports how many hosts the limiter remembers.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shard {
		n += l.shard[i].len()
	}
	return n
}

// Sweep forgets every host that has been idle for a second at now, one
// whose booked slots ran out and whose pressure fully drained, and reports
// how many it forgot. Forgetting loses nothing: such a host is booked exactly as a host
// never seen. The limiter also sweeps a shard by itself whenever it has
// doubled since its last sweep, so calling Sweep is optional; it only gives
// memory back sooner after a crawl has moved on.
func (l *Limiter) Sweep(now time.Time) int {
	t := l.nanos(now)
	n := 0
	for i := range l.shard {
		s := &l.shard[i]
		s.mu.Lock()
		n += s.rebuild(t)
		s.mu.Unlock()
	}
	return n
}

func (l *Limiter) nanos(now time.Time) int64 { return int64(now.Sub(l.epoch)) }

func (l *Limiter) shardFor(hostname string) *shard {
	return &l.shard[maphash.String(l.seed, hostname)&(shardCount-1)]
}

// drain credits the time elapsed since h.clock against h.pressure, one unit
// per whole cooldown; the clock moves by whole cooldowns only, so a host
// touched often loses nothing to rounding.
func (h *host) drain(t int64) {
	steps := (t - h.clock) / int64(cooldown)
	if steps >= int64(h.pressure) {
		h.pressure = 0
		h.clock = max(h.clock, t)
		return
	}
	if steps > 0 {
		h.pressure -= int32(steps)
		h.clock += steps * int64(cooldown)
	}
}

// idle reports whether h is indistinguishable at t from a host never seen.
// A spent quota's reset (server.reset) is never later than tat.
func (h *host) idle(t int64) bool {
	return h.tat <= t && int64(h.pressure) <= (t-h.clock)/int64(cooldown) && !h.underServer(t)
}

// underServer reports whether a server's policy is h's least spacing at t.
func (h *host) underServer(t int64) bool { return h.srv != nil && h.srv.floor > 0 && h.srv.until > t }

// HostState is what the limiter knows of one host at an instant.
type HostState struct {
	Host     string        `json:"host"`
	Pressure int           `json:"pressure"`
	Mode     Mode          `json:"-"` // of the host's last booking
	Floor    time.Duration `json:"-"` // of the host's last booking: its Crawl-delay
	Spacing  time.Duration `json:"-"`
	// NextFree is how long from now until a navigation would go at once
	// (the host's booked slots, less the burst allowance); 0 when one would
	// go now.
	NextFree time.Duration `json:"-"`
	// Source and Rule say where the setting of the host's last booking
	// came from, as Reservation's do; a policy fills them in.
	Source string `json:"-"`
	Rule   string `json:"-"`
	// InFlight and Waiting count the bucket's navigations between their
	// release and their answer, and those waiting for a place, under the
	// cap Concurrency (0: none) set by ConcurrencySource ("flag", "rule
	// N"); a policy fills them in.
	InFlight, Waiting, Concurrency int    `json:"-"`
	ConcurrencySource              string `json:"-"`
	// Baseline and LastAnswer are the bucket's answer-time baseline and
	// its last answer time (limiter.Baselines); a policy fills them in.
	Baseline, LastAnswer time.Duration `json:"-"`
	// Refused counts the bucket's navigations refused because its
	// robots.txt disallows them (--robots obey); a policy fills it in.
	Refused uint64 `json:"-"`
	// Deferred counts the bucket's navigations answered at once, never
	// sent (--max-wait, --host-errors); Breaker is its breaker's phase
	// when not closed ("open", "half-open"), until BreakerEnds from now
	// (0 when half-open); a policy fills them in.
	Deferred    uint64        `json:"-"`
	Breaker     string        `json:"-"`
	BreakerEnds time.Duration `json:"-"`
	// Server is the least spacing the host's server asks for
	// (RateLimit-Policy: Outcome.Server's Spacing), until ServerEnds from
	// now unless an answer sends it again; 0 when none holds. Spacing is
	// never less. ServerReset is how long from now until the quota the
	// server said was spent resets (Outcome.Server's Wait), while the host
	// waits for it; 0 otherwise.
	Server, ServerEnds, ServerReset time.Duration `json:"-"`
}

// Busiest returns up to n of the hosts under the most pressure at now,
// busiest first (ties broken by the latest booked slot), for a status page.
// It reads every shard under its lock, so it costs a pass over all hosts.
func (l *Limiter) Busiest(now time.Time, n int) []HostState {
	if n <= 0 {
		return nil
	}
	t := l.nanos(now)
	type entry struct {
		HostState
		tat int64
	}
	var all []entry
	for i := range l.shard {
		s := &l.shard[i]
		s.mu.Lock()
		for _, m := range []map[string]*record{*s.read.Load(), s.dirty} {
			for name, r := range m {
				r.mu.Lock()
				h := r.host
				r.mu.Unlock()
				h.drain(t)
				hs := HostState{
					Host:     name,
					Pressure: int(h.pressure),
					Mode:     h.mode,
					Floor:    time.Duration(h.set.floor),
					Spacing:  h.setting().spacing(h.pressure),
					NextFree: time.Duration(max(0, h.tat-h.set.tau-t)),
				}
				if h.underServer(t) {
					// As reserve books: the stricter, with no burst.
					hs.Server, hs.ServerEnds = time.Duration(h.srv.floor), time.Duration(h.srv.until-t)
					hs.Spacing, hs.NextFree = max(hs.Spacing, hs.Server), time.Duration(max(0, h.tat-t))
				}
				if said := h.server(); said.reset != 0 && said.reset > t {
					hs.ServerReset = time.Duration(said.reset - t)
				}
				all = append(all, entry{hs, h.tat})
			}
		}
		s.mu.Unlock()
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortFunc(all, func(a, b entry) int {
		if a.Pressure != b.Pressure {
			return b.Pressure - a.Pressure
		}
		return cmp.Compare(b.tat, a.tat)
	})
	out := make([]HostState, 0, min(n, len(all)))
	for _, e := range all[:min(n, len(all))] {
		out = append(out, e.HostState)
	}
	return out
}
