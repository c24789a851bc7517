package policy

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/temoto/robotstxt"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Defaults for the zero values of Robots' fields, and the bounds every
// robots.txt is read within.
const (
	// DefaultRobotsWait is the longest a navigation waits for its site's
	// robots.txt, counted from when the fetch began.
	DefaultRobotsWait = 2 * time.Second
	// DefaultRobotsTTL is how long a robots.txt is kept when its answer
	// says nothing of caching.
	DefaultRobotsTTL = time.Hour
	// DefaultRobotsEntries is how many origins' Crawl-delays are kept.
	DefaultRobotsEntries = 10_000
	// DefaultRobotsBytes is how much of a robots.txt is read, as RFC 9309
	// allows (at least 500 KiB): the rest is ignored.
	DefaultRobotsBytes = 512 << 10

	robotsFetchTimeout = 10 * time.Second // one fetch, redirects included
	robotsMinTTL       = time.Minute      // even with no-cache: not a fetch per navigation
	robotsMaxTTL       = 24 * time.Hour   // RFC 9309: no longer than a day
	robotsFailTTL      = 10 * time.Minute // after no answer: try again sooner than an hour
	// MaxCrawlDelay caps a Crawl-delay: a typo must not stop a crawl for
	// a day. It is the seed's cap on a Retry-After
	// (limiter.DefaultRetryAfterMax) and does not follow
	// --retry-after-max: a Retry-After is one pause, a Crawl-delay the
	// spacing of every navigation to the site, and a longer pause
	// honoured is no reason for a minute between every two pages.
	MaxCrawlDelay = limiter.DefaultRetryAfterMax
)

// Robots reads what a site's robots.txt asks of the group matching
// UserAgent: its Crawl-delay (CrawlDelay) and which paths it disallows
// (Allowed); one fetch serves both. It fetches /robots.txt once per scheme, host and
// port with its own HTTP client, keeps what it read for as long as the
// answer's caching headers say (DefaultRobotsTTL without them, within a
// minute and a day), and remembers at most MaxEntries origins, the least
// recently used forgotten first; while an expired entry is fetched again,
// its old Crawl-delay stands.
//
// A robots.txt that is slow, missing, too big or malformed never holds a
// navigation for longer than Wait after its fetch began, gives what could
// be read (nothing, when it is missing or malformed), and is logged once
// per fetch. As RFC 9309 says, a 4xx answer allows everything and a 5xx
// one disallows everything (until it is fetched again, after 10 minutes);
// unlike RFC 9309, a robots.txt that could not be reached (no answer, or
// none within Wait) allows everything: the relay's network is not always
// the browser's.
//
// Set its fields before the first CrawlDelay; the zero Robots uses the
// defaults. It is safe for concurrent use. Close ends its fetches.
type Robots struct {
	// UserAgent is the product token whose group is read ("*" reads only
	// the group for every crawler). Empty means the browser's product
	// token once SetBrowser gave it, "*" until then.
	UserAgent string
	// Client fetches robots.txt files. Nil means a client of its own with
	// a 10 s timeout.
	Client *http.Client
	// Wait is the longest a navigation waits for a fetch, counted from
	// when the fetch began. Zero means DefaultRobotsWait.
	Wait time.Duration
	// TTL is how long a robots.txt is kept when its answer does not say.
	// Zero means DefaultRobotsTTL.
	TTL time.Duration
	// MaxEntries bounds how many origins are remembered. Zero means
	// DefaultRobotsEntries.
	MaxEntries int
	// MaxBytes is how much of a robots.txt is read. Zero means
	// DefaultRobotsBytes.
	MaxBytes int64
	// Log receives a line per robots.txt that gave no Crawl-delay for
	// another reason than saying none. Nil logs nothing.
	Log *zerolog.Logger

	start   sync.Once
	ctx     context.Context // ends the fetches; set once by start
	cancel  context.CancelFunc
	fetches sync.WaitGroup

	mu       sync.Mutex
	entries  map[string]*list.Element // guarded by mu; values are *robotsEntry
	lru      *list.List               // guarded by mu; most recently used first
	browser  string                   // guarded by mu; the browser's User-Agent
	closed   bool                     // guarded by mu
	ownIdles bool                     // the client is the Robots' own: close its idle connections
}

// robotsEntry is one origin's robots.txt, fetched or being fetched.
type robotsEntry struct {
	origin  string
	started time.Time
	ready   chan struct{} // closed once rules, expires and note are set
	stale   robotsRules   // the previous fetch's, used meanwhile
	refetch bool          // stale is set

	rules   robotsRules
	expires time.Time
	note    string        // why nothing was read; "" when robots.txt was read
	level   zerolog.Level // of note

	logged bool // guarded by Robots.mu; a slow fetch was logged
}

// robotsRules is what one robots.txt says to the agent it was read for.
type robotsRules struct {
	delay time.Duration
	group *robotstxt.Group // nil: no rules, everything allowed
	none  bool             // everything disallowed: it answered 5xx
}

func (r *Robots) init() {
	r.start.Do(func() {
		r.ctx, r.cancel = context.WithCancel(context.Background())
		r.entries = make(map[string]*list.Element)
		r.lru = list.New()
		if r.Client == nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxResponseHeaderBytes = 64 << 10
			r.Client = &http.Client{Timeout: robotsFetchTimeout, Transport: tr}
			r.ownIdles = true
		}
		if r.Wait <= 0 {
			r.Wait = DefaultRobotsWait
		}
		if r.TTL <= 0 {
			r.TTL = DefaultRobotsTTL
		}
		if r.MaxEntries <= 0 {
			r.MaxEntries = DefaultRobotsEntries
		}
		if r.MaxBytes <= 0 {
			r.MaxBytes = DefaultRobotsBytes
		}
	})
}

// SetBrowser tells Robots the browser's User-Agent, as its /json/version
// gives it: robots.txt files are then read for its product token (unless
// UserAgent is set) and fetched with it. What was read for another token
// is forgotten.
func (r *Robots) SetBrowser(userAgent string) {
	r.init()
	r.mu.Lock()
	defer r.mu.Unlock()
	if userAgent == r.browser {
		return
	}
	r.browser = userAgent
	if r.UserAgent == "" {
		clear(r.entries)
		r.lru.Init()
	}
}

// agent is the product token groups are matched against. Callers hold mu.
func (r *Robots) agent() string {
	if r.UserAgent != "" {
		return r.UserAgent
	}
	if t := ProductToken(r.browser); t != "" {
		return t
	}
	return "*"
}

// CrawlDelay returns the Crawl-delay the robots.txt of rawURL's origin
// asks for, 0 when it asks for none or could not be read in time. It
// waits for a fetch at most Wait after the fetch began, and never once ctx
// is done.
func (r *Robots) CrawlDelay(ctx context.Context, rawURL string) time.Duration {
	origin, ok := robotsOrigin(rawURL)
	if !ok {
		return 0
	}
	rules, _ := r.rules(ctx, origin)
	return rules.delay
}

// Allowed reports whether the robots.txt of rawURL's origin allows
// fetching rawURL (its path and query), as RFC 9309 matches them through
// temoto/robotstxt: the longest matching rule wins, Allow on a tie. It
// waits as CrawlDelay does; a robots.txt not read in time, missing (4xx)
// or unreachable allows everything, one that answered 5xx disallows
// everything. When it disallows rawURL, rule says what did: the
// robots.txt's address and the group read.
func (r *Robots) Allowed(ctx context.Context, rawURL string) (ok bool, rule string) {
	origin, ok := robotsOrigin(rawURL)
	if !ok {
		return true, ""
	}
	rules, agent := r.rules(ctx, origin)
	switch {
	case rules.none:
		return false, origin + "/robots.txt answered 5xx: every path disallowed (RFC 9309)"
	case rules.group == nil:
		return true, ""
	case rules.group.Test(robotsPath(rawURL)):
		return true, ""
	}
	return false, origin + "/robots.txt, group of User-agent " + agent
}

// robotsPath is what of rawURL robots.txt rules match: its path, "/" when
// empty, with its query.
func robotsPath(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "/"
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	if u.RawQuery != "" {
		p += "?" + u.RawQuery
	}
	return p
}

// rules returns what origin's robots.txt says, and the agent it was read
// for, waiting for a fetch at most Wait after it began and never once ctx
// is done; nothing (everything allowed) when it was not read in time. A
// fetch that has not answered in time is logged once.
func (r *Robots) rules(ctx context.Context, origin string) (robotsRules, string) {
	r.init()
	e, agent := r.lookup(origin, time.Now())
	if e == nil {
		return robotsRules{}, agent
	}
	select {
	case <-e.ready:
		return e.rules, agent
	default:
	}
	if e.refetch {
		return e.stale, agent
	}
	timer := time.NewTimer(time.Until(e.started.Add(r.Wait)))
	defer timer.Stop()
	select {
	case <-e.ready:
		return e.rules, agent
	case <-ctx.Done():
		return robotsRules{}, agent
	case <-timer.C:
		r.mu.Lock()
		first := !e.logged
		e.logged = true
		r.mu.Unlock()
		if first && r.Log != nil {
			r.Log.Info().Str("robots", e.origin+"/robots.txt").Float64("waited_ms", limiter.ShownMillis(r.Wait)).
				Msg("robots.txt did not answer in time: navigating without it (no Crawl-delay, nothing disallowed) until it does")
		}
		return robotsRules{}, agent
	}
}

// lookup returns origin's entry, starting a fetch when there is none or
// it has expired, and the agent robots.txt files are read for; nil once
// Close was called.
func (r *Robots) lookup(origin string, now time.Time) (*robotsEntry, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, r.agent()
	}
	if el, ok := r.entries[origin]; ok {
		e := el.Value.(*robotsEntry)
		r.lru.MoveToFront(el)
		select {
		case <-e.ready:
			if now.Before(e.expires) {
				return e, r.agent()
			}
			next := r.fetch(origin, now)
			next.stale, next.refetch = e.rules, true
			el.Value = next
			return next, r.agent()
		default:
			return e, r.agent()
		}
	}
	for r.lru.Len() >= r.MaxEntries {
		old := r.lru.Back()
		delete(r.entries, old.Value.(*robotsEntry).origin)
		r.lru.Remove(old)
	}
	e := r.fetch(origin, now)
	r.entries[origin] = r.lru.PushFront(e)
	return e, r.agent()
}

// fetch starts fetching origin's robots.txt. Callers hold mu.
func (r *Robots) fetch(origin string, now time.Time) *robotsEntry {
	e := &robotsEntry{origin: origin, started: now, ready: make(chan struct{})}
	agent, ua := r.agent(), r.browser
	r.fetches.Add(1)
	go func() {
		defer r.fetches.Done()
		r.read(e, agent, ua)
		if e.note != "" && r.Log != nil {
			r.Log.WithLevel(e.level).Str("robots", e.origin+"/robots.txt").Str("why", e.note).
				Msg("robots.txt not read as it is")
		}
		close(e.ready) // after its line: who reads it finds the line written

	}()
	return e
}

// read fetches e's robots.txt and sets what it says for agent.
func (r *Robots) read(e *robotsEntry, agent, ua string) {
	e.expires = time.Now().Add(min(r.TTL, robotsFailTTL))
	ctx, cancel := context.WithTimeout(r.ctx, robotsFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.origin+"/robots.txt", nil)
	if err != nil {
		e.note, e.level = err.Error(), zerolog.InfoLevel
		return
	}
	if ua != "" {
		req.Header.Set("User-Agent", ua)
	}
	resp, err := r.Client.Do(req)
	if err != nil {
		e.note, e.level = "no answer: "+errorText(err), zerolog.InfoLevel
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		// No robots.txt: no Crawl-delay, and nothing unusual.
		e.expires = time.Now().Add(ttlOf(resp.Header, r.TTL))
		e.note, e.level = "missing: "+resp.Status, zerolog.DebugLevel
		return
	case resp.StatusCode >= 500:
		// RFC 9309 2.3.1.4: unreachable, so everything is disallowed.
		e.rules.none = true
		e.note, e.level = "answered "+resp.Status+": no Crawl-delay, and with --robots obey every path disallowed (RFC 9309) until it is fetched again", zerolog.InfoLevel
		return
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		e.note, e.level = "answered "+resp.Status, zerolog.InfoLevel
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, r.MaxBytes+1))
	if err != nil {
		e.note, e.level = "reading it: "+errorText(err), zerolog.InfoLevel
		return
	}
	e.expires = time.Now().Add(ttlOf(resp.Header, r.TTL))
	if int64(len(body)) > r.MaxBytes {
		// Read what fits, up to its last whole line.
		body = body[:r.MaxBytes]
		body = body[:bytes.LastIndexByte(body, '\n')+1]
		e.note, e.level = fmt.Sprintf("larger than %d bytes: read its first %d", r.MaxBytes, len(body)), zerolog.InfoLevel
	}
	data, err := robotstxt.FromBytes(body)
	if err != nil {
		e.note, e.level = "malformed: "+strings.ReplaceAll(err.Error(), "\n", "; "), zerolog.InfoLevel
		return
	}
	g := data.FindGroup(agent)
	e.rules = robotsRules{delay: min(g.CrawlDelay, MaxCrawlDelay), group: g}
	if e.note != "" {
		e.note += fmt.Sprintf(", Crawl-delay %v", e.rules.delay)
	}
}

// errorText is err without the URL that net/http repeats in it.
func errorText(err error) string {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err.Error()
	}
	return err.Error()
}

// ttlOf is how long an answer with header h may be kept: Cache-Control's
// max-age, else Expires against Date, else def; within a minute and a day.
func ttlOf(h http.Header, def time.Duration) time.Duration {
	ttl := def
	cc := strings.ToLower(h.Get("Cache-Control"))
	for _, d := range strings.Split(cc, ",") {
		d = strings.TrimSpace(d)
		switch {
		case d == "no-store" || d == "no-cache":
			return robotsMinTTL
		case strings.HasPrefix(d, "max-age="):
			if s, err := strconv.ParseInt(strings.Trim(d[len("max-age="):], `"`), 10, 64); err == nil && s >= 0 {
				return min(max(time.Duration(min(s, 1<<32))*time.Second, robotsMinTTL), robotsMaxTTL)
			}
		}
	}
	if exp, err := http.ParseTime(h.Get("Expires")); err == nil {
		date, err := http.ParseTime(h.Get("Date"))
		if err != nil {
			date = time.Now()
		}
		ttl = exp.Sub(date)
	}
	return min(max(ttl, robotsMinTTL), robotsMaxTTL)
}

// robotsOrigin is the scheme, host and port rawURL's robots.txt is at,
// the port always written.
func robotsOrigin(rawURL string) (string, bool) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return "", false
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	switch {
	case scheme != "http" && scheme != "https":
		return "", false
	case port == "" && scheme == "http":
		port = "80"
	case port == "":
		port = "443"
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port), true
}

// Close ends the fetches under way and waits for them; CrawlDelay then
// returns 0 at once, and Allowed true.
func (r *Robots) Close() {
	r.init()
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.fetches.Wait()
	if r.ownIdles {
		r.Client.CloseIdleConnections()
	}
}

// compatTokens are the products a browser's User-Agent names for
// compatibility, not to say what it is.
var compatTokens = map[string]bool{
	"mozilla": true, "applewebkit": true, "gecko": true, "khtml": true,
	"safari": true, "version": true, "mobile": true, "like": true,
}

// ProductToken returns the product token of a browser's User-Agent that
// robots.txt groups are matched against: its last product that is not
// there for compatibility ("HeadlessChrome" for headless Chromium,
// "Lightpanda" for Lightpanda), "" when there is none.
func ProductToken(userAgent string) string {
	var b strings.Builder // userAgent without its (comments)
	depth := 0
	for _, r := range userAgent {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth = max(depth-1, 0)
			b.WriteByte(' ')
		case depth == 0:
			b.WriteRune(r)
		}
	}
	token := ""
	for _, f := range strings.Fields(b.String()) {
		name, _, _ := strings.Cut(f, "/")
		if name != "" && !compatTokens[strings.ToLower(name)] && isToken(name) {
			token = name
		}
	}
	return token
}

// isToken reports whether s is letters, digits, _ and - only, as RFC 9309
// has product tokens.
func isToken(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// RobotsUse is what a site's robots.txt is read for.
type RobotsUse uint8

const (
	// RobotsDefault is a rule's when it does not say: as --robots says.
	RobotsDefault RobotsUse = iota
	// RobotsIgnore reads nothing.
	RobotsIgnore
	// RobotsCrawlDelay reads its Crawl-delay, a floor under the spacing.
	RobotsCrawlDelay
	// RobotsObey reads its Crawl-delay and refuses the navigations it
	// disallows.
	RobotsObey
)

func (u RobotsUse) String() string {
	return [...]string{"", "ignore", "crawl-delay", "obey"}[u]
}

// ParseRobotsUse reads --robots and a rule's robots:…: ignore,
// crawl-delay or obey.
func ParseRobotsUse(s string) (RobotsUse, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "ignore":
		return RobotsIgnore, nil
	case "crawl-delay":
		return RobotsCrawlDelay, nil
	case "obey":
		return RobotsObey, nil
	}
	return RobotsDefault, errors.New("want ignore, crawl-delay (each site's Crawl-delay is its least spacing) or obey (Crawl-delay, and navigations its Disallow rules name are refused)")
}
