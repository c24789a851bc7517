package simulate

import (
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
)

// TestReplayBreaker: a page asking every second of a site that fails from
// the start to 90 s, with --host-errors 5/1m: the site sees five
// documents, none for 30 s, one probe, none for 60 s, a probe that the
// site, healthy again, answers, and every request after it.
func TestReplayBreaker(t *testing.T) {
	o := BreakerOptions{
		Breaker:     breaker.Config{Failures: 5, Window: time.Minute, Jitter: -1},
		Navigations: 100,
		Every:       time.Second,
		Load:        100 * time.Millisecond,
		Down:        []Span{{0, 90 * time.Second}},
	}
	navs := ReplayBreaker(o)
	var went []time.Duration
	for _, n := range navs {
		if n.Went {
			went = append(went, n.At)
		}
	}
	want := []time.Duration{0, 1, 2, 3, 4, 35, 96, 97, 98, 99}
	for i := range want {
		want[i] *= time.Second
	}
	if len(went) != len(want) {
		t.Fatalf("the site saw %v, want %v", went, want)
	}
	for i := range want {
		if went[i] != want[i] {
			t.Fatalf("the site saw %v, want %v", went, want)
		}
	}
	if n := navs[5]; n.Went || n.Until != 34100*time.Millisecond {
		t.Errorf("the request after the fifth failure: %+v, want deferred until 34.1s", n)
	}
	if n := navs[35]; !n.Probe || !n.Failed {
		t.Errorf("at 35 s: %+v, want a failed probe", n)
	}
	if n := navs[96]; !n.Probe || n.Failed {
		t.Errorf("at 96 s: %+v, want a probe answered", n)
	}
	var b strings.Builder
	WriteBreaker(&b, navs)
	wantOut := `0s to 4s               5  went, failed
5s to 34s             30  deferred until 34.1s
35s                    1  went as the probe, failed
36s to 95s            60  deferred until 95.1s
96s                    1  went as the probe, answered
97s to 99s             3  went, answered
`
	if b.String() != wantOut {
		t.Errorf("WriteBreaker: got\n%s\nwant\n%s", b.String(), wantOut)
	}

	// With the default jitter, the same seed replays the same.
	o.Breaker.Jitter = 0
	o.Seed = 7
	a, c := ReplayBreaker(o), ReplayBreaker(o)
	for i := range a {
		if a[i] != c[i] {
			t.Fatalf("request %d: %+v, then %+v with the same seed", i, a[i], c[i])
		}
	}
}
