//go:build record

package fakebrowser

// TestRecordLightpanda drives a real `lightpanda serve` as the relay's
// session strategy drives it (Fetch on with the "*" pattern, every paused
// request let go at once) under a puppeteer-like client with Page and
// Network enabled, and writes what it sends, verbatim, into
//
//	testdata/lightpanda-session.jsonl
//
// which cdp's readers are checked on. Rerun it after a Lightpanda
// upgrade (LIGHTPANDA overrides the binary of the PyPI package in .venv):
//
//	go test -tags record -run TestRecordLightpanda -count=1 ./internal/fakebrowser

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto"
)

func TestRecordLightpanda(t *testing.T) {
	site := startRecordSite(t)
	refused := closedPort(t)
	addr, version := startRecordLightpanda(t)
	meta := map[string]string{
		"browser":    addr,
		"site":       site,
		"lightpanda": version,
		"recorder":   "go test -tags record -run TestRecordLightpanda -count=1 ./internal/fakebrowser",
	}
	_, sitePort, _ := net.SplitHostPort(site)
	url := func(path string) string { return "http://" + recordSiteIP + ":" + sitePort + path }

	const path = "testdata/lightpanda-session.jsonl"
	log := newTranscript(t, path, meta, time.Now())
	cc := dialRecorded(t, "ws://"+addr+"/", log)
	loads := make(chan struct{}, 16)
	cc.onEvent = func(m *cdproto.Message) {
		switch m.Method {
		case "Page.loadEventFired":
			loads <- struct{}{}
		case "Fetch.requestPaused":
			// The relay lets go at once what it does not hold.
			var ev struct {
				RequestID string `json:"requestId"`
			}
			json.Unmarshal(m.Params, &ev)
			cc.send(m.SessionID.String(), "Fetch.continueRequest", map[string]string{"requestId": ev.RequestID}, nil)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var created struct {
		TargetID string `json:"targetId"`
	}
	json.Unmarshal(cc.mustCall(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}), &created)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(cc.mustCall(ctx, "", "Target.attachToTarget", map[string]any{"targetId": created.TargetID, "flatten": true}), &attached)
	session := attached.SessionID
	if session == "" {
		t.Fatal("Target.attachToTarget gave no session")
	}
	cc.mustCall(ctx, session, "Page.enable", nil)
	cc.mustCall(ctx, session, "Network.enable", nil)
	// The session strategy's own pattern (hold/session.go: everyPattern).
	cc.mustCall(ctx, session, "Fetch.enable", map[string]any{"patterns": []map[string]string{{"urlPattern": "*", "requestStage": "Request"}}})
	navigate := func(u string) {
		t.Helper()
		cc.mustCall(ctx, session, "Page.navigate", map[string]any{"url": u})
		select {
		case <-loads:
		case <-time.After(5 * time.Second):
		}
		time.Sleep(300 * time.Millisecond) // the stragglers: loadingFinished, answers
	}
	navigate(url("/page?first"))
	navigate(url("/r2")) // 302 within the host
	navigate(url("/busy"))
	navigate("http://" + recordSiteIP + ":" + refused + "/")
	cc.mustCall(ctx, "", "Target.closeTarget", map[string]any{"targetId": created.TargetID})
	time.Sleep(300 * time.Millisecond)
	cc.close()
	log.close()

	checkRecorded(t, path,
		`"method":"Fetch.requestPaused"`, `"resourceType":"Document"`, `"networkId"`,
		`"method":"Network.requestWillBeSent"`, `"method":"Network.responseReceived"`, `"status":429`,
		`"method":"Network.loadingFailed"`)
}

// startRecordLightpanda starts `lightpanda serve` on a free port and
// returns its host:port and version.
func startRecordLightpanda(t *testing.T) (addr, version string) {
	t.Helper()
	bin := os.Getenv("LIGHTPANDA")
	if bin == "" {
		out, err := exec.Command("../../.venv/bin/python", "-c", "from lightpanda.client import find_binary; print(find_binary())").CombinedOutput()
		if err != nil {
			t.Fatalf("no Lightpanda: run `make lightpanda` at the repository root, or set LIGHTPANDA: %v: %s", err, out)
		}
		bin = strings.TrimSpace(string(out))
	}
	addr = ClosedAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "serve", "--host", "127.0.0.1", "--port", port)
	cmd.Env = append(os.Environ(), "LIGHTPANDA_DISABLE_TELEMETRY=true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/json/version")
		if err == nil {
			var v struct {
				Browser string `json:"Browser"`
			}
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			out, _ := exec.Command(bin, "version").Output()
			version = strings.TrimSpace(v.Browser + " " + string(out))
			return addr, version
		}
		if time.Now().After(deadline) {
			t.Fatalf("lightpanda serve did not answer /json/version within 30s: %v", err)
		}
	}
}
