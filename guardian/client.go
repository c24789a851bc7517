package guardian

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Client is the relay's end of its guardian, listening at Socket (what
// Supervise passes in EnvSocket). Its zero value is not usable.
type Client struct {
	Socket string
}

// dialer returns d (or a default), dialing the guardian's socket whatever
// the URL's host.
func (c Client) dialer(d *websocket.Dialer) *websocket.Dialer {
	var dd websocket.Dialer
	if d != nil {
		dd = *d
	}
	if dd.HandshakeTimeout == 0 {
		dd.HandshakeTimeout = 10 * time.Second
	}
	dd.Proxy = nil
	dd.NetDialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", c.Socket)
	}
	return &dd
}

// DialPages dials the browser endpoint browserWS through the guardian,
// with d's buffers and timeout: the connection the relay holds
// navigations in. Close it with a close frame (CloseMessage) when the
// relay means to: one that ends without is taken for the relay's death.
func (c Client) DialPages(ctx context.Context, browserWS string, d *websocket.Dialer) (*websocket.Conn, error) {
	conn, _, err := c.dialer(d).DialContext(ctx, "ws://guardian/pages?to="+url.QueryEscape(browserWS), nil)
	if err != nil {
		return nil, fmt.Errorf("guardian: dialing the browser through the guardian: %w", err)
	}
	return conn, nil
}

// Reporter tells the guardian what the relay's clients created in each
// browser, as it changes, so that the guardian closes it if the relay
// dies. Its methods are safe for concurrent use.
type Reporter struct {
	mu   sync.Mutex
	conn *websocket.Conn   // guarded by mu
	last map[string]string // guarded by mu; the last report sent, by browser endpoint
	bye  bool              // guarded by mu; Bye was said: nothing more is reported
}

// DialReporter opens the relay's report connection to its guardian.
func (c Client) DialReporter(ctx context.Context) (*Reporter, error) {
	conn, _, err := c.dialer(nil).DialContext(ctx, "ws://guardian/report", nil)
	if err != nil {
		return nil, fmt.Errorf("guardian: dialing the guardian: %w", err)
	}
	return &Reporter{conn: conn, last: make(map[string]string)}, nil
}

// Report sends rep unless it says what the last one of its browser said.
func (r *Reporter) Report(rep Report) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bye || r.last[rep.Upstream] == string(b) {
		return nil
	}
	r.conn.SetWriteDeadline(time.Now().Add(writeWait))
	if err := r.conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return fmt.Errorf("guardian: reporting: %w", err)
	}
	r.last[rep.Upstream] = string(b)
	return nil
}

// Bye tells the guardian the relay stops by its own hand (it closed what
// its clients created itself), and closes the connection.
func (r *Reporter) Bye() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bye = true
	b, _ := json.Marshal(Report{Bye: true})
	r.conn.SetWriteDeadline(time.Now().Add(writeWait))
	r.conn.WriteMessage(websocket.TextMessage, b)
	r.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	r.conn.Close()
}
