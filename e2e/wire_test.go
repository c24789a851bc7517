//go:build e2e

package e2e

// The wire as a client's websocket library sees it: a client that speaks
// raw bytes (no websocket library) scripts one session and records every
// frame it gets, from the browser directly and through the relay.

import (
	"bufio"
	wbinary "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// rawFrame is a frame as a raw socket reads it.
type rawFrame struct {
	fin  bool
	op   byte
	data []byte
}

// wireConn is a websocket written and read byte by byte.
type wireConn struct {
	nc net.Conn
	br *bufio.Reader
}

// readFrame reads one frame, as RFC 6455 section 5.2 draws it.
func (c *wireConn) readFrame() (rawFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return rawFrame{}, err
	}
	f := rawFrame{fin: h[0]&0x80 != 0, op: h[0] & 0xf}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return f, err
		}
		n = uint64(wbinary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(c.br, b[:]); err != nil {
			return f, err
		}
		n = wbinary.BigEndian.Uint64(b[:])
	}
	if h[1]&0x80 != 0 {
		return f, errors.New("a masked frame from the server")
	}
	if n > 64<<20 {
		return f, fmt.Errorf("a frame of %d bytes", n)
	}
	f.data = make([]byte, n)
	_, err := io.ReadFull(c.br, f.data)
	return f, err
}

// send writes one masked frame with FIN set.
func (c *wireConn) send(op byte, p []byte) error {
	b := []byte{0x80 | op}
	switch {
	case len(p) < 126:
		b = append(b, 0x80|byte(len(p)))
	case len(p) < 1<<16:
		b = append(b, 0x80|126, byte(len(p)>>8), byte(len(p)))
	default:
		b = append(b, 0x80|127)
		b = wbinary.BigEndian.AppendUint64(b, uint64(len(p)))
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key[:]...)
	for i, c := range p {
		b = append(b, c^key[i%4])
	}
	_, err := c.nc.Write(b)
	return err
}

// wireUpgrade dials the websocket at wsURL with the given header lines
// and returns the answer's head and body as the client reads them.
func wireUpgrade(t *testing.T, wsURL, lines string) (head, body string, c *wireConn) {
	t.Helper()
	u, err := url.Parse(wsURL)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(nc, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", u.RequestURI(), u.Host, lines)
	br := bufio.NewReader(nc)
	var hb strings.Builder
	for {
		line, err := br.ReadString('\n')
		hb.WriteString(line)
		if err != nil {
			t.Fatalf("upgrade at %s: %v after %q", wsURL, err, hb.String())
		}
		if line == "\r\n" {
			break
		}
	}
	head = hb.String()
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && resp.ContentLength > 0 {
		b := make([]byte, resp.ContentLength)
		io.ReadFull(br, b)
		body = string(b)
	}
	nc.SetDeadline(time.Time{})
	return head, body, &wireConn{nc: nc, br: br}
}

const wireLines = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"

// transcript is what a client got, a line a frame or event.
type transcript []string

// frameLine describes a frame: its opcode, FIN bit and length, and for
// a message the id or method it carries (lengths are rounded to 64
// bytes: timestamps and reasons differ run to run).
func frameLine(f rawFrame) string {
	s := fmt.Sprintf("op=%d fin=%v", f.op, f.fin)
	switch f.op {
	case 1:
		var m struct {
			ID     *int64
			Method string
			Error  *struct{ Code int }
		}
		json.Unmarshal(f.data, &m)
		switch {
		case m.ID != nil && m.Error != nil:
			s += fmt.Sprintf(" id=%d error=%d", *m.ID, m.Error.Code)
		case m.ID != nil:
			s += fmt.Sprintf(" id=%d", *m.ID)
		default:
			s += " " + m.Method
		}
		return s + fmt.Sprintf(" len≈%d", (len(f.data)+32)/64*64)
	case 8:
		code := 1005
		if len(f.data) >= 2 {
			code = int(wbinary.BigEndian.Uint16(f.data))
		}
		return s + fmt.Sprintf(" close=%d len=%d", code, len(f.data))
	}
	if f.op >= 8 {
		return s + fmt.Sprintf(" len=%d %q", len(f.data), f.data)
	}
	return s + fmt.Sprintf(" len=%d", len(f.data))
}

// wireSession is one session's script: the upgrades, then one
// connection through a 3 MB reply, a 3 MB event, idle, a ping and
// Browser.close, and a second connection the client closes.
type wireSession struct {
	t    *testing.T
	ws   string        // the browser endpoint, directly or through the relay
	idle time.Duration // how long the session idles
	out  transcript
}

func (s *wireSession) log(format string, args ...any) {
	s.out = append(s.out, fmt.Sprintf(format, args...))
}

// until reads frames, each a line, until one satisfies stop or the
// connection ends, within d.
func (s *wireSession) until(c *wireConn, d time.Duration, stop func(rawFrame) bool) (rawFrame, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := c.readFrame()
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				s.log("connection ended")
			case errors.As(err, &ne) && ne.Timeout():
				s.log("nothing more within %v", d)
			default:
				s.log("connection ended: %v", err)
			}
			return f, err
		}
		s.log("%s", frameLine(f))
		if stop(f) {
			return f, nil
		}
	}
}

// reply is a stop for the answer to id.
func reply(id int64) func(rawFrame) bool {
	return func(f rawFrame) bool {
		var m struct{ ID *int64 }
		return f.op == 1 && json.Unmarshal(f.data, &m) == nil && m.ID != nil && *m.ID == id
	}
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (s *wireSession) run() {
	t := s.t
	for _, u := range []struct{ name, lines string }{
		{"a base64 key of 16 bytes", wireLines + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"},
		{"go-rod's key", wireLines + "Sec-WebSocket-Key: nil\r\n"},
		{"no key", wireLines},
		{"no version", "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: nil\r\n"},
		{"version 8", "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: nil\r\n"},
		{"Connection: keep-alive, Upgrade", "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: nil\r\n"},
	} {
		head, body, c := wireUpgrade(t, s.ws, u.lines)
		s.log("upgrade with %s: %q %q", u.name, head, body)
		c.nc.Close()
	}
	// A foreign Origin: refused by both (the relay in its own words).
	head, _, c := wireUpgrade(t, s.ws, wireLines+"Sec-WebSocket-Key: nil\r\nOrigin: http://evil.example\r\n")
	s.log("upgrade with a foreign Origin: %s", head[:strings.Index(head, "\r\n")][:12])
	c.nc.Close()

	// The session: as a client's library dials, with a key of 16 bytes.
	const key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	_, _, c = wireUpgrade(t, s.ws, wireLines+key)
	failed := false
	call := func(id int64, method, session string, params any, d time.Duration) rawFrame {
		if failed {
			return rawFrame{}
		}
		m := map[string]any{"id": id, "method": method, "params": params}
		if session != "" {
			m["sessionId"] = session
		}
		b, _ := json.Marshal(m)
		if err := c.send(1, b); err != nil {
			s.log("%s: %v", method, err)
			failed = true
			return rawFrame{}
		}
		f, err := s.until(c, d, reply(id))
		failed = err != nil
		return f
	}
	var created struct{ Result struct{ TargetID string } }
	json.Unmarshal(call(1, "Target.createTarget", "", map[string]any{"url": "about:blank"}, 30*time.Second).data, &created)
	var attached struct{ Result struct{ SessionID string } }
	json.Unmarshal(call(2, "Target.attachToTarget", "", map[string]any{"targetId": created.Result.TargetID, "flatten": true}, 30*time.Second).data, &attached)
	session := attached.Result.SessionID
	// A 3 MB reply.
	call(3, "Runtime.evaluate", session, map[string]any{"expression": "'r'.repeat(3e6)", "returnByValue": true}, 60*time.Second)
	// A 3 MB event, and the events of Runtime.enable.
	call(4, "Runtime.enable", session, map[string]any{}, 30*time.Second)
	call(5, "Runtime.evaluate", session, map[string]any{"expression": "console.log('e'.repeat(3e6)); 1"}, 60*time.Second)
	if failed {
		return
	}
	// Idle: nothing comes, nothing is asked of the client.
	if _, err := s.until(c, s.idle, func(rawFrame) bool { return false }); !isTimeout(err) {
		return
	}
	s.log("idle %v", s.idle)
	if err := c.send(9, []byte("hello")); err != nil {
		s.log("ping: %v", err)
		return
	}
	s.until(c, 10*time.Second, func(f rawFrame) bool { return f.op == 10 })
	call(6, "Browser.getVersion", "", map[string]any{}, 30*time.Second)

	// A second connection, which the client closes.
	_, _, c2 := wireUpgrade(t, s.ws, wireLines+key)
	c2.send(8, []byte{0x03, 0xe8})
	s.log("second connection, closed by the client:")
	s.until(c2, 10*time.Second, func(rawFrame) bool { return false })

	// Browser.close: the answer, then the connection ends.
	b, _ := json.Marshal(map[string]any{"id": 7, "method": "Browser.close"})
	c.send(1, b)
	s.log("Browser.close:")
	s.until(c, 10*time.Second, func(rawFrame) bool { return false })
}

// TestWireAsTheBrowser runs one session's script against Chromium and
// Lightpanda, each directly and through the relay, side by side, and
// checks the relay's transcript is the browser's: the upgrades accepted
// and refused alike, every frame with the same opcode, FIN bit and
// length, a 3 MB message in one frame, nothing during 80 s idle (no
// ping to answer), the client's ping answered, the client's close
// answered, and after Browser.close the answer, then the connection's
// end, no close frame.
func TestWireAsTheBrowser(t *testing.T) {
	t.Parallel()
	idle := 80 * time.Second
	if d, err := time.ParseDuration(os.Getenv("WIRE_IDLE")); err == nil {
		idle = d // a shorter run while working on the test
	}
	type run struct {
		name     string
		relayed  bool
		browser  func(t *testing.T) string // its endpoint's http:// URL
		sessions transcript
	}
	chromium := func(t *testing.T) string { return ownChromium(t) }
	lightpanda := func(t *testing.T) string { return startLightpanda(t) }
	runs := []*run{
		{name: "chromium directly", browser: chromium},
		{name: "chromium through the relay", browser: chromium, relayed: true},
		{name: "lightpanda directly", browser: lightpanda},
		{name: "lightpanda through the relay", browser: lightpanda, relayed: true},
	}
	t.Run("sessions", func(t *testing.T) {
		for _, r := range runs {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				up := r.browser(t)
				if r.relayed {
					// Holding navigations with Fetch, the default, on a
					// host of no page: the relay's own connections run.
					up = startRelayTo(t, up, limiter.Config{Mode: limiter.Fixed, Interval: 100 * time.Millisecond, Burst: 1}).url
				}
				var v struct{ WebSocketDebuggerURL string }
				body, err := httpGet(up + "/json/version")
				if err != nil || json.Unmarshal(body, &v) != nil {
					t.Fatalf("%s/json/version: %v: %s", up, err, body)
				}
				s := &wireSession{t: t, ws: v.WebSocketDebuggerURL, idle: idle}
				s.run()
				r.sessions = s.out
			})
		}
	})
	for i := 0; i < len(runs); i += 2 {
		direct, relayed := runs[i], runs[i+1]
		t.Run(strings.Fields(direct.name)[0], func(t *testing.T) {
			t.Logf("%s:\n%s", direct.name, strings.Join(direct.sessions, "\n"))
			d, r := direct.sessions, relayed.sessions
			for j := range max(len(d), len(r)) {
				var dl, rl string
				if j < len(d) {
					dl = d[j]
				}
				if j < len(r) {
					rl = r[j]
				}
				if dl != rl {
					t.Errorf("line %d:\n  %s: %s\n  %s: %s", j+1, direct.name, dl, relayed.name, rl)
				}
			}
		})
	}
}
