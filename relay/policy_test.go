package relay

import (
	"strings"
	"testing"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/resolve"
)

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
