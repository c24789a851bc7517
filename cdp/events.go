package cdp

// The events and commands below are decoded with encoding/json, which is
// lenient the way the relay must be with messages it only looks at:
// unknown members, repeated names (the last wins) and invalid UTF-8 are
// fine; the browser is the judge of those.

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

// Navigate is what the relay reads of Page.navigate and
// Target.createTarget params.
type Navigate struct {
	URL     string `json:"url"`
	FrameID string `json:"frameId"`
}

// NavigateParams reads the url (and frameId) of a Page.navigate or
// Target.createTarget command.
func NavigateParams(params []byte) (Navigate, bool) {
	// Chromium reads these names exactly, where encoding/json would also
	// take "URL" or "FrameId" into the struct: a client's own spelling of
	// them must not hide the URL the browser navigates to.
	var members map[string]json.RawMessage
	var p Navigate
	if json.Unmarshal(params, &members) != nil {
		return p, false
	}
	if json.Unmarshal(members["url"], &p.URL) != nil || p.URL == "" {
		return Navigate{}, false
	}
	if json.Unmarshal(members["frameId"], &p.FrameID) != nil {
		p.FrameID = ""
	}
	return p, true
}

// AttachedTarget reads the session and target id of Target.attachedToTarget.
func AttachedTarget(params []byte) (session, target string, ok bool) {
	a, ok := readAttached(params)
	if !ok || a.SessionID == "" {
		return "", "", false
	}
	return a.SessionID, a.Target.TargetID, true
}

// Attached is what the relay reads of Target.attachedToTarget.
type Attached struct {
	SessionID string
	Target    TargetInfo
	// Waiting reports that the target waits for Runtime.runIfWaitingForDebugger
	// before it runs (auto-attached with waitForDebuggerOnStart).
	Waiting bool
}

// ReadAttached reads Target.attachedToTarget.
func ReadAttached(params []byte) (Attached, bool) {
	a, ok := readAttached(params)
	if !ok || a.SessionID == "" || a.Target.TargetID == "" {
		return Attached{}, false
	}
	return a, true
}

// readAttached reads what Target.attachedToTarget params hold; ok is
// false when they are not what encoding/json would read.
func readAttached(params []byte) (a Attached, ok bool) {
	ok = readFields(params,
		field{"sessionId", &a.SessionID},
		field{"targetInfo", func(v []byte) (ok bool) {
			if string(v) == "null" {
				return true
			}
			a.Target, ok = readTargetInfo(v)
			return ok
		}},
		field{"waitingForDebugger", &a.Waiting})
	return a, ok
}

// DetachedSession reads the session of Target.detachedFromTarget.
func DetachedSession(params []byte) (string, bool) {
	session, ok := memberString(params, "sessionId")
	return session, ok && session != ""
}

// ReadRequestID reads the requestId of a Fetch command's params (what
// answers a paused request: Fetch.continueRequest, fulfillRequest, …).
func ReadRequestID(params []byte) (string, bool) {
	id, ok := memberString(params, "requestId")
	return id, ok && id != ""
}

// memberString reads one string member of an object; ok is false when
// the object, or the member's value, is not what encoding/json would read
// into a string.
func memberString(obj []byte, name string) (v string, ok bool) {
	ok = readFields(obj, field{name, &v})
	return v, ok
}

// Request is what the relay reads of Network.requestWillBeSent.
type Request struct {
	RequestID string
	FrameID   string
	Type      string
	URL       string
	// Redirect is the answer of the previous hop when this request follows
	// a redirect, nil otherwise.
	Redirect *Outcome
}

// RequestWillBeSent reads a Network.requestWillBeSent event; the answer
// of a redirect keeps the headers keep names (Outcome.Headers).
func RequestWillBeSent(params []byte, keep []string) (Request, bool) {
	p, ok := readWillBeSent(params, keep)
	if !ok {
		return Request{}, false
	}
	return p.request()
}

// request is what RequestWillBeSent returns of params read.
func (p *willBeSentParams) request() (Request, bool) {
	if p.RequestID == "" {
		return Request{}, false
	}
	r := Request{RequestID: p.RequestID, FrameID: p.FrameID, Type: p.Type, URL: p.Request.URL}
	if p.RedirectResponse != nil {
		o := p.RedirectResponse.outcome()
		r.Redirect = &o
	}
	return r, true
}

// willBeSentParams is what RequestWillBeSent reads of its params.
type willBeSentParams struct {
	RequestID string `json:"requestId"`
	FrameID   string `json:"frameId"`
	Type      string `json:"type"`
	Request   struct {
		URL string `json:"url"`
	} `json:"request"`
	RedirectResponse *response `json:"redirectResponse"`
}

// readWillBeSent reads willBeSentParams; ok is false when params are not
// what encoding/json would read into one. The navigate strategy reads
// every request of every page with it.
func readWillBeSent(params []byte, keep []string) (p willBeSentParams, ok bool) {
	ok = readFields(params,
		field{"requestId", &p.RequestID},
		field{"frameId", &p.FrameID},
		field{"type", &p.Type},
		field{"request", func(v []byte) bool {
			return string(v) == "null" || readFields(v, field{"url", &p.Request.URL})
		}},
		field{"redirectResponse", func(v []byte) (ok bool) {
			p.RedirectResponse, ok = responseOf(v, keep)
			return ok
		}})
	return p, ok
}

// responseOf reads a member that holds a Network.Response, or null
// (nil); ok is false when it is not what encoding/json would read into a
// *response.
func responseOf(val []byte, keep []string) (*response, bool) {
	if string(val) == "null" {
		return nil, true
	}
	r, ok := readResponse(val, keep)
	return &r, ok
}

// readResponse reads a Network.Response object into a response; ok is
// false when it is not what encoding/json would read into one.
func readResponse(obj []byte, keep []string) (r response, ok bool) {
	r.keep = keep
	ok = readFields(obj,
		field{"status", &r.Status},
		field{"headers", func(v []byte) bool {
			// Only Retry-After, the headers keep names and the server's
			// limits (ratelimit.Named) are read of them (outcome): the
			// others are checked, not kept.
			r.Headers = nil
			if string(v) == "null" {
				return true
			}
			ok := true
			read := members(v, func(key, v []byte) bool {
				if !bytes.EqualFold(key, []byte("Retry-After")) && (len(keep) == 0 || !keeps(keep, string(key))) && !ratelimit.Named(string(key)) {
					ok = string(v) == "null" || v[0] == '"'
					return ok
				}
				var val string
				if val, ok = stringOf(v); ok {
					if r.Headers == nil {
						r.Headers = map[string]string{}
					}
					r.Headers[string(key)] = val
				}
				return ok
			})
			return ok && read
		}},
		field{"remoteIPAddress", &r.RemoteIP},
		field{"timing", func(v []byte) (ok bool) {
			r.Timing, ok = timingOf(v)
			return ok
		}})
	return r, ok
}

// timingOf reads a member that holds a Network.ResourceTiming, or null
// (nil); ok is false when it is not what encoding/json would read into a
// *timing.
func timingOf(val []byte) (*timing, bool) {
	if string(val) == "null" {
		return nil, true
	}
	var t timing
	ok := readFields(val,
		field{"requestTime", &t.RequestTime},
		field{"sendStart", &t.SendStart},
		field{"sendEnd", func(v []byte) bool {
			if string(v) == "null" {
				t.SendEnd = nil
				return true
			}
			end, ok := floatOf(v)
			t.SendEnd = &end
			return ok
		}})
	return &t, ok
}

type response struct {
	Status   float64           `json:"status"`
	Headers  map[string]string `json:"headers"`
	RemoteIP string            `json:"remoteIPAddress"`
	Timing   *timing           `json:"timing"`
	keep     []string          // the headers besides Retry-After that outcome keeps (readResponse's keep)
}

// timing is what the relay reads of a response's Network.ResourceTiming.
type timing struct {
	RequestTime float64  `json:"requestTime"`
	SendStart   float64  `json:"sendStart"`
	SendEnd     *float64 `json:"sendEnd"`
}

func (r *response) outcome() Outcome {
	o := Outcome{Status: int(r.Status)}
	if r.RemoteIP != "" {
		// Chromium writes an IPv6 address bare; brackets are read too.
		o.RemoteIP, _ = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(r.RemoteIP, "["), "]"))
	}
	switch len(r.Headers) { // only what the reader kept: mostly none
	case 0:
	case 1:
		for k, v := range r.Headers {
			o.header(r.keep, k, v)
		}
	default:
		// In order of name: a header sent under two spellings is read the
		// same whatever the map's order.
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			o.header(r.keep, k, r.Headers[k])
		}
	}
	return o
}

// header reads one header a Network event's reader kept into o.
func (o *Outcome) header(keep []string, k, v string) {
	if strings.EqualFold(k, "Retry-After") {
		// Lightpanda joins repeated headers with newlines; the first counts.
		o.RetryAfter, _, _ = strings.Cut(v, "\n")
		return
	}
	if len(keep) > 0 && keeps(keep, k) {
		o.Headers = o.Headers.kept(k, v)
	}
	o.Limits.Add(k, v) // Chromium joins them with newlines too, which Read takes as lines
}

// Answer is how a document request ended, from Network.responseReceived or
// Network.loadingFailed.
type Answer struct {
	RequestID string
	Outcome   Outcome
}

// DocumentAnswer reads Network.responseReceived (of a document) or
// Network.loadingFailed, keeping the answer's headers keep names
// (Outcome.Headers). A cancelled load has the zero Outcome.
func DocumentAnswer(method, params []byte, keep []string) (Answer, bool) {
	p, ok := readNetworkParams(params, keep)
	if !ok {
		return Answer{}, false
	}
	return p.answer(method)
}

// answer is what DocumentAnswer returns of params read for method.
func (p *networkParams) answer(method []byte) (Answer, bool) {
	if p.RequestID == "" {
		return Answer{}, false
	}
	a := Answer{RequestID: p.RequestID}
	switch string(method) {
	case "Network.responseReceived":
		if p.Response == nil || p.Type != "Document" {
			return a, false
		}
		a.Outcome = p.Response.outcome()
	case "Network.loadingFailed":
		if !p.Canceled {
			a.Outcome.NoAnswer = NoAnswer(p.ErrorText)
		}
	default:
		return a, false
	}
	return a, true
}

// TargetInfo is what the relay reads of a target's info.
type TargetInfo struct {
	TargetID         string `json:"targetId"`
	Type             string `json:"type"` // page, iframe, worker, tab, browser…
	OpenerID         string `json:"openerId"`
	BrowserContextID string `json:"browserContextId"`
}

// ReadTargetInfo reads the targetInfo member of Target.targetCreated,
// Target.targetInfoChanged or Target.attachedToTarget params, or of
// Target.getTargetInfo's result.
func ReadTargetInfo(params []byte) (TargetInfo, bool) {
	var ti TargetInfo
	ok := readFields(params, field{"targetInfo", func(v []byte) (ok bool) {
		ti, ok = TargetInfo{}, true
		if string(v) != "null" {
			ti, ok = readTargetInfo(v)
		}
		return ok
	}})
	if !ok || ti.TargetID == "" {
		return TargetInfo{}, false
	}
	return ti, true
}

// LeadingTargetID returns the targetId of a Target event's targetInfo
// without decoding the rest, when the browser wrote it first, as Chromium
// does (`{"targetInfo":{"targetId":"…"`); ok is false otherwise. Every
// client of a browser hears of every change to every page: most are of
// pages a reader knows already, which it can tell from the id alone.
func LeadingTargetID(params []byte) ([]byte, bool) {
	const prefix = `{"targetInfo":{"targetId":"`
	if !bytes.HasPrefix(params, []byte(prefix)) {
		return nil, false
	}
	rest := params[len(prefix):]
	end := bytes.IndexByte(rest, '"')
	if end <= 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return nil, false
	}
	return rest[:end], true
}

// ChangedTargetID returns the targetId of a whole Target.targetCreated or
// Target.targetInfoChanged message from its first bytes, when the browser
// wrote its method, its params and their targetInfo's targetId first, as
// Chromium does; ok is false for any other message, or another order.
func ChangedTargetID(msg []byte) ([]byte, bool) {
	params, ok := bytes.CutPrefix(msg, []byte(`{"method":"Target.targetInfoChanged","params":`))
	if !ok {
		params, ok = bytes.CutPrefix(msg, []byte(`{"method":"Target.targetCreated","params":`))
	}
	if !ok {
		return nil, false
	}
	return LeadingTargetID(params)
}

// ReadTargetID reads the targetId of Target.targetDestroyed params.
func ReadTargetID(params []byte) (string, bool) {
	id, ok := memberString(params, "targetId")
	return id, ok && id != ""
}

// TargetParams reads the targetId and browserContextId members of a
// Target command's params (Target.createTarget, Target.attachToTarget,
// Target.closeTarget, Target.disposeBrowserContext) or of its result
// (Target.createTarget, Target.createBrowserContext); either is "" when
// absent or not a string.
func TargetParams(params []byte) (target, context string) {
	var members map[string]json.RawMessage
	if json.Unmarshal(params, &members) != nil {
		return "", ""
	}
	// Exact names, as Chromium reads them (see NavigateParams).
	json.Unmarshal(members["targetId"], &target)
	json.Unmarshal(members["browserContextId"], &context)
	return target, context
}

// Drives reports whether a command drives a page, and so shows whose page
// it is: navigating it, running script in it, giving it input. Attaching
// to a page is not driving it: Puppeteer and Playwright attach to every
// page there is, and set each up, but drive only their own.
func Drives(method []byte) bool {
	switch string(method) {
	case "Page.navigate", "Page.reload", "Page.navigateToHistoryEntry",
		"Runtime.evaluate", "Runtime.callFunctionOn", "Page.setDocumentContent":
		return true
	}
	return len(method) > len("Input.") && string(method[:len("Input.")]) == "Input."
}

// Error is the error of a reply.
type Error struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

// ReadReply reads the result, or the error, of a reply.
func ReadReply(msg []byte) (result json.RawMessage, e *Error, ok bool) {
	var r struct {
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if json.Unmarshal(msg, &r) != nil {
		return nil, nil, false
	}
	return r.Result, r.Error, true
}

// Reply encodes the answer to a client's command id on session ("" for
// the connection's own), as the browser writes one: result, or e when it
// is set.
func Reply(id int64, session string, result any, e *Error) ([]byte, error) {
	r := struct {
		ID        int64  `json:"id"`
		Result    any    `json:"result,omitempty"`
		Error     *Error `json:"error,omitempty"`
		SessionID string `json:"sessionId,omitempty"`
	}{ID: id, SessionID: session, Error: e}
	if e == nil {
		r.Result = result
	}
	return json.Marshal(r)
}

// Command encodes a command of the relay's own: id, method, the session
// it is for ("" for the connection's own) and params (a json.RawMessage
// goes as it is). The relay sends one per held navigation, so the envelope
// is written by hand.
func Command(id int64, method, session string, params any) ([]byte, error) {
	p, ok := params.(json.RawMessage)
	if !ok {
		var err error
		if p, err = json.Marshal(params); err != nil {
			return nil, err
		}
	}
	if !plainString(method) || !plainString(session) {
		return json.Marshal(struct {
			ID        int64           `json:"id"`
			SessionID string          `json:"sessionId,omitempty"`
			Method    string          `json:"method"`
			Params    json.RawMessage `json:"params"`
		}{id, session, method, p})
	}
	b := make([]byte, 0, 48+len(method)+len(session)+len(p))
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, id, 10)
	if session != "" {
		b = append(append(append(b, `,"sessionId":"`...), session...), '"')
	}
	b = append(append(append(b, `,"method":"`...), method...), `","params":`...)
	return append(append(b, p...), '}'), nil
}

// StringParam encodes params with one string member, name: value.
func StringParam(name, value string) json.RawMessage {
	if !plainString(name) || !plainString(value) {
		p, _ := json.Marshal(map[string]string{name: value})
		return p
	}
	b := make([]byte, 0, 7+len(name)+len(value))
	b = append(append(append(b, `{"`...), name...), `":"`...)
	return append(append(b, value...), `"}`...)
}

// plainString reports whether s goes into JSON as it is, between quotes:
// no quote, backslash, control character, or what encoding/json escapes
// for HTML.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&', c >= 0x80:
			return false
		}
	}
	return true
}

// FetchPausesDocuments reports whether a client's Fetch.enable, whose
// params are given, may pause a document request before it leaves: no
// patterns (every request), or a pattern of every resource type or of
// documents at the request stage. Patterns are read as Chromium reads
// them, names exact: an empty list pauses nothing. Params the browser
// would refuse report true, the worst case.
func FetchPausesDocuments(params []byte) bool {
	if len(bytes.TrimSpace(params)) == 0 {
		return true
	}
	var patterns []byte
	if !members(params, func(key, v []byte) bool {
		if string(key) == "patterns" {
			patterns = v
		}
		return true
	}) {
		return true
	}
	if patterns == nil || string(patterns) == "null" {
		return true
	}
	pauses := false
	read := elements(patterns, func(pt []byte) bool {
		typ, stage := "", ""
		ok := members(pt, func(key, v []byte) bool {
			switch string(key) {
			case "resourceType":
				typ, _ = stringOf(v)
			case "requestStage":
				stage, _ = stringOf(v)
			}
			return true
		})
		if !ok || (typ == "" || typ == "Document") && (stage == "" || stage == "Request") {
			pauses = true
			return false
		}
		return true
	})
	return pauses || !read
}

// NetworkEvent is what the relay reads of a Network event of a document
// request it follows: when the request left the browser, and how the hop
// it was on ended.
type NetworkEvent struct {
	RequestID string
	// Timestamp is when the event happened, in seconds of the browser's
	// monotonic clock; 0 for an event without one.
	Timestamp float64
	// Sent is when the hop the event ends had been sent, in seconds of the
	// same clock: the end of the send (the response's timing: requestTime
	// + sendEnd; + sendStart when it has no end). The request reached the
	// server between the send's start and end (on a busy machine the two
	// are ms apart), so the navigation after it counts from the end.
	// 0 when the event does not tell.
	Sent float64
	// Ended reports that the event ends a hop: its answer (a document's
	// Network.responseReceived, or the redirect answer a
	// Network.requestWillBeSent carries) or its failure
	// (Network.loadingFailed). Outcome is then how it ended.
	Ended   bool
	Outcome Outcome
	// Redirect reports that the hop was answered with a redirect, and the
	// request goes on.
	Redirect bool
	// Sending reports a Network.requestWillBeSentExtraInfo: the browser is
	// sending the request's next hop now.
	Sending bool
	// Document reports an event of a document's request (its type).
	Document bool
	// NavFrame is the frame whose navigation the request is, when the
	// event says so: its frameId, when Chromium names the request by its
	// loader (requestId = loaderId), as it names a frame's navigation
	// (Network.requestWillBeSent, Network.responseReceived; a
	// Network.loadingFailed names no frame). Empty otherwise.
	NavFrame string
}

// sent is when the hop r answers had been sent, in seconds of the
// browser's monotonic clock (NetworkEvent.Sent); 0 when r does not tell.
func (r *response) sent() float64 {
	if r.Timing == nil || r.Timing.RequestTime <= 0 || r.Timing.SendStart < 0 {
		return 0
	}
	if end := r.Timing.SendEnd; end != nil && *end >= r.Timing.SendStart {
		return r.Timing.RequestTime + *end/1000
	}
	return r.Timing.RequestTime + r.Timing.SendStart/1000
}

// ReadNetworkEvent reads the Network events that tell when a document
// request left and how each of its hops ended:
// Network.requestWillBeSentExtraInfo, Network.requestWillBeSent (of a
// redirect hop), Network.responseReceived (of a document) and
// Network.loadingFailed. An answer keeps the headers keep names
// (Outcome.Headers). ok is false for any other event, or one that says
// nothing of either.
func ReadNetworkEvent(method, params []byte, keep []string) (NetworkEvent, bool) {
	p, ok := readNetworkParams(params, keep)
	if !ok {
		return NetworkEvent{}, false
	}
	return p.event(method)
}

// networkParams is what ReadNetworkEvent and DocumentAnswer read of a
// Network event's params.
type networkParams struct {
	RequestID        string    `json:"requestId"`
	LoaderID         string    `json:"loaderId"`
	FrameID          string    `json:"frameId"`
	Timestamp        float64   `json:"timestamp"`
	Type             string    `json:"type"`
	Response         *response `json:"response"`
	RedirectResponse *response `json:"redirectResponse"`
	ErrorText        string    `json:"errorText"`
	Canceled         bool      `json:"canceled"`
}

// readNetworkParams reads networkParams; ok is false when params are not
// what encoding/json would read into one. A holding relay reads every
// document's answer with it, some kilobytes each (headers, timing,
// security details).
func readNetworkParams(params []byte, keep []string) (p networkParams, ok bool) {
	ok = readFields(params,
		field{"requestId", &p.RequestID},
		field{"loaderId", &p.LoaderID},
		field{"frameId", &p.FrameID},
		field{"timestamp", &p.Timestamp},
		field{"type", &p.Type},
		field{"response", func(v []byte) (ok bool) {
			p.Response, ok = responseOf(v, keep)
			return ok
		}},
		field{"redirectResponse", func(v []byte) (ok bool) {
			p.RedirectResponse, ok = responseOf(v, keep)
			return ok
		}},
		field{"errorText", &p.ErrorText},
		field{"canceled", &p.Canceled})
	return p, ok
}

// event is what ReadNetworkEvent returns of params read for method.
func (p *networkParams) event(method []byte) (NetworkEvent, bool) {
	if p.RequestID == "" {
		return NetworkEvent{}, false
	}
	ev := NetworkEvent{RequestID: p.RequestID, Timestamp: p.Timestamp, Document: p.Type == "Document"}
	if p.LoaderID == p.RequestID {
		ev.NavFrame = p.FrameID
	}
	switch string(method) {
	case "Network.requestWillBeSentExtraInfo":
		ev.Sending = true
	case "Network.requestWillBeSent":
		if p.RedirectResponse == nil {
			return ev, false
		}
		ev.Ended, ev.Redirect = true, true
		ev.Outcome, ev.Sent = p.RedirectResponse.outcome(), p.RedirectResponse.sent()
	case "Network.responseReceived":
		if p.Response == nil || p.Type != "Document" {
			return ev, false
		}
		ev.Ended = true
		ev.Outcome, ev.Sent = p.Response.outcome(), p.Response.sent()
	case "Network.loadingFailed":
		ev.Ended = true
		if !p.Canceled {
			ev.Outcome.NoAnswer = NoAnswer(p.ErrorText)
		}
	default:
		return ev, false
	}
	return ev, true
}

// NetworkRequestID returns the requestId of a Network event's params
// without decoding them, when Chromium wrote it first, as it does; ok is
// false otherwise.
func NetworkRequestID(params []byte) (string, bool) {
	const prefix = `{"requestId":"`
	if !bytes.HasPrefix(params, []byte(prefix)) {
		return "", false
	}
	rest := params[len(prefix):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return "", false
	}
	return string(rest[:end]), true
}
