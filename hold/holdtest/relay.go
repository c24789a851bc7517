package holdtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cdp-throttle/cdp-throttle/cdp"
	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// Relay is a relay of the tests' own in front of the fake browser: each
// client connection it serves gets one to the browser, and its messages
// are handed to the Holder's hold.Conn at the moments package relay
// hands them (FromClient on the client's reader; Wants, then FromBrowser,
// on the browser's). Message by message, not frame by frame: what the
// wire looks like is package relay's business, not holding's.
type Relay struct {
	*Holder
	Srv  *httptest.Server
	Addr string // host:port it listens on

	fb    *fakebrowser.Browser
	log   zerolog.Logger
	mu    sync.Mutex                   // guards conns; takes no other
	conns map[*websocket.Conn]struct{} // the sockets open, closed at the end
	pairs sync.WaitGroup
}

// Serve serves clients in front of fb, held by th; it is closed when the
// test ends, before th is.
func Serve(t *testing.T, th *Holder, fb *fakebrowser.Browser) *Relay {
	t.Helper()
	r := &Relay{Holder: th, fb: fb, log: zerolog.New(th.Logs).Level(zerolog.DebugLevel), conns: make(map[*websocket.Conn]struct{})}
	r.Srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.Addr = r.Srv.Listener.Addr().String()
	t.Cleanup(r.close)
	return r
}

// Start starts a Holder (Arm) and serves clients in front of it.
func Start(t *testing.T, fb *fakebrowser.Browser, cfg limiter.Config, ways hold.Ways, opts ...func(*hold.Holder)) *Relay {
	t.Helper()
	th := Arm(t, fb, cfg, ways, opts...)
	return Serve(t, th, fb)
}

// StartLightpanda starts a relay, as Start does, in front of a new
// Lightpanda-like fake browser, and connects a client (Client); the test
// is checked for leaked goroutines (fakebrowser.CheckLeaks).
func StartLightpanda(t *testing.T, cfg limiter.Config, ways hold.Ways, opts ...func(*hold.Holder)) (*Relay, *websocket.Conn, *fakebrowser.Conn) {
	t.Helper()
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, fakebrowser.Config{Lightpanda: true})
	r := Start(t, fb, cfg, ways, opts...)
	c, fc := r.Client(t)
	return r, c, fc
}

// Dial connects a client to the relay's path; it is closed when the test
// ends.
func (r *Relay) Dial(t *testing.T, path string, hdr http.Header) *websocket.Conn {
	t.Helper()
	return Dial(t, r.Addr, path, hdr)
}

// Dial connects a client to path on the relay at addr (host:port); it is
// closed when the test ends. Package relay's tests dial their relay so.
func Dial(t *testing.T, addr, path string, hdr http.Header) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.DefaultDialer.Dial("ws://"+addr+path, hdr)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dialing the relay at %s: %v (status %d)", path, err, status)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Client connects a client to the relay's root, as most clients connect,
// and returns it with the browser's end of the connection the relay opened
// for it.
func (r *Relay) Client(t *testing.T) (*websocket.Conn, *fakebrowser.Conn) {
	t.Helper()
	c := r.Dial(t, "/", nil)
	return c, r.fb.Accept(t)
}

func (r *Relay) close() {
	r.Srv.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.pairs.Wait()
}

func (r *Relay) track(c *websocket.Conn, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
}

func (r *Relay) serve(w http.ResponseWriter, req *http.Request) {
	switch {
	case websocket.IsWebSocketUpgrade(req):
		r.relay(w, req)
	case strings.TrimSuffix(req.URL.Path, "/") == "/json/new":
		r.newPage(w, req)
	default:
		u, _ := url.Parse(r.fb.URL())
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, req)
	}
}

// newPage asks the browser for a page as the relay does, telling the
// holding before and after (Browser.NewPage).
func (r *Relay) newPage(w http.ResponseWriter, req *http.Request) {
	created := r.Browser.NewPage(req.URL.RawQuery)
	out, err := http.NewRequest(http.MethodPut, r.fb.URL()+"/json/new?"+req.URL.RawQuery, nil)
	if err != nil {
		created("")
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		created("")
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var page struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &page)
	created(page.ID)
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// relay relays one client connection.
func (r *Relay) relay(w http.ResponseWriter, req *http.Request) {
	target := r.fb.WSURL()
	if strings.HasPrefix(req.URL.Path, "/devtools/page/") {
		target = "ws://" + r.fb.Addr + req.URL.Path
	}
	br, _, err := websocket.DefaultDialer.Dial(target, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	cl, err := (&websocket.Upgrader{}).Upgrade(w, req, nil)
	if err != nil {
		br.Close()
		return
	}
	r.pairs.Add(1)
	defer r.pairs.Done()
	r.track(cl, true)
	r.track(br, true)
	defer r.track(cl, false)
	defer r.track(br, false)
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{path: req.URL.Path, ctx: ctx, log: &r.log, cl: cl, br: br}
	conn := r.Browser.Conn(c)
	if conn != nil {
		conn.Start()
	}
	browserDone := make(chan struct{})
	go func() {
		defer close(browserDone)
		for {
			_, msg, err := br.ReadMessage()
			if err != nil {
				break
			}
			if conn != nil && conn.Wants(msg) {
				if hd, err := cdp.Scan(msg); err == nil && conn.FromBrowser(hd, msg) {
					continue
				}
			}
			c.ToClient(msg)
		}
		cl.Close()
	}()
	for {
		typ, msg, err := cl.ReadMessage()
		if err != nil {
			break
		}
		if typ == websocket.TextMessage && conn != nil {
			if hd, err := cdp.Scan(msg); err == nil && conn.FromClient(hd, msg) {
				continue
			}
		}
		c.ToBrowser(msg)
	}
	br.Close()
	<-browserDone
	cancel()
	c.held.Wait()
	if conn != nil {
		conn.Ended()
	}
}

// client is one client connection as holding sees it (hold.Client).
type client struct {
	path     string
	ctx      context.Context
	held     sync.WaitGroup
	log      *zerolog.Logger
	cmu, bmu sync.Mutex // serialise the writes to cl and br
	cl, br   *websocket.Conn
}

func (c *client) Path() string               { return c.path }
func (c *client) Context() context.Context   { return c.ctx }
func (c *client) Held() *sync.WaitGroup      { return &c.held }
func (c *client) Log() *zerolog.Logger       { return c.log }
func (c *client) ToBrowser(msg []byte) error { return write(&c.bmu, c.br, msg) }
func (c *client) ToClient(msg []byte) error  { return write(&c.cmu, c.cl, msg) }

func write(mu *sync.Mutex, ws *websocket.Conn, msg []byte) error {
	mu.Lock()
	defer mu.Unlock()
	ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return ws.WriteMessage(websocket.TextMessage, msg)
}
