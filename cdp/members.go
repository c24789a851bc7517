package cdp

// The Target events go to every client of a shared browser (each of a
// hundred Puppeteer clients hears of every page), and the relay reads a
// few string members of each: they are read here straight from the bytes,
// without encoding/json, keys matched exactly as Chromium writes them.

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

// readTargetInfo reads a targetInfo object; ok is false when it is not
// one that encoding/json would read into TargetInfo.
func readTargetInfo(val []byte) (ti TargetInfo, ok bool) {
	ok = true
	read := members(val, func(key, v []byte) bool {
		var dst *string
		switch string(key) {
		case "targetId":
			dst = &ti.TargetID
		case "type":
			dst = &ti.Type
		case "openerId":
			dst = &ti.OpenerID
		case "browserContextId":
			dst = &ti.BrowserContextID
		default:
			return true
		}
		*dst, ok = stringOf(v)
		return ok
	})
	return ti, ok && read
}
