package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Defaults for the zero values of Options' fields.
const (
	DefaultStartTimeout = 30 * time.Second
	// DefaultEndpoint is where a browser that neither announces its
	// endpoint nor names a port in its command is taken to serve CDP.
	DefaultEndpoint = "http://127.0.0.1:9222"
)

// Placeholders in a command, filled for each process: PortPlaceholder with
// a free loopback port, chosen again at each restart; IndexPlaceholder
// with the browser's number in its group, from 1 (for a profile
// directory of its own).
const (
	PortPlaceholder  = "{port}"
	IndexPlaceholder = "{i}"
)

// Options configures StartGroup. The zero value starts one browser.
type Options struct {
	// Count is how many browsers to start from the command; zero means 1.
	Count int
	// Log receives the browsers' lifecycle; the zero Logger logs nothing.
	Log zerolog.Logger
	// StartTimeout bounds how long a process may take to say where it
	// serves CDP; one that does not is refused at start, and killed and
	// restarted later. Zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// TimeoutFlag names the setting StartTimeout comes from, for messages
	// ("--start-timeout"); "" names none.
	TimeoutFlag string
}

func (o Options) flag() string {
	if o.TimeoutFlag == "" {
		return ""
	}
	return " (" + o.TimeoutFlag + ")"
}

// Check reports what is wrong with a browser command to be started count
// times, before anything starts: the message names what to change.
func Check(argv []string, count int) error {
	if count < 1 {
		return fmt.Errorf("--browsers %d: want 1 or more", count)
	}
	if len(argv) == 0 {
		if count > 1 {
			return fmt.Errorf("--browsers %d needs a browser command after --", count)
		}
		return nil
	}
	// Chromium itself (not a script that may add the flag) serves CDP on
	// a port only when told to.
	if _, ok := flagValue(argv, "--remote-debugging-port"); !ok && slices.Contains(chromiumNames, filepath.Base(argv[0])) {
		return fmt.Errorf("%s serves CDP on a port only with --remote-debugging-port: add --remote-debugging-port=0 (a port it chooses and announces) to the command", filepath.Base(argv[0]))
	}
	if isLightpandaServe(argv) {
		if _, ok := flagValue(argv, "--unix-socket"); ok {
			return errors.New("the relay reaches lightpanda serve over TCP: drop --unix-socket (--port 0 gives it a port of its own)")
		}
		if v, ok := flagValue(argv, "--http-nav-delay"); ok && strings.TrimSpace(v) != "0" {
			return fmt.Errorf("--http-nav-delay %s in the lightpanda command would space navigations a second time, inside each Lightpanda, "+
				"after the relay released them: give it to the relay instead (cdp-throttle --http-nav-delay %[1]s -- lightpanda serve …)", v)
		}
	}
	if count == 1 {
		return nil
	}
	cmd := strings.Join(argv, " ")
	port0 := false
	for _, name := range []string{"--remote-debugging-port", "--port"} {
		if v, ok := flagValue(argv, name); ok && v == "0" {
			port0 = true
		}
	}
	if !strings.Contains(cmd, PortPlaceholder) && !port0 {
		return fmt.Errorf("--browsers %d: put %s in the command where its port goes (or a port 0 the browser announces), so that each browser gets a port of its own", count, PortPlaceholder)
	}
	if isChromium(argv) {
		if dir, _ := flagValue(argv, "--user-data-dir"); !strings.Contains(dir, IndexPlaceholder) {
			return fmt.Errorf("--browsers %d: each Chromium needs a profile of its own: --user-data-dir=/tmp/profile-%s", count, IndexPlaceholder)
		}
	}
	return nil
}

// fill returns argv with its placeholders filled for the browser numbered
// index, and, for lightpanda serve, its own navigation limiter turned off
// unless the command sets it (Check refuses a non-zero one).
func fill(argv []string, index int) ([]string, error) {
	out := make([]string, len(argv))
	var port string
	for i, a := range argv {
		if strings.Contains(a, PortPlaceholder) && port == "" {
			p, err := freePort()
			if err != nil {
				return nil, fmt.Errorf("launcher: choosing a port for %s: %w", PortPlaceholder, err)
			}
			port = p
		}
		a = strings.ReplaceAll(a, PortPlaceholder, port)
		out[i] = strings.ReplaceAll(a, IndexPlaceholder, strconv.Itoa(index))
	}
	if isLightpandaServe(out) {
		if _, ok := flagValue(out, "--http-nav-delay"); !ok {
			// The relay's schedule is the only one: Lightpanda's own
			// limiter would delay each navigation again after its slot.
			out = append(out, "--http-nav-delay", "0")
		}
	}
	return out, nil
}

// freePort picks a loopback port nothing listens on now. The browser binds
// it a moment later; if something else took it meanwhile, the browser
// fails to bind and is restarted with another.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port, nil
}

// chromiumNames are the names Chromium and Chrome are installed under.
var chromiumNames = []string{"chromium", "chromium-browser", "chrome", "google-chrome", "google-chrome-stable", "chrome-headless-shell", "headless_shell"}

// Group is the browsers started from one command. Create it with
// StartGroup and Stop it when done; its methods are safe for concurrent
// use.
type Group struct {
	// Browsers are the group's browsers, in order; each is an endpoint
	// that follows its restarts.
	Browsers []*Browser
}

// StartGroup starts o.Count browsers from argv, each supervised on its
// own, and waits until each has said where it serves CDP. It refuses to
// start, stopping them all, when one exits first, says it cannot serve
// CDP, or says nothing within o.StartTimeout; or when ctx ends.
func StartGroup(ctx context.Context, argv []string, o Options) (*Group, error) {
	if o.Count < 1 {
		o.Count = 1
	}
	if err := Check(argv, o.Count); err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	g := &Group{}
	for i := 1; i <= o.Count; i++ {
		b := newBrowser(argv, i, o)
		if err := b.start(); err != nil {
			g.Stop()
			return nil, err
		}
		go b.supervise()
		g.Browsers = append(g.Browsers, b)
	}
	for _, b := range g.Browsers {
		select {
		case <-b.first.ready:
		case <-ctx.Done():
			g.Stop()
			return nil, ctx.Err()
		}
		if err := b.first.err; err != nil {
			g.Stop()
			var be *bindError
			if errors.As(err, &be) {
				err = fmt.Errorf("%s: %w", b.name, err)
			}
			return nil, fmt.Errorf("launcher: refusing to start: %w", err)
		}
	}
	return g, nil
}

// Stop stops every browser of the group at once and returns when all are
// gone.
func (g *Group) Stop() {
	var wg sync.WaitGroup
	for _, b := range g.Browsers {
		wg.Go(b.Stop)
	}
	wg.Wait()
}

// Bind returns a context that ends with parent, or when a browser of the
// group is given up on, with its Err as the cause.
func (g *Group) Bind(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	for _, b := range g.Browsers {
		go b.cancelOnExit(ctx, cancel)
	}
	return ctx, func() { cancel(nil) }
}
