// Package store keeps the limiter's per-host state in Redis, so that every
// relay process of a fleet books a host's navigations on one schedule. It
// owns the Redis keys and the Lua step that applies the rule there; it
// knows the limiter's rule and configuration, and nothing of CDP or the
// relay, which use it as they would a limiter.Limiter.
//
// Redis books with the same rule as the in-process limiter.Limiter (SPEC
// §1). Each host is one hash (tat, pressure, clock, the setting of its
// last booking, and the least spacing its server asked for, until when,
// and when the quota it said was spent resets: limiter.Outcome.Server)
// under Options.Prefix + host, and each Reserve or Observe
// is one atomic server-side step: a Lua script, loaded once and run with
// EVALSHA, reads the hash, applies the rule and writes it back. The
// setting travels with each booking as the script's arguments
// (ReserveWith), so relays whose rules differ for a host still share its
// schedule, each booking spaced by the setting of the relay that made it. The step reads Redis's own clock, so relays whose
// clocks disagree still agree on the schedule; the start it books is handed
// back in the caller's clock. A host's key expires by itself once the host is
// idle, so nothing sweeps.
//
// When Redis does not answer within Options.Timeout (50 ms by default), or
// cannot be reached, the store logs the outage once and keeps serving. By
// default it books in a local limiter.Limiter with the same configuration:
// each relay then spaces navigations on its own, hosts start afresh there
// (with their burst), and what was booked locally is not carried back.
// With FallbackClosed it lets nothing go instead: Reserve returns holds, which
// a caller tells apart by Reservation.Retry and asks again when they end. Either way the
// store tries Redis again at most once per Options.ProbeInterval and goes
// back to it as soon as it answers. Fallbacks and Outages count what happened,
// for metrics.
//
// Beside the hosts' hashes, the store keeps the places of the in-flight
// cap (inflight.go) and the buckets' circuit breakers (breaker.go), each
// under an infix of its own after the prefix, with the same fallback.
//
// A step that timed out may still have run in Redis: the slot it booked
// there is lost, which only ever spaces that host's navigations more.
//
// Redis may be one server, a master that Redis Sentinel fails over, or a
// Redis Cluster (connect.go), each reached with go-redis's own client.
// Every step touches one key, so a cluster runs it whole on the node that
// owns the host; an outage there falls back for that node's hosts only.
// Replication to a Sentinel's replica is asynchronous: a booking the old
// master acknowledged just before it died may be missing on the new one.
package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// Defaults for the zero values of Options' fields.
const (
	DefaultPrefix        = "cdp-throttle:"
	DefaultTimeout       = 50 * time.Millisecond
	DefaultProbeInterval = time.Second
	DefaultHold          = time.Second
)

// expiryMargin is how long a key outlives the moment its host turns idle.
// With Redis's clock none is needed; it covers steps whose explicit now
// (tests on a simulated clock) runs behind the real time that expiry counts.
const expiryMargin = time.Second

// Fallback chooses what a store does while Redis does not answer.
type Fallback string

const (
	// FallbackLocal books navigations in an in-process limiter.Limiter with
	// the store's configuration until Redis answers again: each relay then
	// spaces a host's navigations on its own. It is the default.
	FallbackLocal Fallback = "local"
	// FallbackClosed lets no navigation go until Redis answers again: Reserve
	// returns holds (Reservation.Retry) and Observe drops what it is told.
	FallbackClosed Fallback = "closed"
)

// ParseFallback reads --store-fallback: local or closed.
func ParseFallback(s string) (Fallback, error) {
	switch f := Fallback(strings.ToLower(strings.TrimSpace(s))); f {
	case FallbackLocal, FallbackClosed:
		return f, nil
	}
	return "", fmt.Errorf("--store-fallback %q: want local or closed", s)
}

// Options configures a Redis store. The zero Options is the default.
type Options struct {
	// Prefix is put before each host to make its key. Empty means DefaultPrefix.
	Prefix string
	// Timeout bounds every call to Redis, from taking a connection to the
	// answer. Zero means DefaultTimeout.
	Timeout time.Duration
	// Fallback is what to do while Redis does not answer: FallbackLocal
	// (also the meaning of "") or FallbackClosed.
	Fallback Fallback
	// ProbeInterval is how often, at most, a store that lost Redis tries it
	// again; calls in between go straight to the fallback. Zero means
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// Hold is how far in the future a hold starts in FallbackClosed mode: how
	// often a held navigation asks again. Zero means DefaultHold.
	Hold time.Duration
	// Log receives a warning when Redis is lost and a note when it is back,
	// once per outage. Nil logs nothing.
	Log *zerolog.Logger
	// Lease is how long a place of the in-flight cap lives in Redis unless
	// its relay renews it (every Lease/3): how long a relay that died holds
	// its places. Zero means DefaultLease.
	Lease time.Duration
}

// Redis books navigation slots per host in Redis, with the rule of
// limiter.Limiter, and implements hold.Limiter. It is safe for concurrent
// use. The zero Redis is not usable: create it with NewRedis and end it
// with Close.
//
// Times are kept in whole microseconds; a fixed Interval is rounded down to
// one (and is at least 1 µs).
type Redis struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // the client, when Redis is a cluster
	kind    Kind
	local   *limiter.Limiter // fallback in FallbackLocal mode; always holds the normalised config
	holds   bool             // FallbackClosed: hold navigations while Redis is down
	prefix  string
	timeout time.Duration
	probe   time.Duration
	hold    time.Duration
	log     zerolog.Logger
	addr    string         // for logs: host:port/db, or the sentinels or nodes; never the password
	cfg     limiter.Config // what Reserve and Observe book with
	burst   int
	// callerClock makes the script use the caller's now instead of
	// Redis's clock. Set by tests only, to replay the rule on a simulated clock.
	callerClock bool
	// clock, when set, is the now the in-flight script uses instead of
	// Redis's clock. Set by tests only.
	clock func() time.Time
	// rand is the jitter's randomness, drawn here and passed to the
	// script; set once before use (SetRand), nil for math/rand/v2's.
	rand *limiter.Rand

	owner     string        // names this store's leases: random, per process
	lease     time.Duration // Options.Lease
	leases    leases
	stopRenew chan struct{}
	renewing  sync.WaitGroup

	whole     outage       // of the one server or master; a cluster has one per node
	nodes     *nodeOutages // a cluster's, by node
	master    master       // where a Sentinel-watched master is
	lastError atomic.Int64 // unix ns of the last server error logged
	fallbacks atomic.Uint64
	outages   atomic.Uint64
	shut      atomic.Bool // Close was called
}

//go:embed step.lua
var stepSource string

// step is the script every Reserve and Observe runs. go-redis runs it with
// EVALSHA and falls back to EVAL, which caches it again, after Redis lost
// its script cache (NOSCRIPT), a restart for one.
var step = script(stepSource,
	"{{COOLDOWN}}", us(limiter.CooldownIntervals*limiter.AdaptiveInterval),
	"{{MAX_SPACING}}", us(limiter.MaxIntervals*limiter.AdaptiveInterval),
	"{{MAX_PRESSURE}}", strconv.Itoa((limiter.MaxIntervals-1)*limiter.RampBursts),
	"{{RAMP}}", strconv.Itoa(limiter.RampBursts),
	"{{SERVER_LIFE}}", us(limiter.ServerPolicyLife),
)

// luaClock is the clock every script reads now with: clock(arg) is arg
// read as microseconds (only tests pass one), or the server's time when
// arg is not a number (the empty string).
const luaClock = `local function clock(arg)
  local now = tonumber(arg)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end`

// script makes a script of source, in which {{MARGIN_MS}} is
// expiryMargin in milliseconds, {{CLOCK}} defines clock (luaClock), and
// the pairs of more (old, new) are replaced as strings.NewReplacer does.
func script(source string, more ...string) *redis.Script {
	pairs := append([]string{
		"{{MARGIN_MS}}", strconv.FormatInt(expiryMargin.Milliseconds(), 10),
		"{{CLOCK}}", luaClock,
	}, more...)
	return redis.NewScript(strings.NewReplacer(pairs...).Replace(source))
}

func us(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

// NewRedis connects to Redis at url and returns a store booking with cfg.
// url is one server, "redis://HOST:PORT/DB" (any form redis.ParseURL
// reads); a master watched by Redis Sentinel, go-redis's failover URL
// "redis://S1:26379/DB?master_name=NAME&addr=S2:26379" (master_name
// selects it; the addresses are the sentinels'); or a Redis Cluster,
// "redis-cluster://N1:7000?addr=N2:7001" (go-redis's cluster URL under a
// scheme of its own). It checks, within ctx, that Redis answers and loads
// the script, so a wrong address fails here rather than at the first
// navigation; once running, the store rides out outages as opts.Fallback
// says, in a cluster node by node.
func NewRedis(ctx context.Context, url string, cfg limiter.Config, opts Options) (*Redis, error) {
	redis.SetLogger(quietRedis{})
	s := &Redis{
		local:   limiter.New(cfg),
		prefix:  opts.Prefix,
		timeout: opts.Timeout,
		probe:   opts.ProbeInterval,
		hold:    opts.Hold,
		log:     zerolog.Nop(),
		cfg:     cfg,
		owner:   newOwner(),
		lease:   opts.Lease,
	}
	if s.lease <= 0 {
		s.lease = DefaultLease
	}
	switch opts.Fallback {
	case "", FallbackLocal:
	case FallbackClosed:
		s.holds = true
	default:
		return nil, fmt.Errorf("store: fallback %q: want %q or %q", opts.Fallback, FallbackLocal, FallbackClosed)
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.probe <= 0 {
		s.probe = DefaultProbeInterval
	}
	if s.hold <= 0 {
		s.hold = DefaultHold
	}
	if opts.Log != nil {
		s.log = *opts.Log
	}
	// As limiter.New reads Burst; limiter.Limiter's Burst method cannot
	// tell it for a fixed limiter without an interval.
	switch s.burst = cfg.Burst; {
	case s.burst == 0:
		s.burst = limiter.DefaultBurst
	case s.burst < 1:
		s.burst = 1
	}

	if err := s.connect(url, s.timeout); err != nil {
		return nil, err
	}
	if err := step.Load(ctx, s.client).Err(); err != nil {
		s.client.Close()
		return nil, fmt.Errorf("store: redis at %s: loading the script: %w", s.addr, err)
	}
	if err := inflightStep.Load(ctx, s.client).Err(); err != nil {
		s.client.Close()
		return nil, fmt.Errorf("store: redis at %s: loading the in-flight script: %w", s.addr, err)
	}
	if err := breakerStep.Load(ctx, s.client).Err(); err != nil {
		s.client.Close()
		return nil, fmt.Errorf("store: redis at %s: loading the breaker's script: %w", s.addr, err)
	}
	s.stopRenew = make(chan struct{})
	s.renewing.Go(func() { s.renew(s.stopRenew) })
	return s, nil
}

// Close stops renewing leases and closes the connections to Redis. Calls
// made after it are answered by the fallback, without logging an outage.
func (s *Redis) Close() error {
	if s.shut.Swap(true) {
		return nil
	}
	close(s.stopRenew)
	s.renewing.Wait()
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("store: closing redis at %s: %w", s.addr, err)
	}
	return nil
}

// Mode reports the store's mode.
func (s *Redis) Mode() limiter.Mode { return s.local.Mode() }

// Interval reports the base interval: the spacing in Fixed mode, the unit of
// the adaptive ramp otherwise.
func (s *Redis) Interval() time.Duration { return s.local.Interval() }

// Burst reports how many navigations an idle host absorbs at once.
func (s *Redis) Burst() int { return s.burst }

// SetRand makes the store, and its local fallback, draw jitter from r
// (limiter.NewRand) instead of math/rand/v2's global source. Call it
// before the store books anything.
func (s *Redis) SetRand(r *limiter.Rand) {
	s.rand = r
	s.local.SetRand(r)
}

// Fallbacks reports how many Reserve and Observe calls were answered
// without Redis, by the local limiter or with a hold.
func (s *Redis) Fallbacks() uint64 { return s.fallbacks.Load() }

// Outages reports how many times the store lost Redis.
func (s *Redis) Outages() uint64 { return s.outages.Load() }

// Reserve books the next slot of host for a navigation wanted at now, as
// limiter.Limiter's Reserve does, in Redis. The reservation's Start is in
// the caller's clock: now plus the wait Redis computed on its own.
//
// While Redis does not answer, the local fallback books instead, or in
// FallbackClosed mode Reserve returns a hold: nothing booked, Start one
// Options.Hold after now, and Retry set (ask again at Start).
func (s *Redis) Reserve(host string, now time.Time) limiter.Reservation {
	if limiter.Exempt(host) {
		return limiter.Reservation{Start: now, Mode: limiter.Off}
	}
	return s.ReserveWith(host, s.cfg, now)
}

// ReserveWith is Reserve with the setting cfg instead of the store's own,
// as limiter.Limiter's ReserveWith: the setting goes to Redis with the
// booking, and loopback is booked like any host (the policy decides what
// is exempt).
func (s *Redis) ReserveWith(host string, cfg limiter.Config, now time.Time) limiter.Reservation {
	entered := time.Now()
	set := settingOf(cfg)
	if set.mode == limiter.Off {
		return limiter.Reservation{Start: now, Mode: limiter.Off}
	}
	if o := s.outageOf(s.prefix + host); s.tryRedis(o) {
		sent := time.Now()
		if set.jitter != "0" {
			set.u = strconv.FormatFloat(s.rand.Uniform(), 'g', -1, 64) // one draw per booking, as limiter.Limiter draws
		}
		v, err := s.run(host, now, "r", set, noArgs)
		if err == nil {
			s.answered(o)
			// The slot starts v[0]-v[3] after Redis read its clock. That
			// read came after now by however long the call took to reach
			// Redis, so count from when the answer is in: a slot is then
			// never let go early, only late by the answer's way back, at
			// most the round trip (skew). The time from entering here to
			// sending counts too: on a saturated machine it was 3 ms
			// (TestChaos), by which a slot counted from sent went early.
			at, skew := now, time.Duration(0)
			if !s.callerClock {
				skew = time.Since(sent)
				at = now.Add(time.Since(entered))
			}
			if v[1] < 0 { // too far ahead to wait for: nothing was booked
				return limiter.Reservation{Start: at.Add(time.Duration(v[0]-v[3]) * time.Microsecond), Pressure: int(v[2]), Skew: skew,
					Mode: set.mode, Bucket: host, Deferred: "max-wait"}
			}
			return limiter.Reservation{
				Start:    at.Add(time.Duration(v[0]-v[3]) * time.Microsecond),
				Spacing:  time.Duration(v[1]) * time.Microsecond,
				Pressure: int(v[2]),
				Slack:    time.Duration(v[6]) * time.Microsecond,
				Headroom: time.Duration(v[7]) * time.Microsecond,
				Tracked:  true,
				Skew:     skew,
				Mode:     set.mode,
				Bucket:   host,
				Server:   time.Duration(v[8]) * time.Microsecond,
				Pushed:   time.Duration(v[11]) * time.Microsecond,
				Shared:   true,
			}
		}
		s.failed(o, err)
	}
	s.fallbacks.Add(1)
	if s.holds {
		return limiter.Reservation{Start: now.Add(s.hold), Retry: true, Mode: set.mode, Bucket: host}
	}
	return s.local.ReserveWith(host, cfg, now)
}

// setting is a limiter.Config as the script takes it, in microseconds.
type setting struct {
	mode              limiter.Mode
	adaptive          string // "1" adaptive, "0" fixed
	base, tau, floorU int64
	jitter            string // F, "0" for none
	u                 string // a reserve's draw for the jitter, "0" unless drawn
	maxWait           int64  // a reserve's MaxWait in µs, 0 for none
}

func settingOf(cfg limiter.Config) setting {
	mode, base, tau, floor, jitter := cfg.Params()
	s := setting{mode: mode, adaptive: "0", base: max(base.Microseconds(), 1), floorU: floor.Microseconds(),
		jitter: strconv.FormatFloat(jitter, 'g', -1, 64), u: "0", maxWait: max(cfg.MaxWait, 0).Microseconds()}
	if mode == limiter.Adaptive {
		s.adaptive = "1"
	}
	s.tau = int64(tau/max(base, 1)) * s.base // (burst−1) whole base intervals, as the limiter counts them
	return s
}

// Observe feeds the answer to a navigation of host, received at now, back
// into the host's pressure in Redis, as limiter.Limiter's Observe does,
// with what it says of the server's own limits: its policy is kept in
// the host's hash, where every relay's bookings find it. Answers that
// change nothing never reach Redis. While Redis does not
// answer, the local fallback is told instead; in FallbackClosed mode the
// answer is dropped.
func (s *Redis) Observe(host string, o limiter.Outcome, now time.Time) {
	if limiter.Exempt(host) {
		return
	}
	s.ObserveWith(host, s.cfg, o, now)
}

// ObserveWith is Observe for a host booked with the setting cfg
// (ReserveWith): only an adaptive setting hears statuses, and
// cfg.Overload says which are overload (limiter.Config.Effect); a fixed
// one hears the server's limits alone, unless cfg.IgnoreServer.
func (s *Redis) ObserveWith(host string, cfg limiter.Config, o limiter.Outcome, now time.Time) {
	set := settingOf(cfg)
	if set.mode == limiter.Off {
		return
	}
	var srv ratelimit.Limits
	if !cfg.IgnoreServer {
		srv = o.Server
	}
	effect := cfg.Effect(o)
	args := noArgs
	if set.mode == limiter.Adaptive {
		args.add = int64(effect.Pressure())
		if effect == limiter.Overload {
			if d, ok := cfg.RetryAfter(o, now); ok {
				args.wait = d.Microseconds()
			}
		}
	}
	if args.add == 0 && srv == (ratelimit.Limits{}) {
		return
	}
	if srv.Wait > 0 {
		// The server's spent quota holds the host as a Retry-After does;
		// with both, the later. Its own reset is kept for Busiest.
		args.wait = max(args.wait, srv.Wait.Microseconds())
		args.spent = srv.Wait.Microseconds()
	}
	args.server = srv.Spacing.Microseconds()
	if !s.runOrFallBack(host, now, "o", set, args) && !s.holds {
		s.local.ObserveWith(host, cfg, o, now)
	}
}

// Push moves host's schedule later by by, as limiter.Limiter's Push does,
// in Redis: every relay's navigations booked after it start that much
// later. While Redis does not answer, the local fallback is pushed instead
// (FallbackClosed books nothing meanwhile, so nothing is pushed).
func (s *Redis) Push(host string, by time.Duration, now time.Time) {
	if by <= 0 || limiter.Exempt(host) {
		return
	}
	if !s.runOrFallBack(host, now, "l", settingOf(s.cfg), stepArgs{add: max(by.Microseconds(), 1), wait: -1}) && !s.holds {
		s.local.Push(host, by, now)
	}
}

// runOrFallBack runs a step that answers nothing on host's schedule in
// Redis (run) and reports whether Redis took it. While Redis does not
// answer it counts a fallback and reports false: the caller takes the
// step on the local fallback instead, unless FallbackClosed holds.
func (s *Redis) runOrFallBack(host string, now time.Time, op string, set setting, args stepArgs) bool {
	if o := s.outageOf(s.prefix + host); s.tryRedis(o) {
		_, err := s.run(host, now, op, set, args)
		if err == nil {
			s.answered(o)
			return true
		}
		s.failed(o, err)
	}
	s.fallbacks.Add(1)
	return false
}

// Pushed reports how far, in all, late departures have pushed host's
// schedule in Redis (every relay's pushes), as a booking there reports it
// (limiter.Reservation.Pushed): a slot booked before a push waits it out
// too. ok is false while Redis does not answer.
func (s *Redis) Pushed(host string) (pushed time.Duration, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	v, err := s.client.HGet(ctx, s.prefix+host, "pu").Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, true // never pushed, or forgotten as idle
	case err != nil:
		return 0, false
	}
	return time.Duration(v) * time.Microsecond, true
}

// Wait books a slot for host at time.Now, waiting out holds, and blocks
// until the slot starts or ctx is done, returning ctx's error in that case.
// A cancelled wait keeps its slot booked, as limiter.Limiter's Wait does.
func (s *Redis) Wait(ctx context.Context, host string) (limiter.Reservation, error) {
	for {
		now := time.Now()
		r := s.Reserve(host, now)
		if d := r.Start.Sub(now); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				return r, ctx.Err()
			}
		}
		if !r.Retry {
			return r, nil
		}
	}
}

// stepValues is how many values the script returns: {start, spacing,
// pressure, now, adaptive, floor, slack, headroom, server, server until,
// reset, pushed}, times in microseconds (server until and reset on Redis's
// clock, as now, 0 for none).
const stepValues = 12

// stepArgs are the script's arguments besides the op and the setting.
type stepArgs struct {
	add    int64 // observe: the pressure the answer adds; late: how far to push, in µs
	wait   int64 // observe: how long the answer asks the host be left alone, in µs; -1 for none
	server int64 // observe: the least spacing the answer's server asks for, in µs; 0 for none
	spent  int64 // observe: how long the server's spent quota asks the host be left alone, in µs (also in wait); 0 for none
}

// noArgs are the arguments of a step that is told nothing.
var noArgs = stepArgs{wait: -1}

// run runs one step of the script for host with the setting set and
// returns its values.
func (s *Redis) run(host string, now time.Time, op string, set setting, args stepArgs) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	nowArg := ""
	if s.callerClock {
		nowArg = strconv.FormatInt(now.UnixMicro(), 10)
	}
	v, err := step.Run(ctx, s.client, []string{s.prefix + host}, op, set.adaptive, set.base, set.tau, args.add, args.wait, nowArg, set.floorU, set.jitter, set.u, args.server, set.maxWait, args.spent).Int64Slice()
	if err == nil && len(v) != stepValues {
		err = fmt.Errorf("script returned %d values, want %d", len(v), stepValues)
	}
	return v, err
}

// tryRedis reports whether a call should go to Redis (in a cluster, to
// the node o is of): always while it answers, and for one call per
// ProbeInterval while it does not.
func (s *Redis) tryRedis(o *outage) bool {
	if !o.down.Load() {
		return true
	}
	next := o.nextProbe.Load()
	now := time.Now().UnixNano()
	return now >= next && o.nextProbe.CompareAndSwap(next, now+int64(s.probe))
}

// answered notes that Redis (the node o is of) answered a call, ending an
// outage.
func (s *Redis) answered(o *outage) {
	if o.down.Load() && o.down.CompareAndSwap(true, false) {
		e := s.log.Info().Str("redis", s.addr)
		if o.name != "" {
			e = e.Str("node", o.name)
		}
		e.Stringer("down_for", time.Since(time.Unix(0, o.downSince.Load())).Round(time.Millisecond)).
			Uint64("fallbacks", s.fallbacks.Load()).Msg("redis answers again: booking navigations in it")
	}
}

// failed handles a call Redis (the node o is of) did not answer. A server
// that answered with an error fails that call only; one that did not
// answer in time, or could not be reached, starts an outage.
func (s *Redis) failed(o *outage, err error) {
	if s.shut.Load() {
		return
	}
	now := time.Now()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// Logged at most once a probe interval: every call may fail alike.
		last := s.lastError.Load()
		if now.UnixNano()-last >= int64(s.probe) && s.lastError.CompareAndSwap(last, now.UnixNano()) {
			s.log.Error().Err(err).Str("redis", s.addr).Str("fallback", s.fallbackName()).Msg("redis refused a navigation step")
		}
		return
	}
	o.nextProbe.Store(now.Add(s.probe).UnixNano())
	if o.down.CompareAndSwap(false, true) {
		o.downSince.Store(now.UnixNano())
		s.outages.Add(1)
		e := s.log.Warn().Err(err).Str("redis", s.addr)
		effect := s.fallbackEffect()
		if o.name != "" {
			e, effect = e.Str("node", o.name), effect+" for the hosts of this node"
		}
		e.Str("fallback", s.fallbackName()).Msg("lost redis: " + effect + " until it answers")
	}
}

func (s *Redis) fallbackName() string {
	if s.holds {
		return string(FallbackClosed)
	}
	return string(FallbackLocal)
}

func (s *Redis) fallbackEffect() string {
	if s.holds {
		return "holding every navigation"
	}
	return "booking navigations in this process only"
}

// maxScan bounds how many keys Busiest looks at: a status page must not
// walk a crawl's millions of hosts.
const maxScan = 10_000

// Busiest returns up to n of the hosts under the most pressure at now, as
// limiter.Limiter's Busiest does, from the first maxScan keys of the store,
// each with the setting of its last booking, whichever relay made it, and
// its server's policy and spent quota, whichever relay heard them: the
// step that peeks returns them with the rest, so nothing is asked more.
// It reads Redis with its own, longer timeout; while Redis is down it
// reports what the local fallback knows.
func (s *Redis) Busiest(now time.Time, n int) []limiter.HostState {
	if n <= 0 {
		return nil
	}
	if s.cluster == nil && s.whole.down.Load() {
		return s.local.Busiest(now, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	keys, err := s.scan(ctx, s.prefix+"*", maxScan)
	if err != nil {
		return nil
	}
	keys = slices.DeleteFunc(keys, func(k string) bool {
		return strings.HasPrefix(k, s.prefix+inflightInfix) || strings.HasPrefix(k, s.prefix+breakerInfix)
	})
	cmds := s.peekAll(ctx, keys, now)
	out := make([]limiter.HostState, 0, len(keys))
	for i, c := range cmds {
		v, err := c.Int64Slice()
		if err != nil || len(v) != stepValues || v[2] < 0 {
			continue
		}
		mode := limiter.Fixed
		if v[4] == 1 {
			mode = limiter.Adaptive
		}
		h := limiter.HostState{
			Host:     strings.TrimPrefix(keys[i], s.prefix),
			Pressure: int(v[2]),
			Mode:     mode,
			Floor:    time.Duration(v[5]) * time.Microsecond,
			Spacing:  time.Duration(v[1]) * time.Microsecond,
			NextFree: time.Duration(v[0]-v[3]) * time.Microsecond,
			Server:   time.Duration(v[8]) * time.Microsecond,
		}
		if h.Server > 0 {
			h.ServerEnds = time.Duration(v[9]-v[3]) * time.Microsecond
		}
		if v[10] > 0 {
			h.ServerReset = time.Duration(v[10]-v[3]) * time.Microsecond
		}
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b limiter.HostState) int {
		if a.Pressure != b.Pressure {
			return b.Pressure - a.Pressure
		}
		return int(b.NextFree - a.NextFree)
	})
	return out[:min(n, len(out))]
}

// peekAll peeks at keys in one pipeline. EVALSHA in a pipeline cannot
// fall back to EVAL as step.Run does alone: when Redis lost the script
// (NOSCRIPT: a restart that kept its keys, a SCRIPT FLUSH, a failover),
// peekAll loads it again and runs the pipeline once more. Like run, it
// reads Redis's clock, not now, unless the store runs on the caller's.
func (s *Redis) peekAll(ctx context.Context, keys []string, now time.Time) []*redis.Cmd {
	set := settingOf(s.cfg)
	nowArg := ""
	if s.callerClock {
		nowArg = strconv.FormatInt(now.UnixMicro(), 10)
	}
	for try := 0; ; try++ {
		pipe := s.client.Pipeline()
		cmds := make([]*redis.Cmd, len(keys))
		for i, k := range keys {
			cmds[i] = step.EvalSha(ctx, pipe, []string{k}, "p", set.adaptive, set.base, set.tau, 0, -1, nowArg, set.floorU)
		}
		pipe.Exec(ctx)
		if try > 0 || !slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return isNoScript(c.Err()) }) {
			return cmds
		}
		if err := step.Load(ctx, s.client).Err(); err != nil {
			return cmds
		}
	}
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// quietRedis drops go-redis's own logging (a line per failed dial while
// Redis is down); the store logs each outage once.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
