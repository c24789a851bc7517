package relay

// The transcripts the fake browser plays, recorded off a real Chromium
// (testdata/chromium-*.jsonl), and the shapes read from them.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// recordedHTTP is one line of testdata/chromium-http.jsonl.
type recordedHTTP struct {
	Method      string `json:"method"`
	Path        string `json:"path"`
	Query       string `json:"query"`
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

// recordedMsg is one line of a websocket transcript.
type recordedMsg struct {
	T    float64         `json:"t"`    // ms after the recording started
	From string          `json:"from"` // "client" or "browser"
	Msg  json.RawMessage `json:"msg"`  // as it was on the wire

	m wireMsg // Msg, decoded
}

// wireMsg is what the fake reads of a CDP message, with encoding/json
// rather than the scanner under test.
type wireMsg struct {
	ID        *int64          `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
}

func decodeWire(data []byte) (wireMsg, bool) {
	var m wireMsg
	return m, json.Unmarshal(data, &m) == nil
}

// recording is a websocket transcript.
type recording struct {
	meta map[string]string
	msgs []recordedMsg
}

func readLines(t testing.TB, path string, line func(meta map[string]string, data []byte)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (record it with: go test -tags record -run TestRecord ./relay)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var meta map[string]string
	for sc.Scan() {
		if meta == nil {
			var m struct{ Meta map[string]string }
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Meta == nil {
				t.Fatalf("%s: first line is not the meta line", path)
			}
			meta = m.Meta
			continue
		}
		line(meta, sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func loadRecording(t testing.TB, name string) *recording {
	t.Helper()
	r := &recording{}
	readLines(t, "testdata/"+name, func(meta map[string]string, data []byte) {
		r.meta = meta
		var rm recordedMsg
		if err := json.Unmarshal(data, &rm); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ok bool
		if rm.m, ok = decodeWire(rm.Msg); !ok {
			t.Fatalf("%s: unreadable message %.100s", name, rm.Msg)
		}
		r.msgs = append(r.msgs, rm)
	})
	return r
}

func loadHTTP(t testing.TB) (meta map[string]string, lines []recordedHTTP) {
	t.Helper()
	readLines(t, "testdata/chromium-http.jsonl", func(m map[string]string, data []byte) {
		meta = m
		var l recordedHTTP
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	})
	return meta, lines
}

// reply returns the browser's recorded reply to the first command calling
// method for which match (nil: any) is true.
func (r *recording) reply(t testing.TB, method string, match func(params []byte) bool) []byte {
	t.Helper()
	for _, c := range r.msgs {
		if c.From != "client" || c.m.Method != method || c.m.ID == nil || match != nil && !match(c.m.Params) {
			continue
		}
		for _, b := range r.msgs {
			if b.From == "browser" && b.m.ID != nil && *b.m.ID == *c.m.ID && b.m.Method == "" {
				return b.Msg
			}
		}
	}
	// Errorf, not Fatalf: the fake's connection readers call this too.
	t.Errorf("no recorded reply to %s", method)
	return []byte(`{"id":0,"result":{}}`)
}

// replyIndex returns the index of the browser's reply to the first command
// calling method.
func (r *recording) replyIndex(t testing.TB, method string) int {
	t.Helper()
	var id *int64
	for i, m := range r.msgs {
		switch {
		case id == nil && m.From == "client" && m.m.Method == method:
			id = m.m.ID
		case id != nil && m.From == "browser" && m.m.ID != nil && *m.m.ID == *id:
			return i
		}
	}
	t.Fatalf("no recorded reply to %s", method)
	return 0
}

// find returns the browser messages calling method for which match is true.
func (r *recording) find(method string, match func(params []byte) bool) [][]byte {
	var out [][]byte
	for _, m := range r.msgs {
		if m.From == "browser" && m.m.Method == method && (match == nil || match(m.m.Params)) {
			out = append(out, m.Msg)
		}
	}
	return out
}

// pause is what the tests read of a Fetch.requestPaused event.
type pause struct {
	RequestID           string `json:"requestId"`
	FrameID             string `json:"frameId"`
	RedirectedRequestID string `json:"redirectedRequestId"`
	Request             struct {
		URL string `json:"url"`
	} `json:"request"`
	ResponseStatusCode  int    `json:"responseStatusCode"`
	ResponseErrorReason string `json:"responseErrorReason"`
	ResponseHeaders     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"responseHeaders"`
}

func (p pause) requestStage() bool { return p.ResponseStatusCode == 0 && p.ResponseErrorReason == "" }

func readPause(msg []byte) (pause, bool) {
	var m struct {
		Method string `json:"method"`
		Params pause  `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "Fetch.requestPaused" {
		return pause{}, false
	}
	return m.Params, true
}

// chain returns the Fetch.requestPaused events of the document request
// whose first hop's URL contains urlPart: every hop at both stages, in the
// order Chromium sent them.
func (r *recording) chain(t testing.TB, urlPart string) [][]byte {
	t.Helper()
	var job string
	var out [][]byte
	for _, m := range r.msgs {
		p, ok := readPause(m.Msg)
		if !ok || m.From != "browser" {
			continue
		}
		if job == "" && p.requestStage() && p.RedirectedRequestID == "" && strings.Contains(p.Request.URL, urlPart) {
			job = p.RequestID[:strings.LastIndexByte(p.RequestID, '.')+1]
		}
		if job != "" && strings.HasPrefix(p.RequestID, job) {
			out = append(out, m.Msg)
		}
	}
	if out == nil {
		t.Fatalf("no recorded document request for %q", urlPart)
	}
	return out
}

// targetInfo returns the recorded targetInfo of the first Target.targetCreated
// for which match is true.
func (r *recording) targetInfo(t testing.TB, match func(info targetInfo) bool) (targetInfo, []byte) {
	t.Helper()
	for _, msg := range r.find("Target.targetCreated", nil) {
		if info, raw, ok := readTargetInfo(msg); ok && match(info) {
			return info, raw
		}
	}
	t.Fatal("no recorded Target.targetCreated matches")
	return targetInfo{}, nil
}

type targetInfo struct {
	TargetID string `json:"targetId"`
	Type     string `json:"type"`
	URL      string `json:"url"`
}

func readTargetInfo(msg []byte) (targetInfo, json.RawMessage, bool) {
	var m struct {
		Params struct {
			TargetInfo json.RawMessage `json:"targetInfo"`
		} `json:"params"`
	}
	var info targetInfo
	if json.Unmarshal(msg, &m) != nil || json.Unmarshal(m.Params.TargetInfo, &info) != nil || info.TargetID == "" {
		return info, nil, false
	}
	return info, m.Params.TargetInfo, true
}

var leadingID = regexp.MustCompile(`^\{"id":-?[0-9]+`)

// withID gives a recorded reply the id of the command it now answers.
func withID(reply []byte, id int64) []byte {
	if !leadingID.Match(reply) {
		panic(fmt.Sprintf("recorded reply does not start with its id: %.60s", reply))
	}
	return leadingID.ReplaceAllLiteral(reply, []byte(`{"id":`+strconv.FormatInt(id, 10)))
}

var jobID = regexp.MustCompile(`"interception-job-[0-9]+\.`)

// renumberJob moves every interception id of a recorded pause to job.
func renumberJob(msg []byte, job int) []byte {
	return jobID.ReplaceAll(msg, []byte(`"interception-job-`+strconv.Itoa(job)+`.`))
}

// equalMsg explains how got differs from want, or returns "".
func equalMsg(got, want []byte) string {
	if bytes.Equal(got, want) {
		return ""
	}
	if len(got) != len(want) {
		return fmt.Sprintf("got %d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d: got %.60q, want %.60q", i, got[i:], want[i:])
		}
	}
	return ""
}
