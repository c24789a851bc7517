package relay

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/resolve"
)

// TestFetchHolderRules: with per-site rules the relay holds each host by
// its own rule, its one warning names the rule (at debug for a fixed
// one), an exempt rule is never held nor booked, and /hosts shows each
// bucket's rule and where it came from.
func TestFetchHolderRules(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{})
	const hour = time.Hour
	var lim *limiter.Limiter
	tp := relayTo(t, fb, limiter.Config{}, func(p *Proxy) {
		cfg, err := policy.FromFlags(policy.Flags{Rules: []string{"a.test=fixed:1h,burst:1", "b.test=exempt"}})
		if err != nil {
			t.Fatal(err)
		}
		lim = limiter.New(cfg.Default)
		p.Limiter = policy.New(cfg, lim)
	})
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

	_, body := getBody(t, "http://"+tp.addr+"/hosts")
	var hosts []struct {
		Host, Mode, Source, Rule string
		NextFreeMS               float64 `json:"next_free_ms"`
	}
	if err := json.Unmarshal([]byte(body), &hosts); err != nil || len(hosts) != 1 {
		t.Fatalf("/hosts: got %s (%v), want a.test alone", body, err)
	}
	if h := hosts[0]; h.Host != "a.test" || h.Mode != "fixed" || h.Source != "rule 1" || h.Rule != "a.test=fixed:1h,burst:1" || h.NextFreeMS < float64(hour/2/time.Millisecond) {
		t.Errorf("/hosts: got %+v, want a.test, fixed, rule 1, a.test=fixed:1h,burst:1, next free in an hour", h)
	}

	// The warning, once a navigation is actually delayed: played on, held
	// until the relay closes when the test ends.
	held := make(chan error, 1)
	go func() {
		_, err := hc.Play(fb.FetchRec.Chain(t, "/page?first"))
		held <- err
	}()
	t.Cleanup(func() { tp.p.Close(); <-held })
	fakebrowser.Eventually(t, "the held navigation", func() bool { return len(tp.logs.Lines(`"message":"navigation held"`)) > 0 })
	warned := tp.logs.Lines("spacing out navigations to this host", `"host":"a.test"`)
	if len(warned) != 1 || !strings.Contains(warned[0], `"level":"debug"`) || !strings.Contains(warned[0], `"source":"rule 1"`) ||
		!strings.Contains(warned[0], `"rule":"a.test=fixed:1h,burst:1"`) || !strings.Contains(warned[0], `"delay_ms":`) {
		t.Errorf("got %q, want one debug line naming rule 1 and the delay in ms", warned)
	}
}

// TestBrowserArgs: with --bucket ip the relay asks the browser for its
// command line at start (Browser.getBrowserCommandLine) and hands it to
// the policy: the browser's --host-resolver-rules put a.test on its
// address before any answer, and a proxy there makes the addresses the
// resolver's, which the log says. A browser that does not tell costs
// nothing but a debug line.
func TestBrowserArgs(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	for _, tc := range []struct {
		name    string
		args    []string
		flags   policy.Flags
		bucket  string // of a.test once started
		source  string // logged in a warning, "" for none
		unknown bool   // the debug line that the command line is not known
	}{
		{"rules", []string{"/usr/bin/chromium", "--enable-automation", "--host-resolver-rules=MAP *.test 127.0.0.2"}, policy.Flags{Bucket: "ip"}, "127.0.0.2", "", false},
		{"a proxy", []string{"/usr/bin/chromium", "--enable-automation", "--proxy-server=http://10.0.0.1:3128"}, policy.Flags{Bucket: "ip"}, "a.test", "--proxy-server", false},
		{"not told", nil, policy.Flags{Bucket: "ip"}, "a.test", "", true},
		{"not asked without --bucket ip", []string{"--host-resolver-rules=MAP *.test 127.0.0.2"}, policy.Flags{}, "a.test", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := fakebrowser.New(t, fakebrowser.Config{CommandLine: tc.args})
			var pol *policy.Policy
			tp := relayTo(t, fb, limiter.Config{}, func(p *Proxy) {
				cfg, err := policy.FromFlags(tc.flags)
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Addrs != nil {
					cfg.Addrs.Source = resolve.Browser // no lookups in a unit test
				}
				pol = policy.New(cfg, limiter.New(cfg.Default))
				t.Cleanup(pol.Close)
				p.Limiter = pol
			})
			if got := pol.Bucket("a.test"); got != tc.bucket {
				t.Errorf("a.test's bucket: got %q, want %q", got, tc.bucket)
			}
			logs := tp.logs.String()
			if got := strings.Contains(logs, "the browser connects through a proxy ("+tc.source+")"); got != (tc.source != "") {
				t.Errorf("proxy warning logged: %v, want %v:\n%s", got, tc.source != "", logs)
			}
			if got := strings.Contains(logs, "the browser's command line is not known"); got != tc.unknown {
				t.Errorf("'not known' logged: %v, want %v", got, tc.unknown)
			}
		})
	}
}
