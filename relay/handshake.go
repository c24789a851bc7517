package relay

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/cdp-throttle/cdp-throttle/wire"
)

// The opening handshake is the browser's: the relay sends the browser
// the client's own upgrade request and hands the client the browser's
// answer byte for byte, so that whatever the browser accepts (Chromium
// takes a Sec-WebSocket-Key that is not 16 base64 bytes, as go-rod
// sends it, and any Sec-WebSocket-Version but none) is accepted, and
// refused as the browser refuses it, with the browser's status and
// words. What the relay decides itself comes before: access (token,
// Host, Origin) and a place in a browser.

// forwarded are the headers of a client's upgrade request the browser
// gets. Not its Host (the browser's own address: Chromium takes only an
// IP or localhost), Origin (the relay's --allow-origin decides), token,
// cookies, nor Sec-WebSocket-Extensions: the relay reads the messages,
// so none is compressed (permessage-deflate is declined, as RFC 6455
// lets a server decline it).
var forwarded = []string{"Upgrade", "Connection", "Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol", "User-Agent"}

// maxRefusal bounds the body of a refusal passed on to the client.
const maxRefusal = 64 << 10

// browserAnswer is the browser's answer to a client's upgrade request.
type browserAnswer struct {
	nc     net.Conn      // the connection to the browser; nil when it could not be dialled
	br     *bufio.Reader // reads nc: the frames after a 101
	head   []byte        // the answer's status line and headers, as the browser wrote them
	status int
	body   []byte // a refusal's body, up to maxRefusal
}

// upgraded reports whether the browser switched protocols.
func (a *browserAnswer) upgraded() bool { return a.status == http.StatusSwitchingProtocols }

// close closes the connection of an answer not taken.
func (a *browserAnswer) close() {
	if a != nil && a.nc != nil {
		a.nc.Close()
	}
}

// dialBrowser sends the client's upgrade request r to the browser at
// target (a ws:// URL) and reads its answer, within clientHandshake and
// r's context. An error means no answer: the browser could not be
// reached, or did not answer in HTTP.
func (p *Proxy) dialBrowser(ctx context.Context, target string, r *http.Request) (*browserAnswer, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("relay: browser endpoint %q: %w", target, err)
	}
	ctx, cancel := context.WithTimeout(ctx, clientHandshake)
	defer cancel()
	nc, err := dialBatching(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("relay: dialing the browser: %w", err)
	}
	// The handshake ends with ctx: a client that leaves stops waiting.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var req bytes.Buffer
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\n", u.RequestURI(), u.Host)
	for _, name := range forwarded {
		for _, v := range r.Header.Values(name) {
			fmt.Fprintf(&req, "%s: %s\r\n", name, v)
		}
	}
	req.WriteString("\r\n")
	a := &browserAnswer{nc: nc, br: bufio.NewReaderSize(nc, readBuffer)}
	if _, err := nc.Write(req.Bytes()); err != nil {
		nc.Close()
		return nil, fmt.Errorf("relay: sending the browser the upgrade: %w", ctxErr(ctx, err))
	}
	head, resp, err := wire.ReadHead(a.br)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("relay: the browser's answer to the upgrade: %w", ctxErr(ctx, err))
	}
	a.head, a.status = head, resp.StatusCode
	if !a.upgraded() {
		n := resp.ContentLength
		if n < 0 || n > maxRefusal {
			n = maxRefusal
		}
		a.body = make([]byte, n)
		k, _ := io.ReadFull(a.br, a.body)
		a.body = a.body[:k]
		nc.Close()
		a.nc = nil
		return a, nil
	}
	nc.SetDeadline(time.Time{})
	keepAlive(nc.(*wire.Batch).Conn)
	return a, nil
}

// ctxErr is ctx's error when ctx ended, which is why err happened.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// passRefusal hands the client the browser's refusal of its upgrade,
// byte for byte, and closes its connection.
func passRefusal(w http.ResponseWriter, a *browserAnswer) error {
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	defer nc.Close()
	brw.Writer.Write(a.head)
	brw.Writer.Write(a.body)
	return brw.Writer.Flush()
}

// takeClient takes the client's connection from the HTTP server once
// the browser switched protocols, and hands the client the browser's
// answer.
func takeClient(w http.ResponseWriter, a *browserAnswer) (net.Conn, *bufio.Reader, error) {
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	nc.SetDeadline(time.Time{})
	keepAlive(nc)
	bc := wire.Batching(nc)
	// Anything the client sent after its request is already in brw.
	var in io.Reader = bc
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		in = io.MultiReader(bytes.NewReader(bytes.Clone(early)), bc)
	}
	bc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := bc.Write(a.head); err != nil {
		bc.Close()
		return nil, nil, err
	}
	return bc, bufio.NewReaderSize(in, readBuffer), nil
}

// dialBatching dials a browser's websocket connection as a wire.Batch.
func dialBatching(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return wire.Batching(c), nil
}
