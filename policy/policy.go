// Package policy decides, for each navigation, which schedule it is booked
// in and with which setting: per-site rules by host pattern (first match
// wins, the global flags otherwise), exempt hosts, one schedule per host or
// per registrable domain, and a robots.txt Crawl-delay as a floor under the
// spacing. It owns the parsing of those settings and of every duration the
// command line reads, and implements the relay's Limiter on top of a
// Booker: the in-process limiter.Limiter or the shared Redis store.
//
// It knows the limiter's settings but not its arithmetic, and nothing of
// CDP, websockets, Redis or how a navigation is held.
package policy

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/limiter"
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
	// Robots, when set, reads each site's robots.txt Crawl-delay as a floor
	// under its spacing.
	Robots *Robots
	// CrawlDelay is a floor under every host's spacing, as if each site's
	// robots.txt asked for it: simulate's --crawl-delay.
	CrawlDelay time.Duration
	// Log, when set, is Robots' log unless it has its own.
	Log *zerolog.Logger
}

// Sources of a setting, as Reservation.Source names them.
const (
	SourceFlags    = "flag"
	SourceRobots   = "robots.txt"
	SourceLoopback = "loopback"
	SourceExempt   = "exempt-host"
)

// decision is what applies to one host.
type decision struct {
	set     limiter.Config
	tracked bool   // false: nothing is booked
	source  string // SourceFlags, "rule N", SourceLoopback, SourceExempt
	rule    string // the rule's text, or the exempt glob
}

// Policy books navigations as its Config says, in a Booker. It implements
// the relay's Limiter, and is safe for concurrent use. Create it with New;
// Close ends its robots.txt fetches.
type Policy struct {
	cfg     Config
	book    Booker
	mode    limiter.Mode
	sources []string // "rule N", by rule index
	labels  labels   // what each bucket was last booked with, for Busiest
}

// New returns a policy booking in b.
func New(cfg Config, b Booker) *Policy {
	if cfg.Robots != nil && cfg.Robots.Log == nil {
		cfg.Robots.Log = cfg.Log
	}
	p := &Policy{cfg: cfg, book: b, mode: limiter.Off}
	if spaces(cfg.Default) {
		p.mode = cfg.Default.Mode
	}
	for i, r := range cfg.Rules {
		p.sources = append(p.sources, "rule "+strconv.Itoa(i+1))
		if p.mode == limiter.Off && spaces(r.Setting) {
			p.mode = r.Setting.Mode
		}
	}
	return p
}

// Mode reports the policy's global mode: the mode of the global flags,
// unless they are off while some rule spaces hosts, in which case the mode
// of the first such rule. Off means that nothing is ever booked: the
// relay need not watch navigations at all.
func (p *Policy) Mode() limiter.Mode { return p.mode }

// Bucket returns the schedule host is booked in: host itself, or its site.
func (p *Policy) Bucket(host string) string {
	if p.cfg.Bucket == BySite {
		return Site(host)
	}
	return host
}

// Buckets names what a bucket is: "host", or "site" with --bucket site.
func (p *Policy) Buckets() string { return p.cfg.Bucket.String() }

// decide returns what applies to host: loopback and --exempt-host first,
// then the first rule that matches, then the flags.
func (p *Policy) decide(host string) decision {
	if limiter.Exempt(host) {
		return decision{source: SourceLoopback}
	}
	for _, g := range p.cfg.Exempt {
		if match(g, host) {
			return decision{source: SourceExempt, rule: g}
		}
	}
	for i, r := range p.cfg.Rules {
		if match(r.Pattern, host) {
			return decision{set: r.Setting, tracked: spaces(r.Setting), source: p.sources[i], rule: r.Text}
		}
	}
	return decision{set: p.cfg.Default, tracked: spaces(p.cfg.Default), source: SourceFlags}
}

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
// untracked reservation (loopback, exempt, off) starts at now.
func (p *Policy) Reserve(ctx context.Context, host, rawURL string, now time.Time) limiter.Reservation {
	d := p.decide(host)
	if !d.tracked {
		return limiter.Reservation{Start: now, Mode: limiter.Off, Source: d.source, Rule: d.rule}
	}
	bucket := p.Bucket(host)
	set := d.set
	set.Floor = p.cfg.CrawlDelay
	if p.cfg.Robots != nil {
		asked := time.Now()
		set.Floor = max(set.Floor, p.cfg.Robots.CrawlDelay(ctx, rawURL))
		now = now.Add(time.Since(asked))
	}
	r := p.book.ReserveWith(bucket, set, now)
	r.Source, r.Rule = d.source, d.rule
	if set.Floor > 0 && r.Spacing == set.Floor {
		r.Source, r.Rule = SourceRobots, "Crawl-delay: "+set.Floor.String()
	}
	p.labels.put(bucket, label{source: r.Source, rule: r.Rule, floor: set.Floor})
	return r
}

// Observe feeds the answer a navigation to host got at now back into its
// schedule, when the setting that applies to host is adaptive.
func (p *Policy) Observe(host string, o limiter.Outcome, now time.Time) {
	d := p.decide(host)
	if !d.tracked || d.set.Mode != limiter.Adaptive {
		return
	}
	bucket := p.Bucket(host)
	set := d.set
	if l, ok := p.labels.get(bucket); ok {
		set.Floor = l.floor // the Retry-After wait is counted as the booking's
	}
	p.book.ObserveWith(bucket, set, o, now)
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

// Busiest returns up to n of the buckets under the most pressure at now,
// as the Booker's Busiest does, each with the source and rule of its last
// booking; nil when the Booker cannot tell.
func (p *Policy) Busiest(now time.Time, n int) []limiter.HostState {
	b, ok := p.book.(interface {
		Busiest(now time.Time, n int) []limiter.HostState
	})
	if !ok {
		return nil
	}
	hs := b.Busiest(now, n)
	for i := range hs {
		if l, ok := p.labels.get(hs[i].Host); ok {
			hs[i].Source, hs[i].Rule = l.source, l.rule
			continue
		}
		// Booked by another relay of a shared store, or long ago: what
		// applies to the bucket's own name.
		d := p.decide(hs[i].Host)
		hs[i].Source, hs[i].Rule = d.source, d.rule
	}
	return hs
}

// SetBrowser tells the policy the browser's User-Agent, as its
// /json/version gives it: robots.txt files are read for its product token
// unless --robots-user-agent says otherwise.
func (p *Policy) SetBrowser(userAgent string) {
	if p.cfg.Robots != nil {
		p.cfg.Robots.SetBrowser(userAgent)
	}
}

// Close ends the policy's robots.txt fetches.
func (p *Policy) Close() {
	if p.cfg.Robots != nil {
		p.cfg.Robots.Close()
	}
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
