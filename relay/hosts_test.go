package relay

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/policy"
	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// busyLimiter is a Limiter whose Busiest reports hosts as given.
type busyLimiter struct {
	hold.Limiter
	hosts []limiter.HostState
	asked int // the n of the last Busiest
}

func (b *busyLimiter) Busiest(_ time.Time, n int) []limiter.HostState {
	b.asked = n
	return b.hosts[:min(n, len(b.hosts))]
}

// TestHostsStatus: /hosts takes n from 1 to 1000 and refuses anything else
// with 400 and the reason; it shows waits to a tenth of a millisecond, a
// host whose next navigation would go at once as spaced by nothing, and a
// server's policy, until when it holds and a spent quota's reset only
// where the server said them.
func TestHostsStatus(t *testing.T) {
	lim := &busyLimiter{hosts: []limiter.HostState{
		{Host: "busy.test", Pressure: 41, Mode: limiter.Adaptive, Spacing: 100 * time.Millisecond, NextFree: 21285157 * time.Nanosecond, Source: "flag"},
		{Host: "idle.test", Pressure: 0, Mode: limiter.Adaptive, Spacing: 20 * time.Millisecond, Source: "flag"},
		{Host: "burst.test", Pressure: 3, Mode: limiter.Fixed, Spacing: 300 * time.Millisecond, Floor: 1500049 * time.Microsecond, Source: "robots.txt"},
		{Host: "api.test", Mode: limiter.Fixed, Spacing: 200 * time.Millisecond, NextFree: 2500 * time.Millisecond, Source: "server", Rule: "RateLimit-Policy: 200ms",
			Server: 200 * time.Millisecond, ServerEnds: time.Hour - 1234567*time.Microsecond, ServerReset: 2500 * time.Millisecond},
	}}
	p := &Proxy{Limiter: lim}
	tests := []struct {
		query  string
		status int
		asked  int
		body   string
	}{
		{"", 200, 50, `[{"host":"busy.test","pressure":41,"spacing_ms":100,"next_free_ms":21.3,"mode":"adaptive","source":"flag"},` +
			`{"host":"idle.test","pressure":0,"spacing_ms":0,"next_free_ms":0,"mode":"adaptive","source":"flag"},` +
			`{"host":"burst.test","pressure":3,"spacing_ms":0,"next_free_ms":0,"mode":"fixed","source":"robots.txt","crawl_delay_ms":1500},` +
			`{"host":"api.test","pressure":0,"spacing_ms":200,"next_free_ms":2500,"mode":"fixed","source":"server","rule":"RateLimit-Policy: 200ms",` +
			`"server_floor_ms":200,"server_floor_ends_ms":3598765.4,"server_reset_ms":2500}]`},
		{"?n=1", 200, 1, `[{"host":"busy.test","pressure":41,"spacing_ms":100,"next_free_ms":21.3,"mode":"adaptive","source":"flag"}]`},
		{"?n=1000", 200, 1000, ""},
		{"?n=abc", 400, 0, `cdp-throttle: /hosts?n=abc: want a whole number of hosts from 1 to 1000`},
		{"?n=", 400, 0, `cdp-throttle: /hosts?n=: want a whole number of hosts from 1 to 1000`},
		{"?n=0", 400, 0, `cdp-throttle: /hosts?n=0: want a whole number of hosts from 1 to 1000`},
		{"?n=-3", 400, 0, `cdp-throttle: /hosts?n=-3: want a whole number of hosts from 1 to 1000`},
		{"?n=1001", 400, 0, `cdp-throttle: /hosts?n=1001: want a whole number of hosts from 1 to 1000`},
		{"?n=2.5", 400, 0, `cdp-throttle: /hosts?n=2.5: want a whole number of hosts from 1 to 1000`},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			lim.asked = 0
			w := httptest.NewRecorder()
			p.serveHosts(w, httptest.NewRequest(http.MethodGet, "/hosts"+tt.query, nil))
			body := strings.TrimSpace(w.Body.String())
			if w.Code != tt.status || tt.body != "" && body != tt.body {
				t.Errorf("got %d %s\nwant %d %s", w.Code, body, tt.status, tt.body)
			}
			if lim.asked != tt.asked {
				t.Errorf("asked the limiter for %d hosts, want %d", lim.asked, tt.asked)
			}
		})
	}
}

// TestHostsServerFloor: after an answer whose RateLimit-Policy spaces a
// host more than its rule, /hosts and the page's /status show the server
// as the source of its spacing, with the policy, until when it holds, and
// the reset of the quota it said was spent.
func TestHostsServerFloor(t *testing.T) {
	cfg, err := policy.FromFlags(policy.Flags{Delay: "20ms"})
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.New(cfg, limiter.New(cfg.Default))
	defer pol.Close()
	p := &Proxy{Limiter: pol}
	now := time.Now()
	pol.Reserve(context.Background(), "api.test", "http://api.test/", now)
	pol.Observe("api.test", limiter.Outcome{Status: 200, Server: ratelimit.Limits{Spacing: 200 * time.Millisecond, Wait: 3 * time.Second}}, now)

	w := httptest.NewRecorder()
	p.serveHosts(w, httptest.NewRequest(http.MethodGet, "/hosts", nil))
	var hosts []map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &hosts); err != nil || len(hosts) != 1 {
		t.Fatalf("/hosts: %v: %s, want api.test", err, w.Body)
	}
	h := hosts[0]
	ends, _ := h["server_floor_ends_ms"].(float64)
	reset, _ := h["server_reset_ms"].(float64)
	if h["source"] != "server" || h["rule"] != "RateLimit-Policy: 200ms" || h["spacing_ms"] != 200.0 || h["server_floor_ms"] != 200.0 ||
		ends > 3600e3 || ends < 3599e3 || reset > 3000 || reset < 2000 {
		t.Errorf("/hosts: got %s, want api.test spaced 200 ms by the server, for about an hour, its quota reset in about 3 s", w.Body)
	}
	t.Logf("/hosts: %s", strings.TrimSpace(w.Body.String()))

	st := p.Status(time.Now(), 10)
	if len(st.Buckets) != 1 {
		t.Fatalf("Status: got %+v, want api.test", st.Buckets)
	}
	if b := st.Buckets[0]; b.Source != "server" || b.Rule != "RateLimit-Policy: 200ms" || b.ServerFloor != 200*time.Millisecond ||
		b.ServerFloorEnds < time.Hour-time.Second || b.ServerReset < 2*time.Second || b.ServerReset > 3*time.Second {
		t.Errorf("Status: got %+v, want api.test spaced 200 ms by the server for about an hour, its quota reset in about 3 s", b)
	}
}
