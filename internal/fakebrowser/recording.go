package fakebrowser

// The transcripts the fake browser plays, recorded off a real Chromium
// (testdata/chromium-*.jsonl), and the shapes read from them. A real
// Lightpanda's is recorded too (testdata/lightpanda-session.jsonl,
// record_lightpanda_test.go), for cdp's readers.

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RecordedHTTP is one line of testdata/chromium-http.jsonl.
type RecordedHTTP struct {
	Method      string `json:"method"`
	Path        string `json:"path"`
	Query       string `json:"query"`
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

// AskHTTP sends a browser's HTTP endpoint at addr (host:port) the request
// method path?query, and returns its answer as the recorder writes it (the
// recorder asks a real Chromium; the relay's tests ask the fake again what
// it answered the relay).
func AskHTTP(t testing.TB, addr, method, path, query string) RecordedHTTP {
	t.Helper()
	u := "http://" + addr + path
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return RecordedHTTP{
		Method: method, Path: path, Query: query,
		Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: string(body),
	}
}

// RecordedMsg is one line of a websocket transcript.
type RecordedMsg struct {
	T    float64         `json:"t"`    // ms after the recording started
	From string          `json:"from"` // "client" or "browser"
	Msg  json.RawMessage `json:"msg"`  // as it was on the wire

	Wire Wire // Msg, decoded
}

// Wire is what the fake reads of a CDP message, with encoding/json
// rather than the scanner under test.
type Wire struct {
	ID        *int64          `json:"id"`
	Method    string          `json:"method"`
	SessionID string          `json:"sessionId"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	Error     json.RawMessage `json:"error"`
}

func decodeWire(data []byte) (Wire, bool) {
	var m Wire
	return m, json.Unmarshal(data, &m) == nil
}

// Recording is a websocket transcript.
type Recording struct {
	meta map[string]string
	Msgs []RecordedMsg
}

// transcripts are the recordings, embedded so that the fake serves them
// whatever the directory its tests run in. The recorder (record_test.go)
// rewrites them.
//
//go:embed testdata/*.jsonl
var transcripts embed.FS

func readLines(t testing.TB, path string, line func(meta map[string]string, data []byte)) {
	t.Helper()
	f, err := transcripts.Open(path)
	if err != nil {
		t.Fatalf("fake browser: %v (record it with: go test -tags record -run TestRecord ./internal/fakebrowser)", err)
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

// LoadRecording reads the websocket transcript testdata/name.
func LoadRecording(t testing.TB, name string) *Recording {
	t.Helper()
	r := &Recording{}
	readLines(t, "testdata/"+name, func(meta map[string]string, data []byte) {
		r.meta = meta
		var rm RecordedMsg
		if err := json.Unmarshal(data, &rm); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ok bool
		if rm.Wire, ok = decodeWire(rm.Msg); !ok {
			t.Fatalf("%s: unreadable message %.100s", name, rm.Msg)
		}
		r.Msgs = append(r.Msgs, rm)
	})
	return r
}

// LoadHTTP reads the recorded /json/* answers
// (testdata/chromium-http.jsonl) and their meta line.
func LoadHTTP(t testing.TB) (meta map[string]string, lines []RecordedHTTP) {
	t.Helper()
	readLines(t, "testdata/chromium-http.jsonl", func(m map[string]string, data []byte) {
		meta = m
		var l RecordedHTTP
		if err := json.Unmarshal(data, &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	})
	return meta, lines
}

// reply returns the browser's recorded reply to the first command calling
// method for which match (nil: any) is true.
func (r *Recording) reply(t testing.TB, method string, match func(params []byte) bool) []byte {
	t.Helper()
	for _, c := range r.Msgs {
		if c.From != "client" || c.Wire.Method != method || c.Wire.ID == nil || match != nil && !match(c.Wire.Params) {
			continue
		}
		for _, b := range r.Msgs {
			if b.From == "browser" && b.Wire.ID != nil && *b.Wire.ID == *c.Wire.ID && b.Wire.Method == "" {
				return b.Msg
			}
		}
	}
	// Errorf, not Fatalf: the fake's connection readers call this too.
	t.Errorf("no recorded reply to %s", method)
	return []byte(`{"id":0,"result":{}}`)
}

// ReplyIndex returns the index of the browser's reply to the first command
// calling method.
func (r *Recording) ReplyIndex(t testing.TB, method string) int {
	t.Helper()
	var id *int64
	for i, m := range r.Msgs {
		switch {
		case id == nil && m.From == "client" && m.Wire.Method == method:
			id = m.Wire.ID
		case id != nil && m.From == "browser" && m.Wire.ID != nil && *m.Wire.ID == *id:
			return i
		}
	}
	t.Fatalf("no recorded reply to %s", method)
	return 0
}

// find returns the browser messages calling method for which match is true.
func (r *Recording) find(method string, match func(params []byte) bool) [][]byte {
	var out [][]byte
	for _, m := range r.Msgs {
		if m.From == "browser" && m.Wire.Method == method && (match == nil || match(m.Wire.Params)) {
			out = append(out, m.Msg)
		}
	}
	return out
}

// Pause is what the tests read of a Fetch.requestPaused event.
type Pause struct {
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

func (p Pause) requestStage() bool { return p.ResponseStatusCode == 0 && p.ResponseErrorReason == "" }

// ReadPause reads msg as a Fetch.requestPaused event.
func ReadPause(msg []byte) (Pause, bool) {
	var m struct {
		Method string `json:"method"`
		Params Pause  `json:"params"`
	}
	if json.Unmarshal(msg, &m) != nil || m.Method != "Fetch.requestPaused" {
		return Pause{}, false
	}
	return m.Params, true
}

// Chain returns the Fetch.requestPaused events of the document request
// whose first hop's URL contains urlPart: every hop at both stages, in the
// order Chromium sent them.
func (r *Recording) Chain(t testing.TB, urlPart string) [][]byte {
	t.Helper()
	var job string
	var out [][]byte
	for _, m := range r.Msgs {
		p, ok := ReadPause(m.Msg)
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

// TargetInfo returns the recorded targetInfo of the first Target.targetCreated
// for which match is true.
func (r *Recording) TargetInfo(t testing.TB, match func(info TargetInfo) bool) (TargetInfo, []byte) {
	t.Helper()
	for _, msg := range r.find("Target.targetCreated", nil) {
		if info, raw, ok := ReadTargetInfo(msg); ok && match(info) {
			return info, raw
		}
	}
	t.Fatal("no recorded Target.targetCreated matches")
	return TargetInfo{}, nil
}

// TargetInfo is what the tests read of a target's targetInfo.
type TargetInfo struct {
	TargetID string `json:"targetId"`
	Type     string `json:"type"`
	URL      string `json:"url"`
}

// ReadTargetInfo reads the targetInfo of a Target event (targetCreated,
// targetInfoChanged, attachedToTarget), decoded and raw.
func ReadTargetInfo(msg []byte) (TargetInfo, json.RawMessage, bool) {
	var m struct {
		Params struct {
			TargetInfo json.RawMessage `json:"targetInfo"`
		} `json:"params"`
	}
	var info TargetInfo
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

// JobID matches the job part of an interception id
// ("interception-job-N.").
var JobID = regexp.MustCompile(`"interception-job-[0-9]+\.`)

// RenumberJob moves every interception id of a recorded pause to job.
func RenumberJob(msg []byte, job int) []byte {
	return JobID.ReplaceAll(msg, []byte(`"interception-job-`+strconv.Itoa(job)+`.`))
}

// EqualMsg explains how got differs from want, or returns "".
func EqualMsg(got, want []byte) string {
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

// devToolsListening is the line a Chromium started with
// --remote-debugging-port prints on stderr once its DevTools listen.
var devToolsListening = regexp.MustCompile(`DevTools listening on (ws://([^/\s]+)/\S+)`)

// ListeningOn reads a real Chromium's stderr until it says where its
// DevTools listen, and returns their HTTP address (host:port) and the
// browser's websocket URL; the rest of stderr is read away, so that
// Chromium never blocks writing it. It gives up after 30 s. The recorder
// and e2e's harness start Chromium with it.
func ListeningOn(stderr io.Reader) (addr, wsURL string, err error) {
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := devToolsListening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
				break
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case m := <-found:
		return m[2], m[1], nil
	case <-time.After(30 * time.Second):
		return "", "", errors.New("chromium did not print its DevTools endpoint within 30s")
	}
}
