//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// The answers the seed left out (issue 40): a Retry-After given as an
// HTTP-date, and a header that makes any answer overload
// (--overload-header), through real Chromium and real Lightpanda.

// answerBrowsers are the browsers these tests go through: each gives a
// relay in front of it, with cfg, and a page of its own on it, and names
// the host the site is reached at.
var answerBrowsers = []struct {
	name string
	open func(t *testing.T, cfg limiter.Config) (r *relayed, rc *rawClient, session string, s *site, host string)
}{
	{"chromium", func(t *testing.T, cfg limiter.Config) (*relayed, *rawClient, string, *site, string) {
		s := newSite(t)
		r := startRelay(t, cfg)
		rc := dialRaw(t, browserWSVia(t, r))
		session, _ := rc.newPage()
		return r, rc, session, s, "answers.test"
	}},
	{"lightpanda", func(t *testing.T, cfg limiter.Config) (*relayed, *rawClient, string, *site, string) {
		lp := startLightpanda(t)
		r := startRelayTo(t, lp, cfg)
		s := newSiteAt(t, lpHost)
		rc := dialRaw(t, browserWSVia(t, r))
		return r, rc, rc.openTarget(map[string]any{"url": "about:blank"}), s, lpHost
	}},
}

// wantNavigations returns the navigations of host that s saw, and fails
// the test unless there are n.
func wantNavigations(t *testing.T, s *site, host string, n int) []hit {
	t.Helper()
	hits := navigations(s, host)
	if len(hits) != n {
		t.Fatalf("the site saw %d navigations, want %d:%s", len(hits), n, describe(hits))
	}
	return hits
}

// hostRow is a bucket's line of the relay's /hosts, the fields the tests read.
type hostRow struct {
	Host       string
	Pressure   int
	NextFreeMS float64 `json:"next_free_ms"`
}

// hostOf reads host's line off r's /hosts; zero when it has none.
func hostOf(t *testing.T, r *relayed, host string) hostRow {
	t.Helper()
	body, err := httpGet(r.url + "/hosts")
	if err != nil {
		t.Fatal(err)
	}
	var hosts []hostRow
	json.Unmarshal(body, &hosts)
	for _, h := range hosts {
		if h.Host == host {
			return h
		}
	}
	return hostRow{}
}

// hostPressure reads host's pressure off the relay's /hosts.
func hostPressure(t *testing.T, r *relayed, host string) int { return hostOf(t, r, host).Pressure }

// TestRetryAfterDate: a 503 whose Retry-After is an HTTP-date about 3 s
// ahead keeps the host's next navigation, asked for at once, from
// reaching the site before that date.
func TestRetryAfterDate(t *testing.T) {
	for _, b := range answerBrowsers {
		t.Run(b.name, func(t *testing.T) {
			r, rc, session, s, host := b.open(t, adaptive1)
			run := runID()
			before := len(heldBookings(r, host))
			// A whole second, as an HTTP-date writes it, 3 to 4 s ahead.
			date := time.Now().Add(3 * time.Second).Truncate(time.Second).Add(time.Second)
			ra := url.QueryEscape(date.UTC().Format(http.TimeFormat))
			rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/status?code=503&ra="+ra+"&run="+run)})
			rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?run="+run)})
			hits := wantNavigations(t, s, host, 2)
			next := hits[1].reached()
			t.Logf("Retry-After: %s; the 503 reached the site %.1f ms before it, the next navigation %.1f ms after it",
				date.UTC().Format(http.TimeFormat), ms(date.Sub(hits[0].reached())), ms(next.Sub(date)))
			// The relay's slot is the date on its own clock, the site's:
			// the navigation cannot reach it sooner (the exact tests'
			// slack for the kernel's stamp against the relay's clock).
			if next.Before(date.Add(-exactSlack)) {
				t.Errorf("the navigation after a 503 with Retry-After: %s reached the site %.1f ms before that date", date.UTC().Format(http.TimeFormat), ms(date.Sub(next)))
			}
			if len(heldBookings(r, host)) == before {
				t.Errorf("the relay held nothing after the 503: the test shows nothing")
			}
			if next.After(date.Add(2 * time.Second)) {
				t.Errorf("the navigation after the 503 reached the site %.1f ms after the Retry-After date, want it soon after", ms(next.Sub(date)))
			}
		})
	}
}

// TestOverloadHeader: with --overload-header cf-mitigated=challenge, a
// 200 carrying cf-mitigated: challenge counts as overload, as a 429 does
// (50 units of pressure at once, counted overload in /metrics, the
// navigations after it spaced by 100 ms or more: pressure over 40 once the
// 300 ms waited for the answer have drained 3); without the flag it
// counts as the 200 it is.
func TestOverloadHeader(t *testing.T) {
	challenged := adaptive1
	challenged.OverloadHeaders = limiter.NewHeaders(limiter.Header{Name: "cf-mitigated", Value: "challenge"})
	for _, b := range answerBrowsers {
		for _, tt := range []struct {
			name     string
			cfg      limiter.Config
			overload bool
		}{{"flag", challenged, true}, {"no flag", adaptive1, false}} {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				r, rc, session, s, host := b.open(t, tt.cfg)
				run := runID()
				rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/status?code=200&hdr=cf-mitigated:challenge&run="+run)})
				time.Sleep(300 * time.Millisecond) // the answer on its way to the limiter
				pressure := hostPressure(t, r, host)
				overloads := metricAt(t, r.url, `cdp_throttle_feedback_total{class="overload"}`)
				// Three more, one after another: the second and third are
				// spaced by the pressure the challenge left.
				for i := range 3 {
					rc.mustCall(session, "Page.navigate", map[string]any{"url": s.url(host, "/page?run="+run+"&i="+strconv.Itoa(i))})
				}
				hits := wantNavigations(t, s, host, 4)
				gap := hits[3].reached().Sub(hits[2].reached())
				t.Logf("pressure %d after the challenge, /metrics overload %v; the last two navigations reached the site %.1f ms apart", pressure, overloads, ms(gap))
				switch {
				case tt.overload && (pressure < 45 || overloads != 1):
					t.Errorf("a 200 with cf-mitigated: challenge under --overload-header cf-mitigated=challenge: pressure %d, overloads %v; want about 50 and 1, as a 429", pressure, overloads)
				case tt.overload && gap < 100*time.Millisecond-exactSlack:
					t.Errorf("after the challenge, navigations reached the site %.1f ms apart, want at least 100 ms (pressure over 40)", ms(gap))
				case !tt.overload && (pressure > 2 || overloads != 0):
					t.Errorf("a 200 with cf-mitigated: challenge and no --overload-header: pressure %d, overloads %v; want 1 and 0", pressure, overloads)
				}
			})
		}
	}
}
