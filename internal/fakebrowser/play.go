package fakebrowser

// What the fake plays against the relay's own connections (net and
// pages): the recorded pages announced, the recorded transcripts replayed
// in causal order.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// AnnouncePages sends the recorded Target.targetCreated events of the
// pages created while the recording ran, as Chromium does before a page's
// first request. With quietly, the fake only learns of them, so it can
// answer Target.getTargetInfo, but announces nothing.
func AnnouncePages(t *testing.T, fb *Browser, hc *Conn, quietly bool) {
	t.Helper()
	for _, rm := range fb.FetchRec.Msgs[fb.FetchRec.ReplyIndex(t, "Fetch.enable"):] {
		info, raw, ok := ReadTargetInfo(rm.Msg)
		if !ok || rm.Wire.Method != "Target.targetCreated" || info.Type != "page" {
			continue
		}
		if quietly {
			fb.Announce(info.TargetID, raw)
			continue
		}
		if err := hc.Send(rm.Msg); err != nil {
			t.Fatal(err)
		}
	}
}

// Commands returns the commands the relay sent on hc calling method.
func Commands(hc *Conn, method string) []Msg {
	var out []Msg
	for _, m := range hc.Received() {
		if m.Wire.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// ArmedPages waits until the relay's pages connection pc armed every page
// the fake knows.
func ArmedPages(t *testing.T, fb *Browser, pc *Conn) {
	t.Helper()
	fb.Await(t, "every page armed", func() bool {
		for id, info := range fb.Targets {
			if ti, _, ok := ReadTargetInfo(fmt.Appendf(nil, `{"params":{"targetInfo":%s}}`, info)); !ok || ti.Type != "page" {
				continue
			}
			if ss := pc.SessionLocked(id); ss == nil || !ss.Fetch || !ss.Ran {
				return false
			}
		}
		return true
	})
}

// RelayConns starts the test of a relay's own connections to fb: its net
// and pages connections, the recorded pages announced and armed.
func RelayConns(t *testing.T, fb *Browser, late bool) (net, pages *Conn) {
	t.Helper()
	net, pages = fb.Holder(t), fb.Pages(t)
	AnnouncePages(t, fb, net, late)
	if !late {
		ArmedPages(t, fb, pages)
	}
	return net, pages
}

// ReplayChromium plays the net connection's transcript recorded from
// Chromium (browser-level Fetch pausing every document) against the
// relay's net connection hc, in causal order, checks that the relay sends
// the very commands the recorder sent (ids aside; net's pattern updates
// aside, which the relay makes as pages holds and lets go), and returns
// when the recorded 429 was answered.
func ReplayChromium(t *testing.T, fb *Browser, hc *Conn) time.Time {
	t.Helper()
	// The fake answered discovery and Fetch.enable by itself.
	busy := ReplayTranscript(t, fb.FetchRec, fb.FetchRec.ReplyIndex(t, "Fetch.enable"), hc, func(m Msg) bool { return m.Wire.Method == "Fetch.enable" })
	if busy.IsZero() {
		t.Fatal("the recording has no 429")
	}
	return busy
}

// ReplayTranscript plays rec against the relay's connection hc, in causal order:
// from index auto on (what comes before, the fake sent by itself), each
// browser event once the relay has sent what the recorder sent before
// it. It checks that the relay sends the very commands the recorder sent,
// ids aside and but for those ignore is true of, and returns when the
// recorded 429 was answered, if it was.
func ReplayTranscript(t *testing.T, rec *Recording, auto int, hc *Conn, ignore func(Msg) bool) time.Time {
	t.Helper()
	var pending []Msg // relay commands not matched yet
	var busyAnswered time.Time
	var waitingFor string
	defer func() {
		if t.Failed() {
			t.Logf("waiting for the relay to send %s; it sent, unmatched:", waitingFor)
			for _, m := range pending {
				t.Logf("  %s %s %s", m.Wire.Method, m.Wire.SessionID, m.Wire.Params)
			}
		}
	}()
	next := func() Msg {
		for {
			m := hc.Next(t)
			if !ignore(m) {
				return m
			}
		}
	}
	for i, rm := range rec.Msgs {
		switch {
		case rm.From == "client" && ignore(Msg{Wire: rm.Wire, Data: rm.Msg}):
		case rm.From == "client":
			want := rm.Wire
			waitingFor = want.Method + " " + want.SessionID + " " + string(want.Params)
			found := -1
			for found < 0 {
				for j, got := range pending {
					if got.Wire.Method == want.Method && sameJSON(got.Wire.Params, want.Params) && got.Wire.SessionID == want.SessionID {
						found = j
						break
					}
				}
				if found < 0 {
					pending = append(pending, next())
				}
			}
			pending = append(pending[:found], pending[found+1:]...)
		case i <= auto, rm.Wire.ID != nil:
			// Sent by the fake itself: discovery, and the replies to commands.
		default:
			if p, ok := ReadPause(rm.Msg); ok && p.ResponseStatusCode == 429 {
				busyAnswered = time.Now()
			}
			if strings.Contains(string(rm.Msg), `"status":429`) {
				busyAnswered = time.Now()
			}
			if err := hc.Send(rm.Msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range pending {
		t.Errorf("relay sent %s %s %s, which the recorder did not", m.Wire.Method, m.Wire.SessionID, m.Wire.Params)
	}
	return busyAnswered
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	for _, p := range []*[]byte{&a, &b} {
		if len(*p) == 0 || string(*p) == "null" {
			*p = []byte("{}") // no params, or none to speak of
		}
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
