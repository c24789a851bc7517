package holdtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// Holding that obeys robots.txt (--robots obey), for the tests of
// refusals, whichever way holds.

// Obeying returns an option that makes a Holder's Limiter a policy
// obeying robots.txt (--robots obey) with rules, every robots.txt served
// by one test site whatever its host, and where the limiter the policy
// books in is once the Holder is armed (Arm runs the option). The
// Holder's own Lim is then unused.
func Obeying(t *testing.T, robots string, rules ...string) (func(*hold.Holder), **limiter.Limiter) {
	t.Helper()
	return ObeyingFlags(t, robots, policy.Flags{Robots: "obey", Rules: rules})
}

// ObeyingFlags is Obeying with the policy's flags f. The test site
// starts as the option runs, so that a test's leak check
// (fakebrowser.CheckLeaks), however early or late it comes before the
// Holder is armed, counts the site's goroutines and sees it closed.
func ObeyingFlags(t *testing.T, robots string, f policy.Flags) (func(*hold.Holder), **limiter.Limiter) {
	t.Helper()
	var lim *limiter.Limiter
	return func(hd *hold.Holder) {
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/robots.txt" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprint(w, robots)
		}))
		t.Cleanup(site.Close)
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
		hd.Limiter = policy.New(cfg, lim)
	}, &lim
}
