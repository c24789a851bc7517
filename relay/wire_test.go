package relay

// What the relay looks like on the wire, read frame by frame with a
// client and a browser that speak raw bytes (no websocket library): the
// browser's handshake byte for byte, each frame with its sender's
// opcode, FIN bit and length.

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
	"github.com/cdp-throttle/cdp-throttle/wire"
)

// acceptOf is the Sec-WebSocket-Accept for key, as RFC 6455 computes it.
func acceptOf(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// chromiumHead is Chromium 156's answer to an upgrade, byte for byte.
func chromiumHead(key string) string {
	return "HTTP/1.1 101 WebSocket Protocol Handshake\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acceptOf(key) + "\r\n\r\n"
}

// rawBrowser is a Chromium-like endpoint that answers each upgrade with
// the bytes answer gives and hands the connection to script, raw.
type rawBrowser struct {
	srv  *httptest.Server
	reqs chan *http.Request // each upgrade request, as the browser got it
	wg   sync.WaitGroup
}

func newRawBrowser(t *testing.T, answer func(r *http.Request) string, script func(nc net.Conn, fr *wire.Reader)) *rawBrowser {
	t.Helper()
	rb := &rawBrowser{reqs: make(chan *http.Request, 16)}
	rb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/json/version" {
			fmt.Fprintf(w, `{"Browser":"Chrome/156.0.0.0","webSocketDebuggerUrl":"ws://%s/devtools/browser/raw"}`, r.Host)
			return
		}
		rb.reqs <- r
		nc, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		rb.wg.Add(1)
		defer rb.wg.Done()
		defer nc.Close()
		head := answer(r)
		nc.Write([]byte(head))
		if strings.HasPrefix(head, "HTTP/1.1 101") {
			script(nc, wire.NewReader(brw.Reader))
		}
	}))
	t.Cleanup(func() {
		rb.srv.CloseClientConnections()
		rb.srv.Close()
		rb.wg.Wait()
	})
	return rb
}

// rawConn is one end of a websocket written and read as bytes.
type rawConn struct {
	nc     net.Conn
	fr     *wire.Reader
	masked bool // frames written are masked: a client's
}

// rawDial sends an upgrade request of the given header lines to addr
// and returns the answer's head, byte for byte, and the connection.
func rawDial(t *testing.T, addr, path, lines string) (string, *rawConn) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(waitFor))
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, addr, lines)
	br := bufio.NewReader(nc)
	head, _, err := wire.ReadHead(br)
	if err != nil {
		t.Fatal(err)
	}
	return string(head), &rawConn{nc: nc, fr: wire.NewReader(br), masked: true}
}

const upgradeLines = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"

// send writes one frame.
func (c *rawConn) send(t *testing.T, fin bool, op wire.Op, p []byte) {
	t.Helper()
	h := wire.Header{Fin: fin, Op: op, Len: int64(len(p)), Masked: c.masked, Key: [4]byte{7, 1, 2, 9}}
	b := wire.AppendHeader(nil, h)
	q := bytes.Clone(p)
	if c.masked {
		wire.Mask(h.Key, 0, q)
	}
	if _, err := c.nc.Write(append(b, q...)); err != nil {
		t.Fatal(err)
	}
}

// frame is a frame as read, with its payload.
type frame struct {
	wire.Header
	data []byte
}

func (f frame) String() string {
	return fmt.Sprintf("%s fin=%v len=%d masked=%v", f.Op, f.Fin, f.Len, f.Masked)
}

// next reads one frame.
func (c *rawConn) next(t *testing.T) frame {
	t.Helper()
	h, err := c.fr.Next()
	if err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	data, err := io.ReadAll(c.fr)
	if err != nil {
		t.Fatalf("reading a %s frame's payload: %v", h.Op, err)
	}
	return frame{h, data}
}

// TestHandshakeIsTheBrowsers checks that a client's upgrade gets the
// browser's answer byte for byte, accepted or refused as the browser
// decides (go-rod's key "nil" included), and that the browser gets the
// client's key, version and user agent but not its Origin, token or
// offer of compression.
func TestHandshakeIsTheBrowsers(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	refusal := "HTTP/1.1 500 Internal Server Error\r\nContent-Length:49\r\nContent-Type:text/html\r\n\r\nInvalid request format. The version is not valid."
	rb := newRawBrowser(t, func(r *http.Request) string {
		if r.Header.Get("Sec-WebSocket-Version") == "" {
			return refusal
		}
		return chromiumHead(r.Header.Get("Sec-WebSocket-Key"))
	}, func(nc net.Conn, fr *wire.Reader) { io.Copy(io.Discard, nc) })
	tp := relayToURL(t, rb.srv.URL, limiter.Config{Mode: limiter.Off}, func(p *Proxy) {
		p.Token = "s3cret"
		p.AllowOrigins = []string{"http://app.example"}
	})

	head, _ := rawDial(t, tp.addr, "/?token=s3cret", upgradeLines+"Sec-WebSocket-Key: nil\r\nOrigin: http://app.example\r\nUser-Agent: Go-http-client/1.1\r\n"+
		"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\nCookie: a=b\r\n")
	if want := chromiumHead("nil"); head != want {
		t.Errorf("client got\n%q\nwant the browser's\n%q", head, want)
	}
	r := <-rb.reqs
	if r.URL.Path != "/devtools/browser/raw" || r.URL.RawQuery != "" {
		t.Errorf("browser asked for %q, want its endpoint without the token", r.URL)
	}
	for name, want := range map[string]string{
		"Sec-Websocket-Key": "nil", "Sec-Websocket-Version": "13", "Upgrade": "websocket", "Connection": "Upgrade", "User-Agent": "Go-http-client/1.1",
		"Origin": "", "Sec-Websocket-Extensions": "", "Cookie": "", "Authorization": "",
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("browser got %s %q, want %q", name, got, want)
		}
	}
	if h, _, _ := net.SplitHostPort(r.Host); net.ParseIP(h) == nil {
		t.Errorf("browser got Host %q, want its own address (Chromium takes only an IP or localhost)", r.Host)
	}

	head, _ = rawDial(t, tp.addr, "/", "Authorization: Bearer s3cret\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: nil\r\n")
	if head+"Invalid request format. The version is not valid." != refusal {
		t.Errorf("client got\n%q\nwant the browser's refusal\n%q", head, refusal)
	}
}

// TestFramesAsTheirSenderFramedThem relays frames both ways between raw
// peers and checks each arrives as it was sent: a 3 MiB message in one
// frame, a fragmented one in its fragments with a ping between them, a
// fragmented one too big to read whole streamed frame by frame; toward
// the browser, as Puppeteer writes, masked, text and a command read
// whole in one frame; a ping answered by the browser; and no frame the
// peers did not send.
func TestFramesAsTheirSenderFramedThem(t *testing.T) {
	fakebrowser.CheckLeaks(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	mid := bytes.Repeat([]byte("m"), 100<<10)
	huge := bytes.Repeat([]byte("h"), 3<<20)
	// What the browser sends, frame by frame, once it got the client's
	// first command.
	fromBrowser := []frame{
		{wire.Header{Fin: true, Op: wire.Text, Len: int64(len(big))}, big},
		{wire.Header{Fin: false, Op: wire.Text, Len: 11}, []byte(`{"method":"`)},
		{wire.Header{Fin: false, Op: wire.Continuation, Len: 4}, []byte(`Page`)},
		{wire.Header{Fin: true, Op: wire.Ping, Len: 2}, []byte(`hi`)},
		{wire.Header{Fin: true, Op: wire.Continuation, Len: 17}, []byte(`.loadEventFired"}`)},
		{wire.Header{Fin: false, Op: wire.Text, Len: int64(len(mid))}, mid},
		{wire.Header{Fin: false, Op: wire.Continuation, Len: int64(len(mid))}, mid},
		{wire.Header{Fin: true, Op: wire.Continuation, Len: 3}, []byte("end")},
	}
	got := make(chan []frame, 1)
	rb := newRawBrowser(t, func(r *http.Request) string { return chromiumHead(r.Header.Get("Sec-WebSocket-Key")) },
		func(nc net.Conn, fr *wire.Reader) {
			b := &rawConn{nc: nc, fr: fr}
			var in []frame
			for len(in) < 7 {
				h, err := fr.Next()
				if err != nil {
					break
				}
				data, _ := io.ReadAll(fr)
				in = append(in, frame{h, data})
				if len(in) == 1 {
					for _, f := range fromBrowser {
						b.send(t, f.Fin, f.Op, f.data)
					}
				}
				if h.Op == wire.Ping {
					b.send(t, true, wire.Pong, data)
				}
			}
			got <- in
			io.Copy(io.Discard, nc)
		})
	tp := relayToURL(t, rb.srv.URL, limiter.Config{Mode: limiter.Off})
	_, c := rawDial(t, tp.addr, "/", upgradeLines+"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")

	c.send(t, true, wire.Text, []byte(`{"id":1,"method":"Browser.getVersion"}`))
	// A control frame in the middle of a message read whole comes before
	// it (RFC 6455 lets it come anywhere between the message's frames).
	toClient := append([]frame{fromBrowser[0], fromBrowser[3]}, fromBrowser[1], fromBrowser[2])
	toClient = append(toClient, fromBrowser[4:]...)
	for i, want := range toClient {
		if f := c.next(t); f.Header != want.Header || !bytes.Equal(f.data, want.data) {
			t.Fatalf("frame %d: client got %v, want %v as the browser sent it", i, f, want)
		}
	}
	// A command in fragments, read whole for the share: one frame.
	c.send(t, false, wire.Text, []byte(`{"id":2,`))
	c.send(t, true, wire.Continuation, []byte(`"method":"Browser.getVersion"}`))
	// Binary: the browser takes text only.
	c.send(t, true, wire.Binary, []byte(`{"id":3,"method":"Browser.getVersion"}`))
	c.send(t, true, wire.Ping, []byte("are you there"))
	if f := c.next(t); f.Op != wire.Pong || string(f.data) != "are you there" || f.Masked {
		t.Errorf("client got %v %q, want the browser's pong, unmasked", f, f.data)
	}
	// Too big to read whole: streamed in its fragments.
	c.send(t, false, wire.Text, append([]byte(`{"id":4,"method":"Runtime.evaluate","params":{"expression":"'`), huge...))
	c.send(t, false, wire.Continuation, huge)
	c.send(t, true, wire.Continuation, []byte(`'"}}`))

	in := <-got
	want := []string{
		`text fin=true len=38 masked=true {"id":1,"method":"Browser.getVersion"}`,
		`text fin=true len=38 masked=true {"id":2,"method":"Browser.getVersion"}`,
		`text fin=true len=38 masked=true {"id":3,"method":"Browser.getVersion"}`,
		`ping fin=true len=13 masked=true are you there`,
		fmt.Sprintf("text fin=false len=%d masked=true", 61+len(huge)),
		fmt.Sprintf("continuation fin=false len=%d masked=true", len(huge)),
		`continuation fin=true len=4 masked=true '"}}`,
	}
	for i, f := range in {
		s := f.String()
		if f.Len < 100 {
			s += " " + string(f.data)
		}
		if i >= len(want) || s != want[i] {
			t.Errorf("browser frame %d: %s, want %s", i, s, want[min(i, len(want)-1)])
		}
	}
	if len(in) != len(want) {
		t.Errorf("browser got %d frames, want %d", len(in), len(want))
	}
	// Nothing else: no ping from the relay while the client idles.
	c.nc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if h, err := c.fr.Next(); err == nil {
		t.Errorf("client got a %s frame nobody sent", h.Op)
	}
}
