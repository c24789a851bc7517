package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/ownership"
)

// share is what the relay does for one client connection so that the
// clients of one browser can share it: it follows what the client owns
// (package ownership), answers the client's Browser.close by closing only
// that, and refuses the debug commands that kill processes every client
// needs. Lightpanda gives each connection a browser of its own, so there
// own is nil and Browser.close passes through.
type share struct {
	pr  *pair
	own *ownership.Conn // nil when the browser is the connection's own
}

func newShare(pr *pair, id uint64) *share {
	s := &share{pr: pr}
	if pr.up.owners != nil {
		s.own = pr.up.owners.Join(id)
		if target, ok := strings.CutPrefix(pr.path, "/devtools/page/"); ok {
			s.own.Claim(target) // a client that opens a page's own socket drives it
		}
	}
	return s
}

// errClosedItsBrowser ends a pair whose client closed its browser: the
// client's connection ends as Chromium's exit ends it, the browser is told
// 1000 (pair.finish).
var errClosedItsBrowser = errors.New("relay: the client closed its browser")

// fromClient looks at a command on its way to the browser: it reports
// whether the relay took it (and answered it), and errClosedItsBrowser
// once the connection is to end.
func (s *share) fromClient(hd *cdp.Header, msg []byte) (bool, error) {
	if s.own != nil {
		s.own.FromClient(hd)
	}
	if !hd.HasID || len(hd.Method) < len("Browser.c") || string(hd.Method[:len("Browser.")]) != "Browser." {
		return false, nil
	}
	m := string(hd.Method)
	if (m != "Browser.close" && m != "Browser.crash" && m != "Browser.crashGpuProcess") || !utf8.Valid(msg) {
		return false, nil // the browser refuses invalid UTF-8 whole (-32700)
	}
	p := s.pr.p
	switch {
	case m == "Browser.close" && s.own == nil:
		// Lightpanda: the connection's own browser, which Lightpanda
		// ends with the connection anyway.
		p.Metrics.browserCommand(m, "passed")
		return false, nil
	case p.AllowBrowserClose:
		p.Metrics.browserCommand(m, "passed")
		s.pr.log.Info().Str("method", m).Msg("a client closes or crashes the browser for every client (--allow-browser-close)")
		return false, nil
	case m == "Browser.close":
		s.closeItsBrowser(hd)
		return true, errClosedItsBrowser
	}
	p.Metrics.browserCommand(m, "refused")
	s.pr.log.Info().Str("method", m).Msg("refused: the browser is shared with other clients (--allow-browser-close allows it)")
	reply, _ := cdp.Reply(hd.ID, string(hd.SessionID), nil, &cdp.Error{Code: -32000,
		Message: m + " refused by cdp-throttle: the browser is shared with other clients; start the relay with --allow-browser-close to allow it"})
	s.pr.writeClient(reply)
	return true, nil
}

// closeItsBrowser answers a client's Browser.close as the browser does,
// then closes what the client owns alone through a connection of the
// relay's own, while the browser stays up for everyone else. Chromium
// answers first, then tells the client of each of its sessions detached
// as their pages close, then the connection ends: so does the relay,
// waiting up to detachWait for those events to come through.
func (s *share) closeItsBrowser(hd *cdp.Header) {
	pr := s.pr
	reply, _ := cdp.Reply(hd.ID, string(hd.SessionID), struct{}{}, nil)
	pr.writeClient(reply)
	l := s.own.CloseAll()
	pr.p.Metrics.browserCommand("Browser.close", "contained")
	r := pr.p.closeLeftovers(context.Background(), pr.up, l, "browser_close")
	ctx, cancel := context.WithTimeout(pr.ctx, detachWait)
	detached := s.own.WaitDetached(ctx.Done(), l)
	cancel()
	ev := pr.log.Info()
	if r.err != nil {
		ev = pr.log.Warn().Err(r.err)
	}
	ev.Int("pages", r.pages).Int("contexts", r.contexts).Int("gone_already", r.gone).Int("failed", r.failed).Bool("sessions_detached", detached).
		Msg("the client closed its browser: closed its own pages and contexts, the browser stays up for the others")
}

// detachWait bounds how long the end of a client's connection after its
// Browser.close waits for its sessions' detachments.
const detachWait = 2 * time.Second

// fromBrowser looks at a message on its way to the client.
func (s *share) fromBrowser(hd *cdp.Header, msg []byte) {
	if s.own != nil {
		s.own.FromBrowser(hd, msg)
	}
}

// wants reports, from its first bytes, whether fromBrowser needs to see
// a message.
func (s *share) wants(msg []byte) bool {
	return s.own != nil && s.own.Wants(msg)
}

// ended leaves what the client created to the orphan timeout.
func (s *share) ended() {
	if s.own != nil {
		s.own.Leave()
	}
}

// writeClient writes a message of the relay's own to the client.
func (pr *pair) writeClient(msg []byte) {
	if err := pr.ToClient(msg); err != nil {
		pr.log.Debug().Err(err).Msg("answer for the client not delivered")
	}
}

// closeWait bounds closing what one client leaves.
const closeWait = 10 * time.Second

// closed is what closing a client's leftovers came to.
type closed struct {
	pages, contexts int // closed
	gone            int // the browser no longer had them
	failed          int // not closed: the browser could not be reached, or refused
	err             error
}

// closeLeftovers closes pages and browser contexts of up through a
// connection of the relay's own (Target.closeTarget, then
// Target.disposeBrowserContext), and counts them for why.
func (p *Proxy) closeLeftovers(ctx context.Context, up *upstream, l ownership.Leftovers, why string) closed {
	var r closed
	if l.Empty() {
		return r
	}
	ctx, cancel := context.WithTimeout(ctx, closeWait)
	defer cancel()
	answers, err := up.closeTargets(ctx, p, l)
	r.err = err
	for i, a := range answers {
		what := "page"
		if i >= len(l.Pages) {
			what = "context"
		}
		outcome := "closed"
		switch {
		case a == nil:
			outcome = "failed"
			r.failed++
		case a.Code != 0 && (strings.Contains(a.Message, "No target") || strings.Contains(a.Message, "Failed to find")):
			outcome = "gone"
			r.gone++
		case a.Code != 0:
			outcome = "failed"
			r.failed++
			if r.err == nil {
				r.err = fmt.Errorf("relay: closing a %s: %s (%d)", what, a.Message, a.Code)
			}
		case what == "page":
			r.pages++
		default:
			r.contexts++
		}
		p.Metrics.leftover(what, why, outcome)
	}
	return r
}

// closeTargets sends Target.closeTarget for each of l's pages and
// Target.disposeBrowserContext for each of its contexts on a connection
// of its own to the browser endpoint, and returns each answer's error, or
// &cdp.Error{} for success; nil for those not answered.
func (up *upstream) closeTargets(ctx context.Context, p *Proxy, l ownership.Leftovers) ([]*cdp.Error, error) {
	answers := make([]*cdp.Error, len(l.Pages)+len(l.Contexts))
	c, err := up.dialBrief(ctx)
	if err != nil {
		return answers, err
	}
	defer c.Close()
	for i := range answers {
		method, params := "Target.closeTarget", map[string]string{"targetId": ""}
		if i < len(l.Pages) {
			params["targetId"] = l.Pages[i]
		} else {
			method, params = "Target.disposeBrowserContext", map[string]string{"browserContextId": l.Contexts[i-len(l.Pages)]}
		}
		msg, err := cdp.Command(int64(i+1), method, "", params)
		if err == nil {
			err = c.WriteMessage(websocket.TextMessage, msg)
		}
		if err != nil {
			return answers, fmt.Errorf("relay: %s: %w", method, err)
		}
	}
	for left := len(answers); left > 0; {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return answers, fmt.Errorf("relay: closing what a client left: %w", err)
		}
		hd, err := cdp.Scan(msg)
		if err != nil || !hd.HasID || hd.ID < 1 || hd.ID > int64(len(answers)) || answers[hd.ID-1] != nil {
			continue
		}
		_, e, _ := cdp.ReadReply(msg)
		if e == nil {
			e = &cdp.Error{}
		}
		answers[hd.ID-1] = e
		left--
	}
	c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	return answers, nil
}

// orphanClose is the ownership registry's Close for up: it closes what a
// client left behind and says so once.
func (p *Proxy) orphanClose(up *upstream, timeout time.Duration) func(ownership.Leftovers) {
	return func(l ownership.Leftovers) {
		r := p.closeLeftovers(context.Background(), up, l, "orphan")
		ev := p.log.Info()
		if r.err != nil {
			ev = p.log.Warn().Err(r.err)
		}
		if l.Client == 0 {
			ev = ev.Str("opened_by", "/json/new")
		} else {
			ev = ev.Uint64("conn", l.Client)
		}
		ev.Str("upstream", up.name).Int("pages", r.pages).Int("contexts", r.contexts).Int("gone_already", r.gone).
			Int("failed", r.failed).Stringer("orphan_timeout", timeout).Msg("closed what a client left behind")
	}
}
