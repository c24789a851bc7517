package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// What the relay looks for in its Limiter besides hold.Limiter, each by
// its interface (*policy.Policy has them all); a Limiter without one
// works, and the relay does without what it gives.

// browserArgs is a Limiter that reads the browser's command line: the
// policy, with --bucket ip (its --host-resolver-rules, a proxy). Without
// it, nothing asks the browser for its command line.
type browserArgs interface {
	WantsBrowserArgs() bool
	SetBrowserArgs(args []string) (note string, err error)
}

// browserAgent is a Limiter that reads robots.txt as the browser would
// ask for it: the policy, with --robots. Without it, robots.txt is read
// for the relay's own user agent.
type browserAgent interface {
	SetBrowser(userAgent string)
}

// bucketsBy is a Limiter whose hosts may share schedules (--bucket), and
// says by what. Without it, the page says nothing of buckets.
type bucketsBy interface {
	Buckets() string
}

// busiest is a Limiter that tells the state of its busiest buckets, for
// the page and /hosts. Without it, both list none.
type busiest interface {
	Busiest(now time.Time, n int) []limiter.HostState
}

// argsWait bounds asking a browser for its command line at start.
const argsWait = 2 * time.Second

// readBrowserArgs hands the Limiter, when it wants it, the command line of
// the first Chromium answering at start (Lightpanda has none to give).
// Chromium tells it only when started with --enable-automation; otherwise
// nothing is read, which the debug log says.
func (p *Proxy) readBrowserArgs(ctx context.Context, versions []version, errs []error) {
	b, ok := p.Limiter.(browserArgs)
	if !ok || !b.WantsBrowserArgs() {
		return
	}
	for i, up := range p.ups {
		if errs[i] != nil || versions[i].lightpanda() {
			continue
		}
		ctx, cancel := context.WithTimeout(ctx, argsWait)
		args, err := up.commandLine(ctx, p)
		cancel()
		if err != nil {
			p.log.Debug().Str("upstream", up.name).Err(err).Msg("the browser's command line is not known: --bucket ip reads no --host-resolver-rules or proxy from it")
			return
		}
		note, err := b.SetBrowserArgs(args)
		switch {
		case err != nil:
			p.log.Warn().Str("upstream", up.name).Err(err).Msg("the browser's command line: --bucket ip reads no --host-resolver-rules from it")
		case note != "":
			p.log.Warn().Str("upstream", up.name).Msg(note)
		}
		return
	}
}

// commandLine asks the browser for the command line it was started with
// (Browser.getBrowserCommandLine), on a short-lived connection of the
// relay's own.
func (up *upstream) commandLine(ctx context.Context, p *Proxy) ([]string, error) {
	c, err := up.dialBrief(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	msg, err := cdp.Command(1, "Browser.getBrowserCommandLine", "", struct{}{})
	if err == nil {
		err = c.WriteMessage(websocket.TextMessage, msg)
	}
	if err != nil {
		return nil, fmt.Errorf("relay: Browser.getBrowserCommandLine: %w", err)
	}
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return nil, fmt.Errorf("relay: Browser.getBrowserCommandLine: %w", err)
		}
		if hd, err := cdp.Scan(msg); err != nil || !hd.HasID || hd.ID != 1 {
			continue
		}
		result, e, _ := cdp.ReadReply(msg)
		if e != nil {
			return nil, fmt.Errorf("relay: Browser.getBrowserCommandLine: %s", e.Message)
		}
		var r struct {
			Arguments []string `json:"arguments"`
		}
		if err := json.Unmarshal(result, &r); err != nil {
			return nil, fmt.Errorf("relay: Browser.getBrowserCommandLine: %w", err)
		}
		return r.Arguments, nil
	}
}
