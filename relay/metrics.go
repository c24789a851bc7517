package relay

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Metrics are the relay's Prometheus metrics, served at /metrics. They carry
// no per-host labels: a crawl touches too many hosts. A nil *Metrics
// records nothing. Its methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	navPassed, navDelayed, navExempt, navUntracked prometheus.Counter
	navForeign, navUnheld                          prometheus.Counter
	delay, concurrency                             prometheus.Histogram
	overload, failure, slow, answered              prometheus.Counter
	conns                                          prometheus.Gauge
	msgsToBrowser, msgsToClient                    prometheus.Counter
	bytesToBrowser, bytesToClient                  prometheus.Counter
}

// NewMetrics creates the metrics of a relay booking in ls: its Limiter,
// and what books under it (a *limiter.Limiter, a shared store). What only
// some know — how many hosts they track (Len), how often a shared store
// fell back (Fallbacks), how many places of the in-flight cap the bound
// gave back (Expired) — is exported from the first of ls that has it.
func NewMetrics(ls ...any) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg}
	nav := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cdp_throttle_navigations_total",
		Help: "Top-level navigations by outcome: passed (booked, went at once), delayed (held for their slot), " +
			"exempt (loopback, --exempt-host, a rule that is exempt or off), untracked (not a page's main frame, or not http), " +
			"foreign (a page none of the relay's clients drives: let go at once), " +
			"unheld (a client's navigation that reached the network without a booking).",
	}, []string{"outcome"})
	m.navPassed, m.navDelayed = nav.WithLabelValues("passed"), nav.WithLabelValues("delayed")
	m.navExempt, m.navUntracked = nav.WithLabelValues("exempt"), nav.WithLabelValues("untracked")
	m.navForeign, m.navUnheld = nav.WithLabelValues("foreign"), nav.WithLabelValues("unheld")
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
		Help: "Answers to held navigations by class: overload (--overload-status, 429 and 503 by default), " +
			"failure (other 5xx, no answer), slow (slower than the host's baseline allows, with --latency-backoff), ok (the rest).",
	}, []string{"class"})
	m.overload, m.failure, m.answered = fb.WithLabelValues("overload"), fb.WithLabelValues("failure"), fb.WithLabelValues("ok")
	m.slow = fb.WithLabelValues("slow")
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
	reg.MustRegister(nav, m.delay, m.concurrency, fb, m.conns, msgs, bytes)
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
	if expired, ok := first[interface{ Expired() uint64 }](ls); ok {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cdp_throttle_concurrency_expired_total",
			Help: "Places among a host's navigations in flight given back by the bound (--http-nav-concurrency-bound): the navigation's end was never seen.",
		}, func() float64 { return float64(expired.Expired()) }))
	}
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// navigation counts one navigation: booked for a wait of d (exempt and
// untracked ones pass nothing to book).
func (m *Metrics) navigation(outcome navOutcome, d time.Duration) {
	if m == nil {
		return
	}
	switch outcome {
	case navBooked:
		if d > 0 {
			m.navDelayed.Inc()
			m.delay.Observe(d.Seconds())
		} else {
			m.navPassed.Inc()
		}
	case navExempt:
		m.navExempt.Inc()
	case navUntracked:
		m.navUntracked.Inc()
	case navForeign:
		m.navForeign.Inc()
	}
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

// concurrencyWait counts a navigation that waited d for a place among its
// host's navigations in flight.
func (m *Metrics) concurrencyWait(d time.Duration) {
	if m != nil {
		m.concurrency.Observe(d.Seconds())
	}
}

// unheld counts n navigations that reached the network without a booking.
func (m *Metrics) unheld(n int) {
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

type navOutcome int

const (
	navBooked navOutcome = iota
	navExempt
	navUntracked
	navForeign
)

// feedback counts one answer fed back to the limiter, by what it was.
func (m *Metrics) feedback(e limiter.Effect) {
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

func (m *Metrics) connection(delta float64) {
	if m != nil {
		m.conns.Add(delta)
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
