// Package policy decides, for each navigation, which schedule it is booked
// in and with which setting: per-site rules by host pattern (first match
// wins, the global flags otherwise), exempt hosts (loopback unless a rule
// names it), one schedule per host, per registrable domain or per server
// address (learned from the browser's answers and the resolver, package
// resolve), a robots.txt Crawl-delay as a floor under the spacing and,
// with --robots obey, the navigations its Disallow refuses (Allowed), the
// cap on navigations in flight, the answers that count as overload, and
// the latency baseline that turns slow answers into pressure. It owns the
// parsing of those settings
// and of every duration the command line reads, and implements the relay's
// Limiter on top of a Booker: the in-process limiter.Limiter or the shared
// Redis store (whose places of the in-flight cap it also uses, when the
// Booker keeps them).
//
// It knows the limiter's settings but not its arithmetic, and nothing of
// CDP, websockets, Redis or how a navigation is held.
package policy

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/inflight"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
	"github.com/cdp-throttle/cdp-throttle/resolve"
)

// Booker books navigations with a setting per booking, as
// *limiter.Limiter and the Redis store do. Its methods must be safe for
// concurrent use.
type Booker interface {
	ReserveWith(bucket string, cfg limiter.Config, now time.Time) limiter.Reservation
	ObserveWith(bucket string, cfg limiter.Config, o limiter.Outcome, now time.Time)
}

// Config is a policy: what the command line says.
type Config struct {
	// Default is the setting of the global flags (--http-nav-delay,
	// --http-nav-burst), for hosts no rule matches.
	Default limiter.Config
	// Rules give the hosts they match settings of their own; the first
	// that matches wins.
	Rules []Rule
	// Exempt are host globs never spaced, besides loopback.
	Exempt []string
	// Bucket chooses which hosts share one schedule.
	Bucket Bucket
	// Addrs says which address each host is on, with Bucket ByIP; nil
	// means a resolve.Cache of its defaults (both sources). The policy
	// learns into it from the answers it is fed (limiter.Outcome.Addr),
	// and closes it.
	Addrs *resolve.Cache
	// Robots, when set, reads each site's robots.txt: its Crawl-delay as
	// a floor under its spacing, and with RobotsObey the paths it
	// disallows.
	Robots *Robots
	// RobotsUse is what robots.txt is read for (--robots), for hosts
	// whose rule does not say robots:…: RobotsDefault means
	// RobotsCrawlDelay when Robots is set, else RobotsIgnore.
	RobotsUse RobotsUse
	// CrawlDelay is a floor under every host's spacing, as if each site's
	// robots.txt asked for it: simulate's --crawl-delay.
	CrawlDelay time.Duration
	// Concurrency caps the navigations of each bucket in flight at once
	// (--http-nav-concurrency), for hosts whose rule does not say
	// concurrency:N; 0 means no cap.
	Concurrency int
	// ConcurrencyBound is how long a place of the cap is held at most
	// (--http-nav-concurrency-bound); zero means inflight.DefaultBound.
	ConcurrencyBound time.Duration
	// LatencyBackoff, when over 1, reads an answer slower than that many
	// times its bucket's baseline (limiter.Baselines) as slow, which adds
	// the failure pressure (--latency-backoff); 0 is off.
	LatencyBackoff float64
	// HostErrors is each bucket's breaker (--host-errors N/WINDOW): N
	// failures of its documents within the window pause the bucket, its
	// navigations deferred (limiter.Reservation.Deferred "breaker") until
	// a probe is answered. The zero Config is off.
	HostErrors breaker.Config
	// Breakers keep the buckets' breakers when HostErrors is on: a shared
	// store's (store.Redis.Breaker), for every relay of a fleet; nil
	// means this process's own (breaker.NewLocal).
	Breakers breaker.Breaker
	// Log, when set, is Robots' log unless it has its own.
	Log *zerolog.Logger
}

// Sources of a setting, as Reservation.Source names them.
const (
	SourceFlags    = "flag"
	SourceRobots   = "robots.txt"
	SourceLoopback = "loopback"
	SourceExempt   = "exempt-host"
	// SourceServer says the server's own policy set the spacing
	// (limiter.Outcome.Server, RateLimit-Policy), stricter than the setting.
	SourceServer = "server"
)

// decision is what applies to one host.
type decision struct {
	set       limiter.Config
	tracked   bool   // false: nothing is booked
	source    string // SourceFlags, "rule N", SourceLoopback, SourceExempt
	rule      string // the rule's text, or the exempt glob
	cap       int    // navigations of the bucket in flight at most; 0 no cap
	capSource string // SourceFlags or "rule N"
	robots    RobotsUse
}

// Policy books navigations as its Config says, in a Booker. It implements
// the relay's Limiter, and is safe for concurrent use. Create it with New;
// Close ends its robots.txt fetches and gives back the places of its cap.
type Policy struct {
	cfg     Config
	book    Booker
	mode    limiter.Mode
	caps    bool               // some host has a cap on navigations in flight
	sources []string           // "rule N", by rule index
	labels  labels             // what each bucket was last booked with, for Busiest
	cap     *inflight.Cap      // places of the buckets' navigations in flight
	lat     *limiter.Baselines // answer times; nil without --latency-backoff
	refuses bool               // some host obeys its robots.txt's Disallow
	refused refusals           // by bucket
	defers  refusals           // deferred navigations, by bucket
	headers []string           // the answer headers some setting reads (AnswerHeaders)
	breaker breaker.Breaker    // the buckets' breakers; nil when off
	probes  sync.Map           // bucket → struct{}: its breaker's probe went and is not answered yet
}

// pollShared is how often the first navigation waiting for a place asks a
// shared store again: places given back by other relays are found then.
const pollShared = 20 * time.Millisecond

// New returns a policy booking in b. When b also keeps places of the
// in-flight cap (inflight.Table: the Redis store), the cap is counted
// there, for every relay that shares it.
func New(cfg Config, b Booker) *Policy {
	if cfg.Robots != nil && cfg.Robots.Log == nil {
		cfg.Robots.Log = cfg.Log
	}
	switch {
	case cfg.Robots == nil:
		cfg.RobotsUse = RobotsIgnore // nothing reads robots.txt, whatever rules say
	case cfg.RobotsUse == RobotsDefault:
		cfg.RobotsUse = RobotsCrawlDelay
	}
	if cfg.Bucket == ByIP && cfg.Addrs == nil {
		cfg.Addrs = &resolve.Cache{}
	}
	p := &Policy{cfg: cfg, book: b, mode: limiter.Off, caps: cfg.Concurrency > 0}
	p.refuses = cfg.RobotsUse == RobotsObey
	if spaces(cfg.Default) {
		p.mode = cfg.Default.Mode
	}
	p.headers = cfg.Default.OverloadHeaders.Names()
	for i, r := range cfg.Rules {
		for _, name := range r.Setting.OverloadHeaders.Names() {
			if !slices.Contains(p.headers, name) {
				p.headers = append(p.headers, name)
			}
		}
		p.sources = append(p.sources, "rule "+strconv.Itoa(i+1))
		if p.mode == limiter.Off && spaces(r.Setting) {
			p.mode = r.Setting.Mode
		}
		p.caps = p.caps || r.Concurrency > 0
		p.refuses = p.refuses || cfg.Robots != nil && r.Robots == RobotsObey
	}
	p.cap = &inflight.Cap{Bound: cfg.ConcurrencyBound}
	if t, ok := b.(inflight.Table); ok {
		p.cap.Table, p.cap.Poll = t, pollShared
	}
	if cfg.LatencyBackoff > 1 {
		p.lat = &limiter.Baselines{Factor: cfg.LatencyBackoff}
	}
	if cfg.HostErrors.On() {
		p.breaker = cfg.Breakers
		if p.breaker == nil {
			p.breaker = breaker.NewLocal(cfg.HostErrors, nil)
		}
	}
	return p
}

// Breakers returns the buckets' breakers, nil when --host-errors is off:
// /hosts and /metrics read them.
func (p *Policy) Breakers() breaker.Breaker { return p.breaker }

// AnswerHeaders names the headers of a document's answer, lower-case,
// that some setting reads besides Retry-After (--overload-header, a
// rule's overload-header:): what the relay keeps of each answer for
// Observe (limiter.Outcome.Headers). Nil when none does.
func (p *Policy) AnswerHeaders() []string { return p.headers }

// Caps reports whether some host has a cap on its navigations in flight:
// then navigations are held even when nothing is spaced.
func (p *Policy) Caps() bool { return p.caps }

// Mode reports the policy's global mode: the mode of the global flags,
// unless they are off while some rule spaces hosts, in which case the mode
// of the first such rule. Off means that nothing is ever booked: unless
// the policy Caps navigations in flight, the relay need not watch
// navigations at all.
func (p *Policy) Mode() limiter.Mode { return p.mode }

// Bucket returns the schedule host is booked in: host itself, its site,
// or the address it is known to be on (host itself while that is not
// known). It never waits: a navigation's booking does, in bucketOf.
func (p *Policy) Bucket(host string) string {
	switch p.cfg.Bucket {
	case BySite:
		return Site(host)
	case ByIP:
		if a, ok := p.cfg.Addrs.Peek(host); ok {
			return resolve.Key(a)
		}
	}
	return host
}

// bucketOf is Bucket for a navigation about to be booked: by address, it
// may ask the resolver for a host the browser has not told about, waiting
// at most resolve.Cache.Wait (1 s) and never past ctx.
func (p *Policy) bucketOf(ctx context.Context, host string) string {
	if p.cfg.Bucket == ByIP {
		if a, ok := p.cfg.Addrs.Addr(ctx, host); ok {
			return resolve.Key(a)
		}
		return host
	}
	return p.Bucket(host)
}

// Buckets names what a bucket is: "host", or "site" with --bucket site,
// "ip" with --bucket ip.
func (p *Policy) Buckets() string { return p.cfg.Bucket.String() }

// decide returns what applies to host: --exempt-host first, then the
// first rule that matches, then loopback, exempt unless a rule matched it,
// then the flags.
func (p *Policy) decide(host string) decision {
	for _, g := range p.cfg.Exempt {
		if match(g, host) {
			return decision{source: SourceExempt, rule: g}
		}
	}
	for i, r := range p.cfg.Rules {
		if match(r.Pattern, host) {
			d := decision{set: r.Setting, tracked: spaces(r.Setting), source: p.sources[i], rule: r.Text, cap: r.Concurrency, capSource: SourceFlags, robots: p.cfg.RobotsUse}
			if r.OwnConcurrency {
				d.capSource = p.sources[i]
			}
			if r.Robots != RobotsDefault && p.cfg.Robots != nil {
				d.robots = r.Robots
			}
			if r.Exempt {
				d.robots = RobotsIgnore
			}
			return d
		}
	}
	if limiter.Exempt(host) {
		return decision{source: SourceLoopback}
	}
	return decision{set: p.cfg.Default, tracked: spaces(p.cfg.Default), source: SourceFlags, cap: p.cfg.Concurrency, capSource: SourceFlags, robots: p.cfg.RobotsUse}
}

// Exempt reports whether navigations to host are neither spaced, capped
// nor checked against its robots.txt: the relay need not hold them at
// all. Loopback is, unless a rule names it (or a glob of one matches it).
func (p *Policy) Exempt(host string) bool {
	d := p.decide(host)
	return !d.tracked && d.cap <= 0 && d.robots != RobotsObey
}

// Refuses reports whether some host obeys its robots.txt's Disallow
// (--robots obey, or a rule's robots:obey): then navigations are held,
// to be checked, even when nothing is spaced or capped.
func (p *Policy) Refuses() bool { return p.refuses }

// Allowed reports whether a navigation to rawURL, whose host (as
// limiter.Key returns it) is host, may go: false when host obeys its
// robots.txt and that disallows rawURL for the robots.txt user agent.
// Then rule says what disallowed it, for the log, and the refusal is
// counted for host's bucket (Busiest). It may wait for the site's
// robots.txt as Reserve does, and the fetch serves both.
func (p *Policy) Allowed(ctx context.Context, host, rawURL string) (ok bool, rule string) {
	if !p.refuses || p.decide(host).robots != RobotsObey {
		return true, ""
	}
	ok, rule = p.cfg.Robots.Allowed(ctx, rawURL)
	if !ok {
		p.refused.add(p.Bucket(host))
	}
	return ok, rule
}

// Cap reports the bucket of host and the cap on its navigations in
// flight, 0 for none.
func (p *Policy) Cap(host string) (bucket string, limit int) {
	return p.Bucket(host), p.decide(host).cap
}

// Enter waits, behind the navigations of its bucket that came first, for
// a place among the bucket's navigations in flight, and returns it: the
// navigation gives it back (Place.Leave) when its answer is in, it fails,
// or it ends any other way; in any case the bound gives it back. A host
// without a cap gets nil at once. It returns ctx's error when ctx ends
// first.
func (p *Policy) Enter(ctx context.Context, host string) (*inflight.Place, error) {
	d := p.decide(host)
	if d.cap <= 0 {
		return nil, nil
	}
	pl, err := p.cap.Enter(ctx, p.bucketOf(ctx, host), d.cap)
	if pl != nil {
		pl.Source = d.capSource
		if d.capSource != SourceFlags {
			pl.Rule = d.rule
		}
	}
	return pl, err
}

// Expired reports how many places of the cap the bound gave back: the
// ends of their navigations were never seen.
func (p *Policy) Expired() uint64 { return p.cap.Expired() }

// spaces reports whether a setting books anything: it is not off, nor
// fixed without an interval (which the limiter reads as off).
func spaces(c limiter.Config) bool {
	return c.Mode == limiter.Adaptive || c.Mode == limiter.Fixed && c.Interval > 0
}

// Setting returns the setting a navigation to host is booked with, before
// any robots.txt, and where it comes from ("flag", "rule N", "loopback",
// "exempt-host"); tracked is false when nothing is booked for host.
func (p *Policy) Setting(host string) (set limiter.Config, source string, tracked bool) {
	d := p.decide(host)
	return d.set, d.source, d.tracked
}

// Reserve books the slot of a navigation to rawURL, whose host (as
// limiter.Key returns it) is host, wanted at now. It may wait for the
// site's robots.txt, at most Robots.Wait after its fetch began and never
// once ctx is done; the booking is then made at now plus that wait. An
// untracked reservation (loopback, exempt, off) starts at now. A slot
// that would start after ctx's deadline is not booked: the reservation
// is deferred (limiter.PastDeadline), as one past --max-wait is.
func (p *Policy) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	d := p.decide(host)
	if !d.tracked {
		return limiter.Reservation{Start: now, Mode: limiter.Off, Source: d.source, Rule: d.rule}
	}
	asked := time.Now()
	bucket := p.bucketOf(ctx, host)
	set := d.set
	set.Floor = p.cfg.CrawlDelay
	if d.robots == RobotsCrawlDelay || d.robots == RobotsObey {
		set.Floor = max(set.Floor, p.cfg.Robots.CrawlDelay(ctx, rawURL))
	}
	if p.cfg.Robots != nil || p.cfg.Bucket == ByIP {
		now = now.Add(time.Since(asked)) // booked when the wait ended
	}
	past := false // the caller cannot wait past ctx's deadline: a slot after it is deferred
	if end, ok := ctx.Deadline(); ok {
		if wait := max(end.Sub(now), time.Nanosecond); set.MaxWait <= 0 || wait < set.MaxWait {
			set.MaxWait, past = wait, true
		}
	}
	probe := false
	if p.breaker != nil {
		switch b := p.breaker.Allow(bucket, now); {
		case b.Retry: // a store that cannot say holds it, as a booking it cannot make
			return limiter.Reservation{Start: b.Until, Retry: true, Mode: set.Mode, Bucket: bucket, Source: d.source, Rule: d.rule}
		case !b.Go:
			p.defers.add(bucket)
			return limiter.Reservation{Start: b.Until, Deferred: "breaker", Mode: set.Mode, Bucket: bucket, Source: d.source, Rule: d.rule}
		case b.Probe:
			probe = true
			p.probes.Store(bucket, struct{}{})
		}
	}
	r := p.book.ReserveWith(bucket, set, now)
	if past && r.Deferred == "max-wait" {
		r.Deferred = limiter.PastDeadline
	}
	if r.Deferred != "" {
		p.defers.add(bucket)
	}
	if probe && (r.Deferred != "" || r.Retry) {
		p.ProbeLost(bucket, now) // the probe does not go: another may, at once
	}
	r.Probe = probe && r.Deferred == "" && !r.Retry
	r.Source, r.Rule = d.source, d.rule
	if set.Floor > 0 && r.Spacing == set.Floor {
		r.Source, r.Rule = SourceRobots, "Crawl-delay: "+set.Floor.String()
	}
	p.labels.put(bucket, label{source: r.Source, rule: r.Rule, floor: set.Floor})
	if r.Server > 0 && r.Spacing == r.Server {
		// Said, not labelled: the server's policy lapses by itself, and
		// Busiest asks the Booker whether it still holds.
		r.Source, r.Rule = SourceServer, serverRule(r.Server)
	}
	return r
}

// serverRule is the text of SourceServer: the spacing the server's
// policy asks for, w/q of the strictest (package ratelimit).
func serverRule(spacing time.Duration) string { return "RateLimit-Policy: " + spacing.String() }

// Observe feeds the answer a navigation to host got at now back into its
// schedule, when the setting that applies to host is adaptive, or fixed
// and the answer says the server's own limits (o.Server, unless the
// setting ignores them), and returns what it is (limiter.Config.Effect):
// overload by the setting's statuses, a failure, slow against the
// bucket's baseline (with --latency-backoff), or calm. The answer's time
// (o.Took) goes into the baseline of an adaptive setting.
func (p *Policy) Observe(host string, o limiter.Outcome, now time.Time) limiter.Effect {
	if p.cfg.Bucket == ByIP {
		p.cfg.Addrs.Learn(host, o.Addr) // the bucket of host's next navigation
	}
	d := p.decide(host)
	if d.tracked && p.breaker != nil {
		p.tellBreaker(p.Bucket(host), d.set, o, now)
	}
	switch {
	case !d.tracked:
		return d.set.Effect(o)
	case d.set.Mode != limiter.Adaptive && (d.set.IgnoreServer || o.Server == (ratelimit.Limits{})):
		return d.set.Effect(o) // a fixed spacing hears nothing else
	}
	bucket := p.Bucket(host)
	if p.lat != nil && d.set.Mode == limiter.Adaptive {
		o.Slow = p.lat.Answer(bucket, o.Status, o.Took, now)
	}
	set := d.set
	if l, ok := p.labels.get(bucket); ok {
		set.Floor = l.floor // the Retry-After wait is counted as the booking's
	}
	p.book.ObserveWith(bucket, set, o, now)
	return set.Effect(o)
}

// ProbeLost tells bucket's breaker that its probe ended with no answer
// (hold.Prober): its page went, its client left, another navigation
// replaced it, or it never went; another may go at once. Once the probe's
// answer was told, or another probe's was, it does nothing.
func (p *Policy) ProbeLost(bucket string, now time.Time) {
	if _, ok := p.probes.LoadAndDelete(bucket); ok {
		p.breaker.Observe(bucket, breaker.Answer{Probe: true, Lost: true}, now)
	}
}

// tellBreaker tells bucket's breaker of an answer to one of its
// navigations: a failure (5xx, the overload statuses and headers, no
// answer at all), with its Retry-After, or the answer of the bucket's
// probe, whatever it is. Other answers change nothing, and are not told.
func (p *Policy) tellBreaker(bucket string, set limiter.Config, o limiter.Outcome, now time.Time) {
	e := set.Effect(o)
	a := breaker.Answer{Failed: e == limiter.Overload || e == limiter.Failure}
	_, a.Probe = p.probes.LoadAndDelete(bucket)
	if !a.Failed && !a.Probe {
		return
	}
	if e == limiter.Overload {
		a.RetryAfter, _ = set.RetryAfter(o, now)
	}
	p.breaker.Observe(bucket, a, now)
}

// ReadsLimits reports whether the answers of host are read for what
// they say of the server's own limits (limiter.Outcome.Server): host is
// spaced, and its setting obeys them (--ratelimit-headers,
// ratelimit-headers:).
func (p *Policy) ReadsLimits(host string) bool {
	d := p.decide(host)
	return d.tracked && !d.set.IgnoreServer
}

// Push moves bucket's schedule later by by, when the Booker can: a
// navigation booked in it left the browser late (package pace). bucket is
// a Reservation's Bucket.
func (p *Policy) Push(bucket string, by time.Duration, now time.Time) {
	if b, ok := p.book.(interface {
		Push(bucket string, by time.Duration, now time.Time)
	}); ok {
		b.Push(bucket, by, now)
	}
}

// Pushed reports how far late departures have pushed bucket's schedule in
// all, when the Booker is a shared store that says (hold.PushReader); ok
// is false otherwise, or while it does not answer.
func (p *Policy) Pushed(bucket string) (time.Duration, bool) {
	if b, ok := p.book.(interface {
		Pushed(bucket string) (time.Duration, bool)
	}); ok {
		return b.Pushed(bucket)
	}
	return 0, false
}

// Busiest returns up to n of the buckets under the most pressure at now,
// as the Booker's Busiest does, each with the source and rule of its last
// booking, or SourceServer while its server's policy is what sets its
// spacing; nil when the Booker cannot tell.
func (p *Policy) Busiest(now time.Time, n int) []limiter.HostState {
	b, ok := p.book.(interface {
		Busiest(now time.Time, n int) []limiter.HostState
	})
	if !ok {
		return nil
	}
	hs := b.Busiest(now, n)
	listed := make(map[string]bool, len(hs))
	for i := range hs {
		listed[hs[i].Host] = true
		switch l, ok := p.labels.get(hs[i].Host); {
		case hs[i].Server > 0 && hs[i].Spacing == hs[i].Server:
			hs[i].Source, hs[i].Rule = SourceServer, serverRule(hs[i].Server)
		case ok:
			hs[i].Source, hs[i].Rule = l.source, l.rule
		default:
			// Booked by another relay of a shared store, or long ago:
			// what applies to the bucket's own name.
			d := p.decide(hs[i].Host)
			hs[i].Source, hs[i].Rule = d.source, d.rule
		}
	}
	// Buckets with navigations in flight or waiting here that the
	// schedule has forgotten (idle, or never spaced) are shown too, and
	// so are those with navigations refused.
	for _, st := range p.cap.Busy() {
		if !listed[st.Bucket] && len(hs) < n {
			listed[st.Bucket] = true
			d := p.decide(st.Bucket)
			hs = append(hs, limiter.HostState{Host: st.Bucket, Mode: d.set.Mode, Source: d.source, Rule: d.rule})
		}
	}
	for _, bucket := range append(p.refused.buckets(), p.defers.buckets()...) {
		if !listed[bucket] && len(hs) < n {
			listed[bucket] = true
			d := p.decide(bucket)
			hs = append(hs, limiter.HostState{Host: bucket, Mode: d.set.Mode, Source: d.source, Rule: d.rule})
		}
	}
	for i := range hs {
		p.describe(&hs[i], now)
	}
	return hs
}

// describe adds to a bucket's state its cap, its navigations in flight
// and waiting, and its answer times.
func (p *Policy) describe(h *limiter.HostState, now time.Time) {
	if p.caps {
		d := p.decide(h.Host)
		st := p.cap.StateOf(h.Host)
		h.InFlight, h.Waiting, h.Concurrency, h.ConcurrencySource = st.InFlight, st.Waiting, d.cap, d.capSource
		if st.Limit > 0 {
			h.Concurrency = st.Limit // as its navigations were capped: by the rule of the host that entered
		}
		if h.Concurrency == 0 {
			h.ConcurrencySource = ""
		}
	}
	if p.lat != nil {
		h.Baseline, h.LastAnswer, _ = p.lat.State(h.Host, now)
	}
	h.Refused, h.Deferred = p.refused.of(h.Host), p.defers.of(h.Host)
	if p.breaker != nil && h.Deferred > 0 {
		// Only a bucket that deferred something is asked: the fleet's
		// breakers are in Redis, and the page asks every second.
		switch st := p.breaker.State(h.Host, now); st.Phase {
		case breaker.Open:
			h.Breaker, h.BreakerEnds = st.Phase.String(), max(0, st.Until.Sub(now))
		case breaker.HalfOpen:
			h.Breaker = st.Phase.String()
		}
	}
}

// SetBrowser tells the policy the browser's User-Agent, as its
// /json/version gives it: robots.txt files are read for its product token
// unless --robots-user-agent says otherwise.
func (p *Policy) SetBrowser(userAgent string) {
	if p.cfg.Robots != nil {
		p.cfg.Robots.SetBrowser(userAgent)
	}
}

// WantsBrowserArgs reports whether the policy reads the browser's command
// line (SetBrowserArgs): with --bucket ip.
func (p *Policy) WantsBrowserArgs() bool { return p.cfg.Bucket == ByIP }

// SetBrowserArgs tells the policy the command line of the browser, as
// Browser.getBrowserCommandLine gives it (Chromium does when started with
// --enable-automation, as Puppeteer and Playwright start it): with
// --bucket ip its --host-resolver-rules and a proxy are read as for a
// browser the relay starts (resolve.Cache.FitBrowser); rules already read
// stand. note says what a proxy made of the address source, for the log.
// Call it before the first navigation.
func (p *Policy) SetBrowserArgs(args []string) (note string, err error) {
	if p.cfg.Bucket != ByIP {
		return "", nil
	}
	return p.cfg.Addrs.FitBrowser(args, nil)
}

// Close ends the policy's robots.txt fetches and gives back every place of
// its cap still held (to a shared store too, so a relay that stops leaves
// none behind).
func (p *Policy) Close() {
	if p.cfg.Robots != nil {
		p.cfg.Robots.Close()
	}
	if p.cfg.Addrs != nil {
		p.cfg.Addrs.Close()
	}
	p.cap.Close()
}

// label is what a bucket was last booked with.
type label struct {
	source, rule string
	floor        time.Duration
}

// labels remembers the label of each bucket booked lately. Memory is
// bounded: past maxLabels buckets the older half is forgotten.
type labels struct {
	mu       sync.Mutex
	cur, old map[string]label // guarded by mu
}

const maxLabels = 100_000

func (ls *labels) put(bucket string, l label) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.cur == nil || len(ls.cur) >= maxLabels/2 {
		ls.old, ls.cur = ls.cur, make(map[string]label)
	}
	if prev, ok := ls.cur[bucket]; ok && prev == l {
		return
	}
	ls.cur[bucket] = l
}

func (ls *labels) get(bucket string) (label, bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if l, ok := ls.cur[bucket]; ok {
		return l, true
	}
	l, ok := ls.old[bucket]
	return l, ok
}

// refusals counts the navigations refused in each bucket. Memory is
// bounded as labels': past maxLabels buckets the older half is forgotten.
// It is safe for concurrent use; the zero value counts none.
type refusals struct {
	mu       sync.Mutex
	cur, old map[string]uint64 // guarded by mu
}

func (rs *refusals) add(bucket string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.cur == nil || len(rs.cur) >= maxLabels/2 {
		if _, ok := rs.cur[bucket]; !ok {
			rs.old, rs.cur = rs.cur, make(map[string]uint64)
		}
	}
	if n, ok := rs.old[bucket]; ok {
		delete(rs.old, bucket)
		rs.cur[bucket] = n
	}
	rs.cur[bucket]++
}

func (rs *refusals) of(bucket string) uint64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if n, ok := rs.cur[bucket]; ok {
		return n
	}
	return rs.old[bucket]
}

// buckets returns the buckets with refusals, the most refused first.
func (rs *refusals) buckets() []string {
	rs.mu.Lock()
	var bs []string
	for _, m := range []map[string]uint64{rs.cur, rs.old} {
		for b := range m {
			bs = append(bs, b)
		}
	}
	rs.mu.Unlock()
	slices.SortFunc(bs, func(a, b string) int { return cmp.Compare(rs.of(b), rs.of(a)) })
	return bs
}
