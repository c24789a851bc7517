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
