package relay

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

// pages returns the relay's pages connection: the next live one that
// auto-attached to pages.
func (fb *fakeBrowser) pages(t testing.TB) *fakeConn {
	t.Helper()
	var got *fakeConn
	fb.await(t, "relay connection attached to pages", func() bool {
		for _, c := range fb.conns {
			if c.pagesConn && !fb.returned[c] && !c.ended_() {
				got, fb.returned[c] = c, true
				return true
			}
		}
		return false
	})
	return got
}

// session returns fc's session on page target (the armed one, if any),
// nil when it has none.
func (fc *fakeConn) session(target string) *fakeSess {
	fc.fb.mu.Lock()
	defer fc.fb.mu.Unlock()
	return fc.sessionLocked(target)
}

// sessionLocked is session. Callers hold fb.mu.
func (fc *fakeConn) sessionLocked(target string) *fakeSess {
	var got *fakeSess
	for _, ss := range fc.sessions {
		if ss.target == target && (got == nil || ss.fetch && !got.fetch) {
			got = ss
		}
	}
	return got
}

// armed waits until the relay enabled Fetch in fc's session on
// target.
func (fb *fakeBrowser) armed(t testing.TB, fc *fakeConn, target string) {
	t.Helper()
	fb.await(t, "the relay's interception on page "+target, func() bool {
		ss := fc.sessionLocked(target)
		return ss != nil && ss.fetch && !fc.ended_()
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
	fc      *fakeConn
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
func (fb *fakeBrowser) interceptors(frame, url string, on map[*fakeConn]int) []interceptor {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var sess []*fakeSess
	owner := map[*fakeSess]*fakeConn{}
	for _, c := range fb.conns {
		if c.ended_() {
			continue
		}
		for _, ss := range c.sessions {
			if ss.target == frame && ss.fetch {
				sess = append(sess, ss)
				owner[ss] = c
			}
		}
	}
	slices.SortFunc(sess, func(a, b *fakeSess) int { return b.seq - a.seq })
	var out []interceptor
	for _, ss := range sess {
		out = append(out, interceptor{fc: owner[ss], session: ss.id, network: ss.network, rank: -ss.seq})
	}
	for i, c := range fb.conns {
		if !c.fetchOn || on[c] != c.onEpoch || c.ended_() {
			continue
		}
		if slices.ContainsFunc(c.patterns, func(p string) bool { return matchPattern(p, url) }) {
			out = append(out, interceptor{fc: c, rank: i})
		}
	}
	return out
}

// nextInterceptor returns the interceptor a request of frame to url goes
// to after the one of rank after (math.MinInt: the first), as things are
// now: a pattern set changed meanwhile counts.
func (fb *fakeBrowser) nextInterceptor(frame, url string, after int, on map[*fakeConn]int) (interceptor, bool) {
	for _, ic := range fb.interceptors(frame, url, on) {
		if ic.rank > after {
			return ic, true
		}
	}
	return interceptor{}, false
}

// fetchOnNow returns the connections whose browser-level Fetch is on, as
// a request that starts now sees them.
func (fb *fakeBrowser) fetchOnNow() map[*fakeConn]int {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	on := map[*fakeConn]int{}
	for _, c := range fb.conns {
		if c.fetchOn {
			on[c] = c.onEpoch
		}
	}
	return on
}

// networkSessions returns the live sessions with Network on for page frame.
func (fb *fakeBrowser) networkSessions(frame string) []interceptor {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	var out []interceptor
	for _, c := range fb.conns {
		for _, ss := range c.sessions {
			if ss.target == frame && ss.network && !c.ended_() {
				out = append(out, interceptor{fc: c, session: ss.id, network: true})
			}
		}
	}
	return out
}

// mono is the fake browser's monotonic clock, in seconds, as its Network
// events stamp them.
func (fb *fakeBrowser) mono(at time.Time) float64 {
	return 1000 + at.Sub(fakeEpoch).Seconds()
}

var fakeEpoch = time.Now()

// asPause rewrites a recorded browser-level pause for ic: its own
// interception job, and for a session its sessionId and the request's
// networkId.
func asPause(msg []byte, job int, ic interceptor, networkID string) []byte {
	msg = renumberJob(msg, job)
	if ic.session == "" {
		return msg
	}
	var m map[string]json.RawMessage
	json.Unmarshal(msg, &m)
	var params map[string]json.RawMessage
	json.Unmarshal(m["params"], &params)
	params["networkId"], _ = json.Marshal(networkID)
	m["params"], _ = json.Marshal(params)
	m["sessionId"], _ = json.Marshal(ic.session)
	out, _ := json.Marshal(m)
	return out
}

// navigate plays a recorded chain of a document request the way Chromium
// drives it through every interceptor of the browser (fb.interceptors): a
// Request-stage hop pauses at each in turn, each with an interception id
// of its own, and goes on once the last one let it go; one that ends while
// holding it hands it to the next. A Response-stage hop pauses, in the
// reverse order, only at the browser-level interceptors that asked for it.
// Sessions with Network on get the request's Network events: that it is
// being sent, and how each hop was answered (timed as it left). It
// returns, per Request-stage hop, when the first interceptor got it and
// when it left.
func (fb *fakeBrowser) navigate(t testing.TB, chain [][]byte) []hopTimes {
	t.Helper()
	networkID := fmt.Sprintf("NET-%d", fb.newJob())
	var out []hopTimes
	var frame string
	var sent time.Time
	answered := true
	jobs := map[*fakeConn]int{} // each browser-level interceptor's job of the hop under way
	on := fb.fetchOnNow()
	for i, msg := range chain {
		p, _ := readPause(msg)
		frame = p.FrameID
		if p.requestStage() {
			if !answered {
				fb.networkEnd(frame, networkID, pause{ResponseStatusCode: 200}, sent, false)
			}
			var ht hopTimes
			for at := math.MinInt; ; {
				ic, ok := fb.nextInterceptor(frame, p.Request.URL, at, on)
				if !ok {
					break
				}
				at = ic.rank
				job := fb.newJob()
				if ic.session == "" {
					jobs[ic.fc] = job
				}
				m := asPause(msg, job, ic, networkID)
				mp, _ := readPause(m)
				at := time.Now()
				if err := ic.fc.send(m); err != nil {
					continue // gone already: the next one gets it
				}
				cont, err := ic.fc.continuedAt(mp.RequestID)
				if err != nil {
					continue // ended while holding: the next one gets it
				}
				ic.fc.mu.Lock()
				delete(ic.fc.continued, mp.RequestID)
				ic.fc.mu.Unlock()
				if ht.paused.IsZero() {
					ht.paused, ht.requestID = at, mp.RequestID
				}
				ht.continued = cont
				ht.pauses++
				if reason := ic.fc.failedWith(mp.RequestID); reason != "" {
					// Failed where it paused: no one else sees it, and the
					// navigation is over.
					ht.failed = reason
					fb.networkEnd(frame, networkID, pause{ResponseErrorReason: reason}, time.Now(), false)
					return append(out, ht)
				}
			}
			sent = time.Now()
			if ht.paused.IsZero() {
				ht.paused, ht.continued = sent, sent
			}
			for _, ns := range fb.networkSessions(frame) {
				ns.fc.send(fmt.Appendf(nil, `{"method":"Network.requestWillBeSentExtraInfo","params":{"requestId":%q,"associatedCookies":[],"headers":{}},"sessionId":%q}`, networkID, ns.session))
			}
			out = append(out, ht)
			answered = false
			continue
		}
		// The answer: paused where it was asked for, then told in Network
		// events.
		hs := fb.holders()
		slices.Reverse(hs)
		for _, hc := range hs {
			job, ok := jobs[hc]
			if !ok {
				continue
			}
			m := renumberJob(msg, job)
			mp, _ := readPause(m)
			if !hc.pausesAnswer(mp.RequestID) {
				continue
			}
			if err := hc.send(m); err != nil {
				continue
			}
			hc.continuedAt(mp.RequestID)
			hc.mu.Lock()
			delete(hc.continued, mp.RequestID)
			hc.mu.Unlock()
		}
		more := i+1 < len(chain)
		fb.networkEnd(frame, networkID, p, sent, more && redirects(p.ResponseStatusCode))
		answered = true
	}
	if !answered {
		fb.networkEnd(frame, networkID, pause{ResponseStatusCode: 200}, sent, false)
	}
	return out
}

// networkEnd tells the sessions with Network on for frame how a hop sent
// at sent was answered: p's status or failure, a redirect when redirect is
// set (the request goes on).
func (fb *fakeBrowser) networkEnd(frame, networkID string, p pause, sent time.Time, redirect bool) {
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
		ns.fc.send([]byte(ev))
	}
}

// headersOf returns a paused answer's headers as Network events carry them.
func headersOf(p pause) string {
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

// navigateTo plays a navigation of page to url (one Request-stage hop,
// answered 200) on a goroutine of its own, and returns where its times
// arrive.
func (fb *fakeBrowser) navigateTo(t testing.TB, page, url string) <-chan []hopTimes {
	ch := make(chan []hopTimes, 1)
	job := fb.newJob()
	go func() {
		ch <- fb.navigate(t, [][]byte{pausedDoc(fmt.Sprintf("interception-job-%d.0", job), page, url)})
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
