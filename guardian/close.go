package guardian

import (
	"context"
	"fmt"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/redact"
)

// closeWait bounds closing what one relay's clients created in one
// browser.
const closeWait = 3 * time.Second

// closeTargets closes rep's pages (Target.closeTarget), then its browser
// contexts (Target.disposeBrowserContext), through a connection of its
// own to rep's browser endpoint, all commands at once, and counts those
// closed (or already gone).
func closeTargets(ctx context.Context, rep Report) (pages, contexts int, err error) {
	dialer := websocket.Dialer{HandshakeTimeout: closeWait}
	c, _, err := dialer.DialContext(ctx, rep.Upstream, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("guardian: dialing %s: %w", redact.URL(rep.Upstream), err)
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetWriteDeadline(deadline)
	c.SetReadDeadline(deadline)
	c.SetReadLimit(maxMessage)
	id := int64(0)
	for _, p := range rep.Pages {
		id++
		msg, _ := cdp.Command(id, "Target.closeTarget", "", &target.CloseTargetParams{TargetID: target.ID(p)})
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			return 0, 0, err
		}
	}
	for _, b := range rep.Contexts {
		id++
		msg, _ := cdp.Command(id, "Target.disposeBrowserContext", "", map[string]string{"browserContextId": b})
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			return 0, 0, err
		}
	}
	for left := id; left > 0; {
		_, data, err := c.ReadMessage()
		if err != nil {
			return pages, contexts, err
		}
		hd, err := cdp.Scan(data)
		if err != nil || !hd.HasID || hd.ID < 1 || hd.ID > id {
			continue
		}
		left--
		if hd.ID <= int64(len(rep.Pages)) {
			pages++
		} else {
			contexts++
		}
	}
	return pages, contexts, nil
}
