package policy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/limiter"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// robotsSite serves body as /robots.txt (or runs serve) and counts fetches.
type robotsSite struct {
	*httptest.Server
	fetches atomic.Int32
}

func newRobotsSite(t *testing.T, serve func(w http.ResponseWriter, r *http.Request)) *robotsSite {
	s := &robotsSite{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		s.fetches.Add(1)
		serve(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func text(body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) }
}

func newRobots(t *testing.T, r *Robots) (*Robots, *fakebrowser.Logs) {
	logs := &fakebrowser.Logs{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	r.Log = &log
	t.Cleanup(r.Close)
	return r, logs
}

func TestRobotsCrawlDelay(t *testing.T) {
	site := newRobotsSite(t, text("User-agent: HeadlessChrome\nCrawl-delay: 2\n\nUser-agent: *\nCrawl-delay: 0.5\nDisallow: /private\n"))
	r, logs := newRobots(t, &Robots{})
	ctx := context.Background()
	for range 5 {
		if got := r.CrawlDelay(ctx, site.URL+"/page?x"); got != 500*time.Millisecond {
			t.Fatalf("for *: got %v, want 500ms", got)
		}
	}
	if n := site.fetches.Load(); n != 1 {
		t.Errorf("fetched %d times, want once per origin", n)
	}
	r.SetBrowser("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36")
	if got := r.CrawlDelay(ctx, site.URL+"/"); got != 2*time.Second {
		t.Errorf("for the browser's token: got %v, want 2s", got)
	}
	mine, _ := newRobots(t, &Robots{UserAgent: "otherbot"})
	mine.SetBrowser("HeadlessChrome/131")
	if got := mine.CrawlDelay(ctx, site.URL+"/"); got != 500*time.Millisecond {
		t.Errorf("for --robots-user-agent otherbot: got %v, want the * group's 500ms", got)
	}
	if n := logs.Count("robots"); n != 0 {
		t.Errorf("a good robots.txt logged %d lines, want none", n)
	}
}

func TestRobotsWithoutCrawlDelay(t *testing.T) {
	huge := "User-agent: *\nCrawl-delay: 1\n" + strings.Repeat("Disallow: /x\n", 200)
	tests := []struct {
		name  string
		serve func(http.ResponseWriter, *http.Request)
		want  time.Duration
		log   string // what the one log line says; "" for none at info
	}{
		{"missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, 0, ""},
		{"server error", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", 503) }, 0, "answered 503"},
		{"malformed", text("User-agent: *\nCrawl-delay: soon\n"), 0, "malformed"},
		{"huge", text(huge), time.Second, "larger than 1024 bytes"},
		{"empty", text(""), 0, ""},
		{"no delay", text("User-agent: *\nDisallow: /\n"), 0, ""},
		{"capped", text("User-agent: *\nCrawl-delay: 86400\n"), MaxCrawlDelay, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			site := newRobotsSite(t, tt.serve)
			r, logs := newRobots(t, &Robots{MaxBytes: 1024})
			for range 3 {
				if got := r.CrawlDelay(context.Background(), site.URL+"/"); got != tt.want {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
			infos := logs.Count(`"level":"info"`)
			if tt.log == "" && infos != 0 || tt.log != "" && (infos != 1 || logs.Count(tt.log) != 1) {
				t.Errorf("logged %d info lines (%d with %q), want %s", infos, logs.Count(tt.log), tt.log, map[bool]string{true: "none", false: "one"}[tt.log == ""])
			}
		})
	}
}

func TestRobotsNeverAnswers(t *testing.T) {
	release := make(chan struct{})
	site := newRobotsSite(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	r, logs := newRobots(t, &Robots{Wait: time.Second})
	start := time.Now()
	if got := r.CrawlDelay(context.Background(), site.URL+"/a"); got != 0 {
		t.Errorf("got %v, want 0", got)
	}
	first := time.Since(start)
	start = time.Now()
	if got := r.CrawlDelay(context.Background(), site.URL+"/b"); got != 0 {
		t.Errorf("second navigation: got %v, want 0", got)
	}
	second := time.Since(start)
	// The bound counts from the fetch's start: the first navigation waits
	// it out, the second finds it passed (half of it is a wide margin).
	if first < time.Second || second > 500*time.Millisecond {
		t.Errorf("waited %v, then %v; want 1s, then nothing", first, second)
	}
	if n := logs.Count("did not answer in time"); n != 1 {
		t.Errorf("logged the slow robots.txt %d times, want once", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r2, _ := newRobots(t, &Robots{Wait: time.Hour})
	if got := r2.CrawlDelay(ctx, site.URL+"/"); got != 0 {
		t.Errorf("cancelled: got %v, want 0 at once", got)
	}
}

func TestRobotsBounded(t *testing.T) {
	var sites []*robotsSite
	for range 3 {
		sites = append(sites, newRobotsSite(t, text("User-agent: *\nCrawl-delay: 1\n")))
	}
	r, _ := newRobots(t, &Robots{MaxEntries: 2})
	for _, s := range append(sites, sites[0]) {
		r.CrawlDelay(context.Background(), s.URL+"/")
	}
	r.mu.Lock()
	n := r.lru.Len()
	r.mu.Unlock()
	if n != 2 {
		t.Errorf("remembers %d origins, want 2", n)
	}
	if got := sites[0].fetches.Load(); got != 2 {
		t.Errorf("the least recently used origin was fetched %d times, want again after it was forgotten", got)
	}
}

func TestRobotsExpiry(t *testing.T) {
	site := newRobotsSite(t, text("User-agent: *\nCrawl-delay: 1\n"))
	r, _ := newRobots(t, &Robots{})
	if got := r.CrawlDelay(context.Background(), site.URL+"/"); got != time.Second {
		t.Fatalf("got %v, want 1s", got)
	}
	r.mu.Lock()
	for _, el := range r.entries {
		el.Value.(*robotsEntry).expires = time.Now().Add(-time.Second)
	}
	r.mu.Unlock()
	// Expired: fetched again, while the old Crawl-delay stands.
	if got := r.CrawlDelay(context.Background(), site.URL+"/"); got != time.Second {
		t.Errorf("while fetching again: got %v, want the old 1s", got)
	}
	for deadline := time.Now().Add(10 * time.Second); site.fetches.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an expired robots.txt was not fetched again")
		}
	}
}

func TestTTLOf(t *testing.T) {
	date := "Tue, 01 Dec 2026 12:00:00 GMT"
	tests := []struct {
		h    http.Header
		want time.Duration
	}{
		{http.Header{}, time.Hour},
		{http.Header{"Cache-Control": {"public, max-age=7200"}}, 2 * time.Hour},
		{http.Header{"Cache-Control": {"max-age=5"}}, time.Minute},
		{http.Header{"Cache-Control": {"max-age=9999999"}}, 24 * time.Hour},
		{http.Header{"Cache-Control": {"no-cache"}}, time.Minute},
		{http.Header{"Date": {date}, "Expires": {"Tue, 01 Dec 2026 15:00:00 GMT"}}, 3 * time.Hour},
	}
	for _, tt := range tests {
		if got := ttlOf(tt.h, time.Hour); got != tt.want {
			t.Errorf("%v: got %v, want %v", tt.h, got, tt.want)
		}
	}
}

func TestRobotsOrigin(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://A.test/x?y", "http://a.test:80"},
		{"HTTPS://a.test:8443/", "https://a.test:8443"},
		{"https://a.test/", "https://a.test:443"},
		{"http://[2001:db8::1]:8080/", "http://[2001:db8::1]:8080"},
		{"data:text/html,x", ""},
	}
	for _, tt := range tests {
		if got, _ := robotsOrigin(tt.in); got != tt.want {
			t.Errorf("robotsOrigin(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestProductToken(t *testing.T) {
	tests := []struct{ ua, want string }{
		{"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36", "HeadlessChrome"},
		{"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36", "Chrome"},
		{"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0", "Edg"},
		{"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", "Firefox"},
		{"Lightpanda/1.0", "Lightpanda"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ProductToken(tt.ua); got != tt.want {
			t.Errorf("ProductToken(%q): got %q, want %q", tt.ua, got, tt.want)
		}
	}
}

func TestRobotsAllowed(t *testing.T) {
	const body = `User-agent: HeadlessChrome
Disallow: /chrome-only/

User-agent: *
Disallow: /private/
Disallow: /*.pdf$
Disallow: /search*q=
Disallow: /shop/
Allow: /shop/public/
Allow: /tie
Disallow: /tie
`
	site := newRobotsSite(t, text(body))
	tests := []struct {
		agent, path string
		want        bool
	}{
		{"*", "/", true},
		{"*", "/public/x", true},
		{"*", "/private/x", false},
		{"*", "/private", true}, // the rule is /private/
		{"*", "/doc.pdf", false},
		{"*", "/doc.pdf?v=1", true}, // $ anchors the end
		{"*", "/search?x=1&q=a", false},
		{"*", "/search?x=1", true},
		{"*", "/shop/cart", false},
		{"*", "/shop/public/item", true}, // the longer Allow beats the Disallow
		{"*", "/chrome-only/x", true},
		{"HeadlessChrome", "/chrome-only/x", false},
		{"HeadlessChrome", "/private/x", true}, // its own group only
		{"otherbot", "/private/x", false},      // falls back to *
	}
	for _, tt := range tests {
		t.Run(tt.agent+tt.path, func(t *testing.T) {
			r, _ := newRobots(t, &Robots{UserAgent: tt.agent})
			ok, rule := r.Allowed(context.Background(), site.URL+tt.path)
			if ok != tt.want {
				t.Errorf("Allowed(%s) for %s: got %v (%q), want %v", tt.path, tt.agent, ok, rule, tt.want)
			}
			if !ok && !strings.Contains(rule, "/robots.txt") {
				t.Errorf("rule %q: want the robots.txt named", rule)
			}
		})
	}
}

func TestRobotsAllowedAnswers(t *testing.T) {
	tests := []struct {
		name  string
		serve func(http.ResponseWriter, *http.Request)
		want  bool
	}{
		{"missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, true},
		{"forbidden", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 403) }, true},
		{"server error", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", 503) }, false}, // RFC 9309 2.3.1.4
		{"empty", text(""), true},
		{"malformed", text("User-agent: *\nCrawl-delay: soon\n"), true},
		{"disallow all", text("User-agent: *\nDisallow: /\n"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			site := newRobotsSite(t, tt.serve)
			r, _ := newRobots(t, &Robots{})
			for range 3 {
				if ok, rule := r.Allowed(context.Background(), site.URL+"/private/x"); ok != tt.want {
					t.Fatalf("got %v (%q), want %v", ok, rule, tt.want)
				}
			}
			if n := site.fetches.Load(); n != 1 {
				t.Errorf("fetched %d times, want once", n)
			}
		})
	}
	r, _ := newRobots(t, &Robots{})
	if ok, _ := r.Allowed(context.Background(), "http://127.0.0.1:1/private/x"); !ok {
		t.Error("unreachable robots.txt: got disallowed, want allowed (the relay's network is not the browser's)")
	}
}

func TestRobotsAllowedHangs(t *testing.T) {
	release := make(chan struct{})
	site := newRobotsSite(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
			fmt.Fprint(w, "User-agent: *\nDisallow: /\n")
		}
	})
	r, logs := newRobots(t, &Robots{Wait: 200 * time.Millisecond})
	start := time.Now()
	for _, path := range []string{"/a", "/b", "/c"} {
		if ok, rule := r.Allowed(context.Background(), site.URL+path); !ok {
			t.Errorf("%s while robots.txt hangs: got disallowed (%q), want allowed", path, rule)
		}
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("waited %v, want the bound", d)
	}
	if n := logs.Count("did not answer in time"); n != 1 {
		t.Errorf("logged the hang %d times, want once", n)
	}
	close(release)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ok, _ := r.Allowed(context.Background(), site.URL+"/d"); !ok {
			break // once it answers, it counts
		}
		if time.Now().After(deadline) {
			t.Fatal("the robots.txt that answered late was never read")
		}
	}
}

func TestRobotsOneFetchServesBoth(t *testing.T) {
	site := newRobotsSite(t, text("User-agent: *\nCrawl-delay: 1\nDisallow: /private/\n"))
	r, _ := newRobots(t, &Robots{})
	ctx := context.Background()
	if ok, _ := r.Allowed(ctx, site.URL+"/private/x"); ok {
		t.Error("Allowed /private/x: got true, want false")
	}
	if got := r.CrawlDelay(ctx, site.URL+"/public/x"); got != time.Second {
		t.Errorf("CrawlDelay: got %v, want 1s", got)
	}
	if ok, _ := r.Allowed(ctx, site.URL+"/public/x"); !ok {
		t.Error("Allowed /public/x: got false, want true")
	}
	if n := site.fetches.Load(); n != 1 {
		t.Errorf("fetched %d times, want once for both", n)
	}
}

func TestPolicyObeysRobots(t *testing.T) {
	site := newRobotsSite(t, text("User-agent: *\nDisallow: /private/\n"))
	// The site is on loopback: rules name it, as a site elsewhere needs none.
	tests := []struct {
		name     string
		flags    Flags
		refuses  bool // some host's navigations may be refused
		refuse   bool // this one's are
		exempted bool
	}{
		{"obey", Flags{Robots: "obey", Delay: "0", Rules: []string{"127.0.0.1=fixed:1ms"}}, true, true, false},
		{"obey, off rule: held to be checked", Flags{Robots: "obey", Rules: []string{"127.0.0.1=off"}}, true, true, false},
		{"crawl-delay", Flags{Robots: "crawl-delay", Rules: []string{"127.0.0.1=off"}}, false, false, true},
		{"rule turns it off", Flags{Robots: "obey", Rules: []string{"127.0.0.1=off,robots:ignore"}}, true, false, true},
		{"rule turns it on", Flags{Rules: []string{"127.0.0.1=off robots:obey"}}, true, true, false},
		{"not named: loopback exempt", Flags{Robots: "obey"}, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := FromFlags(tt.flags)
			if err != nil {
				t.Fatal(err)
			}
			p := New(cfg, limiter.New(cfg.Default))
			t.Cleanup(p.Close)
			host, _ := limiter.Key(site.URL)
			if got := p.Refuses(); got != tt.refuses {
				t.Errorf("Refuses: got %v, want %v", got, tt.refuses)
			}
			if got := p.Exempt(host); got != tt.exempted {
				t.Errorf("Exempt: got %v, want %v", got, tt.exempted)
			}
			ok, _ := p.Allowed(context.Background(), host, site.URL+"/private/x")
			if ok == tt.refuse {
				t.Errorf("Allowed /private/x: got %v, want %v", ok, !tt.refuse)
			}
			if ok, rule := p.Allowed(context.Background(), host, site.URL+"/public/x"); !ok {
				t.Errorf("Allowed /public/x: got false (%q), want true", rule)
			}
			var refused uint64
			for _, h := range p.Busiest(time.Now(), 10) {
				if h.Host == host {
					refused = h.Refused
				}
			}
			if want := map[bool]uint64{true: 1, false: 0}[tt.refuse]; refused != want {
				t.Errorf("Busiest counts %d refusals of %s, want %d", refused, host, want)
			}
		})
	}
}

func TestRobotsRuleSetting(t *testing.T) {
	tests := []struct {
		in   string
		want RobotsUse
		err  string
	}{
		{"a.test=fixed:1s", RobotsDefault, ""},
		{"a.test=robots:ignore", RobotsIgnore, ""},
		{"a.test=fixed:1s,robots:crawl-delay", RobotsCrawlDelay, ""},
		{"a.test=off robots:OBEY", RobotsObey, ""},
		{"a.test=robots:never", RobotsDefault, "want ignore, crawl-delay"},
		{"a.test=robots:obey,robots:ignore", RobotsDefault, "one robots:"},
		{"a.test=exempt,robots:obey", RobotsDefault, "means nothing for exempt hosts"},
	}
	for _, tt := range tests {
		r, err := ParseRule(tt.in, limiter.Config{}, 0)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: got error %v, want one saying %q", tt.in, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.in, err)
		case tt.err == "" && r.Robots != tt.want:
			t.Errorf("%s: got robots %v, want %v", tt.in, r.Robots, tt.want)
		}
	}
}
