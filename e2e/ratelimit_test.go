//go:build e2e

package e2e

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The server's own limits (issue 40, item 3): a site's document answers
// that say them in RateLimit-Policy, RateLimit or X-RateLimit-Remaining
// and -Reset space the site's navigations, through real Chromium and real
// Lightpanda, under a fixed rule of 20 ms that would space them less; with
// --ratelimit-headers ignore they do not.

// ruleSpacing is the relay's own rule in these tests: far below what the
// site asks for, so that whatever spaces the site more is the site's word.
const ruleSpacing = 20 * time.Millisecond

// limitsURL is the site's /status answering 200 with the headers hdrs
// (NAME:VALUE each).
func limitsURL(s *site, host, run string, i int, hdrs ...string) string {
	q := "/status?code=200&run=" + run + "&i=" + strconv.Itoa(i)
	for _, h := range hdrs {
		q += "&hdr=" + url.QueryEscape(h)
	}
	return s.url(host, q)
}

// TestRateLimitPolicy: a site whose document answers say
// RateLimit-Policy: "p";q=5;w=1 (5 requests a second) sees the
// navigations after the first answer at least 200 ms apart (less the
// exact tests' slack), though the relay's rule spaces them by 20 ms; with
// --ratelimit-headers ignore, by the rule alone.
func TestRateLimitPolicy(t *testing.T) {
	const policy = `RateLimit-Policy:"p";q=5;w=1`
	const n = 6
	for _, b := range answerBrowsers {
		for _, ignore := range []bool{false, true} {
			name := b.name + "/obey"
			if ignore {
				name = b.name + "/ignore"
			}
			t.Run(name, func(t *testing.T) {
				cfg := fixed(ruleSpacing, 1)
				cfg.IgnoreServer = ignore
				r, rc, session, s, host := b.open(t, cfg)
				run := runID()
				for i := range n {
					rc.mustCall(session, "Page.navigate", map[string]any{"url": limitsURL(s, host, run, i, policy)})
				}
				hits := navigations(s, host)
				if len(hits) != n {
					t.Fatalf("the site saw %d navigations, want %d:%s", len(hits), n, describe(hits))
				}
				// The first answer brings the policy: the gaps from the
				// second navigation on are the site's.
				var gaps []string
				least := time.Hour
				for i := 2; i < n; i++ {
					gap := hits[i].reached().Sub(hits[i-1].reached())
					least = min(least, gap)
					gaps = append(gaps, strconv.FormatFloat(ms(gap), 'f', 1, 64))
				}
				var most time.Duration
				for _, bk := range heldBookings(r, host) {
					most = max(most, bk.spacing)
				}
				t.Logf("gaps at the site after the first answer: %s ms (least %.1f); the relay's largest spacing %.1f ms", strings.Join(gaps, ", "), ms(least), ms(most))
				switch {
				case !ignore && least < 200*time.Millisecond-exactSlack:
					t.Errorf("under RateLimit-Policy: \"p\";q=5;w=1, navigations reached the site %.1f ms apart, want at least 200 ms:%s", ms(least), describe(hits))
				case !ignore && most != 200*time.Millisecond:
					t.Errorf("the relay's largest spacing %v, want the server's 200ms", most)
				case ignore && most > ruleSpacing:
					t.Errorf("with --ratelimit-headers ignore the relay spaced a navigation by %v, want its rule's %v at most", most, ruleSpacing)
				case ignore && least >= 200*time.Millisecond-exactSlack:
					t.Errorf("with --ratelimit-headers ignore every gap was %.1f ms or more, want the rule's, not the server's:%s", ms(least), describe(hits))
				}
			})
		}
	}
}

// TestRateLimitSpent: a document answer that says the site's quota is
// spent, RateLimit: "p";r=0;t=3 or X-RateLimit-Remaining: 0 with
// X-RateLimit-Reset: 3, keeps the next navigation, asked for at once,
// from reaching the site until 3 s after that answer (less the exact
// tests' slack, counted from the spent answer's own arrival, which came
// before the answer); with --ratelimit-headers ignore it goes at once.
func TestRateLimitSpent(t *testing.T) {
	for _, b := range answerBrowsers {
		for _, tt := range []struct {
			name string
			hdrs []string
		}{
			{"RateLimit", []string{`RateLimit:"p";r=0;t=3`}},
			{"X-RateLimit", []string{"X-RateLimit-Remaining:0", "X-RateLimit-Reset:3"}},
		} {
			for _, ignore := range []bool{false, true} {
				name := b.name + "/" + tt.name + "/obey"
				if ignore {
					name = b.name + "/" + tt.name + "/ignore"
				}
				t.Run(name, func(t *testing.T) {
					cfg := fixed(ruleSpacing, 1)
					cfg.IgnoreServer = ignore
					_, rc, session, s, host := b.open(t, cfg)
					run := runID()
					rc.mustCall(session, "Page.navigate", map[string]any{"url": limitsURL(s, host, run, 0, tt.hdrs...)})
					rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?run="+run)})
					hits := navigations(s, host)
					if len(hits) != 2 {
						t.Fatalf("the site saw %d navigations, want 2:%s", len(hits), describe(hits))
					}
					gap := hits[1].reached().Sub(hits[0].reached())
					t.Logf("%s: the next navigation reached the site %.1f ms after the spent answer's request", strings.Join(tt.hdrs, ", "), ms(gap))
					switch {
					case !ignore && gap < 3*time.Second-exactSlack:
						t.Errorf("after %s the next navigation reached the site %.1f ms later, want at least 3 s", strings.Join(tt.hdrs, ", "), ms(gap))
					case !ignore && gap > 5*time.Second:
						t.Errorf("after %s the next navigation reached the site %.1f ms later, want it soon after 3 s", strings.Join(tt.hdrs, ", "), ms(gap))
					case ignore && gap > 2*time.Second:
						t.Errorf("with --ratelimit-headers ignore the next navigation reached the site %.1f ms after a spent answer, want it at once", ms(gap))
					}
				})
			}
		}
	}
}
