//go:build e2e

package e2e

import (
	"encoding/json"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestPanicInOneClient: a relay built with the faultinject tag, in front
// of a Chromium started on its own, 20 Puppeteer clients (a connection
// and a page each) crawling one host at 200 ms; client 0 sets off a
// panic in the relay's code for its connection after its first goto.
// That client is disconnected; the 19 others finish their crawl; the
// site never sees two documents closer than the spacing; the relay
// counts the panic and goes on.
func TestPanicInOneClient(t *testing.T) {
	const (
		clients = 20
		n       = 4
		spacing = 200 * time.Millisecond
	)
	httpURL := ownChromium(t)
	s := newSite(t)
	rp := startRelayBinary(t, faultBuild.get(t), "--upstream", httpURL, "--http-nav-delay", spacing.String(), "--http-nav-burst", "1")
	out := runNode(t, 3*time.Minute, "panic-crawl.mjs", "CDP_URL="+rp.url, "PAGE_URL="+s.url("panic.test", "/page?x=1"),
		"N="+strconv.Itoa(n), "CLIENTS="+strconv.Itoa(clients))
	var got struct {
		Results []struct {
			Client       int
			Done         int
			Error        string
			Disconnected bool
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the script's output: %v: %s", err, out)
	}
	for _, r := range got.Results {
		switch {
		case r.Client == 0:
			if !r.Disconnected || r.Done == n {
				t.Errorf("the client that set off the panic: %+v, want it disconnected before its crawl's end", r)
			}
		case r.Done != n || r.Error != "":
			t.Errorf("client %d: %+v, want its %d navigations done", r.Client, r, n)
		}
	}
	if err := rp.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the relay is gone: %v", err)
	}
	if v := rp.metric(t, "cdp_throttle_panics_total"); v != 1 {
		t.Errorf("cdp_throttle_panics_total: %v, want 1", v)
	}
	docs := s.documents("panic.test")
	var at []time.Time
	for _, h := range docs {
		at = append(at, h.reached())
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	least := time.Hour
	for i := 1; i < len(at); i++ {
		least = min(least, at[i].Sub(at[i-1]))
	}
	t.Logf("%d documents reached the site; least gap %.1f ms (spacing %v)", len(at), float64(least.Microseconds())/1000, spacing)
	if want := (clients-1)*n + 1; len(at) < want {
		t.Errorf("documents at the site: %d, want at least %d", len(at), want)
	}
	if least < spacing*98/100 {
		t.Errorf("least gap at the site: %v, want at least 98%% of %v", least, spacing)
	}
}
