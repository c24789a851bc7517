//go:build e2e

package e2e

// Issue 38: a dead client is found without asking it to answer pings. A
// client whose host is gone (its network link cut, simulated by a
// network namespace whose link goes down: packets to it vanish, nothing
// answers) is found by TCP keepalive; what it created is then closed
// after --orphan-timeout.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/relay"
)

// netnsClientEnv, when set to a browser endpoint's ws:// URL, makes the
// test binary a client that creates two pages there, prints their ids
// and waits, saying nothing more.
const netnsClientEnv = "CDP_THROTTLE_E2E_NETNS_CLIENT"

func netnsClientMain(ws string) {
	c, _, err := websocket.DefaultDialer.Dial(ws, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "netns client:", err)
		os.Exit(1)
	}
	var ids []string
	for i := 1; i <= 2; i++ {
		c.WriteMessage(websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"method":"Target.createTarget","params":{"url":"about:blank"}}`, i))
		for {
			_, msg, err := c.ReadMessage()
			if err != nil {
				fmt.Fprintln(os.Stderr, "netns client:", err)
				os.Exit(1)
			}
			var m struct {
				ID     int
				Result struct{ TargetID string }
			}
			if json.Unmarshal(msg, &m) == nil && m.ID == i {
				ids = append(ids, m.Result.TargetID)
				break
			}
		}
	}
	fmt.Println(strings.Join(ids, " "))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			os.Exit(0)
		}
	}
}

// testBinary is the path of this test binary, to run it again as a
// client of its own (os.Args[0] may be relative to where it started).
func testBinary() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}

// netns is a network namespace joined to this one by a veth pair.
type netns struct {
	name, host, peer string // the namespace, and the two ends of the pair
	hostIP, peerIP   string
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s (this test needs root and iproute2)", strings.Join(args, " "), err, out)
	}
}

// newNetns makes a namespace with the address peerIP, reachable from
// here at hostIP; it is removed when the test ends.
func newNetns(t *testing.T) *netns {
	t.Helper()
	id := os.Getpid() % 200
	n := &netns{
		name: fmt.Sprintf("cdpt-e2e-%d", os.Getpid()), host: fmt.Sprintf("cdpt%dh", os.Getpid()), peer: fmt.Sprintf("cdpt%dp", os.Getpid()),
		hostIP: fmt.Sprintf("10.231.%d.1", id), peerIP: fmt.Sprintf("10.231.%d.2", id),
	}
	ipCmd(t, "netns", "add", n.name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", n.name).Run() })
	ipCmd(t, "link", "add", n.host, "type", "veth", "peer", "name", n.peer)
	t.Cleanup(func() { exec.Command("ip", "link", "del", n.host).Run() })
	ipCmd(t, "link", "set", n.peer, "netns", n.name)
	ipCmd(t, "addr", "add", n.hostIP+"/30", "dev", n.host)
	ipCmd(t, "link", "set", n.host, "up")
	ipCmd(t, "netns", "exec", n.name, "ip", "addr", "add", n.peerIP+"/30", "dev", n.peer)
	ipCmd(t, "netns", "exec", n.name, "ip", "link", "set", n.peer, "up")
	return n
}

// pageAlive reports whether the browser still has target.
func pageAlive(t *testing.T, target string) bool {
	body, err := httpGet(browser.http + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(body), target)
}

// TestClientHostGone: a client in a network namespace creates two pages
// through the relay, then its link goes down, silently (no FIN, no
// reset: its host is gone). The relay, which pings no client, finds the
// connection dead by TCP keepalive (idle 15 s, probes every 5 s, three:
// about 30 s after it last heard from the client), and closes the two
// pages --orphan-timeout (3 s here) later.
func TestClientHostGone(t *testing.T) {
	t.Parallel()
	n := newNetns(t)
	const orphan = 3 * time.Second
	r := startRelay(t, limiter.Config{Mode: limiter.Off}, func(p *relay.Proxy) { p.OrphanTimeout = orphan })
	ln, err := net.Listen("tcp", n.hostIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r.p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	var v struct{ WebSocketDebuggerURL string }
	body, err := httpGet("http://" + ln.Addr().String() + "/json/version")
	if err != nil || json.Unmarshal(body, &v) != nil {
		t.Fatalf("/json/version on %s: %v: %s", ln.Addr(), err, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.name, testBinary(), "-test.run", "^$")
	cmd.Env = append(os.Environ(), netnsClientEnv+"="+v.WebSocketDebuggerURL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel() // the client cannot hear the relay end: it would wait for its own keepalive
		cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the client in the namespace said nothing: %v", err)
	}
	pages := strings.Fields(line)
	if len(pages) != 2 || !pageAlive(t, pages[0]) || !pageAlive(t, pages[1]) {
		t.Fatalf("the client created %q, want two pages the browser has", pages)
	}

	// The client's host is gone: what the relay sends it vanishes.
	gone := time.Now()
	ipCmd(t, "netns", "exec", n.name, "ip", "link", "set", n.peer, "down")
	waitLogged(t, r, 90*time.Second, `"from":"client"`, `"message":"connection ending"`)
	found := time.Since(gone)
	deadline := time.Now().Add(orphan + 10*time.Second)
	for pageAlive(t, pages[0]) || pageAlive(t, pages[1]) {
		if time.Now().After(deadline) {
			t.Fatalf("the client's pages still open %v after the relay found it gone", orphan+10*time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	closed := time.Since(gone)
	t.Logf("client host gone: the relay found its connection dead after %.1f s, closed its 2 pages after %.1f s", found.Seconds(), closed.Seconds())
	// Keepalive's bound: idle 15 s + 3 probes 5 s apart, and the user
	// timeout of 30 s; a few seconds more on a busy machine.
	if found < 25*time.Second || found > 40*time.Second {
		t.Errorf("found the client gone after %v, want about 30 s (keepalive: idle 15 s, 3 probes 5 s apart)", found.Round(100*time.Millisecond))
	}
	if !strings.Contains(r.logs.String(), "closed what a client left behind") {
		t.Error("the relay did not say it closed what the client left")
	}
}
