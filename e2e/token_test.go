//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// tokenE2E is a relay token that a query must escape: "+" reads as a
// space there, "/" and "=" are delimiters, and so is the space.
const tokenE2E = "a+b/c=d e"

// startTokenRelay serves a relay in front of the shared Chromium that
// wants tokenE2E.
func startTokenRelay(t *testing.T) *relayed {
	t.Helper()
	return startRelay(t, limiter.Config{Mode: limiter.Off}, func(p *relay.Proxy) { p.Token = tokenE2E })
}

// checkWays checks what a token script printed: each way in want worked,
// and each reached the site with its page; ways not in want were refused.
func checkWays(t *testing.T, out []byte, s *site, host, run string, want map[string]bool) {
	t.Helper()
	var got map[string]string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("script printed %q: %v", out, err)
	}
	if len(got) != len(want) {
		t.Errorf("script tried %d ways, want %d: %v", len(got), len(want), got)
	}
	for way, works := range want {
		res, tried := got[way]
		switch {
		case !tried:
			t.Errorf("%s: not tried", way)
		case works && res != "ok":
			t.Errorf("%s: got %q, want it to connect and load a page", way, res)
		case !works && res == "ok":
			t.Errorf("%s: connected, want it refused (README says it cannot carry the token)", way)
		default:
			t.Logf("%s: %s", way, res)
		}
		loaded := s.hitsOf(func(h hit) bool {
			q, _ := url.ParseQuery(h.Query)
			return h.Host == host && h.Path == "/page" && q.Get("run") == run && q.Get("way") == way
		})
		if works && len(loaded) != 1 {
			t.Errorf("%s: the site got the page %d times, want once", way, len(loaded))
		}
	}
	for _, h := range s.hitsOf(nil) {
		q, _ := url.ParseQuery(h.Query)
		leaked := strings.Contains(h.Query, url.QueryEscape(tokenE2E)) || strings.Contains(h.Query, url.PathEscape(tokenE2E))
		for _, vs := range q {
			for _, v := range vs {
				leaked = leaked || strings.Contains(v, tokenE2E)
			}
		}
		if leaked {
			t.Errorf("the site got %s?%s, want no token", h.Path, h.Query)
		}
	}
}

// TestTokenPuppeteer: with --token a+b/c=d e, puppeteer.connect works with
// browserWSEndpoint set to the URL the relay advertises, to a ws:// URL
// with ?token= escaped by hand (encodeURIComponent), and to ws://HOST/
// with an Authorization header; browserURL cannot carry the token
// (Puppeteer asks /json/version without the URL's query), so it is
// refused.
func TestTokenPuppeteer(t *testing.T) {
	tokenWays(t, "pptr-token.mjs", "token-pptr.test", map[string]bool{"advertised": true, "by hand": true, "header": true, "browserURL": false})
}

// tokenWays runs script against a relay that wants tokenE2E, loading pages
// of host, and checks each way it tried connects or not as want says.
func tokenWays(t *testing.T, script, host string, want map[string]bool) {
	t.Helper()
	s := newSite(t)
	r := startTokenRelay(t)
	run := runID()
	out := runNode(t, 90*time.Second, script, "RELAY="+r.url, "TOKEN="+tokenE2E, "BASE="+s.url(host, ""), "RUN="+run)
	checkWays(t, out, s, host, run, want)
}

// TestTokenPlaywright: with --token a+b/c=d e, chromium.connectOverCDP
// works with the URL the relay advertises, a ws:// URL with ?token=
// escaped by hand, the relay's http:// URL with ?token= (Playwright keeps
// the query when it asks /json/version/), and the http:// URL with an
// Authorization header (Playwright sends headers with both requests).
func TestTokenPlaywright(t *testing.T) {
	tokenWays(t, "pw-token.mjs", "token-pw.test", map[string]bool{"advertised": true, "by hand": true, "http with ?token=": true, "http with header": true})
}

// TestTokenChromedp: with --token a+b/c=d e, chromedp's remote allocator
// works with the URL the relay advertises, the relay's http:// URL with
// ?token= (chromedp keeps the query when it asks /json/version), and
// ws://HOST/ with an Authorization header given with WithDialHTTPHeader
// and NoModifyURL.
func TestTokenChromedp(t *testing.T) {
	s := newSite(t)
	r := startTokenRelay(t)
	const host = "token-chromedp.test"
	run := runID()
	body, err := httpGet(r.url + "/json/version?token=" + url.QueryEscape(tokenE2E))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ WebSocketDebuggerURL string }
	if err := json.Unmarshal(body, &v); err != nil || v.WebSocketDebuggerURL == "" {
		t.Fatalf("/json/version with the token: got %s (%v)", body, err)
	}
	t.Logf("advertised: %s", v.WebSocketDebuggerURL)
	ways := []struct {
		name string
		url  string
		opts []remote.Option
	}{
		{name: "advertised", url: v.WebSocketDebuggerURL},
		{name: "http with ?token=", url: r.url + "/?token=" + url.QueryEscape(tokenE2E)},
		{name: "ws with header", url: "ws://" + r.host + "/", opts: []remote.Option{
			remote.NoModifyURL,
			remote.WithDialHTTPHeader(http.Header{"Authorization": {"Bearer " + tokenE2E}}),
		}},
	}
	want := map[string]bool{}
	got := map[string]string{}
	for _, w := range ways {
		want[w.name] = true
		got[w.name] = "ok"
		allocCtx, cancelAlloc := remote.NewAllocator(context.Background(), w.url, w.opts...)
		ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithNewBrowserContext())
		tctx, cancelT := context.WithTimeout(ctx, 30*time.Second)
		page := s.url(host, "/page?"+url.Values{"run": {run}, "way": {w.name}}.Encode())
		if err := chromedp.Do(tctx, chromedp.Navigate(page)); err != nil {
			got[w.name] = err.Error()
		}
		cancelT()
		cancel()
		cancelAlloc()
	}
	out, _ := json.Marshal(got)
	checkWays(t, out, s, host, run, want)
}
