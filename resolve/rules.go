package resolve

import (
	"fmt"
	"net"
	"path"
	"strings"
)

// Rules map host names as Chromium's --host-resolver-rules (and
// --host-rules) do: `MAP PATTERN REPLACEMENT` and `EXCLUDE PATTERN`,
// separated by commas. A name that an EXCLUDE matches is not mapped; else
// the first MAP whose pattern matches it (`*` any run of characters, `?`
// one, case-insensitive) replaces it: with an address, which is then the
// name's address; with `~NOTFOUND`, which the browser fails to resolve;
// or with another name, looked up instead. A pattern naming a port
// (`*.test:8080`) is ignored: buckets are by name. The zero or nil Rules
// map nothing. Rules are read-only once parsed, and safe for concurrent
// use.
type Rules struct {
	maps     []mapRule
	excluded []string
}

type mapRule struct{ pattern, to string }

// notFound is the replacement with which Chromium fails a name.
const notFound = "~NOTFOUND"

// ParseRules reads the value of --host-resolver-rules.
func ParseRules(s string) (*Rules, error) {
	r := &Rules{}
	for _, rule := range strings.Split(s, ",") {
		parts := strings.Fields(rule)
		switch {
		case len(parts) == 0:
		case len(parts) == 3 && strings.EqualFold(parts[0], "MAP"):
			to := parts[2]
			if to != notFound {
				if host, _, err := net.SplitHostPort(to); err == nil {
					to = host
				}
				to = strings.ToLower(strings.Trim(to, "[]"))
			}
			r.maps = append(r.maps, mapRule{pattern: strings.ToLower(parts[1]), to: to})
		case len(parts) == 2 && strings.EqualFold(parts[0], "EXCLUDE"):
			r.excluded = append(r.excluded, strings.ToLower(parts[1]))
		default:
			return nil, fmt.Errorf("resolve: host resolver rule %q: want MAP PATTERN REPLACEMENT or EXCLUDE PATTERN", strings.TrimSpace(rule))
		}
	}
	return r, nil
}

// Map returns what name is replaced with: an address (as text), a name
// to look up instead, or "~NOTFOUND"; ok is false when no rule maps it.
func (r *Rules) Map(name string) (to string, ok bool) {
	if r == nil {
		return "", false
	}
	for _, p := range r.excluded {
		if matches(p, name) {
			return "", false
		}
	}
	for _, m := range r.maps {
		if matches(m.pattern, name) {
			return m.to, true
		}
	}
	return "", false
}

// matches reports whether name matches a pattern of * and ?; a pattern
// with a port matches no bare name.
func matches(pattern, name string) bool {
	if strings.ContainsAny(pattern, "[]\\") { // path.Match's own syntax, which Chromium's lacks
		return pattern == name
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}
