package ratelimit

import (
	"errors"
	"strconv"
)

// This file reads the subset of Structured Field Values (RFC 9651, which
// obsoletes RFC 8941) that the RateLimit fields are written in: a List, or
// for draft-07's RateLimit a Dictionary, of Items with Parameters. Every
// bare item type is read, so that a field using one this package has no
// use for still parses; only Integers, Decimals, Strings and Tokens keep
// their values.

// kind is the type of a bare item.
type kind uint8

const (
	kInteger kind = iota + 1
	kDecimal
	kString
	kToken
	kBytes
	kBoolean
	kDate
	kDisplay
	kInner // an Inner List in the place of an Item
)

// bare is a bare item: n for an Integer, Date or Boolean (0 or 1), f for a
// Decimal, s for a String or Token.
type bare struct {
	kind kind
	n    int64
	f    float64
	s    string
}

type param struct {
	key string
	val bare
}

// item is a member of a List or Dictionary: its value and parameters. A
// Dictionary member's key is in key ("" in a List).
type item struct {
	key    string
	val    bare
	params []param
}

// param returns the parameter named key; the last wins, as RFC 9651 has
// a repeated key overwrite the one before.
func (it item) param(key string) (bare, bool) {
	for i := len(it.params) - 1; i >= 0; i-- {
		if it.params[i].key == key {
			return it.params[i].val, true
		}
	}
	return bare{}, false
}

var errSyntax = errors.New("not a structured field")

// sfParser reads one field value; i is the offset of the next byte.
type sfParser struct {
	s string
	i int
}

// parseList reads s as a List (RFC 9651 section 4.2.1). An empty or
// all-space value is an empty List.
func parseList(s string) ([]item, error) {
	return parseMembers(s, false)
}

// parseDictionary reads s as a Dictionary (RFC 9651 section 4.2.2): a
// member without a value is the Boolean true.
func parseDictionary(s string) ([]item, error) {
	return parseMembers(s, true)
}

// parseMembers reads s as the members of a List, or of a Dictionary when
// dict is set, separated by commas; an empty or all-space value has none.
func parseMembers(s string, dict bool) ([]item, error) {
	p := sfParser{s: s}
	p.skipSP()
	var out []item
	for p.i < len(p.s) {
		var it item
		var err error
		if dict {
			it, err = p.dictMember()
		} else {
			it, err = p.member()
		}
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		if !p.next() {
			return nil, errSyntax
		}
	}
	return out, nil
}

// dictMember reads a Dictionary's member: its key, then its value and
// parameters, or its parameters alone for the Boolean true.
func (p *sfParser) dictMember() (item, error) {
	key, ok := p.key()
	if !ok {
		return item{}, errSyntax
	}
	var it item
	if p.i < len(p.s) && p.s[p.i] == '=' {
		p.i++
		var err error
		if it, err = p.member(); err != nil {
			return item{}, err
		}
	} else {
		it.val = bare{kind: kBoolean, n: 1}
		params, err := p.params()
		if err != nil {
			return item{}, err
		}
		it.params = params
	}
	it.key = key
	return it, nil
}

// next steps over the optional space, comma and space between two
// members; false when what follows a member is neither the end nor a
// comma and another member.
func (p *sfParser) next() bool {
	p.skipOWS()
	if p.i == len(p.s) {
		return true
	}
	if p.s[p.i] != ',' {
		return false
	}
	p.i++
	p.skipOWS()
	return p.i < len(p.s) // a trailing comma is an error
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// member reads an Item or an Inner List, with its parameters.
func (p *sfParser) member() (item, error) {
	var it item
	if p.i < len(p.s) && p.s[p.i] == '(' {
		if err := p.innerList(); err != nil {
			return item{}, err
		}
		it.val = bare{kind: kInner}
	} else {
		v, err := p.bareItem()
		if err != nil {
			return item{}, err
		}
		it.val = v
	}
	params, err := p.params()
	if err != nil {
		return item{}, err
	}
	it.params = params
	return it, nil
}

// innerList reads an Inner List, which no RateLimit field uses: it is
// checked and dropped.
func (p *sfParser) innerList() error {
	p.i++ // (
	for {
		p.skipSP()
		if p.i == len(p.s) {
			return errSyntax
		}
		if p.s[p.i] == ')' {
			p.i++
			return nil
		}
		if _, err := p.bareItem(); err != nil {
			return err
		}
		if _, err := p.params(); err != nil {
			return err
		}
		if p.i < len(p.s) && p.s[p.i] != ' ' && p.s[p.i] != ')' {
			return errSyntax
		}
	}
}

// params reads the Parameters after an item: a key without a value is
// the Boolean true.
func (p *sfParser) params() ([]param, error) {
	var out []param
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, ok := p.key()
		if !ok {
			return nil, errSyntax
		}
		v := bare{kind: kBoolean, n: 1}
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			var err error
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		out = append(out, param{key: key, val: v})
	}
	return out, nil
}

// key reads a key: a lowercase letter or *, then lowercase letters,
// digits, _, -, . and *.
func (p *sfParser) key() (string, bool) {
	start := p.i
	if p.i == len(p.s) || !(isLower(p.s[p.i]) || p.s[p.i] == '*') {
		return "", false
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(isLower(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

func (p *sfParser) bareItem() (bare, error) {
	if p.i == len(p.s) {
		return bare{}, errSyntax
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		s, err := p.str()
		return bare{kind: kString, s: s}, err
	case c == '*' || isAlpha(c):
		return bare{kind: kToken, s: p.token()}, nil
	case c == ':':
		return bare{kind: kBytes}, p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return bare{kind: kBoolean, n: int64(p.s[p.i-1] - '0')}, nil
		}
		return bare{}, errSyntax
	case c == '@':
		p.i++
		v, err := p.number()
		if err != nil || v.kind != kInteger {
			return bare{}, errSyntax
		}
		return bare{kind: kDate, n: v.n}, nil
	case c == '%':
		return bare{kind: kDisplay}, p.display()
	}
	return bare{}, errSyntax
}

// number reads an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a point, then one to three).
func (p *sfParser) number() (bare, error) {
	start := p.i
	if p.i == len(p.s) {
		return bare{}, errSyntax // a Date's @ at the end
	}
	if p.s[p.i] == '-' {
		p.i++
	}
	digits, point := 0, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '.' && point < 0 {
			if digits > 12 {
				return bare{}, errSyntax
			}
			point = digits
		} else if !isDigit(c) {
			break
		} else {
			digits++
		}
		p.i++
		if digits > 15 {
			return bare{}, errSyntax
		}
	}
	text := p.s[start:p.i]
	if point < 0 {
		if digits == 0 {
			return bare{}, errSyntax
		}
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return bare{}, errSyntax
		}
		return bare{kind: kInteger, n: n}, nil
	}
	if point == 0 || digits == point || digits-point > 3 {
		return bare{}, errSyntax // no digit before or after the point, or too many after
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return bare{}, errSyntax
	}
	return bare{kind: kDecimal, f: f}, nil
}

// str reads a String: printable ASCII between quotes, \" and \\ the only
// escapes.
func (p *sfParser) str() (string, error) {
	p.i++ // "
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i == len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", errSyntax
			}
			b = append(b, p.s[p.i])
			p.i++
		case c == '"':
			return string(b), nil
		case c < 0x20 || c > 0x7e:
			return "", errSyntax
		default:
			b = append(b, c)
		}
	}
	return "", errSyntax
}

// token reads a Token; the caller has seen its first character.
func (p *sfParser) token() string {
	start := p.i
	p.i++
	for p.i < len(p.s) && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return p.s[start:p.i]
}

// bytes reads a Byte Sequence (base64 between colons) and drops it.
func (p *sfParser) bytes() error {
	p.i++ // :
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		if c == ':' {
			return nil
		}
		if !(isAlpha(c) || isDigit(c) || c == '+' || c == '/' || c == '=') {
			return errSyntax
		}
	}
	return errSyntax
}

// display reads a Display String (RFC 9651: %"…" with %xx escapes of
// lowercase hex) and drops it.
func (p *sfParser) display() error {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		return errSyntax
	}
	p.i += 2
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '"':
			return nil
		case c == '%':
			if p.i+2 > len(p.s) || !isLowerHex(p.s[p.i]) || !isLowerHex(p.s[p.i+1]) {
				return errSyntax
			}
			p.i += 2
		case c < 0x20 || c > 0x7e:
			return errSyntax
		}
	}
	return errSyntax
}

func isDigit(c byte) bool    { return c >= '0' && c <= '9' }
func isLower(c byte) bool    { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool    { return isLower(c) || c >= 'A' && c <= 'Z' }
func isLowerHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' }

// isTchar reports whether c is a tchar of RFC 9110.
func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
