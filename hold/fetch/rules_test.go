package fetch

import (
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
)

// TestFetchHolderRules: with per-site rules the relay holds each host by
// its own rule, its one warning names the rule (at debug for a fixed
// one), an exempt rule is never held nor booked, and the policy shows
// each bucket's rule and where it came from (what the relay's /hosts
// shows).
func TestFetchHolderRules(t *testing.T) {
	const hour = time.Hour
	cfg, err := policy.FromFlags(policy.Flags{Rules: []string{"a.test=fixed:1h,burst:1", "b.test=exempt"}})
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(cfg.Default)
	pol := policy.New(cfg, lim)
	fb, th := armNew(t, limiter.Config{}, func(hd *hold.Holder) { hd.Limiter = pol })
	hc := fb.Holder(t)
	fakebrowser.AnnouncePages(t, fb, hc, false)
	// A new page opened with its URL: b.test, exempt by rule 2.
	hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?created"))
	if n := lim.Len(); n != 0 {
		t.Errorf("limiter knows %d hosts after an exempt navigation, want none", n)
	}
	// a.test twice: the second is held for an hour by rule 1 (its release
	// is never awaited).
	hc.MustPlay(t, fb.FetchRec.Chain(t, "/page?first"))

	hosts := pol.Busiest(time.Now(), 50) // as /hosts lists them
	if len(hosts) != 1 {
		t.Fatalf("the policy shows %+v, want a.test alone", hosts)
	}
	if h := hosts[0]; h.Host != "a.test" || h.Mode != limiter.Fixed || h.Source != "rule 1" || h.Rule != "a.test=fixed:1h,burst:1" || h.NextFree < hour/2 {
		t.Errorf("the policy shows %+v, want a.test, fixed, rule 1, a.test=fixed:1h,burst:1, next free in an hour", h)
	}

	// The warning, once a navigation is actually delayed: played on, held
	// until the relay closes when the test ends.
	held := make(chan error, 1)
	go func() {
		_, err := hc.Play(fb.FetchRec.Chain(t, "/page?first"))
		held <- err
	}()
	t.Cleanup(func() { th.Close(); <-held })
	fakebrowser.Eventually(t, "the held navigation", func() bool { return len(th.Logs.Lines(`"message":"navigation held"`)) > 0 })
	warned := th.Logs.Lines("spacing out navigations to this host", `"host":"a.test"`)
	if len(warned) != 1 || !strings.Contains(warned[0], `"level":"debug"`) || !strings.Contains(warned[0], `"source":"rule 1"`) ||
		!strings.Contains(warned[0], `"rule":"a.test=fixed:1h,burst:1"`) || !strings.Contains(warned[0], `"delay_ms":`) {
		t.Errorf("got %q, want one debug line naming rule 1 and the delay in ms", warned)
	}
}
