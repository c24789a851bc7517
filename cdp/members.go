package cdp

import "strconv"

// The Target events go to every client of a shared browser (each of a
// hundred Puppeteer clients hears of every page), and a holding relay
// reads every paused request and every document's answer: the members the
// relay reads of them are read here straight from the bytes, without
// encoding/json, keys matched exactly as the browser writes them.

// members calls visit with each member of the JSON object obj, its key
// unescaped and its raw value, in order, and reports whether obj is an
// object it could read whole; visit returning false stops it (and it
// reports true).
func members(obj []byte, visit func(key, val []byte) bool) bool {
	s := scanner{b: obj}
	s.space()
	if !s.eat('{') {
		return false
	}
	s.space()
	if s.eat('}') {
		return s.end() == nil
	}
	for {
		s.space()
		key, esc, ok := s.str()
		if !ok {
			return false
		}
		if esc {
			key = unescape(key)
		}
		s.space()
		if !s.eat(':') {
			return false
		}
		s.space()
		start := s.i
		if !s.value(0) {
			return false
		}
		if !visit(key, obj[start:s.i]) {
			return true
		}
		s.space()
		if s.eat(',') {
			continue
		}
		return s.eat('}') && s.end() == nil
	}
}

// elements calls visit with each raw element of the JSON array arr, in
// order, and reports whether arr is an array it could read whole; visit
// returning false stops it (and it reports false).
func elements(arr []byte, visit func(val []byte) bool) bool {
	s := scanner{b: arr}
	s.space()
	if !s.eat('[') {
		return false
	}
	s.space()
	if s.eat(']') {
		return s.end() == nil
	}
	for {
		s.space()
		start := s.i
		if !s.value(0) || !visit(arr[start:s.i]) {
			return false
		}
		s.space()
		if s.eat(',') {
			continue
		}
		return s.eat(']') && s.end() == nil
	}
}

// stringOf returns a member's value as a string; ok is false when the
// value is neither a string nor null (encoding/json refuses it then, and
// leaves a string it reads null into empty).
func stringOf(val []byte) (string, bool) {
	if string(val) == "null" {
		return "", true
	}
	v := stringValue(val)
	if v == nil {
		return "", len(val) == 2 && val[0] == '"' // "" reads as nil
	}
	return string(v), true
}

// intOf returns a member's value as an int, as encoding/json reads a
// number into one: a fraction, an exponent or an int's overflow is not
// one (ok false); null reads 0.
func intOf(val []byte) (int, bool) {
	if string(val) == "null" {
		return 0, true
	}
	if !isNumber(val) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(val), 10, 0)
	return int(n), err == nil
}

// floatOf returns a member's value as a float64, as encoding/json reads a
// number into one: one out of its range is not one (ok false); null reads 0.
func floatOf(val []byte) (float64, bool) {
	if string(val) == "null" {
		return 0, true
	}
	if !isNumber(val) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(val), 64)
	return f, err == nil
}

// isNumber reports whether val is a JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isNumber(val []byte) bool {
	i := 0
	if i < len(val) && val[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(val) && val[i] >= '0' && val[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	switch {
	case i < len(val) && val[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(val) && val[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(val) && (val[i] == 'e' || val[i] == 'E') {
		i++
		if i < len(val) && (val[i] == '+' || val[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(val)
}

// boolOf returns a member's value as a bool; ok is false unless it is
// true, false or null.
func boolOf(val []byte) (v, ok bool) {
	switch string(val) {
	case "true":
		return true, true
	case "false", "null":
		return false, true
	}
	return false, false
}

// A field is a member of an object that readFields reads, and where it
// goes: into is a *string, *int, *float64 or *bool, read as encoding/json
// reads one (stringOf, intOf, floatOf, boolOf), or a func(val []byte) bool
// that reads the raw value and reports whether it could.
type field struct {
	name string
	into any
}

// readFields reads the members of the JSON object obj that fields name,
// in order (a name given again is read again: the last wins), and skips
// the others. ok is false when obj is not an object it could read whole,
// or a member read is not what encoding/json would read into its field.
func readFields(obj []byte, fields ...field) bool {
	ok := true
	read := members(obj, func(key, v []byte) bool {
		for _, f := range fields {
			if string(key) == f.name {
				ok = f.read(v)
				break
			}
		}
		return ok
	})
	return ok && read
}

// read reads val into f.into; an into of another type reads nothing, and
// ok is false.
func (f field) read(val []byte) (ok bool) {
	switch into := f.into.(type) {
	case *string:
		*into, ok = stringOf(val)
	case *int:
		*into, ok = intOf(val)
	case *float64:
		*into, ok = floatOf(val)
	case *bool:
		*into, ok = boolOf(val)
	case func([]byte) bool:
		ok = into(val)
	}
	return ok
}

// readTargetInfo reads a targetInfo object; ok is false when it is not
// one that encoding/json would read into TargetInfo.
func readTargetInfo(val []byte) (ti TargetInfo, ok bool) {
	ok = readFields(val,
		field{"targetId", &ti.TargetID},
		field{"type", &ti.Type},
		field{"openerId", &ti.OpenerID},
		field{"browserContextId", &ti.BrowserContextID})
	return ti, ok
}
