package cdp

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"testing"
)

func TestNavigateParams(t *testing.T) {
	tests := []struct {
		name   string
		params string
		want   Navigate
		wantOK bool
	}{
		{name: "page navigate", params: `{"url":"http://a.test:38201/page?first","frameId":"E6E0B21E17CBA60F6F29DD511B3CEF19"}`,
			want: Navigate{URL: "http://a.test:38201/page?first", FrameID: "E6E0B21E17CBA60F6F29DD511B3CEF19"}, wantOK: true},
		{name: "create target", params: `{"url":"http://b.test/","newWindow":true,"background":true}`,
			want: Navigate{URL: "http://b.test/"}, wantOK: true},
		{name: "escapes", params: `{"url":"http:\/\/a.test\/\u00e9","frameId":"F"}`,
			want: Navigate{URL: "http://a.test/\u00e9", FrameID: "F"}, wantOK: true},
		{name: "last url wins", params: `{"url":"about:blank","url":"http://a.test/"}`,
			want: Navigate{URL: "http://a.test/"}, wantOK: true},
		// Chromium reads exactly "url"; another spelling is not the URL it navigates to.
		{name: "mis-cased key after the url", params: `{"url":"http://a.test/","URL":"about:blank","FrameId":"X"}`,
			want: Navigate{URL: "http://a.test/"}, wantOK: true},
		{name: "only a mis-cased key", params: `{"URL":"http://a.test/"}`},
		{name: "no url", params: `{"frameId":"F"}`},
		{name: "empty url", params: `{"url":""}`},
		{name: "url not a string", params: `{"url":5}`},
		{name: "null", params: `null`},
		{name: "not JSON", params: `{"url":`},
		{name: "not an object", params: `["http://a.test/"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := NavigateParams([]byte(tt.params))
			if ok != tt.wantOK || ok && got != tt.want {
				t.Errorf("NavigateParams(%s): got %+v, %v; want %+v, %v", tt.params, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAttachedTarget(t *testing.T) {
	tests := []struct {
		name                string
		params              string
		wantSession, wantID string
		wantOK              bool
	}{
		{name: "chromium", params: `{"sessionId":"856F1BCC9D0EE7AAB94B6AC92167BB0A","targetInfo":{"targetId":"E6E0B21E17CBA60F6F29DD511B3CEF19","type":"page","title":"","url":"about:blank","attached":true,"canAccessOpener":false,"browserContextId":"C"},"waitingForDebugger":false}`,
			wantSession: "856F1BCC9D0EE7AAB94B6AC92167BB0A", wantID: "E6E0B21E17CBA60F6F29DD511B3CEF19", wantOK: true},
		{name: "lightpanda", params: `{"sessionId":"SID-1","targetInfo":{"targetId":"FID-0000000001","type":"page"},"waitingForDebugger":false}`,
			wantSession: "SID-1", wantID: "FID-0000000001", wantOK: true},
		{name: "no session", params: `{"targetInfo":{"targetId":"T"}}`},
		{name: "not JSON", params: `{`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, id, ok := AttachedTarget([]byte(tt.params))
			if s != tt.wantSession || id != tt.wantID || ok != tt.wantOK {
				t.Errorf("got %q %q %v, want %q %q %v", s, id, ok, tt.wantSession, tt.wantID, tt.wantOK)
			}
		})
	}
}

func TestDetachedSession(t *testing.T) {
	tests := []struct {
		params string
		want   string
		wantOK bool
	}{
		{`{"sessionId":"S","targetId":"T"}`, "S", true},
		{`{"targetId":"T"}`, "", false},
		{`x`, "", false},
	}
	for _, tt := range tests {
		if got, ok := DetachedSession([]byte(tt.params)); got != tt.want || ok != tt.wantOK {
			t.Errorf("DetachedSession(%s): got %q %v, want %q %v", tt.params, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestRequestWillBeSent(t *testing.T) {
	tests := []struct {
		name   string
		params string
		want   Request
		wantOK bool
	}{
		{name: "first hop", params: `{"requestId":"1FBF0E083D5CBBAB7C108EECC7612353","loaderId":"1FBF0E083D5CBBAB7C108EECC7612353","documentURL":"http://a.test:38201/r","request":{"url":"http://a.test:38201/r","method":"GET","headers":{"Upgrade-Insecure-Requests":"1"}},"timestamp":2180.1,"type":"Document","frameId":"E6E0B21E17CBA60F6F29DD511B3CEF19","hasUserGesture":false}`,
			want:   Request{RequestID: "1FBF0E083D5CBBAB7C108EECC7612353", FrameID: "E6E0B21E17CBA60F6F29DD511B3CEF19", Type: "Document", URL: "http://a.test:38201/r"},
			wantOK: true},
		{name: "redirect hop", params: `{"requestId":"1FBF","loaderId":"1FBF","request":{"url":"http://b.test:38201/x","method":"GET"},"redirectHasExtraInfo":true,"redirectResponse":{"url":"http://a.test:38201/r","status":302,"statusText":"Found","headers":{"Content-Length":"0","Location":"http://b.test:38201/x"}},"type":"Document","frameId":"F"}`,
			want:   Request{RequestID: "1FBF", FrameID: "F", Type: "Document", URL: "http://b.test:38201/x", Redirect: &Outcome{Status: 302}},
			wantOK: true},
		{name: "redirect answered 503 with Retry-After", params: `{"requestId":"R","request":{"url":"http://b.test/"},"redirectResponse":{"status":503,"headers":{"retry-after":"7"}},"type":"Document","frameId":"F"}`,
			want:   Request{RequestID: "R", FrameID: "F", Type: "Document", URL: "http://b.test/", Redirect: &Outcome{Status: 503, RetryAfter: "7"}},
			wantOK: true},
		{name: "lightpanda joins repeated headers", params: `{"requestId":"LID-0000000002","request":{"url":"http://b.test/"},"redirectResponse":{"status":429,"headers":{"Retry-After":"5\n9"}},"type":"Document","frameId":"FID-0000000001"}`,
			want:   Request{RequestID: "LID-0000000002", FrameID: "FID-0000000001", Type: "Document", URL: "http://b.test/", Redirect: &Outcome{Status: 429, RetryAfter: "5"}},
			wantOK: true},
		{name: "no requestId", params: `{"request":{"url":"http://a.test/"}}`},
		{name: "not JSON", params: `[`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RequestWillBeSent([]byte(tt.params), nil)
			if ok != tt.wantOK {
				t.Fatalf("got ok %v, want %v", ok, tt.wantOK)
			}
			if (got.Redirect == nil) != (tt.want.Redirect == nil) || got.Redirect != nil && *got.Redirect != *tt.want.Redirect {
				t.Errorf("got redirect %+v, want %+v", got.Redirect, tt.want.Redirect)
			}
			got.Redirect, tt.want.Redirect = nil, nil
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// eventCase is a Network event (method, params) and what a reader of it,
// DocumentAnswer or ReadNetworkEvent, makes of it.
type eventCase[T comparable] struct {
	name   string
	method string
	params string
	want   T
	wantOK bool
}

// notEvents are read as nothing by every reader of Network events.
var notEvents = []struct{ name, method, params string }{
	{name: "other method", method: "Network.loadingFinished", params: `{"requestId":"R"}`},
	{name: "no requestId", method: "Network.loadingFailed", params: `{"errorText":"net::ERR_FAILED"}`},
	{name: "not JSON", method: "Network.responseReceived", params: `{"requestId":`},
}

// checkEvents runs read over every case of tests, and notEvents, keeping
// no headers.
func checkEvents[T comparable](t *testing.T, read func(method, params []byte, keep []string) (T, bool), tests []eventCase[T]) {
	t.Helper()
	for _, n := range notEvents {
		tests = append(tests, eventCase[T]{name: n.name, method: n.method, params: n.params})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := read([]byte(tt.method), []byte(tt.params), nil)
			if ok != tt.wantOK || ok && got != tt.want {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestDocumentAnswer(t *testing.T) {
	tests := []eventCase[Answer]{
		{name: "200", method: "Network.responseReceived",
			params: `{"requestId":"943","loaderId":"943","timestamp":2179.4,"type":"Document","response":{"url":"http://a.test:38201/page?first","status":200,"statusText":"OK","headers":{"Cache-Control":"no-store","Content-Type":"text/html"}},"hasExtraInfo":true,"frameId":"E6E"}`,
			want:   Answer{RequestID: "943", Outcome: Outcome{Status: 200}}, wantOK: true},
		{name: "429 with Retry-After", method: "Network.responseReceived",
			params: `{"requestId":"3A3","type":"Document","response":{"url":"http://a.test:38201/busy","status":429,"statusText":"Too Many Requests","headers":{"Cache-Control":"no-store","Content-Length":"11","Content-Type":"text/html","Date":"Sun, 29 Nov 2026 23:44:55 GMT","Retry-After":"3"}}}`,
			want:   Answer{RequestID: "3A3", Outcome: Outcome{Status: 429, RetryAfter: "3"}}, wantOK: true},
		{name: "lower-case retry-after", method: "Network.responseReceived",
			params: `{"requestId":"R","type":"Document","response":{"status":503,"headers":{"retry-after":"120"}}}`,
			want:   Answer{RequestID: "R", Outcome: Outcome{Status: 503, RetryAfter: "120"}}, wantOK: true},
		{name: "the address the browser connected to", method: "Network.responseReceived",
			params: `{"requestId":"943","type":"Document","response":{"url":"http://b.test:38201/","status":200,"headers":{},"remoteIPAddress":"127.0.0.2","remotePort":38201}}`,
			want:   Answer{RequestID: "943", Outcome: Outcome{Status: 200, RemoteIP: netip.MustParseAddr("127.0.0.2")}}, wantOK: true},
		{name: "an IPv6 address, bare or in brackets", method: "Network.responseReceived",
			params: `{"requestId":"R","type":"Document","response":{"status":200,"remoteIPAddress":"[2001:db8::1]"}}`,
			want:   Answer{RequestID: "R", Outcome: Outcome{Status: 200, RemoteIP: netip.MustParseAddr("2001:db8::1")}}, wantOK: true},
		{name: "an address that is not one", method: "Network.responseReceived",
			params: `{"requestId":"R","type":"Document","response":{"status":200,"remoteIPAddress":"proxy"}}`,
			want:   Answer{RequestID: "R", Outcome: Outcome{Status: 200}}, wantOK: true},
		{name: "not a document", method: "Network.responseReceived",
			params: `{"requestId":"6882.2","type":"Other","response":{"url":"http://b.test:38201/favicon.ico","status":404}}`},
		{name: "no response", method: "Network.responseReceived", params: `{"requestId":"R","type":"Document"}`},
		{name: "refused", method: "Network.loadingFailed",
			params: `{"requestId":"BF3","timestamp":2181.308764,"type":"Document","errorText":"net::ERR_CONNECTION_REFUSED","canceled":false}`,
			want:   Answer{RequestID: "BF3", Outcome: Outcome{NoAnswer: true}}, wantOK: true},
		{name: "name not resolved reached no host", method: "Network.loadingFailed",
			params: `{"requestId":"R","type":"Document","errorText":"net::ERR_NAME_NOT_RESOLVED","canceled":false}`,
			want:   Answer{RequestID: "R"}, wantOK: true},
		{name: "canceled", method: "Network.loadingFailed",
			params: `{"requestId":"R","type":"Document","errorText":"net::ERR_ABORTED","canceled":true}`,
			want:   Answer{RequestID: "R"}, wantOK: true},
		{name: "lightpanda could not connect", method: "Network.loadingFailed",
			params: `{"requestId":"LID-0000000003","timestamp":1,"type":"Ping","errorText":"CouldntConnect","canceled":false}`,
			want:   Answer{RequestID: "LID-0000000003", Outcome: Outcome{NoAnswer: true}}, wantOK: true},
	}
	checkEvents(t, DocumentAnswer, tests)
}

func TestTargetParams(t *testing.T) {
	tests := []struct {
		params              string
		wantTarget, wantCtx string
	}{
		{`{"url":"about:blank","browserContextId":"C1"}`, "", "C1"},
		{`{"targetId":"T1","flatten":true}`, "T1", ""},
		{`{"targetId":"T1","browserContextId":"C1"}`, "T1", "C1"},
		{`{"TargetId":"T1","browserContextID":"C1"}`, "", ""}, // Chromium reads exact names
		{`{"targetId":7}`, "", ""},
		{`[1]`, "", ""},
		{``, "", ""},
	}
	for _, tt := range tests {
		if target, ctx := TargetParams([]byte(tt.params)); target != tt.wantTarget || ctx != tt.wantCtx {
			t.Errorf("TargetParams(%s) = %q, %q; want %q, %q", tt.params, target, ctx, tt.wantTarget, tt.wantCtx)
		}
	}
}

func TestDrives(t *testing.T) {
	for method, want := range map[string]bool{
		"Page.navigate": true, "Runtime.evaluate": true, "Runtime.callFunctionOn": true, "Input.dispatchMouseEvent": true,
		"Input.": false, "Page.enable": false, "Runtime.runIfWaitingForDebugger": false, "Target.attachToTarget": false, "": false,
	} {
		if got := Drives([]byte(method)); got != want {
			t.Errorf("Drives(%q) = %v, want %v", method, got, want)
		}
	}
}

func TestReply(t *testing.T) {
	tests := []struct {
		id      int64
		session string
		result  any
		e       *Error
		want    string
	}{
		{5, "", struct{}{}, nil, `{"id":5,"result":{}}`},
		{5, "S1", struct{}{}, nil, `{"id":5,"result":{},"sessionId":"S1"}`},
		{6, "S1", nil, &Error{Code: -32000, Message: "no"}, `{"id":6,"error":{"code":-32000,"message":"no"},"sessionId":"S1"}`},
	}
	for _, tt := range tests {
		got, err := Reply(tt.id, tt.session, tt.result, tt.e)
		if err != nil || string(got) != tt.want {
			t.Errorf("Reply: got %s, %v; want %s", got, err, tt.want)
		}
	}
}

func TestReadNetworkEvent(t *testing.T) {
	tests := []eventCase[NetworkEvent]{
		{name: "sending", method: "Network.requestWillBeSentExtraInfo",
			params: `{"requestId":"8886","associatedCookies":[],"headers":{"Accept":"text/html"},"connectTiming":{"requestTime":4346.13}}`,
			want:   NetworkEvent{RequestID: "8886", Sending: true}, wantOK: true},
		{name: "answer, timed", method: "Network.responseReceived",
			params: `{"requestId":"8886","loaderId":"8886","timestamp":4346.137252,"type":"Document","response":{"url":"http://a.test:34997/page?first","status":200,"headers":{"Content-Type":"text/html"},"timing":{"requestTime":4346.125,"proxyStart":-1,"sendStart":0.5,"sendEnd":125}}}`,
			want:   NetworkEvent{RequestID: "8886", Document: true, Timestamp: 4346.137252, Sent: 4346.25, Ended: true, Outcome: Outcome{Status: 200}}, wantOK: true},
		{name: "answer of a frame's navigation", method: "Network.responseReceived",
			params: `{"requestId":"DA65","loaderId":"DA65","timestamp":5,"type":"Document","response":{"status":200,"timing":{"requestTime":4.5,"sendStart":0.669,"sendEnd":0.706}},"hasExtraInfo":false,"frameId":"046D"}`,
			want:   NetworkEvent{RequestID: "DA65", Document: true, Timestamp: 5, Sent: 4.500706, Ended: true, Outcome: Outcome{Status: 200}, NavFrame: "046D"}, wantOK: true},
		{name: "a document not named by its loader", method: "Network.responseReceived",
			params: `{"requestId":"7.2","loaderId":"DA65","timestamp":5,"type":"Document","response":{"status":200},"frameId":"IFRAME"}`,
			want:   NetworkEvent{RequestID: "7.2", Document: true, Timestamp: 5, Ended: true, Outcome: Outcome{Status: 200}}, wantOK: true},
		{name: "answer with its address", method: "Network.responseReceived",
			params: `{"requestId":"8886","timestamp":4,"type":"Document","response":{"status":200,"headers":{},"remoteIPAddress":"127.0.0.2","remotePort":34997,"timing":{"requestTime":3.5,"sendStart":0.5,"sendEnd":1}}}`,
			want:   NetworkEvent{RequestID: "8886", Document: true, Timestamp: 4, Sent: 3.501, Ended: true, Outcome: Outcome{Status: 200, RemoteIP: netip.MustParseAddr("127.0.0.2")}}, wantOK: true},
		{name: "redirect hop with the address it came from", method: "Network.requestWillBeSent",
			params: `{"requestId":"R","timestamp":5,"type":"Document","request":{"url":"http://b.test/x"},"redirectResponse":{"status":302,"headers":{},"remoteIPAddress":"10.0.0.7"}}`,
			want:   NetworkEvent{RequestID: "R", Document: true, Timestamp: 5, Ended: true, Redirect: true, Outcome: Outcome{Status: 302, RemoteIP: netip.MustParseAddr("10.0.0.7")}}, wantOK: true},
		{name: "429, no timing", method: "Network.responseReceived",
			params: `{"requestId":"R","timestamp":2,"type":"Document","response":{"status":429,"headers":{"Retry-After":"3"}}}`,
			want:   NetworkEvent{RequestID: "R", Document: true, Timestamp: 2, Ended: true, Outcome: Outcome{Status: 429, RetryAfter: "3"}}, wantOK: true},
		{name: "not a document", method: "Network.responseReceived",
			params: `{"requestId":"R","type":"Image","response":{"status":200}}`},
		{name: "redirect hop", method: "Network.requestWillBeSent",
			params: `{"requestId":"R","loaderId":"R","timestamp":5,"type":"Document","request":{"url":"http://b.test/x"},"redirectResponse":{"status":302,"headers":{"Location":"http://b.test/x"},"timing":{"requestTime":4.5,"sendStart":250}}}`,
			want:   NetworkEvent{RequestID: "R", Document: true, Timestamp: 5, Sent: 4.75, Ended: true, Redirect: true, Outcome: Outcome{Status: 302}}, wantOK: true},
		{name: "first hop, no redirect", method: "Network.requestWillBeSent",
			params: `{"requestId":"R","timestamp":5,"type":"Document","request":{"url":"http://b.test/x"}}`},
		{name: "refused", method: "Network.loadingFailed",
			params: `{"requestId":"BF3","timestamp":2181.5,"type":"Document","errorText":"net::ERR_CONNECTION_REFUSED","canceled":false}`,
			want:   NetworkEvent{RequestID: "BF3", Document: true, Timestamp: 2181.5, Ended: true, Outcome: Outcome{NoAnswer: true}}, wantOK: true},
		{name: "canceled", method: "Network.loadingFailed",
			params: `{"requestId":"R","timestamp":1,"errorText":"net::ERR_ABORTED","canceled":true}`,
			want:   NetworkEvent{RequestID: "R", Timestamp: 1, Ended: true}, wantOK: true},
		{name: "answer, send without an end", method: "Network.responseReceived",
			params: `{"requestId":"R","timestamp":5,"type":"Document","response":{"status":200,"timing":{"requestTime":4.5,"sendStart":250}}}`,
			want:   NetworkEvent{RequestID: "R", Document: true, Timestamp: 5, Sent: 4.75, Ended: true, Outcome: Outcome{Status: 200}}, wantOK: true},
		{name: "timing without a send", method: "Network.responseReceived",
			params: `{"requestId":"R","type":"Document","response":{"status":200,"timing":{"requestTime":4,"sendStart":-1}}}`,
			want:   NetworkEvent{RequestID: "R", Document: true, Ended: true, Outcome: Outcome{Status: 200}}, wantOK: true},
	}
	checkEvents(t, ReadNetworkEvent, tests)
}

func TestNetworkRequestID(t *testing.T) {
	tests := []struct {
		params, want string
		ok           bool
	}{
		{`{"requestId":"8886BD55","timestamp":1}`, "8886BD55", true},
		{`{"requestId":"20413.2"}`, "20413.2", true},
		{`{"timestamp":1,"requestId":"R"}`, "", false}, // not first: decoded instead
		{`{"requestId":"a\"b"}`, "", false},
		{`{"requestId":"unterminated`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		if got, ok := NetworkRequestID([]byte(tt.params)); got != tt.want || ok != tt.ok {
			t.Errorf("NetworkRequestID(%s) = %q, %v; want %q, %v", tt.params, got, ok, tt.want, tt.ok)
		}
	}
}

func TestLeadingTargetID(t *testing.T) {
	tests := []struct {
		params, want string
		ok           bool
	}{
		{`{"targetInfo":{"targetId":"2D80E7C0","type":"page","title":"x"}}`, "2D80E7C0", true},
		{`{"targetInfo":{"type":"page","targetId":"T"}}`, "", false}, // not first: decoded instead
		{`{"targetInfo":{"targetId":"a\\"b"}}`, "", false},
		{`{"targetInfo":{"targetId":""}}`, "", false},
		{`{"targetInfo":{"targetId":"unterminated`, "", false},
		{`{"sessionId":"S","targetInfo":{"targetId":"T"}}`, "", false},
		{``, "", false},
	}
	for _, tt := range tests {
		if got, ok := LeadingTargetID([]byte(tt.params)); string(got) != tt.want || ok != tt.ok {
			t.Errorf("LeadingTargetID(%s) = %q, %v; want %q, %v", tt.params, got, ok, tt.want, tt.ok)
		}
	}
	// On what Chromium sends, it reads what ReadTargetInfo reads, every time.
	seen := 0
	recordedEvents(t, "chromium-*.jsonl", func(f, m string, params []byte) {
		if m != "Target.targetCreated" && m != "Target.targetInfoChanged" {
			return
		}
		seen++
		ti, ok := ReadTargetInfo(params)
		id, fast := LeadingTargetID(params)
		if !ok || !fast || string(id) != ti.TargetID {
			t.Errorf("%s: LeadingTargetID = %q, %v; ReadTargetInfo's targetId %q, %v", f, id, fast, ti.TargetID, ok)
		}
	})
	if seen == 0 {
		t.Error("no Target events in the recordings")
	}
}

func TestChangedTargetID(t *testing.T) {
	tests := []struct {
		msg, want string
		ok        bool
	}{
		{`{"method":"Target.targetInfoChanged","params":{"targetInfo":{"targetId":"T1","type":"page","title":"x"}}}`, "T1", true},
		{`{"method":"Target.targetCreated","params":{"targetInfo":{"targetId":"T2","type":"page"}}}`, "T2", true},
		{`{"method":"Target.targetInfoChanged","params":{"targetInfo":{"targetId":"T1"}},"sessionId":"S"}`, "T1", true},
		{`{"method":"Target.attachedToTarget","params":{"sessionId":"S","targetInfo":{"targetId":"T1"}}}`, "", false},
		{`{"method":"Target.targetDestroyed","params":{"targetId":"T1"}}`, "", false},
		{`{"sessionId":"S","method":"Target.targetInfoChanged","params":{"targetInfo":{"targetId":"T1"}}}`, "", false}, // not Chromium's order: read whole
		{`{"method":"Target.targetInfoChanged","params":{"targetInfo":{"type":"page","targetId":"T1"}}}`, "", false},
		{`{"method":"Target.targetInfoChangedX","params":{"targetInfo":{"targetId":"T1"}}}`, "", false},
		{`{"id":1,"result":{"targetInfo":{"targetId":"T1"}}}`, "", false},
	}
	for _, tt := range tests {
		if got, ok := ChangedTargetID([]byte(tt.msg)); string(got) != tt.want || ok != tt.ok {
			t.Errorf("ChangedTargetID(%s) = %q, %v; want %q, %v", tt.msg, got, ok, tt.want, tt.ok)
		}
	}
}

func TestReadAttached(t *testing.T) {
	got, ok := ReadAttached([]byte(`{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page","title":"","url":"about:blank","attached":true,"openerId":"O1","browserContextId":"C"},"waitingForDebugger":true}`))
	if want := (Attached{SessionID: "S1", Target: TargetInfo{TargetID: "T1", Type: "page", OpenerID: "O1", BrowserContextID: "C"}, Waiting: true}); !ok || got != want {
		t.Errorf("got %+v, %v; want %+v", got, ok, want)
	}
	for _, bad := range []string{`{"targetInfo":{"targetId":"T1"}}`, `{"sessionId":"S1"}`, `[]`} {
		if _, ok := ReadAttached([]byte(bad)); ok {
			t.Errorf("ReadAttached(%s) ok, want not", bad)
		}
	}
}

// BenchmarkReadTargetInfo reads a Target.targetInfoChanged's params, as
// every client of a shared browser gets one for every page: straight from
// the bytes, and with encoding/json as it was read before.
func BenchmarkReadTargetInfo(b *testing.B) {
	params := []byte(`{"targetInfo":{"targetId":"3B0D5E7A2C8F41D69E5B7C2A1F0E9D84","type":"page","title":"a page of a crawl","url":"http://a.test:8080/page?c=17&k=3","attached":true,"canAccessOpener":false,"browserContextId":"8F2E4C6A1B3D5E7F9A0B2C4D6E8F0A1B"}}`)
	b.Run("bytes", func(b *testing.B) {
		for range b.N {
			if _, ok := ReadTargetInfo(params); !ok {
				b.Fatal("not read")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for range b.N {
			var p struct {
				TargetInfo *TargetInfo `json:"targetInfo"`
			}
			if json.Unmarshal(params, &p) != nil {
				b.Fatal("not read")
			}
		}
	})
}

// BenchmarkReadNetworkEvent reads the answer of a followed document as
// Chromium sends it (its address, timing and security details included).
func BenchmarkReadNetworkEvent(b *testing.B) {
	params := []byte(`{"requestId":"8886","loaderId":"8886","timestamp":4346.137252,"type":"Document","response":{"url":"http://a.test:34997/page?first","status":200,"statusText":"OK","headers":{"Cache-Control":"no-store","Content-Length":"120","Content-Type":"text/html","Date":"Thu, 03 Dec 2026 12:00:00 GMT"},"mimeType":"text/html","charset":"","connectionReused":false,"connectionId":42,"remoteIPAddress":"127.0.0.2","remotePort":34997,"fromDiskCache":false,"fromServiceWorker":false,"fromPrefetchCache":false,"encodedDataLength":183,"timing":{"requestTime":4346.125,"proxyStart":-1,"proxyEnd":-1,"dnsStart":0.1,"dnsEnd":0.2,"connectStart":0.2,"connectEnd":0.5,"sslStart":-1,"sslEnd":-1,"workerStart":-1,"workerReady":-1,"workerFetchStart":-1,"workerRespondWithSettled":-1,"sendStart":0.5,"sendEnd":0.6,"pushStart":0,"pushEnd":0,"receiveHeadersStart":1.5,"receiveHeadersEnd":1.6},"responseTime":1.7645e+12,"protocol":"http/1.1","alternateProtocolUsage":"unspecifiedReason","securityState":"insecure"},"hasExtraInfo":true,"frameId":"E6E"}`)
	method := []byte("Network.responseReceived")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ReadNetworkEvent(method, params, nil); !ok {
			b.Fatal("unread")
		}
	}
}

// TestCommand: the envelope written by hand is what encoding/json writes,
// for any method, session and params.
func TestCommand(t *testing.T) {
	for _, c := range []struct {
		id              int64
		method, session string
		params          any
	}{
		{-1, "Fetch.continueRequest", "9A1B", StringParam("requestId", "interception-job-1.0")},
		{-7, "Fetch.continueRequest", "", map[string]string{"requestId": "1.2"}},
		{3, "Target.attachToTarget", "S", map[string]any{"targetId": "T", "flatten": true}},
		{-2, "Fetch.failRequest", `odd"session\`, StringParam("requestId", "a<b>&\"\\\x01é")},
		{-4, "Weird\nMethod", "", json.RawMessage(`{"a":[1,2]}`)},
	} {
		got, err := Command(c.id, c.method, c.session, c.params)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := json.Marshal(c.params)
		want, _ := json.Marshal(struct {
			ID        int64           `json:"id"`
			SessionID string          `json:"sessionId,omitempty"`
			Method    string          `json:"method"`
			Params    json.RawMessage `json:"params"`
		}{c.id, c.session, c.method, p})
		if !bytes.Equal(got, want) {
			t.Errorf("Command(%d, %q, %q): %s, want %s", c.id, c.method, c.session, got, want)
		}
	}
}

// TestFetchPausesDocuments: which of a client's Fetch.enable params may
// pause a document before it leaves, read as Chromium reads them.
func TestFetchPausesDocuments(t *testing.T) {
	for params, want := range map[string]bool{
		``:                                  true, // every request
		`{}`:                                true,
		`{"patterns":null}`:                 true,
		`{"patterns":[]}`:                   false, // Chromium intercepts nothing
		`{"patterns":[{"urlPattern":"*"}]}`: true,
		`{"patterns":[{"resourceType":"Image"}]}`:                                        false,
		`{"patterns":[{"resourceType":"Document"}]}`:                                     true,
		`{"patterns":[{"resourceType":"Document","requestStage":"Request"}]}`:            true,
		`{"patterns":[{"resourceType":"Document","requestStage":"Response"}]}`:           false,
		`{"patterns":[{"resourceType":"Image"},{"urlPattern":"*.html"}]}`:                true,
		`{"patterns":[{"ResourceType":"Image"}]}`:                                        true, // a name Chromium does not read: every type
		`{"patterns":[{"urlPattern":"*.png","resourceType":"Image","requestStage":""}]}`: false,
		`{"patterns":5}`:              true, // refused by the browser: the worst case
		`{"patterns":[5]}`:            true,
		`not json`:                    true,
		`{"handleAuthRequests":true}`: true,
	} {
		if got := FetchPausesDocuments([]byte(params)); got != want {
			t.Errorf("FetchPausesDocuments(%s) = %v, want %v", params, got, want)
		}
	}
}
