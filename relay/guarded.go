package relay

import (
	"context"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/guardian"
)

// The relay beside a guardian (Proxy.Guardian: package guardian, in the
// process that started this one). The holding's pages connection, where
// the clients' navigations wait paused, is dialled through the guardian
// (DialGuarded), and the pages and contexts the clients created are
// reported to it as they change (reports), so that if this process dies
// without a stop the guardian answers what was held and closes them.

// reportEvery is how often what the clients created is looked at for a
// change to report.
const reportEvery = 200 * time.Millisecond

// DialGuarded dials the browser endpoint through the relay's guardian
// when it has one, else as Dial does (hold.Guarded).
func (up *upstream) DialGuarded(ctx context.Context) (*websocket.Conn, error) {
	if up.guardian == nil {
		return up.Dial(ctx)
	}
	wsURL, err := up.browserWS(ctx)
	if err != nil {
		return nil, err
	}
	c, err := up.guardian.DialPages(ctx, wsURL, up.dialer)
	if err != nil {
		up.forget(wsURL)
		return nil, err
	}
	c.SetReadLimit(up.readLimit)
	return c, nil
}

// startReports opens the report connection to the guardian and reports
// what the clients created until bg ends.
func (p *Proxy) startReports(ctx, bg context.Context) error {
	r, err := guardian.Client{Socket: p.Guardian}.DialReporter(ctx)
	if err != nil {
		return err
	}
	p.report = r
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(reportEvery)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
			}
			for _, up := range p.ups {
				if up.owners == nil {
					continue // Lightpanda: each connection's browser ends with it
				}
				ws, err := up.browserWS(bg)
				if err != nil {
					continue
				}
				l := up.owners.Snapshot()
				if err := r.Report(guardian.Report{Upstream: ws, Pages: l.Pages, Contexts: l.Contexts}); err != nil {
					p.log.Warn().Err(err).Msg("the relay's guardian is gone: a crash of the relay would now let go what it holds")
					return
				}
			}
		}
	}()
	return nil
}
