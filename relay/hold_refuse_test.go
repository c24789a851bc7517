package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// obeying returns a relay option that makes its Limiter a policy obeying
// robots.txt (--robots obey) with rules, every robots.txt served by one
// test site whatever its host, and the limiter the policy books in.
func obeying(t *testing.T, robots string, rules ...string) (func(*Proxy), **limiter.Limiter) {
	return obeyingFlags(t, robots, policy.Flags{Robots: "obey", Rules: rules})
}

// obeyingFlags is obeying with the policy's flags f.
func obeyingFlags(t *testing.T, robots string, f policy.Flags) (func(*Proxy), **limiter.Limiter) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, robots)
	}))
	t.Cleanup(site.Close)
	var lim *limiter.Limiter
	return func(p *Proxy) {
		cfg, err := policy.FromFlags(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, site.Listener.Addr().String())
		}}
		t.Cleanup(tr.CloseIdleConnections)
		cfg.Robots.Client = &http.Client{Transport: tr}
		lim = limiter.New(cfg.Default)
		p.Limiter = policy.New(cfg, lim)
	}, &lim
}

// rewritten is chain with one URL's path and query replaced.
func rewritten(chain [][]byte, from, to string) [][]byte {
	var out [][]byte
	for _, msg := range chain {
		out = append(out, bytes.ReplaceAll(msg, []byte(from), []byte(to)))
	}
	return out
}

// TestFetchHolderRefusesDisallowed: with --robots obey, a navigation its
// site's robots.txt disallows is failed where it paused with
// BlockedByClient, books nothing (neither a slot of its host's hour-long
// spacing nor its one place in flight), is counted disallowed in /metrics
// and /hosts and said once; one it allows goes on.
func TestFetchHolderRefusesDisallowed(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	obey, lim := obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1,concurrency:1")
	tp := relayTo(t, fb, limiter.Config{}, obey)
	_, pages := fakebrowser.RelayConns(t, fb, false)
	chain := fb.FetchRec.Chain(t, "/page?first")

	for i, path := range []string{"/private/x", "/private/y?q=1"} {
		hops := fb.Navigate(t, rewritten(chain, "/page?first", path))
		if len(hops) != 1 || hops[0].Failed != "BlockedByClient" {
			t.Fatalf("navigation %d to %s: got %+v, want failed with BlockedByClient where it paused", i, path, hops)
		}
	}
	if got := len(fakebrowser.Commands(pages, "Fetch.failRequest")); got != 2 {
		t.Errorf("pages failed %d requests, want 2", got)
	}
	if n := (*lim).Len(); n != 0 {
		t.Errorf("limiter knows %d hosts after refusals, want none: a refusal books nothing", n)
	}
	// Allowed: it goes at once, as the first of its host (neither a slot
	// nor a place was taken by the refused ones).
	done := make(chan []fakebrowser.Hops, 1)
	go func() { done <- fb.Navigate(t, chain) }()
	select {
	case hops := <-done:
		if len(hops) == 0 || hops[0].Failed != "" {
			t.Errorf("allowed navigation: got %+v, want it let go", hops)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the allowed navigation was held: the refused ones booked something")
	}

	if body := metricsBody(t, tp); !strings.Contains(body, `cdp_throttle_navigations_total{outcome="disallowed"} 2`) {
		t.Errorf("/metrics: want 2 disallowed navigations, got\n%s", grepLines(body, "navigations_total"))
	}
	_, body := getBody(t, "http://"+tp.addr+"/hosts")
	var hosts []struct {
		Host    string
		Refused uint64
	}
	if err := json.Unmarshal([]byte(body), &hosts); err != nil || len(hosts) != 1 || hosts[0].Host != "a.test" || hosts[0].Refused != 2 {
		t.Errorf("/hosts: got %s (%v), want a.test with 2 refused", body, err)
	}
	warned := tp.logs.Lines("navigation refused: robots.txt disallows it")
	if len(warned) != 1 || !strings.Contains(warned[0], `"level":"warn"`) || !strings.Contains(warned[0], `"host":"a.test"`) ||
		!strings.Contains(warned[0], `"path":"/private/x"`) || !strings.Contains(warned[0], `"source":"robots.txt"`) {
		t.Errorf("got %q, want one warning naming the host, the path and robots.txt", warned)
	}
}

// TestSessionHoldRefusesDisallowed: held in the client's page session (as
// for Lightpanda), a disallowed document, and a redirect hop within its
// host into a disallowed path, are failed there with BlockedByClient and
// book nothing; an allowed one goes on.
func TestSessionHoldRefusesDisallowed(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	const S, F = "SID-1", "FID-1"
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	obey, lim := obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1")
	tp := relayTo(t, fb, limiter.Config{}, obey)
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	fc.Send(attachedTo(S, F, "page"))
	ownCommand(t, fc, "Fetch.enable", S)
	ownCommand(t, fc, "Network.enable", S)
	readClient(t, c)

	failedOwn := func(id string) {
		t.Helper()
		m := fc.Next(t)
		if m.Wire.Method != "Fetch.failRequest" || !strings.Contains(string(m.Wire.Params), `"`+id+`"`) || !strings.Contains(string(m.Wire.Params), `"errorReason":"BlockedByClient"`) {
			t.Fatalf("browser got %s, want the relay to fail %s with BlockedByClient", m.Data, id)
		}
		fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{},"sessionId":%q}`, *m.Wire.ID, S))
	}
	fc.Send(paused(S, "INT-1", "REQ-1", F, "Document", "http://a.test/private/x"))
	failedOwn("INT-1")
	if n := (*lim).Len(); n != 0 {
		t.Errorf("limiter knows %d hosts after a refusal, want none", n)
	}
	// Allowed, then redirected within the host into /private/.
	fc.Send(paused(S, "INT-2", "REQ-2", F, "Document", "http://a.test/public/redir"))
	continuedOwn(t, fc, "INT-2")
	redirect, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "sessionId": S, "params": map[string]any{
		"requestId": "INT-3", "networkId": "REQ-2", "redirectedRequestId": "INT-2", "frameId": F, "resourceType": "Document",
		"request": map[string]any{"url": "http://a.test/private/z", "method": "GET", "headers": map[string]string{}},
	}})
	fc.Send(redirect)
	failedOwn("INT-3")
	// Subresources are never held, so never refused.
	fc.Send(paused(S, "INT-4", "REQ-4", F, "Image", "http://a.test/private/img.png"))
	continuedOwn(t, fc, "INT-4")
	if body := metricsBody(t, tp); !strings.Contains(body, `cdp_throttle_navigations_total{outcome="disallowed"} 2`) {
		t.Errorf("/metrics: want 2 disallowed navigations, got\n%s", grepLines(body, "navigations_total"))
	}
}

// TestStreamHoldRefusesDisallowed: held in the client stream, a disallowed
// Page.navigate is answered as Chromium answers a blocked navigation,
// errorText net::ERR_BLOCKED_BY_CLIENT, and never reaches the browser; the
// session's next command goes on.
func TestStreamHoldRefusesDisallowed(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	obey, lim := obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1")
	tp := relayTo(t, fb, limiter.Config{}, obey, navigateInStream)
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/private/x"},"sessionId":"SID-1"}`))
	_, data := readClient(t, c)
	got := string(data)
	if !strings.Contains(got, `"id":1`) || !strings.Contains(got, `"errorText":"net::ERR_BLOCKED_BY_CLIENT"`) {
		t.Fatalf("client got %s, want Page.navigate's result with errorText net::ERR_BLOCKED_BY_CLIENT", got)
	}
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/public/x"},"sessionId":"SID-1"}`))
	if m := fc.Next(t); !strings.Contains(string(m.Data), "/public/x") {
		t.Fatalf("browser got %s, want the allowed navigation (and never the refused one)", m.Data)
	}
	if n := (*lim).Len(); n != 1 {
		t.Errorf("limiter knows %d hosts, want a.test once, booked by the allowed navigation alone", n)
	}
	if body := metricsBody(t, tp); !strings.Contains(body, `cdp_throttle_navigations_total{outcome="disallowed"} 1`) {
		t.Errorf("/metrics: want 1 disallowed navigation, got\n%s", grepLines(body, "navigations_total"))
	}
}

// TestFetchHolderRefusesUnspaced: --robots obey with --http-nav-delay 0
// (nothing spaced, nothing capped) still holds navigations, to refuse the
// disallowed ones; the others go at once, booking nothing.
func TestFetchHolderRefusesUnspaced(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	obey, lim := obeyingFlags(t, "User-agent: *\nDisallow: /private/\n", policy.Flags{Robots: "obey", Delay: "0"})
	tp := relayTo(t, fb, limiter.Config{}, obey)
	fakebrowser.RelayConns(t, fb, false)
	chain := fb.FetchRec.Chain(t, "/page?first")
	if hops := fb.Navigate(t, rewritten(chain, "/page?first", "/private/x")); len(hops) != 1 || hops[0].Failed != "BlockedByClient" {
		t.Fatalf("got %+v, want failed with BlockedByClient", hops)
	}
	for range 2 {
		if hops := fb.Navigate(t, chain); len(hops) == 0 || hops[0].Failed != "" {
			t.Fatalf("allowed navigation: got %+v, want it let go", hops)
		}
	}
	if n := (*lim).Len(); n != 0 {
		t.Errorf("limiter knows %d hosts, want none: nothing is spaced", n)
	}
	body := metricsBody(t, tp)
	if !strings.Contains(body, `cdp_throttle_navigations_total{outcome="disallowed"} 1`) || !strings.Contains(body, `cdp_throttle_navigations_total{outcome="exempt"} 2`) {
		t.Errorf("/metrics: want 1 disallowed and 2 exempt, got\n%s", grepLines(body, "navigations_total"))
	}
}

// TestSessionHoldRefusesCreateTarget: held in the client's session, a
// Target.createTarget with a disallowed URL never reaches the browser and
// is answered with a CDP error net::ERR_BLOCKED_BY_CLIENT.
func TestSessionHoldRefusesCreateTarget(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	obey, lim := obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1")
	tp := relayTo(t, fb, limiter.Config{}, obey)
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Target.createTarget","params":{"url":"http://a.test/private/x"}}`))
	_, data := readClient(t, c)
	if got := string(data); !strings.Contains(got, `"id":1`) || !strings.Contains(got, `"error":`) || !strings.Contains(got, "net::ERR_BLOCKED_BY_CLIENT") {
		t.Fatalf("client got %s, want a CDP error net::ERR_BLOCKED_BY_CLIENT", got)
	}
	writeClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Target.createTarget","params":{"url":"http://a.test/public/x"}}`))
	if m := fc.Next(t); m.Wire.Method != "Target.createTarget" || !strings.Contains(string(m.Data), "/public/x") {
		t.Fatalf("browser got %s, want the allowed createTarget (and never the refused one)", m.Data)
	}
	if n := (*lim).Len(); n != 1 {
		t.Errorf("limiter knows %d hosts, want a.test, booked once by the allowed one", n)
	}
}

// TestFetchHolderRefusesRedirectHop: a redirect within its host into a
// path robots.txt disallows (a.test/r2 → a.test/y, recorded off Chromium)
// is failed at its hop, which books nothing more.
func TestFetchHolderRefusesRedirectHop(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	obey, _ := obeying(t, "User-agent: *\nDisallow: /y\n", "a.test=fixed:1h,burst:1")
	tp := relayTo(t, fb, limiter.Config{}, obey)
	fakebrowser.RelayConns(t, fb, false)
	hops := fb.Navigate(t, fb.FetchRec.Chain(t, "/r2"))
	if len(hops) != 2 || hops[0].Failed != "" || hops[1].Failed != "BlockedByClient" {
		t.Fatalf("got %+v, want /r2 let go and its hop to /y failed with BlockedByClient", hops)
	}
	if body := metricsBody(t, tp); !strings.Contains(body, `cdp_throttle_navigations_total{outcome="disallowed"} 1`) {
		t.Errorf("/metrics: want 1 disallowed navigation, got\n%s", grepLines(body, "navigations_total"))
	}
}
