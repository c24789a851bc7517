package relay

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestPage replays Chromium's recorded navigations through a relay, of
// pages its client drives, then reads its page at / and the /status the
// page polls: the browser and how it holds, the navigations of each host
// with their answers, the counts of /metrics.
func TestPage(t *testing.T) {
	tp, fb := relayNew(t, limiter.Config{})
	hc := fb.Holder(t)
	c := tp.dial(t, "/", nil)
	driveRecorded(t, c, fb.Accept(t), fb)
	replayChromium(t, fb, hc)

	code, page := tp.get(t, "/")
	if code != 200 || !strings.HasPrefix(page, "<!doctype html>") {
		t.Fatalf("GET /: %d %.60q, want the page", code, page)
	}
	var st struct {
		Version  uint64
		Browsers []struct {
			Browser, Holding string
			Alive            bool
		}
		Navigations map[string]int
		Answers     map[string]int
		Buckets     []struct {
			Bucket      string
			Pressure    int
			Passed      int
			Delayed     int
			LastAnswer  string `json:"last_answer"`
			Navigations []struct {
				Answer string
				Status int
			}
		}
	}
	// Each answer is fed back on a goroutine of its own, after the fake
	// answered: read /status until the last one is in.
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st.Buckets = nil
		code, body = tp.get(t, "/status")
		if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
			t.Fatalf("GET /status: %d %v: %s", code, err, body)
		}
		drawn := map[string]int{}
		for _, b := range st.Buckets {
			for _, n := range b.Navigations {
				drawn[n.Answer]++
			}
		}
		if st.Answers["overload"] > 0 && drawn["overload"] == st.Answers["overload"] && drawn["failure"] == st.Answers["failure"] || time.Now().After(deadline) {
			break
		}
	}
	if len(st.Browsers) != 1 || st.Browsers[0].Holding != "fetch" || !st.Browsers[0].Alive || !strings.HasPrefix(st.Browsers[0].Browser, "Chrome/") {
		t.Errorf("browsers: got %+v, want one Chrome, alive, holding through fetch", st.Browsers)
	}
	booked := st.Navigations["passed"] + st.Navigations["delayed"]
	drawn, classes := 0, map[string]int{}
	for _, b := range st.Buckets {
		drawn += len(b.Navigations)
		if b.Passed+b.Delayed != len(b.Navigations) {
			t.Errorf("%s: %d passed and %d delayed, but %d navigations", b.Bucket, b.Passed, b.Delayed, len(b.Navigations))
		}
		for _, n := range b.Navigations {
			classes[n.Answer]++
		}
	}
	if drawn != booked || booked < 6 {
		t.Errorf("navigations in /status: %d, counted booked in /metrics: %d; want the same, at least 6", drawn, booked)
	}
	// The recording's a.test answered 429 once and failed once.
	if a := st.Buckets[0]; a.Bucket != "a.test" || a.Pressure < 50 {
		t.Errorf("busiest: got %+v, want a.test after its 429", a)
	}
	if classes["overload"] != st.Answers["overload"] || classes["failure"] != st.Answers["failure"] || classes["overload"] != 1 {
		t.Errorf("answers drawn %v, counted %v; want the same, one overload", classes, st.Answers)
	}

	code, body = tp.get(t, "/status?since="+strconv.FormatUint(st.Version, 10))
	if code != 200 || strings.Contains(body, `"seq"`) {
		t.Errorf("GET /status?since=%d: %d %s, want no navigation (none since)", st.Version, code, body)
	}
	if code, _ := tp.get(t, "/nothing"); code != 404 {
		t.Errorf("GET /nothing: %d, want 404", code)
	}
}
