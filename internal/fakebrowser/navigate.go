package fakebrowser

// Navigations in the fake browser: which connections intercept a
// document request, in what order, with which Network events.

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// Pages returns the relay's pages connection: the next live one that
// auto-attached to pages.
func (fb *Browser) Pages(t testing.TB) *Conn {
	t.Helper()
	return fb.next(t, "relay connection attached to pages", func(c *Conn) bool { return c.pagesConn && !c.ended_() })
}

// Session returns fc's session on page target (the armed one, if any),
// nil when it has none.
func (fc *Conn) Session(target string) *Session {
	fc.fb.Mu.Lock()
	defer fc.fb.Mu.Unlock()
	return fc.SessionLocked(target)
}

// SessionLocked is session. Callers hold fb.Mu.
func (fc *Conn) SessionLocked(target string) *Session {
	var got *Session
	for _, ss := range fc.Sessions {
		if ss.Target == target && (got == nil || ss.Fetch && !got.Fetch) {
			got = ss
		}
	}
	return got
}

// Armed waits until the relay enabled Fetch in fc's session on
// target.
func (fb *Browser) Armed(t testing.TB, fc *Conn, target string) {
	t.Helper()
	fb.Await(t, "the relay's interception on page "+target, func() bool {
		ss := fc.SessionLocked(target)
		return ss != nil && ss.Fetch && !fc.ended_()
	})
}

// matchPattern reports whether a Fetch urlPattern matches url: * is any
// run of characters, ? any one, and a backslash escapes the next.
func matchPattern(pattern, url string) bool {
	if pattern == "" {
		return true
	}
	var match func(p, s string) bool
	match = func(p, s string) bool {
		for len(p) > 0 {
			switch p[0] {
			case '*':
				for i := len(s); i >= 0; i-- {
					if match(p[1:], s[i:]) {
						return true
					}
				}
				return false
			case '?':
				if s == "" {
					return false
				}
				p, s = p[1:], s[1:]
				continue
			case '\\':
				if len(p) > 1 {
					p = p[1:]
				}
			}
			if s == "" || s[0] != p[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
		return s == ""
	}
	return match(pattern, url)
}

// interceptor is one place Chromium pauses a request at: a session of a
// connection, or a connection at the browser level.
type interceptor struct {
	fc      *Conn
	session string // "" at the browser level
	network bool   // the session has Network enabled
	rank    int    // its place in Chromium's order: lower pauses first
}

// interceptors returns where a document request of frame to url pauses,
// in Chromium's order: the page's sessions with Fetch on, newest first,
// then the browser-level interceptors whose patterns match, in the order
// they enabled Fetch. As in Chromium, a browser-level interceptor is on a
// request's way only if its Fetch was on when the request started (on,
// from fetchOnNow), and stayed on; its patterns count as they are now.
func (fb *Browser) interceptors(frame, url string, on map[*Conn]int) []interceptor {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	var sess []*Session
	owner := map[*Session]*Conn{}
	for _, c := range fb.conns {
		if c.ended_() {
			continue
		}
		for _, ss := range c.Sessions {
			if ss.Target == frame && ss.Fetch {
				sess = append(sess, ss)
				owner[ss] = c
			}
		}
	}
	slices.SortFunc(sess, func(a, b *Session) int { return b.Seq - a.Seq })
	var out []interceptor
	for _, ss := range sess {
		out = append(out, interceptor{fc: owner[ss], session: ss.ID, network: ss.Network, rank: -ss.Seq})
	}
	for i, c := range fb.conns {
		if !c.FetchOn || on[c] != c.onEpoch || c.ended_() {
			continue
		}
		if slices.ContainsFunc(c.Patterns, func(p string) bool { return matchPattern(p, url) }) {
			out = append(out, interceptor{fc: c, rank: i})
		}
	}
	return out
}

// nextInterceptor returns the interceptor a request of frame to url goes
// to after the one of rank after (math.MinInt: the first), as things are
// now: a pattern set changed meanwhile counts.
func (fb *Browser) nextInterceptor(frame, url string, after int, on map[*Conn]int) (interceptor, bool) {
	for _, ic := range fb.interceptors(frame, url, on) {
		if ic.rank > after {
			return ic, true
		}
	}
	return interceptor{}, false
}

// fetchOnNow returns the connections whose browser-level Fetch is on, as
// a request that starts now sees them.
func (fb *Browser) fetchOnNow() map[*Conn]int {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	on := map[*Conn]int{}
	for _, c := range fb.conns {
		if c.FetchOn {
			on[c] = c.onEpoch
		}
	}
	return on
}

// networkSessions returns the live sessions with Network on for page frame.
func (fb *Browser) networkSessions(frame string) []interceptor {
	fb.Mu.Lock()
	defer fb.Mu.Unlock()
	var out []interceptor
	for _, c := range fb.conns {
		for _, ss := range c.Sessions {
			if ss.Target == frame && ss.Network && !c.ended_() {
				out = append(out, interceptor{fc: c, session: ss.ID, network: true})
			}
		}
	}
	return out
}

// mono is the fake browser's monotonic clock, in seconds, as its Network
// events stamp them.
func (fb *Browser) mono(at time.Time) float64 {
	return 1000 + at.Sub(fakeEpoch).Seconds()
}

var fakeEpoch = time.Now()

// asPause rewrites a recorded browser-level pause for ic: its own
// interception job, and for a session its sessionId and the request's
// networkId (none when networkID is empty).
func asPause(msg []byte, job int, ic interceptor, networkID string) []byte {
	msg = RenumberJob(msg, job)
	if ic.session == "" {
		return msg
	}
	var m map[string]json.RawMessage
	json.Unmarshal(msg, &m)
	var params map[string]json.RawMessage
	json.Unmarshal(m["params"], &params)
	delete(params, "networkId")
	if networkID != "" {
		params["networkId"], _ = json.Marshal(networkID)
	}
	m["params"], _ = json.Marshal(params)
	m["sessionId"], _ = json.Marshal(ic.session)
	out, _ := json.Marshal(m)
	return out
}

// Navigate plays a recorded chain of a document request the way Chromium
// drives it through every interceptor of the browser (fb.interceptors): a
// Request-stage hop pauses at each in turn, each with an interception id
// of its own, and goes on once the last one let it go; one that ends while
// holding it hands it to the next. A Response-stage hop pauses, in the
// reverse order, only at the browser-level interceptors that asked for it.
// Sessions with Network on get the request's Network events: that it is
// being sent, and how each hop was answered (timed as it left). As in
// Chromium, a request that starts while no session has the page's Network
// on pauses in sessions with no networkId, and is told only by its
// answers (Network.responseReceived, named by its loader and frame). It
// returns, per Request-stage hop, when the first interceptor got it and
// when it left.
func (fb *Browser) Navigate(t testing.TB, chain [][]byte) []Hops {
	t.Helper()
	networkID := fmt.Sprintf("NET-%d", fb.NewJob())
	var out []Hops
	var frame string
	var sent time.Time
	answered := true
	jobs := map[*Conn]int{} // each browser-level interceptor's job of the hop under way
	on := fb.fetchOnNow()
	named := networkID // "" when no session had Network on as it started
	for i, msg := range chain {
		p, _ := ReadPause(msg)
		frame = p.FrameID
		if i == 0 && len(fb.networkSessions(frame)) == 0 {
			named = ""
		}
		if p.requestStage() {
			if !answered {
				fb.networkEnd(frame, networkID, Pause{ResponseStatusCode: 200}, sent, false)
			}
			var ht Hops
			for at := math.MinInt; ; {
				ic, ok := fb.nextInterceptor(frame, p.Request.URL, at, on)
				if !ok {
					break
				}
				at = ic.rank
				job := fb.NewJob()
				if ic.session == "" {
					jobs[ic.fc] = job
				}
				m := asPause(msg, job, ic, named)
				mp, _ := ReadPause(m)
				at := time.Now()
				if err := ic.fc.Send(m); err != nil {
					continue // gone already: the next one gets it
				}
				cont, err := ic.fc.ContinuedAt(mp.RequestID)
				if err != nil {
					continue // ended while holding: the next one gets it
				}
				ic.fc.Mu.Lock()
				delete(ic.fc.Continued, mp.RequestID)
				ic.fc.Mu.Unlock()
				if ht.Paused.IsZero() {
					ht.Paused, ht.RequestID = at, mp.RequestID
				}
				ht.Continued = cont
				ht.Pauses++
				if reason := ic.fc.failedWith(mp.RequestID); reason != "" {
					// Failed where it paused: no one else sees it, and the
					// navigation is over.
					ht.Failed = reason
					fb.networkEnd(frame, networkID, Pause{ResponseErrorReason: reason}, time.Now(), false)
					return append(out, ht)
				}
				if answer, ok := ic.fc.fulfilledWith(mp.RequestID); ok {
					// Answered where it paused, as Chromium tells a
					// fulfilled request's answer in Network events.
					ht.Fulfilled, ht.Headers = answer.ResponseStatusCode, map[string]string{}
					for _, h := range answer.ResponseHeaders {
						ht.Headers[h.Name] = h.Value
					}
					fb.networkEnd(frame, networkID, answer, time.Now(), false)
					return append(out, ht)
				}
			}
			sent = time.Now()
			if ht.Paused.IsZero() {
				ht.Paused, ht.Continued = sent, sent
			}
			for _, ns := range fb.networkSessions(frame) {
				if named == "" {
					break // no extra info for it
				}
				ns.fc.Send(fmt.Appendf(nil, `{"method":"Network.requestWillBeSentExtraInfo","params":{"requestId":%q,"associatedCookies":[],"headers":{}},"sessionId":%q}`, networkID, ns.session))
			}
			out = append(out, ht)
			answered = false
			continue
		}
		// The answer: paused where it was asked for, then told in Network
		// events.
		hs := fb.Holders()
		slices.Reverse(hs)
		for _, hc := range hs {
			job, ok := jobs[hc]
			if !ok {
				continue
			}
			m := RenumberJob(msg, job)
			mp, _ := ReadPause(m)
			if !hc.pausesAnswer(mp.RequestID) {
				continue
			}
			if err := hc.Send(m); err != nil {
				continue
			}
			hc.ContinuedAt(mp.RequestID)
			hc.Mu.Lock()
			delete(hc.Continued, mp.RequestID)
			hc.Mu.Unlock()
		}
		more := i+1 < len(chain)
		fb.networkEnd(frame, networkID, p, sent, more && redirects(p.ResponseStatusCode))
		answered = true
	}
	if !answered {
		fb.networkEnd(frame, networkID, Pause{ResponseStatusCode: 200}, sent, false)
	}
	return out
}

// networkEnd tells the sessions with Network on for frame how a hop sent
// at sent was answered: p's status or failure, a redirect when redirect is
// set (the request goes on).
func (fb *Browser) networkEnd(frame, networkID string, p Pause, sent time.Time, redirect bool) {
	now := fb.mono(time.Now())
	timing := fmt.Sprintf(`{"requestTime":%.6f,"sendStart":0,"sendEnd":0.1}`, fb.mono(sent))
	for _, ns := range fb.networkSessions(frame) {
		var ev string
		switch {
		case p.ResponseErrorReason != "":
			ev = fmt.Sprintf(`{"method":"Network.loadingFailed","params":{"requestId":%q,"timestamp":%.6f,"type":"Document","errorText":"net::ERR_%s","canceled":false},"sessionId":%q}`,
				networkID, now, netError(p.ResponseErrorReason), ns.session)
		case redirect:
			ev = fmt.Sprintf(`{"method":"Network.requestWillBeSent","params":{"requestId":%q,"loaderId":%q,"timestamp":%.6f,"wallTime":%.6f,"type":"Document","frameId":%q,"request":{"url":"http://next.test/"},"redirectResponse":{"status":%d,"headers":%s,"remoteIPAddress":"127.0.0.2","remotePort":42557,"timing":%s}},"sessionId":%q}`,
				networkID, networkID, now, now, frame, p.ResponseStatusCode, headersOf(p), timing, ns.session)
		default:
			ev = fmt.Sprintf(`{"method":"Network.responseReceived","params":{"requestId":%q,"loaderId":%q,"timestamp":%.6f,"type":"Document","response":{"status":%d,"headers":%s,"remoteIPAddress":"127.0.0.2","remotePort":42557,"timing":%s},"frameId":%q},"sessionId":%q}`,
				networkID, networkID, now, p.ResponseStatusCode, headersOf(p), timing, frame, ns.session)
		}
		ns.fc.Send([]byte(ev))
	}
}

// headersOf returns a paused answer's headers as Network events carry them.
func headersOf(p Pause) string {
	h := map[string]string{}
	for _, e := range p.ResponseHeaders {
		h[e.Name] = e.Value
	}
	b, _ := json.Marshal(h)
	return string(b)
}

// netError turns a Fetch ErrorReason into the net error Network events name.
func netError(reason string) string {
	switch reason {
	case "ConnectionRefused":
		return "CONNECTION_REFUSED"
	case "NameNotResolved":
		return "NAME_NOT_RESOLVED"
	case "TimedOut":
		return "TIMED_OUT"
	case "Aborted":
		return "ABORTED"
	case "BlockedByClient":
		return "BLOCKED_BY_CLIENT"
	}
	return "FAILED"
}

// NavigateTo plays a navigation of page to url (one Request-stage hop,
// answered 200) on a goroutine of its own, and returns where its times
// arrive.
func (fb *Browser) NavigateTo(t testing.TB, page, url string) <-chan []Hops {
	ch := make(chan []Hops, 1)
	job := fb.NewJob()
	go func() {
		ch <- fb.Navigate(t, [][]byte{PausedDoc(fmt.Sprintf("interception-job-%d.0", job), page, url)})
	}()
	return ch
}

// redirects reports whether a status sends the browser on to another URL.
func redirects(status int) bool {
	switch status {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}

// PausedDoc is a Request-stage pause of a page's document.
func PausedDoc(id, frame, url string) []byte {
	b, _ := json.Marshal(map[string]any{"method": "Fetch.requestPaused", "params": map[string]any{
		"requestId": id, "frameId": frame, "resourceType": "Document",
		"request": map[string]any{"url": url, "method": "GET", "headers": map[string]string{}},
	}})
	return b
}

// PageCreated announces a page, as Target.targetCreated does.
func PageCreated(id, opener string) []byte {
	info := map[string]any{"targetId": id, "type": "page", "title": "", "url": "about:blank", "attached": false, "browserContextId": "CTX"}
	if opener != "" {
		info["openerId"] = opener
	}
	b, _ := json.Marshal(map[string]any{"method": "Target.targetCreated", "params": map[string]any{"targetInfo": info}})
	return b
}
