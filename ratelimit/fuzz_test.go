package ratelimit

import (
	"testing"
	"time"
)

// FuzzRead feeds a server's bytes to every field: Read never panics, never
// reports more than Max or less than zero, and an error is always an
// *Error with at least one problem.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{
		`"p";q=5;w=1`, `"p";r=0;t=3`, `limit=10, remaining=0, reset=7`, `10;w=1, 50;w=60`,
		`0`, `1767323065`, `1767323047250`, `1.5`, `("a" 1);x=?1, :AQ==:, @1, %"%c3"`,
		"\"a\";q=1;w=1\n\"b\";q=2;w=1", `"p";q=999999999999999;w=999999999999999`,
	} {
		f.Add(seed, seed)
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		for _, fs := range []Fields{
			fields("RateLimit-Policy", a, "RateLimit", b),
			fields("RateLimit-Limit", a, "RateLimit-Remaining", b, "RateLimit-Reset", a),
			fields("X-RateLimit-Remaining", a, "X-RateLimit-Reset", b),
			fields("RateLimit", a, "RateLimit", b),
		} {
			l, err := fs.Read(now)
			if l.Spacing < 0 || l.Spacing > Max || l.Wait < 0 || l.Wait > Max {
				t.Errorf("got %+v, want both within [0, %v]", l, Max)
			}
			if err != nil {
				if e, ok := err.(*Error); !ok || len(e.Problems) == 0 {
					t.Errorf("got error %#v, want an *Error with problems", err)
				}
			}
		}
		parseList(a)
		parseDictionary(a)
	})
}

// FuzzResetWait: any reset is read at any answer time without panic, and
// within [0, Max].
func FuzzResetWait(f *testing.F) {
	f.Add(1.5, int64(0))
	f.Add(1767323065.0, now.UnixNano())
	f.Add(1767323047250.0, now.UnixNano())
	f.Fuzz(func(t *testing.T, v float64, at int64) {
		if v < 0 || v != v {
			return // number never reads a negative or NaN
		}
		d, _ := resetWait(v, time.Unix(0, at))
		if d < 0 || d > Max {
			t.Errorf("resetWait(%v): got %v, want within [0, %v]", v, d, Max)
		}
	})
}
