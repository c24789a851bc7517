package dashboard

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// book records a navigation of host in its own bucket, asked at ask ms and
// released at start ms.
func book(tl *Timeline, host string, ask, start int) {
	tl.Booked(Booking{Bucket: host, Host: host, At: at(ask), Start: at(start), Spacing: 20 * time.Millisecond, Mode: "adaptive", Source: "flag"})
}

func trailOf(t *testing.T, tl *Timeline, since uint64, bucket string) Trail {
	t.Helper()
	_, trails := tl.Since(since)
	for _, tr := range trails {
		if tr.Bucket == bucket {
			return tr
		}
	}
	t.Fatalf("no trail of %s", bucket)
	return Trail{}
}

func answers(tr Trail) string {
	s := ""
	for _, m := range tr.Marks {
		s += fmt.Sprintf("%d:%s ", m.Seq, m.Answer)
	}
	return s
}

// TestTimelineAnswers: an answer goes to the oldest navigation of its
// host without one, released by then and within AnswerBound; a host's
// answers never go to another host's navigations in the same bucket.
func TestTimelineAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps func(tl *Timeline)
		want  string
	}{
		{"in order", func(tl *Timeline) {
			book(tl, "a.test", 0, 0)
			book(tl, "a.test", 10, 100)
			tl.Answered("a.test", "a.test", OK, 200, at(50))
			tl.Answered("a.test", "a.test", Overload, 503, at(150))
		}, "1:ok 2:overload "},
		{"concurrent, answered in release order", func(tl *Timeline) {
			book(tl, "a.test", 0, 0)
			book(tl, "a.test", 1, 20)
			book(tl, "a.test", 2, 40)
			tl.Answered("a.test", "a.test", OK, 200, at(30))
			tl.Answered("a.test", "a.test", Failure, 500, at(35))
		}, "1:ok 2:failure 3:pending "},
		{"not released yet: not its answer", func(tl *Timeline) {
			book(tl, "a.test", 0, 1000)
			tl.Answered("a.test", "a.test", OK, 200, at(10))
		}, "1:pending "},
		{"past AnswerBound: never answered", func(tl *Timeline) {
			book(tl, "a.test", 0, 0) // aborted: no answer ever comes
			book(tl, "a.test", 70_000, 70_000)
			tl.Answered("a.test", "a.test", OK, 200, at(70_050))
		}, "1:pending 2:ok "},
		{"an answer nothing waits for", func(tl *Timeline) {
			tl.Answered("a.test", "a.test", OK, 200, at(10))
			book(tl, "a.test", 20, 20)
		}, "1:pending "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := &Timeline{}
			tc.steps(tl)
			if got := answers(trailOf(t, tl, 0, "a.test")); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("hosts of a site", func(t *testing.T) {
		tl := &Timeline{}
		tl.Booked(Booking{Bucket: "site.test", Host: "www.site.test", At: at(0), Start: at(0)})
		tl.Booked(Booking{Bucket: "site.test", Host: "site.test", At: at(1), Start: at(1)})
		tl.Answered("site.test", "site.test", Overload, 429, at(5))
		tr := trailOf(t, tl, 0, "site.test")
		if got := answers(tr); got != "1:pending 2:overload " {
			t.Errorf("got %q, want the 429 on site.test's navigation", got)
		}
		if tr.Marks[0].Host != "www.site.test" || tr.LastAnswer != Overload || tr.LastStatus != 429 {
			t.Errorf("got %+v, want www.site.test's navigation first and the last answer 429 overload", tr)
		}
	})
}

// TestTimelineSince: a reader gets what changed since the version it read:
// new navigations, and older ones that got their answer since.
func TestTimelineSince(t *testing.T) {
	tl := &Timeline{}
	book(tl, "a.test", 0, 0)
	book(tl, "b.test", 0, 0)
	v1, trails := tl.Since(0)
	if v1 != 2 || len(trails) != 2 {
		t.Fatalf("got version %d, %d trails; want 2, 2", v1, len(trails))
	}
	book(tl, "a.test", 10, 30)
	tl.Answered("a.test", "a.test", OK, 200, at(20)) // the first one's
	v2, _ := tl.Since(0)
	if got := answers(trailOf(t, tl, v1, "a.test")); got != "1:ok 3:pending " {
		t.Errorf("a.test since %d: got %q, want the first, answered, and the third, new", v1, got)
	}
	if tr := trailOf(t, tl, v1, "b.test"); len(tr.Marks) != 0 || tr.Passed != 1 {
		t.Errorf("b.test since %d: got %+v, want no navigation, one passed", v1, tr)
	}
	if tr := trailOf(t, tl, v2, "a.test"); len(tr.Marks) != 0 || tr.Passed != 1 || tr.Delayed != 1 {
		t.Errorf("a.test since %d (now): got %+v, want nothing new, one passed and one delayed", v2, tr)
	}
	// A reader that read a later version (of a relay that restarted) gets
	// everything.
	if got := answers(trailOf(t, tl, v2+100, "a.test")); got != "1:ok 3:pending " {
		t.Errorf("since a version never reached: got %q, want everything", got)
	}
	var nilTL *Timeline
	nilTL.Booked(Booking{Bucket: "a.test"})
	nilTL.Answered("a.test", "a.test", OK, 200, t0)
	if v, trails := nilTL.Since(0); v != 0 || trails != nil {
		t.Errorf("a nil Timeline: got %d, %v; want nothing", v, trails)
	}
}

// TestTimelineBounds: a bucket keeps its last PerBucket navigations, and
// past MaxBuckets the bucket booked least recently is forgotten.
func TestTimelineBounds(t *testing.T) {
	tl := &Timeline{MaxBuckets: 3, PerBucket: 4}
	for i := range 10 {
		book(tl, "a.test", i*100, i*100)
	}
	tl.Answered("a.test", "a.test", OK, 200, at(950)) // the oldest kept: the 7th
	tr := trailOf(t, tl, 0, "a.test")
	if got := answers(tr); got != "7:ok 8:pending 9:pending 10:pending " {
		t.Errorf("got %q, want the last four, the oldest answered", got)
	}
	if tr.Passed != 10 {
		t.Errorf("passed: got %d, want 10 (counted since the bucket was first remembered)", tr.Passed)
	}
	book(tl, "b.test", 2000, 2000)
	book(tl, "c.test", 2100, 2100)
	book(tl, "a.test", 2200, 2200) // a.test booked again: b.test is now the least recent
	book(tl, "d.test", 2300, 2300)
	_, trails := tl.Since(0)
	got := map[string]bool{}
	for _, tr := range trails {
		got[tr.Bucket] = true
	}
	if len(got) != 3 || got["b.test"] || !got["a.test"] || !got["c.test"] || !got["d.test"] {
		t.Errorf("buckets: got %v, want a, c and d (b forgotten)", got)
	}
	// The wrapped ring still matches answers in release order.
	tl2 := &Timeline{PerBucket: 2}
	book(tl2, "a.test", 0, 0)
	book(tl2, "a.test", 1, 1)
	book(tl2, "a.test", 2, 2) // drops the first, which had no answer
	tl2.Answered("a.test", "a.test", Failure, 0, at(3))
	if got := answers(trailOf(t, tl2, 0, "a.test")); got != "2:failure 3:pending " {
		t.Errorf("wrapped: got %q, want the second answered", got)
	}
}

// BenchmarkTimelineBooked is what the relay pays per navigation booked
// (never per message).
func BenchmarkTimelineBooked(b *testing.B) {
	tl := &Timeline{}
	hosts := make([]string, 32) // within DefaultMaxBuckets: none forgotten
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.test", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h := hosts[i%len(hosts)]
		tl.Booked(Booking{Bucket: h, Host: h, At: t0, Start: t0, Mode: "adaptive", Source: "flag"})
		tl.Answered(h, h, OK, 200, t0)
	}
}

// TestTimelineMemory: a full timeline holds DefaultMaxBuckets ×
// DefaultPerBucket navigations in about 4 MB (checked: under 4.5).
func TestTimelineMemory(t *testing.T) {
	tl := &Timeline{}
	hosts := make([]string, DefaultMaxBuckets)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("h%d.test", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range DefaultPerBucket + 10 {
		for _, h := range hosts {
			book(tl, h, i, i)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if grown > 9<<19 {
		t.Errorf("a full timeline grew the heap by %.1f MB, want under 4.5 MB", float64(grown)/(1<<20))
	}
	t.Logf("a full timeline: %.2f MB (%d buckets × %d navigations)", float64(grown)/(1<<20), DefaultMaxBuckets, DefaultPerBucket)
	runtime.KeepAlive(tl)
}
