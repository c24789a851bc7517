package dashboard

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPage: / is one HTML document holding its script and style, a
// Content-Security-Policy that allows exactly those and its own origin,
// and no address of anything elsewhere.
func TestPage(t *testing.T) {
	h := &Handler{}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" || !strings.HasPrefix(body, "<!doctype html>") {
		t.Fatalf("GET /: %d %q, %.40q; want 200, an HTML document", rec.Code, rec.Header().Get("Content-Type"), body)
	}
	csp := rec.Header().Get("Content-Security-Policy")
	for _, tag := range []struct{ name, directive string }{{"script", "script-src"}, {"style", "style-src"}} {
		m := regexp.MustCompile(`(?s)<`+tag.name+`>(.*?)</`+tag.name+`>`).FindAllStringSubmatch(body, -1)
		if len(m) != 1 {
			t.Fatalf("got %d inline <%s> elements, want 1", len(m), tag.name)
		}
		sum := sha256.Sum256([]byte(m[0][1]))
		want := tag.directive + " 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if !strings.Contains(csp, want+";") {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	for _, want := range []string{"default-src 'none'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	for _, m := range regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(body, -1) {
		if u := m[1]; !strings.HasPrefix(u, "/") && u != "data:," {
			t.Errorf("the page refers to %q: not its own origin", u)
		}
	}
	for _, m := range regexp.MustCompile(`(?:https?:)?//[a-zA-Z0-9.-]+`).FindAllString(body, -1) {
		if m != "http://www.w3.org" { // the SVG namespace, a name
			t.Errorf("the page names %q", m)
		}
	}
	if strings.Contains(body, "<!--") {
		t.Errorf("a marker was left in the page")
	}
}

type fakeSource Status

func (f *fakeSource) Status(now time.Time, n int) Status {
	st := Status(*f)
	st.Buckets = st.Buckets[:min(n, len(st.Buckets))]
	return st
}

func get(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec
}

// TestStatus: /status holds the relay's state and the busiest buckets,
// those the limiter knows and those only the timeline remembers, busiest
// first, each with the navigations that changed since the version asked.
func TestStatus(t *testing.T) {
	src := &fakeSource{
		Mode: "adaptive", Clients: 2,
		Browsers:    []Browser{{Upstream: "http://127.0.0.1:9222", Browser: "Chrome/156", Alive: true, Clients: 2, Holding: "fetch"}},
		Navigations: Navigations{Passed: 3, Delayed: 2, Unheld: 1, Disallowed: 4},
		Answers:     Answers{OK: 4, Overload: 1},
		Buckets: []Bucket{
			{Name: "a.test", Pressure: 61, Spacing: 140 * time.Millisecond, NextFree: 123456 * time.Microsecond, Mode: "adaptive", Source: "flag", Refused: 4},
			{Name: "other.test", Pressure: 3, Spacing: 20 * time.Millisecond, Mode: "adaptive", Source: "flag"}, // booked by another relay
		},
	}
	tl := &Timeline{}
	h := &Handler{Source: src, Timeline: tl, Now: func() time.Time { return at(1000) }}
	book(tl, "a.test", 0, 0)
	tl.Booked(Booking{Bucket: "a.test", Host: "a.test", At: at(10), Start: at(130), Spacing: 140 * time.Millisecond, Pressure: 61, Mode: "adaptive", Source: "flag"})
	tl.Answered("a.test", "a.test", Overload, 503, at(50))
	book(tl, "idle.test", 5, 5) // drained since: the limiter forgot it

	type status struct {
		Now, Version uint64
		Mode         string
		BucketsBy    string `json:"buckets_by"`
		Clients      int
		Browsers     []map[string]any
		Navigations  map[string]int
		Answers      map[string]int
		Buckets      []struct {
			Bucket      string
			Pressure    int
			SpacingMS   float64 `json:"spacing_ms"`
			NextFreeMS  float64 `json:"next_free_ms"`
			Passed      int
			Delayed     int
			Refused     int
			LastAnswer  string `json:"last_answer"`
			LastStatus  int    `json:"last_status"`
			Navigations []map[string]any
		}
	}
	read := func(target string) status {
		t.Helper()
		rec := get(t, h, "GET", target)
		var st status
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || json.Unmarshal(rec.Body.Bytes(), &st) != nil {
			t.Fatalf("GET %s: %d %s", target, rec.Code, rec.Body)
		}
		return st
	}
	st := read("/status")
	if st.Now != uint64(at(1000).UnixMilli()) || st.Version != 4 || st.Mode != "adaptive" || st.BucketsBy != "host" || st.Clients != 2 ||
		len(st.Browsers) != 1 || st.Browsers[0]["holding"] != "fetch" || st.Navigations["unheld"] != 1 || st.Navigations["disallowed"] != 4 || st.Answers["overload"] != 1 {
		t.Errorf("got %+v", st)
	}
	var names []string
	for _, b := range st.Buckets {
		names = append(names, b.Bucket)
	}
	if got := strings.Join(names, " "); got != "a.test other.test idle.test" {
		t.Fatalf("buckets: got %s, want a.test other.test idle.test (by pressure, then latest booking)", got)
	}
	a := st.Buckets[0]
	if a.SpacingMS != 140 || a.NextFreeMS != 123.5 || a.Passed != 1 || a.Delayed != 1 || a.Refused != 4 || a.LastAnswer != "overload" || a.LastStatus != 503 || len(a.Navigations) != 2 {
		t.Errorf("a.test: got %+v", a)
	}
	if n := a.Navigations[1]; n["at"] != float64(at(130).UnixMilli()) || n["waited_ms"] != 120.0 || n["spacing_ms"] != 140.0 || n["answer"] != "pending" || n["host"] != nil {
		t.Errorf("a.test's second navigation: got %v, want released at 130 ms after waiting 120 ms, no answer yet", n)
	}
	if n := a.Navigations[0]; n["answer"] != "overload" || n["status"] != 503.0 {
		t.Errorf("a.test's first navigation: got %v, want its 503", n)
	}
	if b := st.Buckets[2]; b.Pressure != 0 || len(b.Navigations) != 1 || b.Passed != 1 {
		t.Errorf("idle.test: got %+v", b)
	}

	tl.Answered("a.test", "a.test", OK, 200, at(200))
	st = read("/status?since=4")
	if st.Version != 5 || len(st.Buckets) != 3 || len(st.Buckets[0].Navigations) != 1 || st.Buckets[0].Navigations[0]["answer"] != "ok" ||
		len(st.Buckets[1].Navigations) != 0 || len(st.Buckets[2].Navigations) != 0 {
		t.Errorf("since=4: got %+v, want only a.test's second navigation, now answered", st)
	}
	if st = read("/status?n=1"); len(st.Buckets) != 1 {
		t.Errorf("n=1: got %d buckets", len(st.Buckets))
	}

	for _, tc := range []struct {
		method, target string
		code           int
	}{
		{"GET", "/status?since=abc", 400},
		{"GET", "/status?since=-1", 400},
		{"GET", "/status?n=0", 400},
		{"GET", "/status?n=201", 400},
		{"GET", "/status?n=x", 400},
		{"POST", "/status", 405},
		{"PUT", "/", 405},
		{"GET", "/nothing", 404},
		{"HEAD", "/", 200},
	} {
		if rec := get(t, h, tc.method, tc.target); rec.Code != tc.code {
			t.Errorf("%s %s: got %d, want %d", tc.method, tc.target, rec.Code, tc.code)
		}
	}

	// Nothing to show: still the documented shape.
	rec := get(t, &Handler{}, "GET", "/status")
	if body := rec.Body.String(); !strings.Contains(body, `"browsers":[]`) || !strings.Contains(body, `"buckets":[]`) {
		t.Errorf("empty /status: got %s", body)
	}
}

// TestStatusServer: a bucket whose server said its limits carries them in
// /status, in ms, as the page reads them: the policy's spacing, how long
// until it lapses, and how long until a spent quota resets; a bucket
// whose server said none carries none of the three.
func TestStatusServer(t *testing.T) {
	src := &fakeSource{Mode: "fixed", Buckets: []Bucket{
		{Name: "api.test", Spacing: 200 * time.Millisecond, NextFree: 2500 * time.Millisecond, Mode: "fixed", Source: "server", Rule: "RateLimit-Policy: 200ms",
			ServerFloor: 200 * time.Millisecond, ServerFloorEnds: time.Hour - 1234567*time.Microsecond, ServerReset: 2500 * time.Millisecond},
		{Name: "plain.test", Spacing: 20 * time.Millisecond, Mode: "fixed", Source: "flag"},
	}}
	rec := get(t, &Handler{Source: src, Timeline: &Timeline{}}, "GET", "/status")
	var st struct{ Buckets []map[string]any }
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Buckets) != 2 {
		t.Fatalf("GET /status: %v: %s", err, rec.Body)
	}
	want := map[string]any{"source": "server", "rule": "RateLimit-Policy: 200ms", "spacing_ms": 200.0,
		"server_floor_ms": 200.0, "server_floor_ends_ms": 3598765.4, "server_reset_ms": 2500.0}
	for k, v := range want {
		if got := st.Buckets[0][k]; got != v {
			t.Errorf("api.test's %s: got %v, want %v", k, got, v)
		}
	}
	for _, k := range []string{"server_floor_ms", "server_floor_ends_ms", "server_reset_ms"} {
		if got, ok := st.Buckets[1][k]; ok {
			t.Errorf("plain.test's %s: got %v, want none", k, got)
		}
	}
}

// BenchmarkStatus is what one answer of /status costs the relay with its
// timeline full (50 buckets × 1,200 navigations): without since (a page's
// first poll), and since the last poll a second ago, ten navigations of
// each bucket booked and answered meanwhile (the page's every poll).
func BenchmarkStatus(b *testing.B) {
	tl := &Timeline{}
	src := &fakeSource{Mode: "adaptive"}
	for h := range DefaultMaxBuckets {
		name := "host" + strconv.Itoa(h) + ".test"
		src.Buckets = append(src.Buckets, Bucket{Name: name, Pressure: 41, Spacing: 100 * time.Millisecond, Mode: "adaptive", Source: "flag"})
		for i := range DefaultPerBucket {
			book(tl, name, i*100, i*100+50)
			tl.Answered(name, name, OK, 200, at(i*100+60))
		}
	}
	h := &Handler{Source: src, Timeline: tl}
	b.Run("full", func(b *testing.B) {
		var n int
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
			n = rec.Body.Len()
		}
		b.ReportMetric(float64(n)/1e3, "kB")
	})
	b.Run("since", func(b *testing.B) {
		var n int
		ms := DefaultPerBucket * 100
		v, _ := tl.Since(0)
		for b.Loop() {
			b.StopTimer()
			v, _ = tl.Since(v) // the version the last poll read
			for _, bk := range src.Buckets {
				for range 10 {
					ms += 10
					book(tl, bk.Name, ms, ms)
					tl.Answered(bk.Name, bk.Name, OK, 200, at(ms+5))
				}
			}
			b.StartTimer()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/status?since="+strconv.FormatUint(v, 10), nil))
			n = rec.Body.Len()
		}
		b.ReportMetric(float64(n)/1e3, "kB")
	})
}
