package relay

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/cdp-throttle/cdp-throttle/admission"
	"github.com/cdp-throttle/cdp-throttle/dashboard"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Metrics are the relay's Prometheus metrics, served at /metrics. They carry
// no per-host labels: a crawl touches too many hosts. A nil *Metrics
// records nothing. Its methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	navPassed, navDelayed, navExempt, navUntracked prometheus.Counter
	navForeign, navUnheld, navDisallowed           prometheus.Counter
	navDeferred, navStopped                        prometheus.Counter
	panics                                         prometheus.Counter
	delay, concurrency                             prometheus.Histogram
	overload, failure, slow, answered              prometheus.Counter
	late                                           prometheus.Counter
	pushedBy                                       prometheus.Counter
	overtook                                       prometheus.Counter
	conns                                          prometheus.Gauge
	msgsToBrowser, msgsToClient                    prometheus.Counter
	bytesToBrowser, bytesToClient                  prometheus.Counter
	leftovers                                      *prometheus.CounterVec
	browserCommands                                *prometheus.CounterVec
	waits                                          prometheus.Histogram
}

// NewMetrics creates the metrics of a relay booking in ls: its Limiter,
// and what books under it (a *limiter.Limiter, a shared store). What only
// some know — how many hosts they track (Len), how often a shared store
// fell back (Fallbacks), its connections (Conns), how many places of the
// in-flight cap the bound gave back (Expired) — is exported from the
// first of ls that has it.
func NewMetrics(ls ...any) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg}
	nav := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdp_throttle_navigations_total",
		Help: "Top-level navigations by outcome: passed (booked, went at once), delayed (held for their slot), " +
			"exempt (loopback, --exempt-host, a rule that is exempt or off), untracked (not a page's main frame, or not http), " +
			"foreign (a page none of the relay's clients drives: let go at once), " +
			"unheld (a client's navigation that reached the network without a booking), " +
			"disallowed (refused because its site's robots.txt disallows it: --robots obey), " +
			"deferred (answered at once with the relay's own 429, never sent: its slot lay further ahead than --max-wait, or its host's breaker was open, --host-errors), " +
			"stopped (answered at once with the relay's own 429, never sent, because the relay was stopping: its slot lay past --drain-timeout).",
	}, []string{"outcome"})
	m.navPassed, m.navDelayed = nav.WithLabelValues("passed"), nav.WithLabelValues("delayed")
	m.navExempt, m.navUntracked = nav.WithLabelValues("exempt"), nav.WithLabelValues("untracked")
	m.navForeign, m.navUnheld = nav.WithLabelValues("foreign"), nav.WithLabelValues("unheld")
	m.navDisallowed, m.navDeferred = nav.WithLabelValues("disallowed"), nav.WithLabelValues("deferred")
	m.navStopped = nav.WithLabelValues("stopped")
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cdp_throttle_panics_total",
		Help: "Panics recovered in the code of one connection (a client's pumps, a held navigation's): that connection was ended, the others went on.",
	})
	m.delay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cdp_throttle_navigation_delay_seconds",
		Help:    "How long delayed navigations were held.",
		Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60},
	})
	m.concurrency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cdp_throttle_concurrency_wait_seconds",
		Help:    "How long navigations that waited for a place among their host's navigations in flight (--http-nav-concurrency, concurrency:N) waited.",
		Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60},
	})
	fb := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdp_throttle_feedback_total",
		Help: "Answers to held navigations by class: overload (--overload-status, 429 and 503 by default, or a header of --overload-header), " +
			"failure (other 5xx, no answer), slow (slower than the host's baseline allows, with --latency-backoff), ok (the rest).",
	}, []string{"class"})
	m.overload, m.failure, m.answered = fb.WithLabelValues("overload"), fb.WithLabelValues("failure"), fb.WithLabelValues("ok")
	m.slow = fb.WithLabelValues("slow")
	m.late = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cdp_throttle_late_departures_total",
		Help: "Held navigations that left the browser later than usual after their release, moving the rest of their schedule.",
	})
	m.pushedBy = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cdp_throttle_schedule_pushed_seconds_total",
		Help: "How far, in all, late departures moved their schedules.",
	})
	m.overtook = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cdp_throttle_departure_waits_expired_total",
		Help: "Held navigations let go while one let go before them in their bucket had not left the browser yet, " +
			"after waiting pace's bound for it: the site may see the two closer than the spacing.",
	})
	m.conns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cdp_throttle_connections",
		Help: "Client connections being relayed.",
	})
	msgs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdp_throttle_messages_total",
		Help: "Messages relayed, by direction (to_browser, to_client).",
	}, []string{"direction"})
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdp_throttle_bytes_total",
		Help: "Message bytes relayed, by direction (to_browser, to_client).",
	}, []string{"direction"})
	m.msgsToBrowser, m.msgsToClient = msgs.WithLabelValues("to_browser"), msgs.WithLabelValues("to_client")
	m.bytesToBrowser, m.bytesToClient = bytes.WithLabelValues("to_browser"), bytes.WithLabelValues("to_client")
	m.leftovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdp_throttle_leftovers_total",
		Help: "Pages and browser contexts the relay closed for a client, by what (page, context), why " +
			"(browser_close: the client's Browser.close; orphan: the client had been gone --orphan-timeout; stop: the relay was stopping) and outcome " +
			"(closed; gone: the browser no longer had it; failed: the browser could not be reached, or refused).",
	}, []string{"what", "why", "outcome"})
	m.browserCommands = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdp_throttle_browser_commands_total",
		Help: "Clients' Browser.close, Browser.crash and Browser.crashGpuProcess by outcome: contained (Browser.close " +
			"closed the client's own pages and contexts only), refused (a CDP error), passed (--allow-browser-close, or " +
			"Lightpanda's Browser.close, which ends the connection's own browser).",
	}, []string{"method", "outcome"})
	m.waits = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cdp_throttle_client_wait_seconds",
		Help:    "How long clients over capacity waited in the queue for a place in a browser (those that got one).",
		Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120},
	})
	reg.MustRegister(nav, m.panics, m.delay, m.concurrency, fb, m.late, m.pushedBy, m.overtook, m.conns, msgs, bytes, m.waits, m.leftovers, m.browserCommands)
	if lenner, ok := first[interface{ Len() int }](ls); ok {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cdp_throttle_hosts_tracked",
			Help: "Hosts the limiter remembers (idle ones are forgotten).",
		}, func() float64 { return float64(lenner.Len()) }))
	}
	if fallbacks, ok := first[interface{ Fallbacks() uint64 }](ls); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cdp_throttle_store_fallbacks_total",
			Help: "Bookings, answers and places in flight the shared store could not take, handled by the local fallback (or held).",
		}, func() float64 { return float64(fallbacks.Fallbacks()) }))
	}
	if conns, ok := first[interface{ Conns() int }](ls); ok {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cdp_throttle_store_connections",
			Help: "Connections to Redis open now, idle ones included.",
		}, func() float64 { return float64(conns.Conns()) }))
	}
	if expired, ok := first[interface{ Expired() uint64 }](ls); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cdp_throttle_concurrency_expired_total",
			Help: "Places among a host's navigations in flight given back by the bound (--http-nav-concurrency-bound): the navigation's end was never seen.",
		}, func() float64 { return float64(expired.Expired()) }))
	}
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// first returns the first of ls that is a T.
func first[T any](ls []any) (T, bool) {
	for _, l := range ls {
		if t, ok := l.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// Waited counts a navigation that waited d for a place among its host's
// navigations in flight (hold.Metrics).
func (m *Metrics) Waited(d time.Duration) {
	if m != nil {
		m.concurrency.Observe(d.Seconds())
	}
}

// admission exports the state of the gate that gives clients their places.
func (m *Metrics) admission(g *admission.Gate) {
	if m == nil {
		return
	}
	gauge := func(name, help string, f func(admission.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(g.Stats()) })
	}
	refused := func(reason string, f func(admission.Stats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "cdp_throttle_clients_refused_total",
			Help:        "Client connections refused a place: queue_full (answered 429), timeout (no place freed within --queue-timeout, answered 503).",
			ConstLabels: prometheus.Labels{"reason": reason},
		}, func() float64 { return float64(f(g.Stats())) })
	}
	m.reg.MustRegister(
		gauge("cdp_throttle_clients_capacity", "Client connections the relay takes at once (its browsers' capacities, --max-clients); -1 for no bound.",
			func(s admission.Stats) float64 { return float64(s.Capacity) }),
		gauge("cdp_throttle_clients_connected", "Client connections holding a place in a browser.",
			func(s admission.Stats) float64 { return float64(s.Connected) }),
		gauge("cdp_throttle_clients_connected_peak", "The most client connections that held a place at once.",
			func(s admission.Stats) float64 { return float64(s.Peak) }),
		gauge("cdp_throttle_clients_queued", "Client connections waiting for a place, their websocket upgrade not answered yet.",
			func(s admission.Stats) float64 { return float64(s.Queued) }),
		refused("queue_full", func(s admission.Stats) uint64 { return s.RefusedFull }),
		refused("timeout", func(s admission.Stats) uint64 { return s.RefusedTimeout }),
	)
}

// clientWaited records how long a client waited for its place.
func (m *Metrics) clientWaited(d time.Duration) {
	if m != nil {
		m.waits.Observe(d.Seconds())
	}
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Navigation counts one navigation: booked for a wait of d (exempt and
// untracked ones pass nothing to book) (hold.Metrics).
func (m *Metrics) Navigation(outcome hold.NavOutcome, d time.Duration) {
	if m == nil {
		return
	}
	switch outcome {
	case hold.NavBooked:
		if d > 0 {
			m.navDelayed.Inc()
			m.delay.Observe(d.Seconds())
		} else {
			m.navPassed.Inc()
		}
	case hold.NavExempt:
		m.navExempt.Inc()
	case hold.NavUntracked:
		m.navUntracked.Inc()
	case hold.NavForeign:
		m.navForeign.Inc()
	case hold.NavDisallowed:
		m.navDisallowed.Inc()
	case hold.NavDeferred:
		m.navDeferred.Inc()
	case hold.NavStopped:
		m.navStopped.Inc()
	}
}

// panicked counts a panic recovered in one connection's code.
func (m *Metrics) panicked() {
	if m != nil {
		m.panics.Inc()
	}
}

// Panicked counts a panic recovered in the code of one held navigation
// (hold.Metrics).
func (m *Metrics) Panicked() { m.panicked() }

// AddUnheld counts n navigations that reached the network without a
// booking (hold.Metrics).
func (m *Metrics) AddUnheld(n int) {
	if m != nil {
		m.navUnheld.Add(float64(n))
	}
}

// Unheld reports how many navigations reached the network without a
// booking: 0 unless the browser released what the relay held, or a way of
// holding could not see them.
func (m *Metrics) Unheld() int {
	if m == nil {
		return 0
	}
	var d dto.Metric
	m.navUnheld.Write(&d)
	return int(d.GetCounter().GetValue())
}

// Feedback counts one answer fed back to the limiter (hold.Metrics).
func (m *Metrics) Feedback(e limiter.Effect) {
	if m == nil {
		return
	}
	switch e {
	case limiter.Overload:
		m.overload.Inc()
	case limiter.Failure:
		m.failure.Inc()
	case limiter.Slow:
		m.slow.Inc()
	default:
		m.answered.Inc()
	}
}

// Pushed counts a late departure that moved its schedule by by
// (hold.Metrics).
func (m *Metrics) Pushed(by time.Duration) {
	if m != nil {
		m.late.Inc()
		m.pushedBy.Add(by.Seconds())
	}
}

// Overtook counts a navigation let go before the one let go before it
// had left the browser, after waiting pace's bound for it (hold.Metrics).
func (m *Metrics) Overtook() {
	if m != nil {
		m.overtook.Inc()
	}
}

// counts reads the counters the page shows.
func (m *Metrics) counts() (dashboard.Navigations, dashboard.Answers) {
	if m == nil {
		return dashboard.Navigations{}, dashboard.Answers{}
	}
	n := func(c prometheus.Counter) uint64 {
		var d dto.Metric
		c.Write(&d)
		return uint64(d.GetCounter().GetValue())
	}
	return dashboard.Navigations{Passed: n(m.navPassed), Delayed: n(m.navDelayed), Exempt: n(m.navExempt),
			Untracked: n(m.navUntracked), Foreign: n(m.navForeign), Unheld: n(m.navUnheld), Disallowed: n(m.navDisallowed), Deferred: n(m.navDeferred)},
		dashboard.Answers{OK: n(m.answered), Overload: n(m.overload), Failure: n(m.failure) + n(m.slow)}
}

func (m *Metrics) connection(delta float64) {
	if m != nil {
		m.conns.Add(delta)
	}
}

// leftover counts one page or context the relay closed (or tried to) for
// a client.
func (m *Metrics) leftover(what, why, outcome string) {
	if m != nil {
		m.leftovers.WithLabelValues(what, why, outcome).Inc()
	}
}

// browserCommand counts a client's Browser.close or Browser.crash*.
func (m *Metrics) browserCommand(method, outcome string) {
	if m != nil {
		m.browserCommands.WithLabelValues(method, outcome).Inc()
	}
}

// relayed counts one message of n bytes.
func (m *Metrics) relayed(toBrowser bool, n int) {
	if m == nil {
		return
	}
	if toBrowser {
		m.msgsToBrowser.Inc()
		m.bytesToBrowser.Add(float64(n))
	} else {
		m.msgsToClient.Inc()
		m.bytesToClient.Add(float64(n))
	}
}
