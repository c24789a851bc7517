package cdp

import (
	"errors"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	tests := []struct {
		name    string
		msg     string
		want    Header // Method, SessionID and Params compared as strings
		wantErr bool
	}{
		{name: "command", msg: `{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/"},"sessionId":"S1"}`,
			want: Header{ID: 1, HasID: true, Method: []byte("Page.navigate"), SessionID: []byte("S1"), Params: []byte(`{"url":"http://a.test/"}`)}},
		{name: "reply", msg: `{"id":42,"result":{"frameId":"F","loaderId":"L"}}`,
			want: Header{ID: 42, HasID: true}},
		{name: "error reply", msg: `{"id":3,"error":{"code":-32601,"message":"'X.y' wasn't found"},"sessionId":"S"}`,
			want: Header{ID: 3, HasID: true, SessionID: []byte("S")}},
		{name: "event", msg: `{"method":"Fetch.requestPaused","params":{"requestId":"interception-job-1.0"}}`,
			want: Header{Method: []byte("Fetch.requestPaused"), Params: []byte(`{"requestId":"interception-job-1.0"}`)}},
		{name: "empty object", msg: `{}`},
		{name: "whitespace everywhere", msg: " \t\r\n{ \"id\" :\t7 ,\n\"method\" : \"A.b\" , \"params\" : [ 1 , 2 ] }\n ",
			want: Header{ID: 7, HasID: true, Method: []byte("A.b"), Params: []byte(`[ 1 , 2 ]`)}},
		{name: "sessionId after a big params", msg: `{"id":9,"method":"Runtime.evaluate","params":{"expression":"` + strings.Repeat("x", 100000) + `","nested":{"sessionId":"inner","id":1}},"sessionId":"OUTER"}`,
			want: Header{ID: 9, HasID: true, Method: []byte("Runtime.evaluate"), SessionID: []byte("OUTER"),
				Params: []byte(`{"expression":"` + strings.Repeat("x", 100000) + `","nested":{"sessionId":"inner","id":1}}`)}},
		{name: "escaped keys", msg: `{"\u0069d":5,"m\u0065thod":"Page.reload","session\u0049d":"S"}`,
			want: Header{ID: 5, HasID: true, Method: []byte("Page.reload"), SessionID: []byte("S")}},
		{name: "escaped values", msg: `{"method":"Page.\u006eavigate","sessionId":"a\"b\\c\/d\u00e9\ud83d\ude00"}`,
			want: Header{Method: []byte("Page.navigate"), SessionID: []byte("a\"b\\c/d\u00e9\U0001F600")}},
		{name: "escape of a lone surrogate", msg: `{"method":"\ud800"}`, want: Header{Method: []byte("\uFFFD")}},
		{name: "invalid UTF-8 as encoding/json reads it", msg: "{\"method\":\"a\xffb\",\"sessionId\":\"\xed\xa0\x80\"}",
			want: Header{Method: []byte("a\uFFFDb"), SessionID: []byte("\uFFFD\uFFFD\uFFFD")}},
		{name: "a key that only looks like id", msg: `{"ID":1,"Id":2,"id ":3,"method":"M","Method":"N"}`,
			want: Header{Method: []byte("M")}},
		{name: "duplicates: last wins", msg: `{"id":1,"method":"A","sessionId":"S1","id":2,"method":"B","sessionId":"S2","params":1,"params":{}}`,
			want: Header{ID: 2, HasID: true, Method: []byte("B"), SessionID: []byte("S2"), Params: []byte(`{}`)}},
		{name: "duplicate id that is not a number", msg: `{"id":1,"id":"1"}`, want: Header{}},
		{name: "duplicate method that is not a string", msg: `{"method":"A","method":null}`, want: Header{}},
		{name: "nested keys are not the message's", msg: `{"params":{"id":1,"method":"inner","sessionId":"inner","params":{}},"result":[{"id":2}]}`,
			want: Header{Params: []byte(`{"id":1,"method":"inner","sessionId":"inner","params":{}}`)}},
		{name: "deep nesting", msg: `{"params":` + strings.Repeat("[", 900) + strings.Repeat("]", 900) + `,"id":1}`,
			want: Header{ID: 1, HasID: true, Params: []byte(strings.Repeat("[", 900) + strings.Repeat("]", 900))}},
		{name: "too deep", msg: `{"params":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`, wantErr: true},
		{name: "params null", msg: `{"id":1,"method":"Page.reload","params":null}`,
			want: Header{ID: 1, HasID: true, Method: []byte("Page.reload"), Params: []byte("null")}},
		{name: "negative id", msg: `{"id":-12}`, want: Header{ID: -12, HasID: true}},
		{name: "largest id", msg: `{"id":9223372036854775807}`, want: Header{ID: 9223372036854775807, HasID: true}},
		{name: "id out of range", msg: `{"id":9223372036854775808}`, want: Header{}},
		{name: "fractional id", msg: `{"id":1.5}`, want: Header{}},
		{name: "id with exponent", msg: `{"id":1e3}`, want: Header{}},
		{name: "id as string", msg: `{"id":"1"}`, want: Header{}},
		{name: "id null", msg: `{"id":null}`, want: Header{}},
		{name: "method as number", msg: `{"method":5,"sessionId":true}`, want: Header{}},
		{name: "empty method", msg: `{"method":""}`, want: Header{Method: []byte{}}},

		{name: "empty input", msg: ``, wantErr: true},
		{name: "only space", msg: "  \n", wantErr: true},
		{name: "null", msg: `null`, wantErr: true},
		{name: "array", msg: `[{"id":1}]`, wantErr: true},
		{name: "string", msg: `"id"`, wantErr: true},
		{name: "unclosed object", msg: `{"id":1`, wantErr: true},
		{name: "key without value", msg: `{"id"}`, wantErr: true},
		{name: "missing value", msg: `{"id":}`, wantErr: true},
		{name: "trailing comma", msg: `{"id":1,}`, wantErr: true},
		{name: "missing comma", msg: `{"id":1 "method":"A"}`, wantErr: true},
		{name: "extra closing brace", msg: `{"id":1}}`, wantErr: true},
		{name: "trailing garbage", msg: `{"id":1} x`, wantErr: true},
		{name: "two objects", msg: `{"id":1}{"id":2}`, wantErr: true},
		{name: "unterminated string", msg: `{"method":"A\"}`, wantErr: true},
		{name: "escape at the end", msg: `{"method":"A\`, wantErr: true},
		{name: "single quotes", msg: `{'id':1}`, wantErr: true},
		{name: "bare key", msg: `{id:1}`, wantErr: true},
		{name: "unclosed nested", msg: `{"params":{"a":[1,2}`, wantErr: true},
		{name: "mismatched nesting", msg: `{"params":[}]}`, wantErr: true},
		{name: "binary", msg: "\x00\x01\x02", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Scan([]byte(tt.msg))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Scan(%.60q): got no error, want one", tt.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scan(%.60q): got error %v", tt.msg, err)
			}
			if h.ID != tt.want.ID || h.HasID != tt.want.HasID {
				t.Errorf("got id %d (%v), want %d (%v)", h.ID, h.HasID, tt.want.ID, tt.want.HasID)
			}
			if (h.Method == nil) != (tt.want.Method == nil) || string(h.Method) != string(tt.want.Method) {
				t.Errorf("got method %q (nil %v), want %q (nil %v)", h.Method, h.Method == nil, tt.want.Method, tt.want.Method == nil)
			}
			if (h.SessionID == nil) != (tt.want.SessionID == nil) || string(h.SessionID) != string(tt.want.SessionID) {
				t.Errorf("got sessionId %q, want %q", h.SessionID, tt.want.SessionID)
			}
			if (h.Params == nil) != (tt.want.Params == nil) || string(h.Params) != string(tt.want.Params) {
				t.Errorf("got params %.80q, want %.80q", h.Params, tt.want.Params)
			}
		})
	}
}

// TestScanTruncated checks that every proper prefix of a message is an
// error, never a header read from half a message.
func TestScanTruncated(t *testing.T) {
	msgs := []string{
		`{"id":12,"method":"Page.navigate","params":{"url":"http://a.test/\"q\"","frameId":"F"},"sessionId":"S\u00e9"}`,
		`{"method":"Fetch.requestPaused","params":{"requestId":"interception-job-1.0","request":{"headers":{"A":"b"},"n":[1,-2.5e3,true,false,null]}}}`,
	}
	for _, msg := range msgs {
		if _, err := Scan([]byte(msg)); err != nil {
			t.Fatalf("Scan of the whole message: %v", err)
		}
		for n := range len(msg) {
			if h, err := Scan([]byte(msg[:n])); err == nil {
				t.Errorf("Scan(%q): got %+v and no error, want an error", msg[:n], h)
			}
		}
	}
}

func TestScanErrors(t *testing.T) {
	if _, err := Scan([]byte(`[1]`)); !errors.Is(err, ErrNotObject) {
		t.Errorf("got %v, want ErrNotObject", err)
	}
	_, err := Scan([]byte(`{"id":1,}`))
	var se *syntaxError
	if !errors.As(err, &se) || se.at != 8 || !strings.HasPrefix(err.Error(), "cdp: malformed message") {
		t.Errorf("got %v, want a syntax error at byte 8", err)
	}
}

func TestIsMethod(t *testing.T) {
	h, _ := Scan([]byte(`{"id":1,"method":"Page.navigate"}`))
	if !h.IsMethod("Page.navigate") || h.IsMethod("Page.navigat") || h.IsMethod("") {
		t.Error("IsMethod does not match the method exactly")
	}
	var reply Header
	if reply.IsMethod("Page.navigate") || !reply.IsMethod("") {
		t.Error("a reply has no method")
	}
}

func BenchmarkScan(b *testing.B) {
	msg := []byte(`{"method":"Network.responseReceived","params":{"requestId":"94363BA539E5F33049116BD592917040","loaderId":"94363BA539E5F33049116BD592917040","timestamp":2179.4,"type":"Document","response":{"url":"http://a.test:38201/page?first","status":200,"statusText":"OK","headers":{"Cache-Control":"no-store","Content-Length":"42","Content-Type":"text/html","Date":"Sun, 29 Nov 2026 23:44:52 GMT"},"mimeType":"text/html","charset":"","connectionReused":false,"connectionId":29,"remoteIPAddress":"127.0.0.2","remotePort":38201,"fromDiskCache":false,"fromServiceWorker":false,"fromPrefetchCache":false,"encodedDataLength":147,"protocol":"http/1.1","securityState":"insecure"},"hasExtraInfo":true,"frameId":"E6E0B21E17CBA60F6F29DD511B3CEF19"},"sessionId":"856F1BCC9D0EE7AAB94B6AC92167BB0A"}`)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := Scan(msg); err != nil {
			b.Fatal(err)
		}
	}
}
