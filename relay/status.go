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
		// With a cap on navigations in flight (zero without one).
		InFlight          *int   `json:"in_flight,omitempty"`
		Waiting           *int   `json:"waiting,omitempty"`
		Concurrency       int    `json:"concurrency,omitempty"`
		ConcurrencySource string `json:"concurrency_source,omitempty"` // flag, rule N
		// With --latency-backoff.
		BaselineMS   float64 `json:"answer_baseline_ms,omitempty"`
		LastAnswerMS float64 `json:"last_answer_ms,omitempty"`
	}
	out := []host{}
	if b, ok := p.Limiter.(busiest); ok {
		for _, h := range b.Busiest(time.Now(), n) {
			hs := host{Host: h.Host, Pressure: h.Pressure, SpacingMS: limiter.Millis(h.Spacing), NextFreeMS: limiter.Millis(h.NextFree),
				Mode: h.Mode.String(), Source: h.Source, Rule: h.Rule, CrawlDelayMS: limiter.Millis(h.Floor),
				Concurrency: h.Concurrency, ConcurrencySource: h.ConcurrencySource,
				BaselineMS: limiter.Millis(h.Baseline), LastAnswerMS: limiter.Millis(h.LastAnswer)}
			if p.capper != nil {
				hs.InFlight, hs.Waiting = &h.InFlight, &h.Waiting // 0 is news here
			}
			out = append(out, hs)
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
