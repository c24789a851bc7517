//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// siteProcessEnv, set, makes the test binary serve a site instead of
// running tests (siteProcessMain): a web server in a process of its own,
// as a real site is. A site inside the test process shares it with the
// relay under test, whose work delays the site's reading of a request and
// so its timestamp of it.
const siteProcessEnv = "CDP_E2E_SITE_PROCESS"

// remoteSite is a site served by another process (startSiteProcess): the
// pages of sixSubresources and a robots.txt, its hits, with the kernel's
// time of each one's arrival, read over a control port on 127.0.0.1.
type remoteSite struct {
	port, control string
}

func (s *remoteSite) url(host, path string) string {
	return "http://" + host + ":" + s.port + path
}

// hitsOf returns the recorded requests for which keep is true.
func (s *remoteSite) hitsOf(keep func(hit) bool) []hit {
	body, err := httpGet("http://" + s.control + "/hits")
	if err != nil {
		return nil
	}
	var all, out []hit
	json.Unmarshal(body, &all)
	for _, h := range all {
		if keep(h) {
			out = append(out, h)
		}
	}
	return out
}

// startSiteProcess starts the test binary as a site on siteIP, whose
// robots.txt says robots ("-": none, so a 404; see robotsOf).
func startSiteProcess(t testing.TB, robots string) *remoteSite {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), siteProcessEnv+"="+robots)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the site's process: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	var s remoteSite
	if _, serr := fmt.Sscan(line, &s.port, &s.control); err != nil || serr != nil {
		t.Fatalf("the site's process said %q (%v)", line, err)
	}
	return &s
}

// siteProcessMain serves the site of startSiteProcess and says where on
// its first line: the site's port, then its control address.
func siteProcessMain(robots string) {
	s := &site{routes: map[string]http.HandlerFunc{}}
	sixSubresources(s)
	fourSubresources(s)
	if robots != "-" {
		s.handle("/robots.txt", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, robots) })
	}
	ln, err := net.Listen("tcp", siteIP+":0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "site process:", err)
		os.Exit(1)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "site process:", err)
		os.Exit(1)
	}
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	go http.Serve(ctl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(s.hitsOf(nil))
	}))
	fmt.Println(s.port, ctl.Addr().String())
	// It ends with the test process, which kills it; an orphan ends
	// when its parent is gone.
	go func() {
		for ppid := os.Getppid(); os.Getppid() == ppid; {
			time.Sleep(time.Second)
		}
		os.Exit(0)
	}()
	srv := &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second, ConnContext: withConn}
	fmt.Fprintln(os.Stderr, srv.Serve(stamping(ln)))
	os.Exit(1)
}

// robotsOf is what a robots.txt says, for startSiteProcess ("-": none).
func robotsOf(lines ...string) string {
	if len(lines) == 0 {
		return "-"
	}
	return strings.Join(lines, "\n") + "\n"
}
