//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// rawClient is a bare CDP client over one websocket, the way any raw
// websocket user would talk to the relay. It records every message it gets.
type rawClient struct {
	t  testing.TB
	c  *websocket.Conn
	wm sync.Mutex

	mu       sync.Mutex
	nextID   int64
	waiting  map[int64]chan rawMessage
	received []rawMessage
	done     chan struct{}
	closeErr error // how the connection ended, once done is closed
}

type rawMessage struct {
	ID     int64           `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
	SessionID string `json:"sessionId,omitempty"`
}

func dialRaw(t testing.TB, url string) *rawClient {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatalf("dialing %s: %v", url, err)
	}
	rc := &rawClient{t: t, c: c, waiting: map[int64]chan rawMessage{}, done: make(chan struct{})}
	go rc.read()
	t.Cleanup(func() { rc.close() })
	return rc
}

func (rc *rawClient) close() {
	rc.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	select {
	case <-rc.done:
	case <-time.After(2 * time.Second):
	}
	rc.c.Close()
	<-rc.done
}

func (rc *rawClient) read() {
	defer close(rc.done)
	for {
		_, data, err := rc.c.ReadMessage()
		if err != nil {
			rc.closeErr = err
			return
		}
		var m rawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			rc.t.Errorf("unreadable message from the relay: %v: %.200s", err, data)
			continue
		}
		rc.mu.Lock()
		rc.received = append(rc.received, m)
		ch := rc.waiting[m.ID]
		delete(rc.waiting, m.ID)
		rc.mu.Unlock()
		if m.ID != 0 && ch != nil {
			ch <- m
		}
	}
}

// send writes a command and returns a channel for its reply.
func (rc *rawClient) send(session, method string, params any) (int64, <-chan rawMessage) {
	rc.mu.Lock()
	rc.nextID++
	id := rc.nextID
	ch := make(chan rawMessage, 1)
	rc.waiting[id] = ch
	rc.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, _ := json.Marshal(msg)
	rc.wm.Lock()
	err := rc.c.WriteMessage(websocket.TextMessage, data)
	rc.wm.Unlock()
	if err != nil {
		select {
		case <-rc.done: // the connection is over; the call just fails
		default:
			rc.t.Errorf("sending %s: %v", method, err)
		}
	}
	return id, ch
}

// call sends a command and waits for its result.
func (rc *rawClient) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	_, ch := rc.send(session, method, params)
	var m rawMessage
	select {
	case m = <-ch:
	case <-rc.done:
		select {
		case m = <-ch: // answered before the connection ended
		default:
			return nil, fmt.Errorf("%s: the connection ended: %v", method, rc.closeErr)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
	}
	return m.Result, nil
}

func (rc *rawClient) mustCall(session, method string, params any) json.RawMessage {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := rc.call(ctx, session, method, params)
	if err != nil {
		rc.t.Fatal(err)
	}
	return res
}

// newPage creates a page in a fresh browser context and attaches to it,
// returning the session and target ids. The context is disposed at cleanup.
func (rc *rawClient) newPage() (session, targetID string) {
	rc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session, targetID, err := rc.tryNewPage(ctx)
	if err != nil {
		rc.t.Fatal(err)
	}
	return session, targetID
}

// tryNewPage is newPage for a caller that can do something about a
// failure (a browser that is restarting): the error instead of the end of
// the test.
func (rc *rawClient) tryNewPage(ctx context.Context) (session, targetID string, err error) {
	var bc struct {
		BrowserContextID string `json:"browserContextId"`
	}
	res, err := rc.call(ctx, "", "Target.createBrowserContext", map[string]any{"disposeOnDetach": true})
	if err != nil {
		return "", "", err
	}
	json.Unmarshal(res, &bc)
	rc.disposeAtCleanup(bc.BrowserContextID)
	var tg struct {
		TargetID string `json:"targetId"`
	}
	if res, err = rc.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": bc.BrowserContextID}); err != nil {
		return "", "", err
	}
	json.Unmarshal(res, &tg)
	var at struct {
		SessionID string `json:"sessionId"`
	}
	if res, err = rc.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": tg.TargetID, "flatten": true}); err != nil {
		return "", "", err
	}
	json.Unmarshal(res, &at)
	return at.SessionID, tg.TargetID, nil
}

// newContext creates a browser context, disposed when the connection ends
// and at cleanup, and returns its id.
func (rc *rawClient) newContext() string {
	rc.t.Helper()
	var bc struct{ BrowserContextID string }
	json.Unmarshal(rc.mustCall("", "Target.createBrowserContext", map[string]any{"disposeOnDetach": true}), &bc)
	rc.disposeAtCleanup(bc.BrowserContextID)
	return bc.BrowserContextID
}

// disposeAtCleanup disposes of a browser context when the test ends.
func (rc *rawClient) disposeAtCleanup(id string) {
	rc.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rc.call(ctx, "", "Target.disposeBrowserContext", map[string]any{"browserContextId": id})
	})
}

// openTarget creates a target with params (its url, browser context,
// window) and attaches to it, flat, returning the session.
func (rc *rawClient) openTarget(params map[string]any) (session string) {
	rc.t.Helper()
	var tg struct{ TargetID string }
	json.Unmarshal(rc.mustCall("", "Target.createTarget", params), &tg)
	var at struct{ SessionID string }
	json.Unmarshal(rc.mustCall("", "Target.attachToTarget", map[string]any{"targetId": tg.TargetID, "flatten": true}), &at)
	return at.SessionID
}

// screenshot captures session's page as a PNG.
func (rc *rawClient) screenshot(session string) ([]byte, error) {
	rc.t.Helper()
	var shot struct{ Data string }
	json.Unmarshal(rc.mustCall(session, "Page.captureScreenshot", map[string]any{"format": "png"}), &shot)
	return base64.StdEncoding.DecodeString(shot.Data)
}

// pageClient is a client's connection and the page it attached to.
type pageClient struct {
	rc      *rawClient
	session string
}

// newPageClient dials ws and opens a page in a fresh browser context.
func newPageClient(t testing.TB, ws string) pageClient {
	t.Helper()
	rc := dialRaw(t, ws)
	session, _ := rc.newPage()
	return pageClient{rc, session}
}

// navigate sends the page to url and waits, up to within, for the answer.
func (c pageClient) navigate(ctx context.Context, within time.Duration, url string) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, err := c.rc.call(ctx, c.session, "Page.navigate", map[string]any{"url": url})
	return err
}

// messages returns what the client has received so far.
func (rc *rawClient) messages() []rawMessage {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]rawMessage(nil), rc.received...)
}

// browserWSVia returns the browser websocket URL the relay advertises.
func browserWSVia(t testing.TB, r *relayed) string {
	t.Helper()
	resp, err := httpGet(r.url + "/json/version")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		WS string `json:"webSocketDebuggerUrl"`
	}
	if err := json.Unmarshal(resp, &v); err != nil || v.WS == "" {
		t.Fatalf("/json/version through the relay: %v: %s", err, resp)
	}
	return v.WS
}

// endedWithoutFrame reports whether a connection ended the way Chromium
// ends one when it exits or dies, which is how the relay ends a client's:
// no close frame (gorilla/websocket says 1006), or a reset.
func endedWithoutFrame(err error) bool {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code == websocket.CloseAbnormalClosure
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNRESET)
}
