package cdp

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/ratelimit"
)

func TestPausedOutcome(t *testing.T) {
	tests := []struct {
		name   string
		params string // of a Fetch.requestPaused event, as the relay decodes it
		want   Outcome
		wantOK bool
	}{
		{name: "request stage",
			params: `{"requestId":"interception-job-1.0","request":{"url":"http://a.test:42557/page?first","method":"GET","headers":{}},"frameId":"93A4F7B3B70E9A34A64C5957850CF1CE","resourceType":"Document"}`},
		{name: "200",
			params: `{"requestId":"interception-job-6.1","request":{"url":"http://b.test:42557/x","method":"GET","headers":{}},"frameId":"93A4","resourceType":"Document","responseStatusCode":200,"responseStatusText":"OK","responseHeaders":[{"name":"Cache-Control","value":"no-store"},{"name":"Content-Type","value":"text/html"}],"networkId":"E93D","redirectedRequestId":"interception-job-6.0"}`,
			want:   Outcome{Status: 200}, wantOK: true},
		{name: "302",
			params: `{"requestId":"interception-job-6.0","request":{"url":"http://a.test:42557/r","method":"GET","headers":{}},"frameId":"93A4","resourceType":"Document","responseStatusCode":302,"responseStatusText":"Found","responseHeaders":[{"name":"Location","value":"http://b.test:42557/x"}]}`,
			want:   Outcome{Status: 302}, wantOK: true},
		{name: "429 with Retry-After",
			params: `{"requestId":"interception-job-9.0","request":{"url":"http://a.test:42557/busy","method":"GET","headers":{}},"frameId":"93A4","resourceType":"Document","responseStatusCode":429,"responseStatusText":"Too Many Requests","responseHeaders":[{"name":"Cache-Control","value":"no-store"},{"name":"Content-Type","value":"text/html"},{"name":"Retry-After","value":"3"},{"name":"Date","value":"Sun, 29 Nov 2026 23:44:55 GMT"},{"name":"Content-Length","value":"11"}],"networkId":"5841"}`,
			want:   Outcome{Status: 429, RetryAfter: "3"}, wantOK: true},
		{name: "503 with lower-case retry-after",
			params: `{"requestId":"j.0","request":{"url":"http://a.test/","method":"GET","headers":{}},"frameId":"F","resourceType":"Document","responseStatusCode":503,"responseHeaders":[{"name":"retry-after","value":"Wed, 21 Oct 2026 07:28:00 GMT"}]}`,
			want:   Outcome{Status: 503, RetryAfter: "Wed, 21 Oct 2026 07:28:00 GMT"}, wantOK: true},
		{name: "repeated Retry-After: the first counts, as in Network events",
			params: `{"requestId":"j.0","request":{"url":"http://a.test/","method":"GET","headers":{}},"frameId":"F","resourceType":"Document","responseStatusCode":429,"responseHeaders":[{"name":"Retry-After","value":"5"},{"name":"RETRY-AFTER","value":"50"}]}`,
			want:   Outcome{Status: 429, RetryAfter: "5"}, wantOK: true},
		{name: "connection refused",
			params: `{"requestId":"interception-job-10.0","request":{"url":"http://c.test:39327/","method":"GET","headers":{}},"frameId":"93A4","resourceType":"Document","responseErrorReason":"ConnectionRefused","networkId":"6C3E"}`,
			want:   Outcome{NoAnswer: true}, wantOK: true},
		{name: "empty response",
			params: `{"requestId":"j.0","request":{"url":"http://c.test/","method":"GET","headers":{}},"frameId":"F","resourceType":"Document","responseErrorReason":"Failed"}`,
			want:   Outcome{NoAnswer: true}, wantOK: true},
		{name: "name not resolved",
			params: `{"requestId":"j.0","request":{"url":"http://nx.test/","method":"GET","headers":{}},"frameId":"F","resourceType":"Document","responseErrorReason":"NameNotResolved"}`,
			wantOK: true},
		{name: "aborted",
			params: `{"requestId":"j.0","request":{"url":"http://a.test/","method":"GET","headers":{}},"frameId":"F","resourceType":"Document","responseErrorReason":"Aborted"}`,
			wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, ok := ReadRequestPaused([]byte(tt.params))
			if !ok {
				t.Fatalf("unreadable: %s", tt.params)
			}
			got, ok := ev.Outcome(nil)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
	if ev, _ := ReadRequestPaused([]byte(`{"requestId":"j.0","responseStatusCode":200,"responseHeaders":[null]}`)); !okOutcome(ev) {
		t.Error("a nil header entry spoils the answer")
	}
}

func okOutcome(ev RequestPaused) bool { _, ok := ev.Outcome(nil); return ok }

func TestNoAnswer(t *testing.T) {
	tests := []struct {
		reason string
		want   bool
	}{
		// Fetch and Network ErrorReason values.
		{"Failed", true}, {"TimedOut", true}, {"ConnectionClosed", true}, {"ConnectionReset", true},
		{"ConnectionRefused", true}, {"ConnectionAborted", true}, {"ConnectionFailed", true}, {"AddressUnreachable", true},
		{"NameNotResolved", false}, {"InternetDisconnected", false}, {"Aborted", false}, {"AccessDenied", false},
		{"BlockedByClient", false}, {"BlockedByResponse", false},
		// Chromium net errors, with and without their prefix.
		{"net::ERR_CONNECTION_REFUSED", true}, {"net::ERR_CONNECTION_RESET", true}, {"net::ERR_EMPTY_RESPONSE", true},
		{"net::ERR_CONNECTION_CLOSED", true}, {"net::ERR_TIMED_OUT", true}, {"net::ERR_CONNECTION_TIMED_OUT", true},
		{"net::ERR_FAILED", true}, {"ERR_CONNECTION_REFUSED", true}, {"net::ERR_ADDRESS_UNREACHABLE", true},
		{"net::ERR_NAME_NOT_RESOLVED", false}, {"net::ERR_ABORTED", false}, {"net::ERR_BLOCKED_BY_CLIENT", false},
		{"net::ERR_HTTP_RESPONSE_CODE_FAILURE", false}, {"net::ERR_UNSAFE_PORT", false},
		// Lightpanda's error names.
		{"CouldntConnect", true}, {"OperationTimedout", true}, {"GotNothing", true}, {"RecvError", true}, {"SendError", true},
		{"CouldntResolveHost", false}, {"Abort", false}, {"UrlBlocked", false}, {"Shutdown", false},
		// Neither.
		{"", false}, {"net::", false}, {"connectionrefused", false},
	}
	for _, tt := range tests {
		if got := NoAnswer(tt.reason); got != tt.want {
			t.Errorf("NoAnswer(%q) = %v, want %v", tt.reason, got, tt.want)
		}
	}
}

// TestKeptHeaders: the answer readers keep the headers they are asked for,
// whatever their case, as sent, and nothing more; Retry-After as before.
func TestKeptHeaders(t *testing.T) {
	keep := []string{"cf-mitigated", "x-overloaded"}
	kept := func(o Outcome) map[string]string {
		m := map[string]string{}
		for name, value := range o.Headers.All() {
			m[name] = value
		}
		return m
	}
	want := map[string]string{"CF-Mitigated": "challenge"}
	network := []byte(`{"requestId":"L","loaderId":"L","type":"Document","response":{"status":200,"headers":{"Server":"cloudflare","CF-Mitigated":"challenge","Retry-After":"7","Content-Type":"text/html"}}}`)
	if a, ok := DocumentAnswer([]byte("Network.responseReceived"), network, keep); !ok || !maps.Equal(kept(a.Outcome), want) || a.Outcome.RetryAfter != "7" {
		t.Errorf("DocumentAnswer: got %+v %v, want %v and Retry-After 7", a, ok, want)
	}
	if ev, ok := ReadNetworkEvent([]byte("Network.responseReceived"), network, keep); !ok || !maps.Equal(kept(ev.Outcome), want) {
		t.Errorf("ReadNetworkEvent: got %+v %v, want %v", ev, ok, want)
	}
	if a, _ := DocumentAnswer([]byte("Network.responseReceived"), network, nil); a.Outcome.Headers != "" || a.Outcome.RetryAfter != "7" {
		t.Errorf("keeping nothing: got %+v, want Retry-After alone", a.Outcome)
	}
	joined := []byte(`{"requestId":"L","type":"Document","response":{"status":200,"headers":{"x-overloaded":"1\nyes"}}}`) // Lightpanda joins repeats
	if a, _ := DocumentAnswer([]byte("Network.responseReceived"), joined, keep); !maps.Equal(kept(a.Outcome), map[string]string{"x-overloaded": "1\nyes"}) {
		t.Errorf("joined: got %+v", a.Outcome)
	}
	redirect := []byte(`{"requestId":"L","type":"Document","request":{"url":"http://b.test/"},"redirectResponse":{"status":302,"headers":{"cf-mitigated":"challenge"}}}`)
	if r, ok := RequestWillBeSent(redirect, keep); !ok || r.Redirect == nil || !maps.Equal(kept(*r.Redirect), map[string]string{"cf-mitigated": "challenge"}) {
		t.Errorf("RequestWillBeSent: got %+v %v", r, ok)
	}
	paused, ok := ReadRequestPaused([]byte(`{"requestId":"I","frameId":"F","resourceType":"Document","request":{"url":"http://b.test/","method":"GET"},"responseStatusCode":200,` +
		`"responseHeaders":[{"name":"server","value":"cloudflare"},{"name":"cf-mitigated","value":"challenge"},{"name":"CF-Mitigated","value":"again"},{"name":"retry-after","value":"3"}]}`))
	if !ok {
		t.Fatal("ReadRequestPaused: not read")
	}
	o, ok := paused.Outcome(keep)
	var got []string
	for name, value := range o.Headers.All() {
		got = append(got, name+": "+value)
	}
	if !ok || !slices.Equal(got, []string{"cf-mitigated: challenge", "CF-Mitigated: again"}) || o.RetryAfter != "3" {
		t.Errorf("RequestPaused.Outcome: got %q, Retry-After %q, %v; want both cf-mitigated in order and Retry-After 3", got, o.RetryAfter, ok)
	}
	if o, _ := paused.Outcome(nil); o.Headers != "" {
		t.Errorf("RequestPaused.Outcome keeping nothing: got %q", o.Headers)
	}
}

// limits builds the Fields an answer's headers name: name, value, ….
func limits(kv ...string) ratelimit.Fields {
	var f ratelimit.Fields
	for i := 0; i+1 < len(kv); i += 2 {
		f.Add(kv[i], kv[i+1])
	}
	return f
}

// TestAnswerLimits: the fields that say a server's limits are kept from
// both places answers are read, the Fetch Response stage and Network
// events, and nothing else is.
func TestAnswerLimits(t *testing.T) {
	paused := `{"requestId":"j.0","request":{"url":"http://a.test/","method":"GET","headers":{}},"frameId":"F","resourceType":"Document","responseStatusCode":200,"responseHeaders":[` +
		`{"name":"RateLimit-Policy","value":"\"p\";q=5;w=1"},{"name":"Content-Type","value":"text/html"},{"name":"ratelimit","value":"\"p\";r=0;t=3"},` +
		`{"name":"RateLimit-Policy","value":"\"h\";q=100;w=3600"},{"name":"X-RateLimit-Remaining","value":"0"},{"name":"X-RateLimit-Reset","value":"3"},{"name":"Retry-After","value":"1"}]}`
	ev, ok := ReadRequestPaused([]byte(paused))
	if !ok {
		t.Fatal("unreadable")
	}
	got, _ := ev.Outcome(nil)
	want := Outcome{Status: 200, RetryAfter: "1", Limits: limits("RateLimit-Policy", `"p";q=5;w=1`, "RateLimit", `"p";r=0;t=3`,
		"RateLimit-Policy", `"h";q=100;w=3600`, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "3")}
	if got != want {
		t.Errorf("Fetch: got %+v, want %+v", got, want)
	}

	// Chromium joins repeated headers with newlines.
	network := `{"requestId":"R","type":"Document","response":{"status":200,"headers":{"Content-Type":"text/html","RateLimit-Policy":"\"p\";q=5;w=1\n\"h\";q=100;w=3600","ratelimit":"\"p\";r=0;t=3","X-RateLimit-Remaining":"0","x-ratelimit-reset":"3","Retry-After":"1"}}}`
	a, ok := DocumentAnswer([]byte("Network.responseReceived"), []byte(network), nil)
	if !ok {
		t.Fatal("unreadable")
	}
	want.Limits = limits("RateLimit-Policy", "\"p\";q=5;w=1\n\"h\";q=100;w=3600", "RateLimit", `"p";r=0;t=3`,
		"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "3")
	if a.Outcome != want {
		t.Errorf("Network: got %+v, want %+v", a.Outcome, want)
	}
	for _, o := range []Outcome{got, a.Outcome} {
		l, err := o.Limits.Read(time.Now())
		if err != nil || l.Spacing != 36*time.Second || l.Wait != 3*time.Second {
			t.Errorf("read: got %+v, %v; want a spacing of 36 s and a wait of 3 s", l, err)
		}
	}
}
