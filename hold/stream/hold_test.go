package stream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cdp-throttle/cdp-throttle/hold"
	"github.com/cdp-throttle/cdp-throttle/hold/holdtest"
	"github.com/cdp-throttle/cdp-throttle/internal/fakebrowser"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// ways are the ways of holding the stream way's tests hold with: the
// stream way alone.
var ways = hold.Ways{Stream: New}

// inStream makes a Holder hold navigations in the client streams, as the
// relay's --intercept navigate does: Chromium in auto mode would get it
// too with the stream way alone, but Lightpanda would be asked for the
// session way, which these tests do not give.
func inStream(hd *hold.Holder) { hd.Intercept = hold.InterceptNavigate }

// start serves clients in front of fb, holding navigations in their
// streams with a limiter for cfg; opts adjust the Holder before it
// starts. It checks that the stream way holds.
func start(t *testing.T, fb *fakebrowser.Browser, cfg limiter.Config, opts ...func(*hold.Holder)) *holdtest.Relay {
	t.Helper()
	tp := holdtest.Start(t, fb, cfg, ways, append([]func(*hold.Holder){inStream}, opts...)...)
	if got := tp.Browser.Holding(); got != "navigate" {
		t.Fatalf("navigations held by %q, want navigate (in the client stream)", got)
	}
	return tp
}

// client starts a relay holding navigations in the stream, as start
// does, in front of a new fake browser for bcfg, and connects a client;
// the test is checked for leaked goroutines (fakebrowser.CheckLeaks).
// A Chromium-like browser is hushed (Hush): its tests play the browser's
// part themselves, from what was recorded from Chromium.
func client(t *testing.T, bcfg fakebrowser.Config, cfg limiter.Config, opts ...func(*hold.Holder)) (*holdtest.Relay, *websocket.Conn, *fakebrowser.Conn) {
	t.Helper()
	fakebrowser.CheckLeaks(t)
	fb := fakebrowser.New(t, bcfg)
	if !bcfg.Lightpanda {
		fb.Hush()
	}
	tp := start(t, fb, cfg, opts...)
	c, fc := tp.Client(t)
	return tp, c, fc
}

// pageSession returns the recorded Target.attachedToTarget of the page the
// session transcript navigates, with its session and target ids.
func pageSession(t *testing.T, sess *fakebrowser.Recording) (attached []byte, session, target string) {
	t.Helper()
	created := false
	for _, rm := range sess.Msgs {
		if rm.From == "client" && rm.Wire.Method == "Target.createTarget" {
			created = true
		}
		if !created || rm.Wire.Method != "Target.attachedToTarget" {
			continue
		}
		var p struct {
			SessionID  string                 `json:"sessionId"`
			TargetInfo fakebrowser.TargetInfo `json:"targetInfo"`
		}
		if json.Unmarshal(rm.Wire.Params, &p) == nil && p.TargetInfo.Type == "page" {
			return rm.Msg, p.SessionID, p.TargetInfo.TargetID
		}
	}
	t.Fatal("no recorded page session")
	return nil, "", ""
}

// replay plays recorded lines between a client and the fake browser
// through the relay: a client line is written by the client and must reach
// the browser unchanged, a browser line is sent by the fake and must reach
// the client unchanged. before, when set, is called before each browser
// line is sent.
func replay(t *testing.T, c *websocket.Conn, fc *fakebrowser.Conn, lines []fakebrowser.RecordedMsg, before func(msg []byte) []byte) {
	t.Helper()
	for _, rm := range lines {
		msg := rm.Msg
		if rm.From == "client" {
			holdtest.WriteClient(t, c, websocket.TextMessage, msg)
			if d := fakebrowser.EqualMsg(fc.Next(t).Data, msg); d != "" {
				t.Fatalf("browser got another message than %.80s: %s", msg, d)
			}
			continue
		}
		if before != nil {
			msg = before(msg)
		}
		if err := fc.Send(msg); err != nil {
			t.Fatal(err)
		}
		if _, got := holdtest.ReadClient(t, c); fakebrowser.EqualMsg(got, msg) != "" {
			t.Fatalf("client got another message than %.80s: %s", msg, fakebrowser.EqualMsg(got, msg))
		}
	}
}

// TestNavHoldReplaysChromiumSession replays a puppeteer-like session
// recorded from Chromium through a relay holding navigations in the
// stream: every message passes unchanged and in order, and the answers in
// the session's Network events reach the limiter.
func TestNavHoldReplaysChromiumSession(t *testing.T) {
	tp, c, fc := client(t, fakebrowser.Config{}, limiter.Config{})
	sess := fakebrowser.LoadRecording(t, "chromium-session.jsonl")
	var busyAnswered time.Time
	replay(t, c, fc, sess.Msgs, func(msg []byte) []byte {
		if bytes.Contains(msg, []byte(`"method":"Network.responseReceived"`)) && bytes.Contains(msg, []byte(`"status":429`)) {
			busyAnswered = time.Now()
		}
		return msg
	})
	if busyAnswered.IsZero() {
		t.Fatal("the recording has no 429")
	}
	tp.Holder.Holder.Wait() // the answers on their way to the limiter are in it
	// a.test: navigate, reload, frames, /r, /r2, /busy (429, Retry-After 3);
	// b.test: the redirect from /r and the new page; c.test: refused.
	holdtest.CheckRecorded(t, tp.Lim, busyAnswered, 0)
}

// TestNavHoldHolds sends commands to a relay holding navigations in the
// stream, with a.test booked for the next hour, and checks which of them
// the browser gets: everything that is not a navigation to a booked host,
// at once and in order.
func TestNavHoldHolds(t *testing.T) {
	sess := fakebrowser.LoadRecording(t, "chromium-session.jsonl")
	attached, S, T := pageSession(t, sess)
	nav := func(id int, session, url, frame string) string {
		m := map[string]any{"id": id, "method": "Page.navigate", "params": map[string]string{"url": url}}
		if frame != "" {
			m["params"].(map[string]string)["frameId"] = frame
		}
		if session != "" {
			m["sessionId"] = session
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	tests := []struct {
		name string
		path string   // "" is "/"
		msgs []string // sent by the client, in order
		held []int    // indexes of msgs the browser must not get
	}{
		{name: "navigate to a booked host", msgs: []string{nav(1, S, "http://a.test/x", T)}, held: []int{0}},
		{name: "navigate without frameId", msgs: []string{nav(1, S, "http://a.test/x", "")}, held: []int{0}},
		{name: "host is case-insensitive, port ignored", msgs: []string{nav(1, S, "HTTP://A.Test:8080/x", T)}, held: []int{0}},
		{name: "a held navigation blocks nothing", msgs: []string{
			nav(1, S, "http://a.test/x", T),
			fmt.Sprintf(`{"id":2,"method":"Runtime.evaluate","params":{"expression":"1+1"},"sessionId":%q}`, S),
			nav(3, "OTHER", "http://b.test/", "F"), // first to b.test: goes at once
			nav(4, "OTHER", "http://b.test/", "F"), // then b.test is booked too
			`{"id":5,"method":"Target.getTargets"}`,
		}, held: []int{0, 3}},
		{name: "iframe navigation passes", msgs: []string{nav(1, S, "http://a.test/x", "0A8EE4E25BC3BA20C6D69A84408D4DE2")}},
		{name: "unknown session gets the benefit of the doubt", msgs: []string{nav(1, "OTHER", "http://a.test/x", "F")}, held: []int{0}},
		{name: "non-network URLs and exempt hosts pass", msgs: []string{
			nav(1, S, "about:blank", T), nav(2, S, "data:text/html,hi", T), nav(3, S, "javascript:void(0)", T),
			nav(4, S, "chrome://version", T), nav(5, S, "http://localhost:8080/", T), nav(6, S, "http://127.0.0.1/", T),
			nav(7, S, "http://[::1]:9/", T), nav(8, S, "file:///etc/hosts", T),
		}},
		{name: "reload repeats the session's last URL", msgs: []string{
			nav(1, S, "http://a.test/x", T), fmt.Sprintf(`{"id":2,"method":"Page.reload","sessionId":%q}`, S),
			fmt.Sprintf(`{"id":3,"method":"Page.reload","params":{"ignoreCache":true},"sessionId":%q}`, S),
		}, held: []int{0, 1, 2}},
		{name: "reload after a non-network URL passes", msgs: []string{
			nav(1, S, "about:blank", T), fmt.Sprintf(`{"id":2,"method":"Page.reload","sessionId":%q}`, S),
		}},
		{name: "reload of a session that never navigated passes", msgs: []string{
			fmt.Sprintf(`{"id":1,"method":"Page.reload","sessionId":%q}`, S),
		}},
		{name: "new target with a URL", msgs: []string{
			`{"id":1,"method":"Target.createTarget","params":{"url":"http://a.test/"}}`,
			`{"id":2,"method":"Target.createTarget","params":{"url":"about:blank"}}`,
			`{"id":3,"method":"Target.createTarget","params":{"url":""}}`,
			`{"id":4,"method":"Target.createTarget","params":{"url":"http://a.test/","newWindow":true,"background":true}}`,
		}, held: []int{0, 3}},
		{name: "not a command: no id, not JSON, another method", msgs: []string{
			`{"method":"Page.navigate","params":{"url":"http://a.test/"}}`,
			`{"id":1,"method":"Page.navigate","params":{"url":"http://a.te`,
			`{"id":2,"method":"Runtime.evaluate","params":{"expression":"\"method\":\"Page.navigate\",\"url\":\"http://a.test/\""}}`,
			`[{"id":3,"method":"Page.navigate","params":{"url":"http://a.test/"}}]`,
			`{"id":4,"method":"Page.navigate","params":{"url":"http://a.test/"},"x":}`,
		}},
		{name: "as the browser parses it: escapes, last key wins, sessionId last", msgs: []string{
			`{"id":1,"method":"Page.\u006eavigate","params":{"url":"http:\/\/a.test\/"},"sessionId":"` + S + `"}`,
			`{"id":2,"method":"Runtime.evaluate","method":"Page.navigate","params":{"url":"http://a.test/"}}`,
			`{"id":3,"method":"Page.navigate","params":{"url":"http://a.test/"},"method":"Runtime.evaluate"}`,
			`{"id":4,"params":{"url":"http://a.test/","frameId":"IFRAME"},"method":"Page.navigate","sessionId":"` + S + `"}`,
			`{"id":5,"params":{"url":"http://a.test/","frameId":"` + T + `"},"method":"Page.navigate","sessionId":"` + S + `"}`,
			`{"id":6,"method":"Page.navigate","params":{"url":"http://a.test/","URL":"about:blank"},"sessionId":"` + S + `"}`,
			`{"id":7,"method":"Page.navigate","params":{"URL":"http://a.test/"},"sessionId":"` + S + `"}`,
		}, held: []int{0, 1, 4, 5}},
		{name: "page endpoint: its own session is the page", path: "/devtools/page/" + T, msgs: []string{
			nav(1, "", "http://a.test/", "0A8EE4E25BC3BA20C6D69A84408D4DE2"),
			nav(2, "", "http://a.test/", T),
		}, held: []int{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fakebrowser.CheckLeaks(t)
			fb := fakebrowser.New(t, fakebrowser.Config{})
			fb.Hush()
			tp := start(t, fb, holdtest.Fixed(time.Hour))
			tp.Lim.Reserve("a.test", time.Now())
			path := tt.path
			if path == "" {
				path = "/"
			}
			c := tp.Dial(t, path, nil)
			fc := fb.Accept(t)
			if path == "/" {
				if err := fc.Send(attached); err != nil {
					t.Fatal(err)
				}
				holdtest.ReadClient(t, c)
			}
			for _, m := range tt.msgs {
				holdtest.WriteClient(t, c, websocket.TextMessage, []byte(m))
			}
			const sentinel = `{"id":999999,"method":"Runtime.evaluate","params":{"expression":"done"}}`
			holdtest.WriteClient(t, c, websocket.TextMessage, []byte(sentinel))
			var want []string
			for i, m := range tt.msgs {
				if !contains(tt.held, i) {
					want = append(want, m)
				}
			}
			want = append(want, sentinel)
			// A navigation that may go at once is booked off the client's
			// reader, so it may arrive after what the client sent next;
			// the relay asks where a page it knows nothing of is (its own
			// commands have negative ids) before it reloads it.
			var got []string
			for len(got) < len(want) {
				m := fc.Next(t)
				if m.Wire.ID != nil && *m.Wire.ID < 0 {
					if m.Wire.Method == "Page.getNavigationHistory" {
						fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{"currentIndex":0,"entries":[{"id":1,"url":"about:blank"}]},"sessionId":%q}`, *m.Wire.ID, m.Wire.SessionID))
					}
					continue
				}
				got = append(got, string(m.Data))
			}
			slices.Sort(got)
			slices.Sort(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("browser got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func contains(s []int, i int) bool {
	for _, x := range s {
		if x == i {
			return true
		}
	}
	return false
}

// TestNavHoldDelay checks against a Lightpanda-like browser that held
// navigation commands reach the browser unchanged once their slots come:
// one at once, the next two a slot and two slots later, whichever books
// first.
func TestNavHoldDelay(t *testing.T) {
	_, c, fc := client(t, fakebrowser.Config{Lightpanda: true}, holdtest.Fixed(300*time.Millisecond))
	msgs := []string{
		`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/1"},"sessionId":"SID-1"}`,
		`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"},"sessionId":"SID-2"}`,
		`{"id":3,"method":"Target.createTarget","params":{"url":"http://a.test/3"}}`,
		`{"id":4,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"SID-1"}`,
	}
	start := time.Now()
	for _, m := range msgs {
		holdtest.WriteClient(t, c, websocket.TextMessage, []byte(m))
	}
	arrived := map[string]time.Time{}
	for range msgs {
		m := fc.Next(t)
		arrived[string(m.Data)] = m.At
	}
	var navs []time.Duration
	for i, m := range msgs {
		at, ok := arrived[m]
		if !ok {
			t.Errorf("browser did not get %s unchanged", m)
			continue
		}
		if i < 3 {
			navs = append(navs, at.Sub(start))
		}
	}
	slices.Sort(navs)
	for k, waited := range navs {
		if want := time.Duration(k) * 300 * time.Millisecond; waited < want {
			t.Errorf("navigation %d to go reached the browser %v after the first was sent, want at least %v", k+1, waited, want)
		}
	}
}

// TestNavHoldKeepsOrder checks that navigations on one session keep their
// order: one that a later one overtakes while it waits for its slot is
// answered as the browser answers an interrupted navigation, and never
// reaches the browser; one that may go at once goes before the next.
func TestNavHoldKeepsOrder(t *testing.T) {
	tp, c, fc := client(t, fakebrowser.Config{Lightpanda: true}, holdtest.Fixed(300*time.Millisecond))
	tp.Lim.Reserve("a.test", time.Now()) // the next a.test slot is 300 ms away
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/stale"},"sessionId":"SID-1"}`))
	time.Sleep(50 * time.Millisecond) // booked, waiting
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.reload","sessionId":"SID-1"}`))
	holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":3,"method":"Page.navigate","params":{"url":"http://b.test/new"},"sessionId":"SID-1"}`))
	_, got := holdtest.ReadClient(t, c)
	if want := `{"id":1,"result":{"frameId":"","errorText":"net::ERR_ABORTED"},"sessionId":"SID-1"}`; string(got) != want {
		t.Errorf("client got %s, want %s", got, want)
	}
	_, got = holdtest.ReadClient(t, c)
	if want := `{"id":2,"result":{},"sessionId":"SID-1"}`; string(got) != want {
		t.Errorf("client got %s, want %s", got, want)
	}
	if m := fc.Next(t); !strings.Contains(string(m.Data), `"id":3`) {
		t.Errorf("browser got %s first, want the last navigation", m.Data)
	}
	time.Sleep(400 * time.Millisecond)
	for _, m := range fc.Received() {
		if strings.Contains(string(m.Data), "stale") || strings.Contains(string(m.Data), "Page.reload") {
			t.Errorf("browser got an overtaken navigation: %s", m.Data)
		}
	}
}

// TestNavHoldAnswers replays single navigations of the recorded session
// and checks what their answers do to the limiter.
func TestNavHoldAnswers(t *testing.T) {
	sess := fakebrowser.LoadRecording(t, "chromium-session.jsonl")
	attached, _, _ := pageSession(t, sess)
	tests := []struct {
		name   string
		url    string                  // the navigation replayed, from its command to the next one
		mutate func(msg []byte) []byte // changes browser messages; nil keeps them
		check  func(*testing.T, *holdtest.Relay, time.Time)
	}{
		{name: "429 with Retry-After pushes the next slot", url: "/busy",
			check: func(t *testing.T, tp *holdtest.Relay, answered time.Time) {
				r := tp.Lim.Reserve("a.test", time.Now())
				if r.Start.Sub(answered) < 3*time.Second {
					t.Errorf("next slot %v after the 429, want at least its Retry-After 3s", r.Start.Sub(answered))
				}
				if r.Pressure < 50 {
					t.Errorf("pressure %d, want at least 50", r.Pressure)
				}
			}},
		{name: "refused connection adds pressure", url: "http://c.test",
			check: func(t *testing.T, tp *holdtest.Relay, _ time.Time) {
				if r := tp.Lim.Reserve("c.test", time.Now()); r.Pressure < 5 {
					t.Errorf("pressure %d, want it raised by 10", r.Pressure)
				}
			}},
		{name: "redirect to another host books it", url: "/r",
			check: func(t *testing.T, tp *holdtest.Relay, _ time.Time) {
				if n := tp.Lim.Len(); n != 2 {
					t.Errorf("limiter knows %d hosts, want a.test and b.test", n)
				}
			}},
		{name: "redirect within the host books nothing more", url: "/r2",
			check: func(t *testing.T, tp *holdtest.Relay, _ time.Time) {
				if r := tp.Lim.Reserve("a.test", time.Now()); r.Pressure > 2 {
					t.Errorf("pressure %d, want one booking before this one", r.Pressure)
				}
			}},
		{name: "200 adds nothing", url: "/page?first",
			check: func(t *testing.T, tp *holdtest.Relay, _ time.Time) {
				now := time.Now()
				if r := tp.Lim.Reserve("a.test", now); r.Pressure > 2 || r.Start.After(now) {
					t.Errorf("pressure %d, start in %v; want 2 at most, now", r.Pressure, r.Start.Sub(now))
				}
			}},
		{name: "an iframe's 429 is not the page's", url: "/frames",
			mutate: func(msg []byte) []byte {
				if bytes.Contains(msg, []byte(`"method":"Network.responseReceived"`)) && bytes.Contains(msg, []byte("child?same")) {
					return bytes.Replace(msg, []byte(`"status":200,`), []byte(`"status":429,`), 1)
				}
				return msg
			},
			check: func(t *testing.T, tp *holdtest.Relay, _ time.Time) {
				now := time.Now()
				if r := tp.Lim.Reserve("a.test", now); r.Pressure > 2 || r.Start.After(now) {
					t.Errorf("pressure %d, start in %v; want the iframe's 429 ignored", r.Pressure, r.Start.Sub(now))
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp, c, fc := attachedClient(t, attached)
			var answered time.Time
			mutate := func(msg []byte) []byte {
				if tt.mutate != nil {
					msg = tt.mutate(msg)
				}
				if bytes.Contains(msg, []byte(`"status":429`)) && answered.IsZero() {
					answered = time.Now() // before the relay can have read it
				}
				return msg
			}
			replay(t, c, fc, navigation(t, sess, tt.url), mutate)
			tp.Holder.Holder.Wait() // the answers on their way to the limiter are in it
			tt.check(t, tp, answered)
		})
	}
}

// attachedClient is a client of a relay holding in the stream in front of
// a fake browser, its page attached (the recorded attachedToTarget,
// replayed).
func attachedClient(t *testing.T, attached []byte) (*holdtest.Relay, *websocket.Conn, *fakebrowser.Conn) {
	t.Helper()
	tp, c, fc := client(t, fakebrowser.Config{}, limiter.Config{})
	replay(t, c, fc, []fakebrowser.RecordedMsg{{From: "browser", Msg: attached}}, nil)
	return tp, c, fc
}

// navigation returns the recorded lines of the navigation to a URL with
// urlPart: its command and what the browser sent until the next command.
func navigation(t *testing.T, sess *fakebrowser.Recording, urlPart string) []fakebrowser.RecordedMsg {
	t.Helper()
	for i, rm := range sess.Msgs {
		if rm.From != "client" || rm.Wire.Method != "Page.navigate" || !strings.Contains(string(rm.Wire.Params), urlPart) {
			continue
		}
		j := i + 1
		for j < len(sess.Msgs) && sess.Msgs[j].From != "client" {
			j++
		}
		return sess.Msgs[i:j]
	}
	t.Fatalf("no recorded navigation to %q", urlPart)
	return nil
}

// TestNavHoldFindsWhereItGoes checks what in-stream holding books for the
// navigations whose URL is not in the command: a history navigation books
// the host of its entry, a reload the host the page is on now (after a
// click moved it elsewhere), and a navigation of an iframe's own session
// books nothing.
func TestNavHoldFindsWhereItGoes(t *testing.T) {
	var rec *holdtest.Recorder
	_, c, fc := client(t, fakebrowser.Config{}, holdtest.Fixed(time.Millisecond), holdtest.RecordBookings(&rec))
	fc.Send(holdtest.AttachedTo("PAGE-S", "PAGE", "page"))
	fc.Send(holdtest.AttachedTo("IFRAME-S", "OOPIF", "iframe"))
	holdtest.ReadClient(t, c)
	holdtest.ReadClient(t, c)
	// answer plays the browser: it answers the relay's own history query.
	answer := func(wantMethod string) fakebrowser.Msg {
		for {
			m := fc.Next(t)
			if m.Wire.ID != nil && *m.Wire.ID < 0 && m.Wire.Method == "Page.getNavigationHistory" {
				fc.Send(fmt.Appendf(nil, `{"id":%d,"result":{"currentIndex":1,"entries":[{"id":7,"url":"http://a.test/"},{"id":8,"url":"http://b.test/"}]},"sessionId":%q}`, *m.Wire.ID, m.Wire.SessionID))
				continue
			}
			if m.Wire.Method != wantMethod {
				t.Fatalf("browser got %s, want %s", m.Data, wantMethod)
			}
			return m
		}
	}
	step := func(msg, method, wantHost string) {
		t.Helper()
		n := len(rec.Bookings())
		holdtest.WriteClient(t, c, websocket.TextMessage, []byte(msg))
		answer(method)
		got := strings.Join(rec.HostsSince(n), " ")
		if got != wantHost {
			t.Errorf("%s booked %q, want %q", method, got, wantHost)
		}
	}
	step(`{"id":1,"sessionId":"PAGE-S","method":"Page.navigateToHistoryEntry","params":{"entryId":7}}`, "Page.navigateToHistoryEntry", "a.test")
	step(`{"id":2,"sessionId":"IFRAME-S","method":"Page.navigate","params":{"url":"http://c.test/"}}`, "Page.navigate", "")
	step(`{"id":3,"sessionId":"PAGE-S","method":"Page.navigate","params":{"url":"http://c.test/"}}`, "Page.navigate", "c.test")
	// A click took the page to d.test; the client enabled Page events.
	fc.Send([]byte(`{"method":"Page.frameNavigated","params":{"frame":{"id":"PAGE","loaderId":"L","url":"http://d.test/next","securityOrigin":"http://d.test","mimeType":"text/html"},"type":"Navigation"},"sessionId":"PAGE-S"}`))
	holdtest.ReadClient(t, c)
	step(`{"id":4,"sessionId":"PAGE-S","method":"Page.reload"}`, "Page.reload", "d.test")
	// With nothing seen of a page, the browser is asked where it is.
	fc.Send(holdtest.AttachedTo("NEW-S", "NEW", "page"))
	holdtest.ReadClient(t, c)
	step(`{"id":5,"sessionId":"NEW-S","method":"Page.reload"}`, "Page.reload", "b.test")
}

// TestNavHoldWaitsForTheSend: a navigation command let go is started when
// the browser gets to it. Where the client's Network events show the
// request started (Network.requestWillBeSent), the next navigation of the
// host waits for that, past its slot, and then the spacing from it; where
// the client's own interception paused the request after it started, for
// the client's Fetch.continueRequest (a client whose patterns pause no
// document does not make it wait for one); where the client did not
// enable Network events, it goes at its slot.
func TestNavHoldWaitsForTheSend(t *testing.T) {
	const spacing = 100 * time.Millisecond
	willBeSent := func(session, id, frame string) []byte {
		return fmt.Appendf(nil, `{"method":"Network.requestWillBeSent","params":{"requestId":%q,"loaderId":%q,"documentURL":"http://a.test/1","request":{"url":"http://a.test/1","method":"GET","headers":{}},"type":"Document","frameId":%q},"sessionId":%q}`, id, id, frame, session)
	}
	paused := func(session, id, frame string) []byte {
		return fmt.Appendf(nil, `{"method":"Fetch.requestPaused","params":{"requestId":"interception-job-7.0","request":{"url":"http://a.test/1","method":"GET","headers":{}},"frameId":%q,"resourceType":"Document","networkId":%q},"sessionId":%q}`, frame, id, session)
	}
	for _, tt := range []struct {
		name    string
		network bool // the client enables Network events
		// fetch: the patterns of the client's own Fetch.enable, "" for none
		fetch string
		// intercepts: the client's interception paused the document, which
		// leaves when the client continues it
		intercepts bool
		events     func(session, id, frame string) [][]byte
	}{
		{"started", true, "", false, func(s, id, f string) [][]byte { return [][]byte{willBeSent(s, id, f)} }},
		{"paused by the client", true, `[{"urlPattern":"*"}]`, true, func(s, id, f string) [][]byte { return [][]byte{willBeSent(s, id, f), paused(s, id, f)} }},
		{"client intercepts images only", true, `[{"urlPattern":"*","resourceType":"Image"}]`, false, func(s, id, f string) [][]byte { return [][]byte{willBeSent(s, id, f)} }},
		{"no Network events", false, "", false, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, c, fc := client(t, fakebrowser.Config{}, holdtest.Fixed(spacing))
			for i, s := range []string{"S1", "S2"} {
				fc.Send(holdtest.AttachedTo(s, "P"+s[1:], "page"))
				holdtest.ReadClient(t, c)
				if tt.network {
					holdtest.WriteClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"method":"Network.enable","sessionId":%q}`, 10+i, s))
					fc.Next(t)
				}
				if tt.fetch != "" {
					holdtest.WriteClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":%d,"method":"Fetch.enable","params":{"patterns":%s},"sessionId":%q}`, 20+i, tt.fetch, s))
					fc.Next(t)
				}
			}
			before := len(fc.Received()) // the Network.enable and Fetch.enable
			holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/1"},"sessionId":"S1"}`))
			holdtest.WriteClient(t, c, websocket.TextMessage, []byte(`{"id":2,"method":"Page.navigate","params":{"url":"http://a.test/2"},"sessionId":"S2"}`))
			// Whichever books first goes first.
			first := fc.Next(t)
			if first.Wire.Method != "Page.navigate" {
				t.Fatalf("browser got %s first, want a navigation", first.Data)
			}
			firstS, secondID := first.Wire.SessionID, `"id":2`
			if firstS == "S2" {
				secondID = `"id":1`
			}
			if !tt.network {
				second := fc.Next(t)
				if waited := second.At.Sub(first.At); waited < spacing-5*time.Millisecond || waited > spacing+150*time.Millisecond {
					t.Errorf("the second navigation went %v after the first, want its slot, %v", waited, spacing)
				}
				return
			}
			// Not sent yet, told of or not: the second waits past its slot.
			var sent time.Time
			for _, ev := range tt.events(firstS, "L1", "P"+firstS[1:]) {
				time.Sleep(3 * spacing)
				if got := len(fc.Received()); got != before+1 {
					t.Fatalf("browser got %d messages, want the client's %d and the first navigation: the second went before the first was sent", got, before)
				}
				sent = time.Now()
				fc.Send(ev)
				holdtest.ReadClient(t, c)
			}
			if tt.intercepts {
				// Started, and paused by the client: not sent until the
				// client lets it go.
				time.Sleep(3 * spacing)
				if got := len(fc.Received()); got != before+1 {
					t.Fatalf("browser got %d messages, want the client's %d and the first navigation: the second went while the client held the first", got, before)
				}
				sent = time.Now()
				holdtest.WriteClient(t, c, websocket.TextMessage, fmt.Appendf(nil, `{"id":30,"method":"Fetch.continueRequest","params":{"requestId":"interception-job-7.0"},"sessionId":%q}`, firstS))
				if cont := fc.Next(t); cont.Wire.Method != "Fetch.continueRequest" {
					t.Fatalf("browser got %s, want the client's Fetch.continueRequest", cont.Data)
				}
			}
			second := fc.Next(t)
			if !strings.Contains(string(second.Data), secondID) {
				t.Fatalf("browser got %s, want the second navigation", second.Data)
			}
			// The relay lets the second go early by the browser's usual lag
			// (package pace), so that it leaves on time: with this fake
			// browser, the relay's own reading of its messages, over 10 ms
			// under -race on a loaded machine (89.8 ms once).
			if waited := second.At.Sub(sent); waited < spacing-20*time.Millisecond || waited > spacing+time.Second {
				t.Errorf("the second navigation went %v after the first was sent, want the spacing, %v", waited, spacing)
			}
		})
	}
}

// TestNavHoldOnlyItsClientsPages: a page the client attached to but never
// drove (another relay's client's, as Playwright attaches to every page)
// navigates: its document is neither counted unheld nor fed back; once
// the client drives the page, the same navigation is counted unheld (a
// link click, say) and its answer fed back.
func TestNavHoldOnlyItsClientsPages(t *testing.T) {
	sess := fakebrowser.LoadRecording(t, "chromium-session.jsonl")
	attached, session, _ := pageSession(t, sess)
	var events []fakebrowser.RecordedMsg // the navigation as the browser tells it, with no command of the client's
	for _, rm := range navigation(t, sess, "/page?first") {
		if rm.From == "browser" && rm.Wire.Method != "" {
			events = append(events, rm)
		}
	}
	tp, c, fc := attachedClient(t, attached)
	replay(t, c, fc, events, nil)
	tp.Holder.Holder.Wait()
	if n, fed, hosts := tp.Counts.Unheld.Load(), tp.Counts.Fed.Load(), tp.Lim.Len(); n != 0 || fed != 0 || hosts != 0 {
		t.Fatalf("another's page navigated: %d unheld, %d answers fed back, %d hosts booked; want none", n, fed, hosts)
	}
	drive := fmt.Sprintf(`{"id":1,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":%q}`, session)
	done := fmt.Sprintf(`{"id":1,"result":{"result":{"type":"number","value":1,"description":"1"}},"sessionId":%q}`, session)
	replay(t, c, fc, []fakebrowser.RecordedMsg{{From: "client", Msg: []byte(drive)}, {From: "browser", Msg: []byte(done)}}, nil)
	replay(t, c, fc, events, nil)
	tp.Holder.Holder.Wait()
	if n, fed := tp.Counts.Unheld.Load(), tp.Counts.Fed.Load(); n != 1 || fed != 1 {
		t.Errorf("the client's page navigated unheld: %d unheld, %d answers fed back; want 1 and 1", n, fed)
	}
}
