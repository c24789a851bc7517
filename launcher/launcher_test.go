package launcher

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
)

// script writes a shell script named name into a fresh directory and
// returns its path. The script sees that directory as $DIR.
func script(t *testing.T, name, body string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nDIR="+dir+"\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitLog waits until a line with the message msg has been logged n times.
func waitLog(t *testing.T, logs *fakebrowser.Logs, msg string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); logs.Count(`"message":"`+msg+`"`) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%q not logged %d times within 10s:\n%s", msg, n, logs)
		}
	}
}

// groupMembers lists the live (not zombie) processes of process group
// pgid, read from /proc: a container's init may never reap the orphans.
func groupMembers(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// pidsOf reads the pids a test script appended to $DIR/pids.
func pidsOf(t *testing.T, bin string) []int {
	t.Helper()
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(bin), "pids"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	return pids
}

func shorten(t *testing.T, delay, grace time.Duration) {
	oldDelay, oldGrace := restartDelay, stopGrace
	restartDelay, stopGrace = delay, grace
	t.Cleanup(func() { restartDelay, stopGrace = oldDelay, oldGrace })
}

// TestStopDuringRestart stops a browser while it waits to be restarted:
// Stop returns at once, nothing is started after it, and no process of
// any of its groups survives (the one that died left a helper behind).
func TestStopDuringRestart(t *testing.T) {
	shorten(t, 2*time.Second, 5*time.Second)
	// The first run leaves a helper in its group and dies at once; later
	// runs would live (a restart after Stop would orphan them).
	bin := script(t, "browser", `echo $$ >> $DIR/pids
sleep 300 >/dev/null 2>&1 &
[ "$(wc -l < $DIR/pids)" -le 1 ] && exit 1
exec sleep 300
`)
	logs := &fakebrowser.Logs{}
	b, err := Start([]string{bin}, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "browser exited", 1)
	time.Sleep(200 * time.Millisecond) // inside the restart delay
	began := time.Now()
	b.Stop()
	if took := time.Since(began); took > time.Second {
		t.Errorf("Stop during a restart took %v, want it prompt", took)
	}
	time.Sleep(restartDelay + 500*time.Millisecond) // when the restart was due
	pids := pidsOf(t, bin)
	if len(pids) != 1 {
		t.Errorf("processes started: %v, want only the first (none after Stop)", pids)
	}
	for _, pid := range pids {
		if live := groupMembers(pid); len(live) > 0 {
			t.Errorf("process group %d still has %v after Stop", pid, live)
		}
	}
	select {
	case <-b.Exited():
	default:
		t.Error("Exited not closed after Stop")
	}
}

// TestStopRacesRestart stops browsers that die at once, at every moment
// around their restart: each Stop returns promptly and leaves nothing
// running.
func TestStopRacesRestart(t *testing.T) {
	shorten(t, 10*time.Millisecond, 5*time.Second)
	bin := script(t, "browser", `echo $$ >> $DIR/pids
sleep 300 &  # a helper holding its output open
sleep 0.02
exit 1
`)
	for i := range 15 {
		b, err := Start([]string{bin}, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i*7) * time.Millisecond)
		began := time.Now()
		b.Stop()
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("run %d: Stop took %v, want it prompt", i, took)
		}
	}
	for _, pid := range pidsOf(t, bin) {
		if live := groupAfterKill(pid); len(live) > 0 {
			t.Errorf("process group %d still has %v after Stop", pid, live)
		}
	}
}

// TestStopKillsWhatIgnoresTerm: a browser that ignores SIGTERM is killed
// after the grace.
func TestStopKillsWhatIgnoresTerm(t *testing.T) {
	shorten(t, time.Second, 300*time.Millisecond)
	bin := script(t, "browser", `echo $$ >> $DIR/pids
trap '' TERM
sleep 300 >/dev/null 2>&1 &
while :; do sleep 1; done
`)
	logs := &fakebrowser.Logs{}
	b, err := Start([]string{bin}, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	for len(pidsOf(t, bin)) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	began := time.Now()
	b.Stop()
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Stop took %v, want about the grace (300ms)", took)
	}
	for _, pid := range pidsOf(t, bin) {
		if live := groupAfterKill(pid); len(live) > 0 {
			t.Errorf("process group %d still has %v after Stop", pid, live)
		}
	}
}

// groupAfterKill returns the members of process group pgid still alive a
// moment after Stop killed it: the kernel ends a killed process when it
// next runs, which on a busy machine is not at once (a CI run saw the
// script's sleep still there right after Stop).
func groupAfterKill(pgid int) []int {
	deadline := time.Now().Add(time.Second)
	for {
		live := groupMembers(pgid)
		if len(live) == 0 || time.Now().After(deadline) {
			return live
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestEndpointFromAnnouncement reads each browser's endpoint from what it
// prints, follows it across a restart onto another port, and refuses to
// start a browser that cannot serve CDP or says nothing in time.
func TestEndpointFromAnnouncement(t *testing.T) {
	shorten(t, 50*time.Millisecond, 5*time.Second)
	tests := []struct {
		name    string
		file    string // the script's name
		body    string
		args    []string
		want    string // the first endpoint
		wantErr string // what refusing to start says
		cap     int    // Capacity once it announced
	}{
		{
			name: "chromium stderr",
			file: "chromium",
			body: `echo "[1:1:ERROR:socket_posix.cc(175)] bind() failed: Address already in use (98)" >&2
echo "" >&2
echo "DevTools listening on ws://[::1]:9222/devtools/browser/0c1d" >&2
exec sleep 300`,
			args: []string{"--remote-debugging-port=9222"},
			want: "ws://[::1]:9222/devtools/browser/0c1d",
		},
		{
			name: "chromium, neither loopback free",
			file: "chromium",
			body: `echo "[1:1:ERROR:devtools_http_handler.cc(322)] Cannot start http server for devtools." >&2
exec sleep 300`,
			args:    []string{"--remote-debugging-port=9222"},
			wantErr: `refusing to start: chromium: it cannot serve CDP: it says "Cannot start http server for devtools." (is port 9222 taken on both 127.0.0.1 and [::1]?)`,
		},
		{
			name:    "chromium says nothing",
			file:    "chromium",
			body:    "echo starting\nexec sleep 300",
			args:    []string{"--remote-debugging-port=0"},
			wantErr: "refusing to start: chromium did not say where it serves CDP within 300ms (--start-timeout); its output ends: starting",
		},
		{
			name:    "exits first",
			file:    "lightpanda",
			body:    `echo '$level=fatal $msg="address already in use" port=9222' >&2; exit 1`,
			args:    []string{"serve", "--port", "9222"},
			wantErr: `refusing to start: lightpanda exited (exit status 1) before saying where it serves CDP; its output ends: $level=fatal $msg="address already in use" port=9222`,
		},
		{
			name: "lightpanda logfmt",
			file: "lightpanda",
			body: `echo '$time=1 $scope=note $level=note $msg="server running" address=127.0.0.1:38895 max_connections=16208 max_browser_connections=16' >&2
exec sleep 300`,
			args: []string{"serve", "--port", "0"},
			want: "http://127.0.0.1:38895",
			cap:  16,
		},
		{
			name: "lightpanda announces its capacity",
			file: "lightpanda",
			body: `echo '$time=1 $scope=note $level=note $msg="server running" address=127.0.0.1:38895 max_connections=16208 max_browser_connections=3' >&2
exec sleep 300`,
			args: []string{"serve", "--port", "0"},
			want: "http://127.0.0.1:38895",
			cap:  3,
		},
		{
			name: "lightpanda's capacity from its command",
			file: "lightpanda",
			body: `echo '$time=1 $scope=note $level=note $msg="server running" address=127.0.0.1:38895' >&2
exec sleep 300`,
			args: []string{"serve", "--port", "0", "--cdp-max-connections", "5"},
			want: "http://127.0.0.1:38895",
			cap:  5,
		},
		{
			name: "lightpanda pretty",
			file: "lightpanda",
			body: `printf 'NOTE  note : server running . . . .  [+0ms]\n      address = [::1]:45837\n      max_connections = 16208\n' >&2
exec sleep 300`,
			args: []string{"serve", "--host", "::1", "--port", "0", "--log-format", "pretty"},
			want: "http://[::1]:45837",
			cap:  16, // its default, announced after the address
		},
		{
			name: "a browser that announces nothing",
			file: "somebrowser",
			body: "exec sleep 300",
			args: []string{"--port", "9333"},
			want: "http://127.0.0.1:9333",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin := script(t, tt.file, tt.body)
			o := Options{StartTimeout: 300 * time.Millisecond, TimeoutFlag: "--start-timeout"}
			began := time.Now()
			g, err := StartGroup(t.Context(), append([]string{bin}, tt.args...), o)
			if tt.wantErr != "" {
				if err == nil {
					g.Stop()
					t.Fatalf("started; want it refused with %q", tt.wantErr)
				}
				if got := strings.TrimPrefix(err.Error(), "launcher: "); got != tt.wantErr {
					t.Errorf("refused with\n%q, want\n%q", got, tt.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("the refusal spans lines: %q", err)
				}
				if took := time.Since(began); took > 2*time.Second {
					t.Errorf("refused after %v, want within the start timeout", took)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer g.Stop()
			got, err := g.Browsers[0].Endpoint(t.Context())
			if err != nil || got != tt.want {
				t.Errorf("Endpoint: got %q, %v; want %q", got, err, tt.want)
			}
			if got := g.Browsers[0].Capacity(); got != tt.cap {
				t.Errorf("Capacity: got %d, want %d", got, tt.cap)
			}
		})
	}
}

// TestEndpointFollowsRestarts: a browser on port 0 comes back on another
// port after it dies; Endpoint waits for the new announcement instead of
// answering with the old one.
func TestEndpointFollowsRestarts(t *testing.T) {
	shorten(t, 300*time.Millisecond, 5*time.Second)
	bin := script(t, "chromium", `echo $$ >> $DIR/pids
n=$(wc -l < $DIR/pids)
sleep 0.2
echo "DevTools listening on ws://127.0.0.1:4000$n/devtools/browser/id$n" >&2
exec sleep 300`)
	logs := &fakebrowser.Logs{}
	g, err := StartGroup(t.Context(), []string{bin, "--remote-debugging-port=0"}, Options{Log: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	b := g.Browsers[0]
	if got, err := b.Endpoint(t.Context()); got != "ws://127.0.0.1:40001/devtools/browser/id1" {
		t.Fatalf("first Endpoint: got %q, %v", got, err)
	}
	if err := syscall.Kill(-pidsOf(t, bin)[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitLog(t, logs, "browser exited", 1)
	// Until the next process announces (the restart delay and 0.2 s),
	// Endpoint waits: never the dead one's address.
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	got, err := b.Endpoint(ctx)
	cancel()
	if err == nil {
		t.Fatalf("Endpoint during the restart: got %q, want it to wait", got)
	}
	if !strings.Contains(err.Error(), "waiting for chromium to restart") {
		t.Errorf("Endpoint during the restart: %v, want it to say it waits for the restart", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if got, err := b.Endpoint(ctx); got != "ws://127.0.0.1:40002/devtools/browser/id2" {
		t.Errorf("Endpoint after the restart: got %q, %v; want the new process's", got, err)
	}
}

// TestEndpointFromActivePortFile: Chromium on port 0 writes
// DevToolsActivePort in its profile; a file older than the process is a
// previous run's and is not read.
func TestEndpointFromActivePortFile(t *testing.T) {
	profile := t.TempDir()
	stale := filepath.Join(profile, "DevToolsActivePort")
	os.WriteFile(stale, []byte("1111\n/devtools/browser/old"), 0o644)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)
	bin := script(t, "chromium", `sleep 0.3
printf '44659\n/devtools/browser/90dba2ec' > "$PROFILE/DevToolsActivePort"
exec sleep 300`)
	t.Setenv("PROFILE", profile)
	g, err := StartGroup(t.Context(), []string{bin, "--remote-debugging-port=0", "--user-data-dir=" + profile}, Options{StartTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	if got, err := g.Browsers[0].Endpoint(t.Context()); got != "ws://127.0.0.1:44659/devtools/browser/90dba2ec" {
		t.Errorf("Endpoint: got %q, %v; want the fresh file's", got, err)
	}
}

// TestGroup starts three browsers from one command: each gets a port of
// its own for {port} and its number for {i}, and Lightpanda's own limiter
// is turned off.
func TestGroup(t *testing.T) {
	bin := script(t, "lightpanda", `echo "$@" >> $DIR/args
port=$(echo "$@" | sed 's/.*--port \([0-9]*\).*/\1/')
echo "\$msg=\"server running\" address=127.0.0.1:$port" >&2
exec sleep 300`)
	g, err := StartGroup(t.Context(), []string{bin, "serve", "--port", "{port}", "--cookie-jar", "/tmp/jar-{i}.json"}, Options{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	seen := map[string]bool{}
	for i, b := range g.Browsers {
		ep, err := b.Endpoint(t.Context())
		if err != nil || !strings.HasPrefix(ep, "http://127.0.0.1:") || seen[ep] {
			t.Errorf("browser %d: Endpoint %q, %v; want a port of its own", i+1, ep, err)
		}
		seen[ep] = true
	}
	args, _ := os.ReadFile(filepath.Join(filepath.Dir(bin), "args"))
	for i := 1; i <= 3; i++ {
		if !strings.Contains(string(args), fmt.Sprintf("--cookie-jar /tmp/jar-%d.json --http-nav-delay 0", i)) {
			t.Errorf("arguments:\n%s\nwant browser %d's jar and --http-nav-delay 0", args, i)
		}
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		argv  []string
		count int
		want  string // "" for fine; else a part of the message
	}{
		{nil, 1, ""},
		{nil, 2, "needs a browser command"},
		{[]string{"chromium", "--remote-debugging-port=9222"}, 0, "want 1 or more"},
		{[]string{"chromium", "--remote-debugging-port=9222"}, 1, ""},
		{[]string{"chromium", "--remote-debugging-port=9222"}, 2, "put {port} in the command"},
		{[]string{"chromium", "--remote-debugging-port=0", "--user-data-dir=/tmp/p"}, 2, "--user-data-dir=/tmp/profile-{i}"},
		{[]string{"chromium", "--remote-debugging-port=0", "--user-data-dir=/tmp/p{i}"}, 2, ""},
		{[]string{"chromium", "--remote-debugging-port={port}", "--user-data-dir=/tmp/p{i}"}, 4, ""},
		{[]string{"lightpanda", "serve", "--port", "{port}"}, 4, ""},
		{[]string{"lightpanda", "serve", "--port", "0"}, 4, ""},
		{[]string{"/venv/bin/lightpanda", "serve", "--http-nav-delay", "0"}, 1, ""},
		{[]string{"/venv/bin/lightpanda", "serve", "--http-nav-delay", "100"}, 1, "give it to the relay instead (cdp-throttle --http-nav-delay 100"},
		{[]string{"lightpanda", "serve", "--http-nav-delay=250"}, 1, "--http-nav-delay 250 in the lightpanda command"},
		{[]string{"lightpanda", "fetch", "--http-nav-delay", "100"}, 1, ""},
		{[]string{"/usr/bin/chromium", "--headless"}, 1, "add --remote-debugging-port=0"},
		{[]string{"google-chrome", "--remote-debugging-pipe"}, 1, "add --remote-debugging-port=0"},
		{[]string{"./my-chrome.sh", "--headless"}, 1, ""},
		{[]string{"lightpanda", "serve", "--unix-socket", "/tmp/lp.sock"}, 1, "drop --unix-socket"},
	}
	for _, tt := range tests {
		err := Check(tt.argv, tt.count)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Check(%q, %d): %v, want nil", tt.argv, tt.count, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Check(%q, %d): %v, want an error with %q", tt.argv, tt.count, err, tt.want)
		}
	}
}

func TestFillTurnsLightpandaLimiterOff(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"lightpanda", "serve", "--port", "9222"}, "lightpanda serve --port 9222 --http-nav-delay 0"},
		{[]string{"/v/bin/lightpanda", "serve", "--http-nav-delay", "0"}, "/v/bin/lightpanda serve --http-nav-delay 0"},
		{[]string{"chromium", "--remote-debugging-port=9222"}, "chromium --remote-debugging-port=9222"},
		{[]string{"lightpanda", "fetch", "http://x/"}, "lightpanda fetch http://x/"},
	}
	for _, tt := range tests {
		got, err := fill(tt.argv, 1)
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("fill(%q): got %q, %v; want %q", tt.argv, got, err, tt.want)
		}
	}
}

func TestStaticEndpoint(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"browser"}, DefaultEndpoint},
		{[]string{"browser", "--port", "9333"}, "http://127.0.0.1:9333"},
		{[]string{"browser", "--host", "::1", "--port=9333"}, "http://[::1]:9333"},
		{[]string{"browser", "--host", "0.0.0.0", "--port", "9333"}, "http://127.0.0.1:9333"},
		{[]string{"browser", "--remote-debugging-port=9444"}, "http://127.0.0.1:9444"},
		{[]string{"browser", "--port", "0"}, DefaultEndpoint},
	}
	for _, tt := range tests {
		if got := staticEndpoint(tt.argv, DefaultEndpoint); got != tt.want {
			t.Errorf("staticEndpoint(%q): got %q, want %q", tt.argv, got, tt.want)
		}
	}
}

// TestRestartWhileHelperHoldsOutput: a browser that dies leaving a helper
// with its output open is seen dead and restarted all the same.
func TestRestartWhileHelperHoldsOutput(t *testing.T) {
	shorten(t, 50*time.Millisecond, 5*time.Second)
	bin := script(t, "browser", `echo $$ >> $DIR/pids
sleep 300 &  # holds the output
[ "$(wc -l < $DIR/pids)" -le 1 ] && exit 1
exec sleep 300
`)
	logs := &fakebrowser.Logs{}
	b, err := Start([]string{bin}, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	began := time.Now()
	waitLog(t, logs, "browser started", 2)
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("restarted after %v, want about a second (the output's grace) and the delay", took)
	}
}

// TestMain checks that every goroutine the launcher starts ends with its
// browser.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestFindBrowser resolves the demo's --browser: $LIGHTPANDA first, then
// the project's .venv, a path as it is, and a clear error without one.
func TestFindBrowser(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("PATH", dir) // no lightpanda on it
	t.Setenv("LIGHTPANDA", "")
	if _, err := FindBrowser("lightpanda"); err == nil || !strings.Contains(err.Error(), "make lightpanda") {
		t.Errorf("no Lightpanda anywhere: got %v, want an error saying how to get it", err)
	}
	venv := filepath.Join(dir, ".venv", "bin", "lightpanda")
	os.MkdirAll(filepath.Dir(venv), 0o755)
	os.WriteFile(venv, []byte("#!/bin/sh\n"), 0o755)
	if got, err := FindBrowser("lightpanda"); err != nil || got != venv {
		t.Errorf("with .venv: got %q, %v; want %q", got, err, venv)
	}
	t.Setenv("LIGHTPANDA", "/opt/lp/lightpanda")
	if got, _ := FindBrowser("lightpanda"); got != "/opt/lp/lightpanda" {
		t.Errorf("with $LIGHTPANDA: got %q", got)
	}
	if got, _ := FindBrowser("/usr/local/bin/chrome"); got != "/usr/local/bin/chrome" {
		t.Errorf("a path: got %q, want it as it is", got)
	}
	if !IsLightpanda(venv) || IsLightpanda("/usr/bin/chromium") {
		t.Errorf("IsLightpanda: wrong for %s or chromium", venv)
	}
}

// TestClosedIsNotCrashed: a browser that served and then exits with
// status 0 (closed by a client, as Browser.close with
// --allow-browser-close does) is restarted however often that happens;
// one that dies with an error as quickly is given up after maxQuickExits.
func TestClosedIsNotCrashed(t *testing.T) {
	shorten(t, 10*time.Millisecond, 5*time.Second)
	for _, tt := range []struct {
		name     string
		status   int
		giveUpAt int // 0: never
	}{
		{name: "exit 0 after serving", status: 0},
		{name: "exit 1 after serving", status: 1, giveUpAt: maxQuickExits},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := script(t, "chromium", fmt.Sprintf(`echo $$ >> $DIR/pids
echo "DevTools listening on ws://127.0.0.1:40001/devtools/browser/id" >&2
sleep 0.1
exit %d`, tt.status))
			logs := &fakebrowser.Logs{}
			b, err := Start([]string{bin, "--remote-debugging-port=40001"}, zerolog.New(logs))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Stop()
			runs := 2 * maxQuickExits
			if tt.giveUpAt > 0 {
				runs = tt.giveUpAt
			}
			for deadline := time.Now().Add(10 * time.Second); len(pidsOf(t, bin)) < runs; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d runs within 10s, want %d:\n%s", len(pidsOf(t, bin)), runs, logs)
				}
			}
			select {
			case <-b.Exited():
				if tt.giveUpAt == 0 {
					t.Errorf("given up after %d runs that exited normally: %v", len(pidsOf(t, bin)), b.Err())
				}
			case <-time.After(time.Second):
				if tt.giveUpAt > 0 {
					t.Errorf("not given up after %d quick deaths", tt.giveUpAt)
				}
			}
		})
	}
}
