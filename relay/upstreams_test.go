package relay

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// twoBrowsers serves a relay in front of two fake browsers with distinct
// browser ids, limiter off (no connections of the relay's own).
func twoBrowsers(t *testing.T, opts ...func(*Proxy)) (*testProxy, *fakebrowser.Browser, *fakebrowser.Browser) {
	t.Helper()
	fb1 := fakebrowser.New(t, fakebrowser.Config{})
	fb2 := fakebrowser.New(t, fakebrowser.Config{})
	fb2.Restart("second-browser-id")
	tp := relayTo(t, fb1, limiter.Config{Mode: limiter.Off}, append([]func(*Proxy){func(p *Proxy) { p.Upstreams = []string{fb2.URL()} }}, opts...)...)
	return tp, fb1, fb2
}

// TestSeveralBrowsersFewestFirst: new clients go to the browser with the
// fewest; /json/version names that browser; its id routes the websocket.
func TestSeveralBrowsersFewestFirst(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	tp, fb1, fb2 := twoBrowsers(t)
	for i, want := range []*fakebrowser.Browser{fb1, fb2, fb1} {
		tp.dial(t, "/", nil)
		fakebrowser.Eventually(t, "the client's connection", func() bool { return fb1.ConnCount()+fb2.ConnCount() == i+1 })
		if want.ConnCount() != (i+2)/2 && want == fb1 || want == fb2 && fb2.ConnCount() != 1 {
			t.Fatalf("client %d: browsers have %d and %d connections", i+1, fb1.ConnCount(), fb2.ConnCount())
		}
	}
	// fb1 has two clients, fb2 one: the next client is sent to fb2.
	_, body := tp.get(t, "/json/version")
	if !strings.Contains(body, "/devtools/browser/second-browser-id") {
		t.Fatalf("/json/version with fb2 the least busy: got %s, want fb2's endpoint", body)
	}
	tp.dial(t, "/devtools/browser/second-browser-id", nil)
	fakebrowser.Eventually(t, "the client's connection", func() bool { return fb2.ConnCount() == 2 })
	if fb1.ConnCount() != 2 {
		t.Errorf("fb1 has %d connections, want still 2", fb1.ConnCount())
	}
	if _, _, err := dialStatus(tp, "/devtools/browser/no-such-browser"); err == nil {
		t.Errorf("dialling an unknown browser id succeeded, want 404")
	}
}

func dialStatus(tp *testProxy, path string) (int, string, error) {
	c, resp, err := websocketDial("ws://" + tp.addr + path)
	if err == nil {
		c.Close()
		return 101, "", nil
	}
	if resp == nil {
		return 0, "", err
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestDeadBrowserSkipped: a browser that stops answering gets no new
// clients and shows in /healthz; with none left /healthz is 503.
func TestDeadBrowserSkipped(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	tp, fb1, fb2 := twoBrowsers(t)
	fb1.Close()
	fakebrowser.Eventually(t, "the relay to notice", func() bool {
		_, body := tp.get(t, "/healthz")
		return strings.Contains(body, `"alive":false`)
	})
	for range 3 {
		tp.dial(t, "/", nil)
	}
	fakebrowser.Eventually(t, "three clients on fb2", func() bool {
		_, body := tp.get(t, "/healthz")
		return fb2.ConnCount() == 3 && strings.Contains(body, `"clients":3`)
	})
	status, body := tp.get(t, "/healthz")
	var h struct {
		Status    string
		Upstreams []struct {
			Upstream string
			Alive    bool
			Clients  int
		}
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil || status != 200 || h.Status != "ok" || len(h.Upstreams) != 2 ||
		h.Upstreams[0].Alive || !h.Upstreams[1].Alive || h.Upstreams[1].Clients != 3 {
		t.Fatalf("/healthz: got %d %s, want 200 with fb1 dead and fb2 alive with 3 clients", status, body)
	}
	fb2.Close()
	fakebrowser.Eventually(t, "the relay to notice", func() bool {
		status, _ := tp.get(t, "/healthz")
		return status == http.StatusServiceUnavailable
	})
}

// TestMetricsAndHosts replays Chromium's recorded navigations through a
// relay with metrics, of pages its client drives, then reads /metrics and
// /hosts.
func TestMetricsAndHosts(t *testing.T) {
	// The relay counts the hosts its limiter tracks (newProxy's Metrics),
	// as the relay command does, and holds with the backup net
	// connection on (relayTo's HoldBackup), which the recording is of.
	tp, fb := relayNew(t, limiter.Config{})
	hc := fb.Holder(t)
	c := tp.dial(t, "/", nil)
	fc := fb.Accept(t)
	driveRecorded(t, c, fc, fb)
	// What the client sent driving them: a command a page.
	driven, drove := 0, 0
	for _, m := range fc.Received() {
		if m.Wire.Method == "Runtime.evaluate" {
			driven, drove = driven+1, drove+len(m.Data)
		}
	}
	replayChromium(t, fb, hc)
	for i := range 3 {
		if err := c.WriteMessage(1, []byte(`{"id":`+strconv.Itoa(i+1)+`,"method":"Browser.getVersion"}`)); err != nil {
			t.Fatal(err)
		}
	}
	fakebrowser.Eventually(t, "the client's messages", func() bool {
		_, body := tp.get(t, "/metrics")
		return strings.Contains(body, fmt.Sprintf(`cdp_throttle_messages_total{direction="to_browser"} %d`, driven+3))
	})
	_, body := tp.get(t, "/metrics")
	for _, want := range []string{
		`cdp_throttle_connections 1`,
		`cdp_throttle_hosts_tracked 3`,
		`cdp_throttle_feedback_total{class="overload"} 1`,
		`cdp_throttle_feedback_total{class="failure"} 1`,
		fmt.Sprintf(`cdp_throttle_bytes_total{direction="to_browser"} %d`, drove+114),
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	counted := regexp.MustCompile(`cdp_throttle_navigations_total\{outcome="(passed|delayed|untracked)"\} ([0-9]+)`).FindAllStringSubmatch(body, -1)
	got := map[string]int{}
	for _, c := range counted {
		got[c[1]], _ = strconv.Atoi(c[2])
	}
	if got["passed"]+got["delayed"] < 6 || got["untracked"] < 2 {
		t.Errorf("navigations: got %v, want at least 6 booked (a.test ×6 and more) and the 2 iframes untracked\n%s", got, body)
	}
	if strings.Contains(body, "a.test") {
		t.Errorf("/metrics names a host; it must carry no per-host labels")
	}

	_, hosts := tp.get(t, "/hosts?n=2")
	var list []struct {
		Host       string  `json:"host"`
		Pressure   int     `json:"pressure"`
		SpacingMS  float64 `json:"spacing_ms"`
		NextFreeMS float64 `json:"next_free_ms"`
		Mode       string  `json:"mode"`
		Source     string  `json:"source"`
	}
	if err := json.Unmarshal([]byte(hosts), &list); err != nil || len(list) != 2 {
		t.Fatalf("/hosts?n=2: got %s (%v), want two hosts", hosts, err)
	}
	// a.test answered 429 (+50): the busiest, its next slot past Retry-After.
	if list[0].Host != "a.test" || list[0].Pressure < 50 || list[0].NextFreeMS < 1000 || list[0].SpacingMS < 100 {
		t.Errorf("/hosts: got %+v first, want a.test with pressure ≥ 50 and its slot seconds away", list[0])
	}
	if list[0].Mode != "adaptive" || list[0].Source != "flag" {
		t.Errorf("/hosts: got mode %q source %q, want adaptive from the flags", list[0].Mode, list[0].Source)
	}
}

func websocketDial(url string) (*websocket.Conn, *http.Response, error) {
	return websocket.DefaultDialer.Dial(url, nil)
}
