package relay

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
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
// with 400 and the reason; it shows waits to a tenth of a millisecond, and
// a host whose next navigation would go at once as spaced by nothing.
func TestHostsStatus(t *testing.T) {
	lim := &busyLimiter{hosts: []limiter.HostState{
		{Host: "busy.test", Pressure: 41, Mode: limiter.Adaptive, Spacing: 100 * time.Millisecond, NextFree: 21285157 * time.Nanosecond, Source: "flag"},
		{Host: "idle.test", Pressure: 0, Mode: limiter.Adaptive, Spacing: 20 * time.Millisecond, Source: "flag"},
		{Host: "burst.test", Pressure: 3, Mode: limiter.Fixed, Spacing: 300 * time.Millisecond, Floor: 1500049 * time.Microsecond, Source: "robots.txt"},
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
			`{"host":"burst.test","pressure":3,"spacing_ms":0,"next_free_ms":0,"mode":"fixed","source":"robots.txt","crawl_delay_ms":1500}]`},
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
