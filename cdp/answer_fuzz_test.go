package cdp

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The paused-request and answer readers read their members straight from
// the bytes; these tests hold them to what encoding/json reads, which
// they replaced.

// jsonRequestPaused is ReadRequestPaused as it was, with encoding/json.
func jsonRequestPaused(params []byte) (RequestPaused, bool) {
	var ev RequestPaused
	if json.Unmarshal(params, &ev) != nil || ev.RequestID == "" {
		return RequestPaused{}, false
	}
	return ev, true
}

// jsonDocumentAnswer is DocumentAnswer as it was, with encoding/json,
// keeping the headers keep names.
func jsonDocumentAnswer(method, params []byte, keep ...string) (Answer, bool) {
	var p networkParams
	if json.Unmarshal(params, &p) != nil {
		return Answer{}, false
	}
	keepOnly(p.Response, keep)
	return p.answer(method)
}

// jsonRequestWillBeSent is RequestWillBeSent as it was, with encoding/json.
func jsonRequestWillBeSent(params []byte, keep ...string) (Request, bool) {
	var p willBeSentParams
	if json.Unmarshal(params, &p) != nil {
		return Request{}, false
	}
	keepOnly(p.RedirectResponse, keep)
	return p.request()
}

// jsonNetworkEvent is ReadNetworkEvent as it was, with encoding/json.
func jsonNetworkEvent(method, params []byte, keep ...string) (NetworkEvent, bool) {
	var p networkParams
	if json.Unmarshal(params, &p) != nil {
		return NetworkEvent{}, false
	}
	keepOnly(p.Response, keep)
	keepOnly(p.RedirectResponse, keep)
	return p.event(method)
}

// keepOnly drops the headers of r encoding/json read that the readers do
// not keep: all but Retry-After and those keep names.
func keepOnly(r *response, keep []string) {
	if r == nil {
		return
	}
	for k := range r.Headers {
		if !strings.EqualFold(k, "Retry-After") && !keeps(keep, k) {
			delete(r.Headers, k)
		}
	}
	if len(r.Headers) == 0 {
		r.Headers = nil
	}
	r.keep = keep // outcome keeps them, as readResponse has it do
}

// networkMethods are the events ReadNetworkEvent reads.
var networkMethods = [][]byte{[]byte("Network.requestWillBeSentExtraInfo"), []byte("Network.requestWillBeSent"),
	[]byte("Network.responseReceived"), []byte("Network.loadingFailed")}

// sameRequest compares two reads of a request, their redirects by value.
func sameRequest(a, b Request) bool {
	if (a.Redirect == nil) != (b.Redirect == nil) || a.Redirect != nil && *a.Redirect != *b.Redirect {
		return false
	}
	a.Redirect, b.Redirect = nil, nil
	return a == b
}

// samePaused compares two reads of a paused request, an empty header
// list equal to none (encoding/json reads [] as an empty list).
func samePaused(a, b RequestPaused) bool {
	if len(a.ResponseHeaders) == 0 && len(b.ResponseHeaders) == 0 {
		a.ResponseHeaders, b.ResponseHeaders = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// readerFields are the members the readers read, at every level:
// encoding/json also takes them in another case, the browser never
// writes them so.
var readerFields = []string{"requestId", "frameId", "resourceType", "redirectedRequestId", "networkId",
	"request", "url", "method", "responseStatusCode", "responseErrorReason", "responseHeaders", "name",
	"value", "type", "response", "errorText", "canceled", "status", "headers", "remoteIPAddress",
	"redirectResponse", "loaderId", "timestamp", "timing", "requestTime", "sendStart", "sendEnd"}

// browserShaped reports whether params are JSON as a browser writes it:
// valid, no key twice in an object, no reader's key in another case, at
// most one Retry-After among a response's headers (encoding/json reads
// them into a map, whose order is not kept).
func browserShaped(params []byte) bool {
	if !json.Valid(params) {
		return false
	}
	var walk func(v []byte) bool
	walk = func(v []byte) bool {
		switch v[0] {
		case '{':
			seen := map[string]bool{}
			retry := 0
			ok := true
			members(v, func(key, val []byte) bool {
				k := string(key)
				if seen[k] {
					ok = false
				}
				seen[k] = true
				if strings.EqualFold(k, "Retry-After") {
					retry++
				}
				for _, f := range readerFields {
					if k != f && strings.EqualFold(k, f) {
						ok = false
					}
				}
				ok = ok && walk(val)
				return ok
			})
			return ok && retry <= 1
		case '[':
			ok := true
			elements(v, func(val []byte) bool { ok = walk(val); return ok })
			return ok
		}
		return true
	}
	return walk(bytes.TrimSpace(params))
}

// FuzzAnswerReaders checks ReadRequestPaused, DocumentAnswer,
// RequestWillBeSent and ReadNetworkEvent against encoding/json on every
// input shaped as a browser writes it.
func FuzzAnswerReaders(f *testing.F) {
	for _, s := range []string{
		`{"requestId":"interception-job-6.1","request":{"url":"http://b.test:42557/x","method":"GET","headers":{}},"frameId":"93A4","resourceType":"Document","responseStatusCode":200,"responseStatusText":"OK","responseHeaders":[{"name":"Retry-After","value":"3"},null],"networkId":"E93D","redirectedRequestId":"interception-job-6.0"}`,
		`{"requestId":"LID-0000000003","frameId":"FID-1","request":{"url":"http://a.test/","method":"GET","headers":{"User-Agent":"Lightpanda/1.0"}},"resourceType":"Document","networkId":"LID-0000000003"}`,
		`{"requestId":"R","type":"Document","response":{"status":429,"headers":{"retry-after":"120","X":null},"remoteIPAddress":"[::1]"}}`,
		`{"requestId":"R","timestamp":1,"type":"Document","errorText":"net::ERR_CONNECTION_REFUSED","canceled":false}`,
		`{"requestId":"R","responseStatusCode":2e2,"response":{"status":1e400}}`,
		`{"requestId":"R","responseStatusCode":-9223372036854775808,"response":{"status":-0.5e-3}}`,
		`{"requestId":"R","responseStatusCode":9223372036854775808}`,
		`{"requestId":"R","request":null,"responseHeaders":null,"response":null,"canceled":null}`,
		`{"requestId":"R","request":"x","responseHeaders":[1],"response":{"headers":[]}}`,
		`{"requestId":"E93D","loaderId":"E93D","documentURL":"http://b.test/x","request":{"url":"http://b.test/x","method":"GET","headers":{}},"timestamp":1,"redirectResponse":{"url":"http://a.test/r","status":302,"headers":{"Location":"http://b.test/x","Retry-After":"1"},"remoteIPAddress":"127.0.0.2"},"type":"Document","frameId":"F"}`,
		`{"requestId":"R","redirectResponse":null,"request":null}`,
		`{"requestId":"\u0052","frameId":"\ud800"}`,
		`{"requestId":"L","loaderId":"L","timestamp":4346.137252,"type":"Document","response":{"status":200,"timing":{"requestTime":4346.125,"sendStart":0.5,"sendEnd":0.6,"receiveHeadersEnd":1.6}},"frameId":"F"}`,
		`{"requestId":"L","loaderId":"M","timestamp":null,"type":"Document","response":{"status":503,"headers":{"Retry-After":"2"},"timing":{"requestTime":1e3,"sendStart":-1,"sendEnd":null}}}`,
		`{"requestId":"L","type":"Document","response":{"timing":null},"redirectResponse":{"timing":{"sendEnd":"x"}}}`,
		`{"requestId":"L","type":"Document","response":{"timing":{"requestTime":true}}}`,
		`{"requestId":"L","type":"Document","response":{"timing":[]},"timestamp":"1"}`,
		`{"requestId":"L","type":"Document","response":{"status":200,"headers":{"cf-mitigated":"challenge","CF-MITIGATED":null,"x-a":"1\nyes"}},"redirectResponse":{"headers":{"X-A":2}}}`,
		`{"requestId":"0","type":"Document","response":{"headers":{"X-A":"","cf-mitigated":"challenge"}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		got, ok := ReadRequestPaused(params) // never panics, whatever it is given
		gotA, okA := DocumentAnswer([]byte("Network.responseReceived"), params, nil)
		gotF, okF := DocumentAnswer([]byte("Network.loadingFailed"), params, nil)
		gotR, okR := RequestWillBeSent(params, nil)
		var gotN [4]NetworkEvent
		var okN [4]bool
		for i, m := range networkMethods {
			gotN[i], okN[i] = ReadNetworkEvent(m, params, nil)
		}
		if !browserShaped(params) {
			return
		}
		for i, m := range networkMethods {
			if w, wok := jsonNetworkEvent(m, params); okN[i] != wok || gotN[i] != w {
				t.Errorf("ReadNetworkEvent(%s, %s) = %+v %v, encoding/json reads %+v %v", m, params, gotN[i], okN[i], w, wok)
			}
		}
		if w, wok := jsonRequestWillBeSent(params); okR != wok || okR && !sameRequest(gotR, w) {
			t.Errorf("RequestWillBeSent(%s) = %+v %v, encoding/json reads %+v %v", params, gotR, okR, w, wok)
		}
		want, wantOK := jsonRequestPaused(params)
		if ok != wantOK || ok && !samePaused(got, want) {
			t.Errorf("ReadRequestPaused(%s) = %+v %v, encoding/json reads %+v %v", params, got, ok, want, wantOK)
		}
		if o, ok := got.Outcome(nil); ok {
			if w, _ := want.Outcome(nil); o != w {
				t.Errorf("Outcome of %s = %+v, encoding/json's %+v", params, o, w)
			}
		}
		if w, wok := jsonDocumentAnswer([]byte("Network.responseReceived"), params); okA != wok || gotA != w {
			t.Errorf("DocumentAnswer(responseReceived, %s) = %+v %v, encoding/json reads %+v %v", params, gotA, okA, w, wok)
		}
		if w, wok := jsonDocumentAnswer([]byte("Network.loadingFailed"), params); okF != wok || gotF != w {
			t.Errorf("DocumentAnswer(loadingFailed, %s) = %+v %v, encoding/json reads %+v %v", params, gotF, okF, w, wok)
		}
		// Keeping headers besides Retry-After reads the same as encoding/json.
		keep := []string{"cf-mitigated", "X-A"}
		for _, m := range networkMethods {
			got, ok := ReadNetworkEvent(m, params, keep)
			if w, wok := jsonNetworkEvent(m, params, keep...); ok != wok || got != w {
				t.Errorf("ReadNetworkEvent(%s, %s, %q) = %+v %v, encoding/json reads %+v %v", m, params, keep, got, ok, w, wok)
			}
		}
		if got, ok := RequestWillBeSent(params, keep); ok {
			if w, _ := jsonRequestWillBeSent(params, keep...); !sameRequest(got, w) {
				t.Errorf("RequestWillBeSent(%s, %q) = %+v, encoding/json reads %+v", params, keep, got, w)
			}
		}
		if got, ok := DocumentAnswer([]byte("Network.responseReceived"), params, keep); ok {
			if w, _ := jsonDocumentAnswer([]byte("Network.responseReceived"), params, keep...); got != w {
				t.Errorf("DocumentAnswer(responseReceived, %s, %q) = %+v, encoding/json reads %+v", params, keep, got, w)
			}
		}
	})
}

// TestAnswerReadersOnRecordings reads every paused request, every request
// sent, every answer and every Network event of the Chromium and
// Lightpanda recordings as encoding/json reads them, and the 429's
// Retry-After of each.
func TestAnswerReadersOnRecordings(t *testing.T) {
	seen := map[string]int{}
	busy := map[string]bool{}
	recordedEvents(t, "*.jsonl", func(f, m string, params []byte) {
		if strings.HasPrefix(m, "Network.") {
			got, ok := ReadNetworkEvent([]byte(m), params, nil)
			if want, wantOK := jsonNetworkEvent([]byte(m), params); ok != wantOK || got != want {
				t.Errorf("%s: ReadNetworkEvent(%s) = %+v %v, encoding/json reads %+v %v", f, m, got, ok, want, wantOK)
			}
			if ok && got.Sent > 0 {
				seen["timed answers"]++
			}
		}
		switch m {
		case "Fetch.requestPaused":
			got, ok := ReadRequestPaused(params)
			want, wantOK := jsonRequestPaused(params)
			if !ok || !wantOK || !samePaused(got, want) {
				t.Errorf("%s: ReadRequestPaused = %+v %v, encoding/json reads %+v %v", f, got, ok, want, wantOK)
			}
		case "Network.requestWillBeSent":
			got, ok := RequestWillBeSent(params, nil)
			want, wantOK := jsonRequestWillBeSent(params)
			if !ok || !wantOK || !sameRequest(got, want) {
				t.Errorf("%s: RequestWillBeSent = %+v %v, encoding/json reads %+v %v", f, got, ok, want, wantOK)
			}
		case "Network.requestWillBeSentExtraInfo":
		case "Network.responseReceived", "Network.loadingFailed":
			got, ok := DocumentAnswer([]byte(m), params, nil)
			want, wantOK := jsonDocumentAnswer([]byte(m), params)
			if ok != wantOK || got != want {
				t.Errorf("%s: DocumentAnswer(%s) = %+v %v, encoding/json reads %+v %v", f, m, got, ok, want, wantOK)
			}
			if got.Outcome.Status == 429 {
				busy[filepath.Base(f)] = got.Outcome.RetryAfter == "3"
			}
		default:
			return
		}
		seen[m]++
	})
	for _, m := range []string{"Fetch.requestPaused", "Network.requestWillBeSent", "Network.requestWillBeSentExtraInfo", "Network.responseReceived", "Network.loadingFailed", "timed answers"} {
		if seen[m] == 0 {
			t.Errorf("no %s in the recordings", m)
		}
	}
	for _, f := range []string{"chromium-session.jsonl", "lightpanda-session.jsonl"} {
		if !busy[f] {
			t.Errorf("%s: no 429 read with its Retry-After of 3", f)
		}
	}
	t.Logf("read %v; 429 with Retry-After in %v", seen, busy)
}

// recordedEvents calls visit with the file, method and params of every
// message of the fake browser's recordings that match glob, and fails
// the test when none match.
func recordedEvents(t *testing.T, glob string, visit func(file, method string, params []byte)) {
	t.Helper()
	files, _ := filepath.Glob("../internal/fakebrowser/testdata/" + glob)
	if len(files) == 0 {
		t.Fatalf("no recordings %s", glob)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			var rec struct {
				Msg struct {
					Method string          `json:"method"`
					Params json.RawMessage `json:"params"`
				} `json:"msg"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg.Method != "" {
				visit(f, rec.Msg.Method, rec.Msg.Params)
			}
		}
	}
}

// A paused document of Lightpanda's and a document's answer of
// Chromium's, as the benchmarks read them.
var (
	benchPaused = []byte(`{"requestId":"INTERCEPT-1342","request":{"url":"http://127.0.0.2:40421/four?x=1&c=12&k=3","method":"GET","headers":{"User-Agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36","Accept":"*/*"},"initialPriority":"VeryHigh","referrerPolicy":"strict-origin-when-cross-origin"},"frameId":"FID-0000000001","resourceType":"Document","networkId":"REQ-1342"}`)
	benchAnswer = []byte(`{"requestId":"6C3E1B4F5B1F4CB6A3D3F0D1A7D6E7B2","loaderId":"6C3E1B4F5B1F4CB6A3D3F0D1A7D6E7B2","timestamp":2179.412,"type":"Document","response":{"url":"http://127.0.0.2:40421/four?x=1&c=12&k=3","status":200,"statusText":"OK","headers":{"Content-Length":"236","Content-Type":"text/html","Date":"Fri, 04 Dec 2026 16:38:22 GMT"},"mimeType":"text/html","charset":"","connectionReused":true,"connectionId":41,"remoteIPAddress":"127.0.0.2","remotePort":40421,"fromDiskCache":false,"fromServiceWorker":false,"fromPrefetchCache":false,"encodedDataLength":117,"timing":{"requestTime":2179.40,"proxyStart":-1,"proxyEnd":-1,"dnsStart":-1,"dnsEnd":-1,"connectStart":-1,"connectEnd":-1,"sslStart":-1,"sslEnd":-1,"workerStart":-1,"workerReady":-1,"workerFetchStart":-1,"workerRespondWithSettled":-1,"sendStart":0.2,"sendEnd":0.3,"pushStart":0,"pushEnd":0,"receiveHeadersStart":1.1,"receiveHeadersEnd":1.2},"responseTime":1.7648658e+12,"protocol":"http/1.1","alternateProtocolUsage":"unspecifiedReason","securityState":"insecure"},"hasExtraInfo":false,"frameId":"6C3E1B4F5B1F4CB6A3D3F0D1A7D6E7B2"}`)
)

// BenchmarkAnswerReaders compares the readers with encoding/json on the
// two events a holding relay reads most (a document's answer is read
// twice: by the share, DocumentAnswer, and by the Fetch strategy's
// following of departures, ReadNetworkEvent).
func BenchmarkAnswerReaders(b *testing.B) {
	method := []byte("Network.responseReceived")
	for _, bm := range []struct {
		name string
		read func()
	}{
		{"paused/bytes", func() { ReadRequestPaused(benchPaused) }},
		{"paused/encoding-json", func() { jsonRequestPaused(benchPaused) }},
		{"answer/bytes", func() { DocumentAnswer(method, benchAnswer, nil) }},
		{"answer/encoding-json", func() { jsonDocumentAnswer(method, benchAnswer) }},
		{"network/bytes", func() { ReadNetworkEvent(method, benchAnswer, nil) }},
		{"network/encoding-json", func() { jsonNetworkEvent(method, benchAnswer) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				bm.read()
			}
		})
	}
}
