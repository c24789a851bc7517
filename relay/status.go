package relay

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// The status surface: what people watching a crawl ask the relay itself,
// beside the browser's endpoints. /metrics is Metrics'.

// serveHosts answers /hosts: the busiest buckets (hosts, or sites with
// --bucket site), each with its mode, the rule that set it and where that
// came from, for people watching a crawl.
func (p *Proxy) serveHosts(w http.ResponseWriter, r *http.Request) {
	type busiest interface {
		Busiest(now time.Time, n int) []limiter.HostState
	}
	n := 50
	if v, err := strconv.Atoi(r.URL.Query().Get("n")); err == nil && v > 0 {
		n = min(v, 1000)
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
			out = append(out, host{h.Host, h.Pressure, limiter.Millis(h.Spacing), limiter.Millis(h.NextFree),
				h.Mode.String(), h.Source, h.Rule, limiter.Millis(h.Floor)})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// serveHealth answers /healthz: 200 when a browser answers, 503 otherwise.
// It never waits for a place.
func (p *Proxy) serveHealth(w http.ResponseWriter, r *http.Request) {
	type browser struct {
		Upstream string `json:"upstream"`
		Alive    bool   `json:"alive"`
		Clients  int64  `json:"clients"`
		Capacity int    `json:"capacity"` // 0: no bound
		Holding  string `json:"holding"`
	}
	type clients struct {
		Capacity       int    `json:"capacity"` // -1: no bound
		Connected      int    `json:"connected"`
		Peak           int    `json:"peak"`
		Queued         int    `json:"queued"`
		RefusedFull    uint64 `json:"refused_queue_full"`
		RefusedTimeout uint64 `json:"refused_timeout"`
	}
	st := p.gate.Stats()
	status := struct {
		Status    string    `json:"status"`
		Clients   clients   `json:"clients"`
		Upstreams []browser `json:"upstreams"`
	}{Status: "unavailable", Clients: clients{st.Capacity, st.Connected, st.Peak, st.Queued, st.RefusedFull, st.RefusedTimeout}}
	for i, up := range p.ups {
		b := browser{Upstream: up.name, Alive: up.alive.Load(), Clients: up.conns.Load(), Capacity: p.gate.BrowserCapacity(i), Holding: up.holding()}
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
