package cdp

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzScan checks that Scan never panics, and that whenever encoding/json
// reads the input as an object, Scan reads the same id, method, sessionId
// and params: duplicate keys (the last wins), escapes, invalid UTF-8 and
// all. Seeds are in testdata/fuzz/FuzzScan, taken from Chromium's and the
// relay's own messages.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"Page.navigate","params":{"url":"http://a.test/"},"sessionId":"S"}`,
		`{"id":1,"result":{}}`,
		`{"method":"Target.attachedToTarget","params":{"sessionId":"S","targetInfo":{"targetId":"T"}}}`,
		`{"\u0069d":1,"method":"A\u0042","id":2}`,
		`{"id":1e2}`,
		`{}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, err := Scan(msg)
		var obj map[string]json.RawMessage
		if json.Unmarshal(msg, &obj) != nil || obj == nil {
			return
		}
		if err != nil {
			if nesting(msg) > maxDepth {
				return // deeper than Scan follows; Chromium's limit is lower still
			}
			t.Fatalf("Scan(%q): %v, but encoding/json reads it", msg, err)
		}
		var id int64
		raw, ok := obj["id"]
		wantHasID := ok && string(raw) != "null" && json.Unmarshal(raw, &id) == nil
		if h.HasID != wantHasID || h.ID != id {
			t.Errorf("Scan(%q): got id %d (%v), encoding/json reads %d (%v)", msg, h.ID, h.HasID, id, wantHasID)
		}
		for _, f := range []struct {
			key string
			got []byte
		}{{"method", h.Method}, {"sessionId", h.SessionID}} {
			want, isString := stringMember(obj, f.key)
			if (f.got != nil) != isString || string(f.got) != want {
				t.Errorf("Scan(%q): got %s %q (nil %v), encoding/json reads %q (a string: %v)", msg, f.key, f.got, f.got == nil, want, isString)
			}
		}
		if !bytes.Equal(h.Params, obj["params"]) || (h.Params == nil) != (obj["params"] == nil) {
			t.Errorf("Scan(%q): got params %q, encoding/json reads %q", msg, h.Params, obj["params"])
		}
	})
}

func stringMember(obj map[string]json.RawMessage, key string) (string, bool) {
	raw, ok := obj[key]
	if !ok || len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// nesting returns how deep arrays and objects nest in msg, outside strings.
func nesting(msg []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(msg); i++ {
		switch c := msg[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

// FuzzTargetReaders checks the Target readers, which read their members
// straight from the bytes, against encoding/json on every input whose keys
// are written as Chromium writes them (encoding/json also takes keys that
// differ in case).
func FuzzTargetReaders(f *testing.F) {
	for _, s := range []string{
		`{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page","title":"","url":"about:blank","attached":true,"openerId":"O1","browserContextId":"C"},"waitingForDebugger":true}`,
		`{"targetInfo":{"targetId":"T\u0031","type":null},"sessionId":"S"}`,
		`{"targetId":"T"}`,
		`{"sessionId":1}`,
		`{"targetInfo":null}`,
		`{"targetInfo":{"targetId":"a","targetId":"b"}}`,
		`{"waitingForDebugger":"yes","sessionId":"S"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		if !json.Valid(params) {
			return // params come from the browser, which writes valid JSON (Scan skips values loosely)
		}
		if bytes.Contains(bytes.ToLower(params), []byte(`targetid`)) && !bytes.Contains(params, []byte(`"targetId"`)) ||
			bytes.Contains(bytes.ToLower(params), []byte(`sessionid`)) && !bytes.Contains(params, []byte(`"sessionId"`)) ||
			bytes.Contains(params, []byte(`\`)) || !bytes.Equal(bytes.ToLower(params), bytes.ToLower(bytes.ToValidUTF8(params, nil))) {
			return
		}
		lower := bytes.ToLower(params)
		for _, k := range []string{"type", "openerid", "browsercontextid", "targetinfo", "waitingfordebugger"} {
			if bytes.Count(lower, []byte(`"`+k+`"`)) != bytes.Count(params, []byte(`"`+map[string]string{"type": "type", "openerid": "openerId", "browsercontextid": "browserContextId", "targetinfo": "targetInfo", "waitingfordebugger": "waitingForDebugger"}[k]+`"`)) {
				return // a key in another case: encoding/json takes it, Chromium never writes it
			}
		}
		var a struct {
			SessionID          string     `json:"sessionId"`
			TargetInfo         TargetInfo `json:"targetInfo"`
			WaitingForDebugger bool       `json:"waitingForDebugger"`
		}
		jerr := json.Unmarshal(params, &a)
		got, ok := ReadAttached(params)
		want := Attached{SessionID: a.SessionID, Target: a.TargetInfo, Waiting: a.WaitingForDebugger}
		wantOK := jerr == nil && a.SessionID != "" && a.TargetInfo.TargetID != ""
		if ok != wantOK || ok && got != want {
			t.Errorf("ReadAttached(%q) = %+v %v, encoding/json reads %+v %v (%v)", params, got, ok, want, wantOK, jerr)
		}
		var p struct {
			TargetInfo *TargetInfo `json:"targetInfo"`
		}
		jerr = json.Unmarshal(params, &p)
		ti, ok := ReadTargetInfo(params)
		wantOK = jerr == nil && p.TargetInfo != nil && p.TargetInfo.TargetID != ""
		if ok != wantOK || ok && ti != *p.TargetInfo {
			t.Errorf("ReadTargetInfo(%q) = %+v %v, encoding/json reads %+v %v (%v)", params, ti, ok, p.TargetInfo, wantOK, jerr)
		}
		var d struct {
			SessionID string `json:"sessionId"`
			TargetID  string `json:"targetId"`
		}
		jerr = json.Unmarshal(params, &d)
		if s, ok := DetachedSession(params); ok != (jerr == nil && d.SessionID != "") || ok && s != d.SessionID {
			t.Errorf("DetachedSession(%q) = %q %v, encoding/json reads %q (%v)", params, s, ok, d.SessionID, jerr)
		}
		if s, ok := ReadTargetID(params); ok != (jerr == nil && d.TargetID != "") || ok && s != d.TargetID {
			t.Errorf("ReadTargetID(%q) = %q %v, encoding/json reads %q (%v)", params, s, ok, d.TargetID, jerr)
		}
	})
}
