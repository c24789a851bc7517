// Package dashboard is the relay's own page: open the relay's address in
// a browser and watch each host (or site) being spaced, live. It serves
// the page at / and the JSON the page reads at /status; the relay serves
// both behind its own access control.
//
// The page is HTML, JavaScript and CSS in page/, embedded in the binary
// and put together into one response (no external resource, no build
// step); it polls /status, asking only for what changed since its last
// poll. The relay hands the package its state through Source and tells
// a Timeline of each navigation booked and answered; the package knows
// nothing of CDP or of how navigations are held.
package dashboard

import (
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Status is the relay's state at an instant, as a Source gives it.
type Status struct {
	// Mode is the limiter's global mode: adaptive, fixed or off.
	Mode string
	// BucketsBy says what a bucket is: "host" (the default) or "site".
	BucketsBy string
	// Clients is how many client connections are relayed now.
	Clients  int
	Browsers []Browser
	// Navigations and Answers count what the relay did since it started.
	Navigations Navigations
	Answers     Answers
	// Buckets are the busiest buckets, busiest first.
	Buckets []Bucket
}

// Browser is one browser behind the relay.
type Browser struct {
	Upstream string // as given, without credentials
	Browser  string // as its /json/version names it
	Alive    bool   // it answered its last health check
	Clients  int
	// Holding says how its navigations are held: fetch, session,
	// navigate, or waiting while nothing can hold them.
	Holding string
}

// Navigations counts top-level navigations by outcome, as /metrics does.
type Navigations struct {
	Passed, Delayed, Exempt, Untracked, Foreign, Unheld uint64
	// Disallowed counts navigations refused because robots.txt disallows
	// them (--robots obey).
	Disallowed uint64
	// Deferred counts navigations answered at once with the relay's own
	// 429 (--max-wait, --host-errors).
	Deferred uint64
}

// Answers counts answers to held navigations by class.
type Answers struct {
	OK, Overload, Failure uint64
}

// Bucket is what the limiter knows of one bucket now.
type Bucket struct {
	Name       string
	Pressure   int
	Spacing    time.Duration
	NextFree   time.Duration // until a navigation would go at once
	CrawlDelay time.Duration
	Mode       string
	Source     string // flag, rule N, robots.txt, server
	Rule       string
	// InFlight and Cap are the bucket's navigations between release and
	// answer and the most it may have, for a limiter that caps them; a
	// Cap of 0 is none, and the page shows neither.
	InFlight, Cap int
	// Refused counts the bucket's navigations refused because robots.txt
	// disallows them (--robots obey).
	Refused uint64
	// Deferred counts its navigations answered at once with the relay's
	// own 429 (--max-wait, --host-errors); Breaker is its breaker's phase
	// when not closed, open until BreakerEnds from now.
	Deferred    uint64
	Breaker     string
	BreakerEnds time.Duration
	// ServerFloor is the least spacing the server's own RateLimit-Policy
	// asks for while it holds, until ServerFloorEnds from now unless sent
	// again; ServerReset is how long until the quota the server said was
	// spent resets, while the bucket waits for it. Zero: none.
	ServerFloor, ServerFloorEnds, ServerReset time.Duration
}

// Source gives the page the relay's state. Status must be safe for
// concurrent use.
type Source interface {
	// Status returns the state at now, with up to n of the busiest buckets.
	Status(now time.Time, n int) Status
}

// DefaultBuckets is how many buckets /status returns unless asked (n=).
const DefaultBuckets = 50

// Handler serves the page at / and its JSON at /status; any other path is
// not found. It checks no access itself: the relay serves it behind its
// own. Its methods are safe for concurrent use.
type Handler struct {
	// Source gives the relay's state; nil shows none.
	Source Source
	// Timeline gives the navigations; nil shows none.
	Timeline *Timeline
	// Now tells the time; nil means time.Now.
	Now func() time.Time
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/", "/status":
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "cdp-throttle: "+r.URL.Path+" answers GET and HEAD only", http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	if r.URL.Path == "/" {
		hd.Set("Content-Type", "text/html; charset=utf-8")
		hd.Set("Content-Security-Policy", page.csp)
		w.Write(page.html)
		return
	}
	q := r.URL.Query()
	var since uint64
	if v := q.Get("since"); v != "" {
		var err error
		if since, err = strconv.ParseUint(v, 10, 64); err != nil {
			http.Error(w, "cdp-throttle: since: want the version a previous /status answered (a whole number ≥ 0)", http.StatusBadRequest)
			return
		}
	}
	n := DefaultBuckets
	if v := q.Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > MaxBuckets {
			http.Error(w, "cdp-throttle: n: want a number of buckets from 1 to "+strconv.Itoa(MaxBuckets), http.StatusBadRequest)
			return
		}
	}
	hd.Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(h.snapshot(since, n))
}

// MaxBuckets is the most buckets /status returns (n=).
const MaxBuckets = 200

// snapshot is what /status answers: the relay's state and, for each of
// the busiest buckets, the navigations that changed since version since.
func (h *Handler) snapshot(since uint64, n int) snapshotJSON {
	now := time.Now()
	if h.Now != nil {
		now = h.Now()
	}
	var st Status
	if h.Source != nil {
		st = h.Source.Status(now, n)
	}
	version, trails := h.Timeline.Since(since)
	out := snapshotJSON{
		Now:       now.UnixMilli(),
		Version:   version,
		Mode:      st.Mode,
		BucketsBy: cmp.Or(st.BucketsBy, "host"),
		Clients:   st.Clients,
		Browsers:  []browserJSON{},
		Navigations: navigationsJSON{st.Navigations.Passed, st.Navigations.Delayed, st.Navigations.Exempt,
			st.Navigations.Untracked, st.Navigations.Foreign, st.Navigations.Unheld, st.Navigations.Disallowed, st.Navigations.Deferred},
		Answers: answersJSON{st.Answers.OK, st.Answers.Overload, st.Answers.Failure},
		Buckets: []bucketJSON{},
	}
	for _, b := range st.Browsers {
		out.Browsers = append(out.Browsers, browserJSON(b))
	}
	byName := make(map[string]int, len(st.Buckets)+len(trails))
	for _, b := range st.Buckets {
		byName[b.Name] = len(out.Buckets)
		out.Buckets = append(out.Buckets, bucketJSON{
			Bucket: b.Name, Pressure: b.Pressure, SpacingMS: millis(b.Spacing), NextFreeMS: millis(b.NextFree),
			Mode: b.Mode, Source: b.Source, Rule: b.Rule, CrawlDelayMS: millis(b.CrawlDelay),
			InFlight: b.InFlight, Cap: b.Cap, Refused: b.Refused, Deferred: b.Deferred, Breaker: b.Breaker, BreakerEndsMS: millis(b.BreakerEnds),
			ServerFloorMS: millis(b.ServerFloor), ServerFloorEndsMS: millis(b.ServerFloorEnds), ServerResetMS: millis(b.ServerReset),
			Navigations: []markJSON{},
		})
	}
	for _, tr := range trails {
		i, ok := byName[tr.Bucket]
		if !ok {
			// Remembered here, forgotten by the limiter: idle and drained.
			i = len(out.Buckets)
			out.Buckets = append(out.Buckets, bucketJSON{Bucket: tr.Bucket, Mode: tr.Mode, Source: tr.Source, Rule: tr.Rule, Navigations: []markJSON{}})
		}
		b := &out.Buckets[i]
		b.Passed, b.Delayed = tr.Passed, tr.Delayed
		if tr.LastAnswer != Pending {
			b.LastAnswer, b.LastStatus = tr.LastAnswer.String(), tr.LastStatus
		}
		b.LastBooked = tr.LastBooking.UnixMilli()
		for _, m := range tr.Marks {
			mj := markJSON{Seq: m.Seq, At: m.Start.UnixMilli(), WaitedMS: millis(m.Start.Sub(m.At)), SpacingMS: millis(m.Spacing),
				Pressure: m.Pressure, Answer: m.Answer.String(), Status: m.Status}
			if m.Host != tr.Bucket {
				mj.Host = m.Host
			}
			b.Navigations = append(b.Navigations, mj)
		}
	}
	// Busiest first: by pressure, then by the latest booking.
	slices.SortStableFunc(out.Buckets, func(a, b bucketJSON) int {
		if a.Pressure != b.Pressure {
			return b.Pressure - a.Pressure
		}
		return cmp.Compare(b.LastBooked, a.LastBooked)
	})
	out.Buckets = out.Buckets[:min(n, len(out.Buckets))]
	return out
}

// millis is d in milliseconds, to a tenth.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(100*time.Microsecond)) / 10
}

// The JSON /status answers, as README's "The relay's own page" documents it.
type (
	snapshotJSON struct {
		Now         int64           `json:"now"`     // the relay's clock, ms since the Unix epoch
		Version     uint64          `json:"version"` // give it back as since= to get only what changed
		Mode        string          `json:"mode"`
		BucketsBy   string          `json:"buckets_by"` // host, site or ip
		Clients     int             `json:"clients"`
		Browsers    []browserJSON   `json:"browsers"`
		Navigations navigationsJSON `json:"navigations"`
		Answers     answersJSON     `json:"answers"`
		Buckets     []bucketJSON    `json:"buckets"`
	}
	browserJSON struct {
		Upstream string `json:"upstream"`
		Browser  string `json:"browser,omitempty"`
		Alive    bool   `json:"alive"`
		Clients  int    `json:"clients"`
		Holding  string `json:"holding"`
	}
	navigationsJSON struct {
		Passed    uint64 `json:"passed"`
		Delayed   uint64 `json:"delayed"`
		Exempt    uint64 `json:"exempt"`
		Untracked uint64 `json:"untracked"`
		Foreign   uint64 `json:"foreign"`
		Unheld    uint64 `json:"unheld"`
		// Disallowed: refused, robots.txt disallows them.
		Disallowed uint64 `json:"disallowed"`
		// Deferred: answered at once with the relay's own 429.
		Deferred uint64 `json:"deferred"`
	}
	answersJSON struct {
		OK       uint64 `json:"ok"`
		Overload uint64 `json:"overload"`
		Failure  uint64 `json:"failure"`
	}
	bucketJSON struct {
		Bucket        string  `json:"bucket"`
		Pressure      int     `json:"pressure"`
		SpacingMS     float64 `json:"spacing_ms"`
		NextFreeMS    float64 `json:"next_free_ms"`
		Mode          string  `json:"mode"`
		Source        string  `json:"source,omitempty"`
		Rule          string  `json:"rule,omitempty"`
		CrawlDelayMS  float64 `json:"crawl_delay_ms,omitempty"`
		InFlight      int     `json:"in_flight,omitempty"`
		Cap           int     `json:"cap,omitempty"`
		Refused       uint64  `json:"refused,omitempty"`
		Deferred      uint64  `json:"deferred,omitempty"`
		Breaker       string  `json:"breaker,omitempty"`
		BreakerEndsMS float64 `json:"breaker_ends_ms,omitempty"`
		// The server's RateLimit-Policy while it holds, how long until it
		// lapses, and how long until a spent quota resets (ms from now).
		ServerFloorMS     float64    `json:"server_floor_ms,omitempty"`
		ServerFloorEndsMS float64    `json:"server_floor_ends_ms,omitempty"`
		ServerResetMS     float64    `json:"server_reset_ms,omitempty"`
		Passed            uint64     `json:"passed"`
		Delayed           uint64     `json:"delayed"`
		LastAnswer        string     `json:"last_answer,omitempty"`
		LastStatus        int        `json:"last_status,omitempty"`
		LastBooked        int64      `json:"last_booked,omitempty"`
		Navigations       []markJSON `json:"navigations"`
	}
	markJSON struct {
		Seq       uint64  `json:"seq"`
		Host      string  `json:"host,omitempty"` // when not the bucket's name
		At        int64   `json:"at"`             // released, ms since the Unix epoch
		WaitedMS  float64 `json:"waited_ms"`
		SpacingMS float64 `json:"spacing_ms"`
		Pressure  int     `json:"pressure"`
		Answer    string  `json:"answer"`
		Status    int     `json:"status,omitempty"`
	}
)
