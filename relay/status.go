package relay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cdp-throttle/cdp-throttle/dashboard"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// The status surface: what people watching a crawl ask the relay itself,
// beside the browser's endpoints. /metrics is Metrics'; the page at / and
// its /status are package dashboard's, which the relay tells of each
// navigation booked and answered (per navigation, never per message) and
// hands its state when the page asks (Status).

// Status reports the relay's state at now for its page, with up to n of
// the busiest buckets (hosts, or sites).
func (p *Proxy) Status(now time.Time, n int) dashboard.Status {
	st := dashboard.Status{Mode: limiter.Off.String(), Clients: p.Conns()}
	if p.Limiter != nil {
		st.Mode = p.Limiter.Mode().String()
	}
	if b, ok := p.Limiter.(bucketsBy); ok {
		st.BucketsBy = b.Buckets()
	}
	st.Navigations, st.Answers = p.Metrics.counts()
	for _, up := range p.ups {
		b := dashboard.Browser{Upstream: up.name, Alive: up.alive.Load(), Clients: int(up.conns.Load()), Holding: "none"}
		if up.holds != nil {
			b.Browser, b.Holding = up.holds.Name(), up.holds.Holding()
		}
		st.Browsers = append(st.Browsers, b)
	}
	if b, ok := p.Limiter.(busiest); ok {
		for _, h := range b.Busiest(now, n) {
			st.Buckets = append(st.Buckets, dashboard.Bucket{Name: h.Host, Pressure: h.Pressure, Spacing: spacingNow(h), NextFree: h.NextFree,
				CrawlDelay: h.Floor, Mode: h.Mode.String(), Source: h.Source, Rule: h.Rule, InFlight: h.InFlight, Cap: h.Concurrency, Refused: h.Refused,
				Deferred: h.Deferred, Breaker: h.Breaker, BreakerEnds: h.BreakerEnds, ServerFloor: h.Server, ServerFloorEnds: h.ServerEnds, ServerReset: h.ServerReset})
		}
	}
	return st
}

// spacingNow is the spacing a navigation of the bucket asked for now
// would get: nothing while its next one goes at once (an idle bucket, or
// one with burst left), whatever its setting. /hosts and the page show it.
func spacingNow(h limiter.HostState) time.Duration {
	if h.NextFree <= 0 {
		return 0
	}
	return h.Spacing
}

// maxHosts is the most /hosts lists at once.
const maxHosts = 1000

// serveHosts answers /hosts: the busiest buckets (hosts, or sites with
// --bucket site), each with its mode, the rule that set it and where that
// came from, for people watching a crawl.
func (p *Proxy) serveHosts(w http.ResponseWriter, r *http.Request) {
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
		Source       string  `json:"source,omitempty"` // flag, rule N, robots.txt, server
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
		// With --robots obey: navigations refused, robots.txt disallows them.
		Refused uint64 `json:"refused,omitempty"`
		// With --max-wait or --host-errors: navigations answered at once
		// with the relay's own 429, and the breaker when not closed.
		Deferred      uint64  `json:"deferred,omitempty"`
		Breaker       string  `json:"breaker,omitempty"`
		BreakerEndsMS float64 `json:"breaker_ends_ms,omitempty"`
		// While the server's RateLimit-Policy holds: the least spacing it
		// asks for, and how long until it lapses unless sent again; while
		// the bucket waits for a spent quota's reset, how long until it.
		ServerFloorMS     float64 `json:"server_floor_ms,omitempty"`
		ServerFloorEndsMS float64 `json:"server_floor_ends_ms,omitempty"`
		ServerResetMS     float64 `json:"server_reset_ms,omitempty"`
	}
	out := []host{}
	if b, ok := p.Limiter.(busiest); ok {
		for _, h := range b.Busiest(time.Now(), n) {
			hs := host{Host: h.Host, Pressure: h.Pressure, SpacingMS: limiter.ShownMillis(spacingNow(h)), NextFreeMS: limiter.ShownMillis(h.NextFree),
				Mode: h.Mode.String(), Source: h.Source, Rule: h.Rule, CrawlDelayMS: limiter.ShownMillis(h.Floor),
				Concurrency: h.Concurrency, ConcurrencySource: h.ConcurrencySource,
				BaselineMS: limiter.ShownMillis(h.Baseline), LastAnswerMS: limiter.ShownMillis(h.LastAnswer), Refused: h.Refused,
				Deferred: h.Deferred, Breaker: h.Breaker, BreakerEndsMS: limiter.ShownMillis(h.BreakerEnds),
				ServerFloorMS: limiter.ShownMillis(h.Server), ServerFloorEndsMS: limiter.ShownMillis(h.ServerEnds), ServerResetMS: limiter.ShownMillis(h.ServerReset)}
			if c, ok := p.Limiter.(hold.Capper); ok && c.Caps() {
				hs.InFlight, hs.Waiting = &h.InFlight, &h.Waiting // 0 is news here
			}
			out = append(out, hs)
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
	if p.stopping() {
		status.Status = "stopping" // takes no clients: a load balancer sends them elsewhere
	}
	w.Header().Set("Content-Type", "application/json")
	if status.Status != "ok" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	json.NewEncoder(w).Encode(status)
}
