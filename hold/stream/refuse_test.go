package stream

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// TestStreamHoldRefusesDisallowed: held in the client stream, a disallowed
// Page.navigate is answered as Chromium answers a blocked navigation,
// errorText net::ERR_BLOCKED_BY_CLIENT, and never reaches the browser; the
// session's next command goes on.
func TestStreamHoldRefusesDisallowed(t *testing.T) {
	obey, lim := holdtest.Obeying(t, "User-agent: *\nDisallow: /private/\n", "a.test=fixed:1h,burst:1")
	tp, c, fc := client(t, fakebrowser.Config{Lightpanda: true}, limiter.Config{}, obey)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/private/x"},"sessionId":"SID-1"}`))
	_, data := holdtest.ReadClient(t, c)
	got := string(data)
	if !strings.Contains(got, `"id":1`) || !strings.Contains(got, `"errorText":"net::ERR_BLOCKED_BY_CLIENT"`) {
		t.Fatalf("client got %s, want Page.navigate's result with errorText net::ERR_BLOCKED_BY_CLIENT", got)
	}
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/public/x"},"sessionId":"SID-1"}`))
	if m := fc.Next(t); !strings.Contains(string(m.Data), "/public/x") {
		t.Fatalf("browser got %s, want the allowed navigation (and never the refused one)", m.Data)
	}
	if n := (*lim).Len(); n != 1 {
		t.Errorf("limiter knows %d hosts, want a.test once, booked by the allowed navigation alone", n)
	}
	if n := tp.Counts.Disallowed.Load(); n != 1 {
		t.Errorf("holding counted %d disallowed navigations, want 1", n)
	}
}

// TestStreamHoldDefers: held in the client stream, with --max-wait, a
// Page.navigate whose slot lies further ahead is answered at once with an
// errorText that says the relay deferred it, its status and when to come
// back (a command's answer has no room for a response), never reaching
// the browser; it books nothing, and is counted deferred.
func TestStreamHoldDefers(t *testing.T) {
	cfg := holdtest.Fixed(time.Minute)
	cfg.MaxWait = 10 * time.Second
	tp, c, fc := client(t, fakebrowser.Config{Lightpanda: true}, cfg)
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/1"},"sessionId":"SID-1"}`))
	if m := fc.Next(t); !strings.Contains(string(m.Data), "/1") {
		t.Fatalf("browser got %s, want the first navigation", m.Data)
	}
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"},"sessionId":"SID-1"}`))
	_, data := holdtest.ReadClient(t, c)
	got := string(data)
	if !strings.Contains(got, `"id":2`) || !strings.Contains(got, `"errorText":"net::ERR_HTTP_RESPONSE_CODE_FAILURE (cdp-throttle: 429 deferred, reason=max-wait, retry after `) {
		t.Fatalf("client got %s, want Page.navigate's result with an errorText saying it was deferred", got)
	}
	if after := got[strings.Index(got, "retry after ")+len("retry after "):]; !strings.HasPrefix(after, "60 s") && !strings.HasPrefix(after, "59 s") {
		t.Errorf("errorText says retry after %q, want the minute to its slot", after)
	}
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":3,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"SID-1"}`))
	if m := fc.Next(t); !strings.Contains(string(m.Data), "Runtime.evaluate") {
		t.Fatalf("browser got %s, want the next command (and never the deferred navigation)", m.Data)
	}
	tp.Holder.Holder.Wait()
	if n := tp.Counts.Deferred.Load(); n != 1 {
		t.Errorf("holding counted %d deferred navigations, want 1", n)
	}
	if n := tp.Counts.Booked.Load(); n != 1 {
		t.Errorf("holding booked %d navigations, want the first alone", n)
	}
}
