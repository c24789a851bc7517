// Package cdp reads and writes what the relay needs of Chrome DevTools
// Protocol messages, straight from their bytes: a message's id, method and
// sessionId without decoding its params (Scan, on every relayed message),
// the few events and commands the relay looks into (navigations, targets,
// paused requests, the answer a document got), and the relay's own
// commands. It decodes with encoding/json, the one JSON library of the
// relay's own code. It owns CDP's shapes and nothing else: it knows neither
// the limiter (an answer is its own Outcome, which the relay converts) nor
// the websocket library, so everything in it can be fuzzed.
package cdp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Header is what Scan reads of a message. Method, SessionID and Params point
// into the scanned bytes; they are only valid while those bytes are.
type Header struct {
	ID        int64
	HasID     bool
	Method    []byte // unescaped; nil for a reply
	SessionID []byte // unescaped; nil for the browser session
	Params    []byte // the raw params value, nil when absent
}

// IsMethod reports whether the message calls or announces method.
func (h *Header) IsMethod(method string) bool { return string(h.Method) == method }

// ErrNotObject is returned by Scan for bytes that are not a JSON object.
var ErrNotObject = errors.New("cdp: message is not a JSON object")

// Scan reads the top-level id, method, sessionId and params of a CDP message
// and skips every other value without decoding it. It checks only as much
// JSON syntax as that needs: bytes that Scan accepts may still be rejected
// by the browser. Where a key repeats, the last one wins, as in Chromium's
// parser.
func Scan(msg []byte) (Header, error) {
	var h Header
	s := scanner{b: msg}
	s.space()
	if !s.eat('{') {
		return h, ErrNotObject
	}
	s.space()
	if s.eat('}') {
		return h, s.end()
	}
	for {
		s.space()
		key, esc, ok := s.str()
		if !ok {
			return h, s.errf("key")
		}
		if esc {
			key = unescape(key)
		}
		s.space()
		if !s.eat(':') {
			return h, s.errf("':'")
		}
		s.space()
		start := s.i
		if !s.value(0) {
			return h, s.errf("value")
		}
		val := msg[start:s.i]
		switch string(key) {
		case "id":
			id, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil {
				id = 0 // ParseInt gives the nearest int64 for a number out of range
			}
			h.ID, h.HasID = id, err == nil
		case "method":
			h.Method = stringValue(val)
		case "sessionId":
			h.SessionID = stringValue(val)
		case "params":
			h.Params = val
		}
		s.space()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return h, s.end()
		}
		return h, s.errf("',' or '}'")
	}
}

// stringValue returns the contents of a JSON string value, unescaped, or nil
// when val is not a string. Invalid UTF-8 becomes U+FFFD, as the event
// readers (encoding/json) see it, so a sessionId reads the same in both.
func stringValue(val []byte) []byte {
	if len(val) < 2 || val[0] != '"' {
		return nil
	}
	inner := val[1 : len(val)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return inner
	}
	return unescape(inner)
}

// unescape decodes the escapes of a JSON string's contents; nil if invalid.
func unescape(inner []byte) []byte {
	quoted := make([]byte, 0, len(inner)+2)
	quoted = append(append(append(quoted, '"'), inner...), '"')
	var out string
	if json.Unmarshal(quoted, &out) != nil {
		return nil
	}
	return []byte(out)
}

// maxDepth bounds the nesting Scan follows, so a hostile message cannot
// make it recurse without end.
const maxDepth = 1000

type scanner struct {
	b []byte
	i int
}

type syntaxError struct {
	want string
	at   int
}

func (e *syntaxError) Error() string {
	return "cdp: malformed message: want " + e.want + " at byte " + strconv.Itoa(e.at)
}

func (s *scanner) errf(want string) error { return &syntaxError{want, s.i} }

func (s *scanner) end() error {
	s.space()
	if s.i != len(s.b) {
		return s.errf("end of message")
	}
	return nil
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns its raw contents and whether they hold escapes.
func (s *scanner) str() (inner []byte, escaped, ok bool) {
	if !s.eat('"') {
		return nil, false, false
	}
	start := s.i
	for s.i < len(s.b) {
		// Jump to the next quote; a backslash before it may escape it.
		j := bytes.IndexByte(s.b[s.i:], '"')
		if j < 0 {
			break
		}
		if k := bytes.IndexByte(s.b[s.i:s.i+j], '\\'); k >= 0 {
			escaped = true
			s.i += k + 2
			continue
		}
		s.i += j
		inner = s.b[start:s.i]
		s.i++
		return inner, escaped, true
	}
	s.i = len(s.b)
	return nil, false, false
}

// value skips one JSON value.
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) || depth > maxDepth {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, _, ok := s.str()
		return ok
	case '{', '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.space()
		if s.eat(closer) {
			return true
		}
		for {
			s.space()
			if c == '{' {
				if _, _, ok := s.str(); !ok {
					return false
				}
				s.space()
				if !s.eat(':') {
					return false
				}
				s.space()
			}
			if !s.value(depth + 1) {
				return false
			}
			s.space()
			if s.eat(',') {
				continue
			}
			return s.eat(closer)
		}
	default:
		// A number, true, false or null: everything up to a delimiter.
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return s.i > start
	}
}
