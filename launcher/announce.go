package launcher

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// kind is what the launcher knows of a command: how the browser will say
// where it serves CDP, and how many clients it takes.
type kind struct {
	// watch returns the function that reads each line of a process's
	// output and settles its endpoint; nil for a browser that announces
	// nothing.
	watch func(*process) func(string)
	// activePort is Chromium's DevToolsActivePort file in the
	// --user-data-dir of the command, "" when it gave none.
	activePort string
	// static is the endpoint of a browser that announces nothing: read
	// from its command line, else the default.
	static string
	// capacity is how many CDP clients the browser takes at once, as its
	// command says (0: no bound); what it announces replaces it.
	capacity int
}

// Chromium prints "DevTools listening on ws://HOST:PORT/devtools/browser/ID"
// once it serves CDP: on 127.0.0.1, or on [::1] when 127.0.0.1's port is
// taken. When it cannot bind either it says so and keeps running.
var (
	chromiumListening = regexp.MustCompile(`DevTools listening on (ws://\S+)`)
	chromiumNoServer  = "Cannot start http server for devtools"
)

// lightpanda serve logs "server running" with the address it listens on,
// at every log level: address=HOST:PORT in logfmt (the default), a line
// "address = HOST:PORT" after it in --log-format pretty.
var lightpandaAddress = regexp.MustCompile(`\baddress ?= ?(\S+)`)

// lightpanda serve takes --cdp-max-connections CDP connections at once (16
// by default) and answers one more with HTTP 503; its "server running"
// line says how many as max_browser_connections.
var lightpandaCapacity = regexp.MustCompile(`\bmax_browser_connections ?= ?(\d+)`)

// LightpandaDefaultConnections is lightpanda serve's --cdp-max-connections
// when its command does not set it.
const LightpandaDefaultConnections = 16

// isLightpandaServe says whether argv runs `lightpanda serve` (the binary,
// or the PyPI package's `lightpanda` command, which execs it).
func isLightpandaServe(argv []string) bool {
	return IsLightpanda(argv[0]) && slices.Contains(argv[1:], "serve")
}

// isChromium says whether argv runs Chromium or Chrome serving CDP.
func isChromium(argv []string) bool {
	if _, ok := flagValue(argv, "--remote-debugging-port"); ok {
		return true
	}
	name := strings.ToLower(filepath.Base(argv[0]))
	return strings.Contains(name, "chrom") || strings.Contains(name, "headless_shell")
}

func kindOf(argv []string) kind {
	switch {
	case isLightpandaServe(argv):
		capacity := LightpandaDefaultConnections
		if v, ok := flagValue(argv, "--cdp-max-connections"); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				capacity = n
			}
		}
		return kind{capacity: capacity, watch: func(pr *process) func(string) {
			running := 0 // lines since "server running", in pretty format
			return func(line string) {
				if strings.Contains(line, "server running") {
					running = 1
				} else if running > 0 {
					running++
				}
				if running == 0 || running > 4 {
					return
				}
				if m := lightpandaCapacity.FindStringSubmatch(line); m != nil {
					if n, err := strconv.Atoi(m[1]); err == nil && n > 0 {
						pr.capacity.Store(int64(n))
					}
				}
				if m := lightpandaAddress.FindStringSubmatch(line); m != nil {
					pr.settle("http://"+m[1], nil)
				}
			}
		}}
	case isChromium(argv):
		k := kind{watch: func(pr *process) func(string) {
			return func(line string) {
				if m := chromiumListening.FindStringSubmatch(line); m != nil {
					pr.settle(m[1], nil)
				} else if strings.Contains(line, chromiumNoServer) {
					pr.settle("", &bindError{port: portOf(argv)})
				}
			}
		}}
		if dir, ok := flagValue(argv, "--user-data-dir"); ok && dir != "" {
			k.activePort = filepath.Join(dir, "DevToolsActivePort")
		}
		return k
	}
	return kind{static: staticEndpoint(argv, DefaultEndpoint)}
}

// bindError is Chromium's word that it could not serve CDP at all.
type bindError struct{ port string }

func (e *bindError) Error() string {
	return "it cannot serve CDP: it says \"" + chromiumNoServer + ".\" (is port " + e.port + " taken on both 127.0.0.1 and [::1]?)"
}

func portOf(argv []string) string {
	p, _ := flagValue(argv, "--remote-debugging-port")
	return p
}

// watchActivePort reads Chromium's DevToolsActivePort file ("PORT\n
// /devtools/browser/ID", written when it serves on a port it chose) until
// the process has settled its endpoint; a file older than the process is
// a previous run's.
func watchActivePort(pr *process, path string, began time.Time) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-pr.ready:
			return
		case <-t.C:
		}
		st, err := os.Stat(path)
		if err != nil || st.ModTime().Before(began) {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		port, ws, ok := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if n, err := strconv.Atoi(strings.TrimSpace(port)); ok && err == nil && n > 0 && strings.HasPrefix(ws, "/devtools/browser/") {
			pr.settle("ws://127.0.0.1:"+strconv.Itoa(n)+strings.TrimSpace(ws), nil)
		}
	}
}

// flagValue finds --name=value or --name value in argv.
func flagValue(argv []string, name string) (string, bool) {
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name {
			if i+1 < len(argv) {
				return argv[i+1], true
			}
			return "", true
		}
	}
	return "", false
}

// staticEndpoint finds where a browser command that announces nothing will
// serve CDP: --remote-debugging-port=N, or --host/--port, else def.
func staticEndpoint(argv []string, def string) string {
	host := "127.0.0.1"
	if h, ok := flagValue(argv, "--remote-debugging-address"); ok && h != "" && h != "0.0.0.0" && h != "::" {
		host = h
	}
	if h, ok := flagValue(argv, "--host"); ok && h != "" && h != "0.0.0.0" && h != "::" {
		host = h
	}
	for _, name := range []string{"--remote-debugging-port", "--port"} {
		if p, ok := flagValue(argv, name); ok {
			if n, err := strconv.Atoi(p); err == nil && n > 0 {
				return "http://" + net.JoinHostPort(strings.Trim(host, "[]"), p)
			}
		}
	}
	return def
}
