package relay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// The status surface: what people watching a crawl ask the relay itself,
// beside the browser's endpoints. /metrics is Metrics'.

// maxHosts is the most /hosts lists at once.
const maxHosts = 1000

// serveHosts answers /hosts: the busiest buckets (hosts, or sites with
// --bucket site), each with its mode, the rule that set it and where that
// came from, for people watching a crawl.
func (p *Proxy) serveHosts(w http.ResponseWriter, r *http.Request) {
	type busiest interface {
		Busiest(now time.Time, n int) []limiter.HostState
	}
	n := 50
	if q := r.URL.Query(); q.Has("n") {
		v, err := strconv.Atoi(q.Get("n"))
		if err != nil || v < 1 || v > maxHosts {
			http.Error(w, fmt.Sprintf("cdp-throttle: /hosts?n=%s: want a whole number of hosts from 1 to %d", q.Get("n"), maxHosts), http.StatusBadRequest)
			return
		}
		n = v
	}
	type host struct {
		Host         string  `json:"host"`
		Pressure     int     `json:"pressure"`
		SpacingMS    float64 `json:"spacing_ms"`
		NextFreeMS   float64 `json:"next_free_ms"`
		Mode         string  `json:"mode"`
		Source       string  `json:"source,omitempty"` // flag, rule N, robots.txt
		Rule         string  `json:"rule,omitempty"`
		CrawlDelayMS float64 `json:"crawl_delay_ms,omitempty"`
	}
	out := []host{}
	if b, ok := p.Limiter.(busiest); ok {
		for _, h := range b.Busiest(time.Now(), n) {
			// What a navigation asked for now would get: a host whose next
			// one goes at once is spaced by nothing now (an idle host, or
			// one with burst left), whatever its setting.
			spacing := h.Spacing
			if h.NextFree <= 0 {
				spacing = 0
			}
			out = append(out, host{h.Host, h.Pressure, limiter.ShownMillis(spacing), limiter.ShownMillis(h.NextFree),
				h.Mode.String(), h.Source, h.Rule, limiter.ShownMillis(h.Floor)})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// serveHealth answers /healthz: 200 when a browser answers, 503 otherwise.
func (p *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	type browser struct {
		Upstream string `json:"upstream"`
		Alive    bool   `json:"alive"`
		Clients  int64  `json:"clients"`
		Holding  string `json:"holding"`
	}
	status := struct {
		Status    string    `json:"status"`
		Upstreams []browser `json:"upstreams"`
	}{Status: "unavailable"}
	for _, up := range p.ups {
		b := browser{Upstream: up.name, Alive: up.alive.Load(), Clients: up.conns.Load(), Holding: up.holding()}
		if b.Alive {
			status.Status = "ok"
		}
		status.Upstreams = append(status.Upstreams, b)
	}
	w.Header().Set("Content-Type", "application/json")
	if status.Status != "ok" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(status)
}
