package ratelimit

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// now is the answer's time in the tables: 2026-01-02 03:04:05 UTC, epoch
// second 1767323045.
var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fields(kv ...string) Fields {
	var f Fields
	for i := 0; i+1 < len(kv); i += 2 {
		f.Add(kv[i], kv[i+1])
	}
	return f
}

func TestRead(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		fields  Fields
		want    Limits
		wantErr string // a part of the error's text; "" for no error
	}{
		{"none", Fields{}, Limits{}, ""},

		// RateLimit-Policy, draft-08 on.
		{"policy", fields("RateLimit-Policy", `"p";q=5;w=1`), Limits{Spacing: 200 * ms}, ""},
		{"policy token name", fields("RateLimit-Policy", `default;q=100;w=10`), Limits{Spacing: 100 * ms}, ""},
		{"policy any case", fields("ratelimit-policy", `"p";q=5;w=1`), Limits{Spacing: 200 * ms}, ""},
		{"strictest policy", fields("RateLimit-Policy", `"permin";q=50;w=60, "perhr";q=1000;w=3600`),
			Limits{Spacing: 3600 * ms}, ""},
		{"policies over two lines", fields("RateLimit-Policy", `"a";q=10;w=1`, "RateLimit-Policy", `"b";q=2;w=1`),
			Limits{Spacing: 500 * ms}, ""},
		{"policies joined by a newline", fields("RateLimit-Policy", "\"a\";q=10;w=1\n\"b\";q=4;w=1"),
			Limits{Spacing: 250 * ms}, ""},
		{"spaces and tabs", fields("RateLimit-Policy", "  \"a\";q=10;w=1 ,\t\"b\";  q=4;w=1"),
			Limits{Spacing: 250 * ms}, ""},
		{"unknown parameters", fields("RateLimit-Policy", `"p";q=5;acme-burst=100;w=1;pk=:cHsdsRa894==:;x="y";z`),
			Limits{Spacing: 200 * ms}, ""},
		{"qu requests", fields("RateLimit-Policy", `"p";q=5;w=1;qu="requests"`), Limits{Spacing: 200 * ms}, ""},
		{"qu request, as the draft's registry spells it", fields("RateLimit-Policy", `"p";q=5;w=1;qu="request"`),
			Limits{Spacing: 200 * ms}, ""},
		{"qu content-bytes skipped", fields("RateLimit-Policy", `"b";q=65535;qu="content-bytes";w=10, "p";q=5;w=1`),
			Limits{Spacing: 200 * ms}, ""},
		{"qu concurrent-requests skipped", fields("RateLimit-Policy", `"c";q=1;qu=concurrent-requests;w=60`), Limits{}, ""},
		{"no window: no pace, no error", fields("RateLimit-Policy", `"p";q=100`), Limits{}, ""},
		{"repeated parameter: the last", fields("RateLimit-Policy", `"p";q=1;q=5;w=1`), Limits{Spacing: 200 * ms}, ""},
		{"rounded up to the nanosecond", fields("RateLimit-Policy", `"p";q=3;w=1`), Limits{Spacing: 333333334}, ""},
		{"a window of a day", fields("RateLimit-Policy", `"d";q=1;w=86400`), Limits{Spacing: Max}, ""},
		{"huge numbers", fields("RateLimit-Policy", `"p";q=999999999999999;w=999999999999999`),
			Limits{Spacing: time.Second}, ""},
		{"huge quota", fields("RateLimit-Policy", `"p";q=999999999999999;w=1`), Limits{Spacing: 1}, ""},
		{"drafts to -07: the quota is the item", fields("RateLimit-Policy", `10;w=1, 50;w=60`),
			Limits{Spacing: 1200 * ms}, ""},
		{"the bad item ignored, the good one read", fields("RateLimit-Policy", `"bad";q=-1;w=1, "p";q=5;w=1`),
			Limits{Spacing: 200 * ms}, "RateLimit-Policy: item 1: q is not a non-negative integer"},
		{"no q", fields("RateLimit-Policy", `"p";w=1`), Limits{}, "item 1: no q"},
		{"q a decimal", fields("RateLimit-Policy", `"p";q=5.5;w=1`), Limits{}, "q is not a non-negative integer"},
		{"q a string", fields("RateLimit-Policy", `"p";q="5";w=1`), Limits{}, "q is not a non-negative integer"},
		{"q=0", fields("RateLimit-Policy", `"p";q=0;w=1`), Limits{}, "q=0 gives no pace"},
		{"w=0", fields("RateLimit-Policy", `"p";q=5;w=0`), Limits{}, "w is not a positive integer"},
		{"w negative", fields("RateLimit-Policy", `"p";q=5;w=-1`), Limits{}, "w is not a positive integer"},
		{"w a decimal", fields("RateLimit-Policy", `"p";q=5;w=1.5`), Limits{}, "w is not a positive integer"},
		{"qu not a string", fields("RateLimit-Policy", `"p";q=5;w=1;qu=1`), Limits{}, "qu is not a string"},
		{"an inner list", fields("RateLimit-Policy", `("a" "b");q=5;w=1, "p";q=4;w=1`),
			Limits{Spacing: 250 * ms}, "item 1: an inner list"},
		{"not a list: the whole field", fields("RateLimit-Policy", `"p";q=5;w=1, "unterminated`),
			Limits{}, "RateLimit-Policy: not a structured field list"},
		{"too many digits", fields("RateLimit-Policy", `"p";q=1234567890123456;w=1`), Limits{}, "not a structured field"},
		{"uppercase key", fields("RateLimit-Policy", `"p";Q=5;W=1`), Limits{}, "not a structured field"},
		{"trailing comma", fields("RateLimit-Policy", `"p";q=5;w=1,`), Limits{}, "not a structured field"},
		{"empty", fields("RateLimit-Policy", ``), Limits{}, ""},

		// RateLimit-Limit, drafts -00 to -06.
		{"limit bare: no pace", fields("RateLimit-Limit", `100`), Limits{}, ""},
		{"limit with policies", fields("RateLimit-Limit", `100, 100;w=60, 10;w=1`), Limits{Spacing: 600 * ms}, ""},
		{"limit malformed", fields("RateLimit-Limit", `lots of`), Limits{}, "RateLimit-Limit: not a structured field list"},

		// RateLimit, draft-08 on.
		{"r=0", fields("RateLimit", `"p";r=0;t=3`), Limits{Wait: 3 * time.Second}, ""},
		{"r>0", fields("RateLimit", `"p";r=1;t=3`), Limits{}, ""},
		{"r=0 without t", fields("RateLimit", `"p";r=0`), Limits{}, ""},
		{"r=0;t=0", fields("RateLimit", `"p";r=0;t=0`), Limits{}, ""},
		{"the longest wait", fields("RateLimit", `"a";r=0;t=3, "b";r=0;t=30, "c";r=5;t=300`),
			Limits{Wait: 30 * time.Second}, ""},
		{"with a partition key", fields("RateLimit", `"default";r=0;t=60;pk=:QXBwLTk5OQ==:`),
			Limits{Wait: time.Minute}, ""},
		{"t past Max", fields("RateLimit", `"day";r=0;t=86400`), Limits{Wait: Max}, ""},
		{"no r", fields("RateLimit", `"p";t=3`), Limits{}, "RateLimit: item 1: no r"},
		{"r negative", fields("RateLimit", `"p";r=-1;t=3`), Limits{}, "r is not a non-negative integer"},
		{"t negative", fields("RateLimit", `"p";r=0;t=-3`), Limits{}, "t is not a non-negative integer"},
		{"t a decimal", fields("RateLimit", `"p";r=0;t=1.5`), Limits{}, "t is not a non-negative integer"},
		{"the bad ignored, the good read", fields("RateLimit", `"a";r=0;t=x, "b";r=0;t=2`),
			Limits{Wait: 2 * time.Second}, "item 1"},
		{"policy and limit", fields("RateLimit-Policy", `"p";q=5;w=1`, "RateLimit", `"p";r=0;t=3`),
			Limits{Spacing: 200 * ms, Wait: 3 * time.Second}, ""},

		// RateLimit, draft-07's Dictionary.
		{"draft-07 spent", fields("RateLimit", `limit=10, remaining=0, reset=7`), Limits{Wait: 7 * time.Second}, ""},
		{"draft-07 left", fields("RateLimit", `limit=10, remaining=3, reset=7`), Limits{}, ""},
		{"draft-07 no reset", fields("RateLimit", `limit=10, remaining=0`), Limits{}, ""},
		{"draft-07 bad reset", fields("RateLimit", `remaining=0, reset="soon"`), Limits{}, "reset is not"},
		{"draft-07 bad remaining", fields("RateLimit", `remaining=-2, reset=7`), Limits{}, "remaining is not"},
		{"neither list nor draft-07", fields("RateLimit", `a=1, b=2`), Limits{}, "RateLimit: not a structured field list"},

		// RateLimit-Remaining and -Reset, drafts -00 to -06.
		{"remaining 0", fields("RateLimit-Remaining", "0", "RateLimit-Reset", "5"), Limits{Wait: 5 * time.Second}, ""},
		{"remaining left", fields("RateLimit-Remaining", "4", "RateLimit-Reset", "5"), Limits{}, ""},
		{"remaining 0, no reset", fields("RateLimit-Remaining", "0"), Limits{}, ""},
		{"remaining bad", fields("RateLimit-Remaining", "none", "RateLimit-Reset", "5"), Limits{},
			"RateLimit-Remaining: not a non-negative number"},
		{"limit, remaining, reset", fields("RateLimit-Limit", "10", "RateLimit-Remaining", "0", "RateLimit-Reset", "2"),
			Limits{Wait: 2 * time.Second}, ""},

		// X-RateLimit-Remaining and -Reset.
		{"x seconds", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "3"), Limits{Wait: 3 * time.Second}, ""},
		{"x fractional seconds", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1.25"),
			Limits{Wait: 1250 * ms}, ""},
		{"x remaining 0.0", fields("x-ratelimit-remaining", "0.0", "x-ratelimit-reset", "3"), Limits{Wait: 3 * time.Second}, ""},
		{"x remaining below 1", fields("X-RateLimit-Remaining", "0.4", "X-RateLimit-Reset", "3"), Limits{Wait: 3 * time.Second}, ""},
		{"x remaining 1", fields("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "3"), Limits{}, ""},
		{"x spaces", fields("X-RateLimit-Remaining", " 0 ", "X-RateLimit-Reset", "\t3 "), Limits{Wait: 3 * time.Second}, ""},
		{"x just below the epoch threshold: seconds", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "999999999"),
			Limits{Wait: Max}, ""},
		{"x epoch seconds", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1767323065"),
			Limits{Wait: 20 * time.Second}, ""},
		{"x epoch seconds with a fraction", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1767323046.5"),
			Limits{Wait: 1500 * ms}, ""},
		{"x epoch milliseconds", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1767323047250"),
			Limits{Wait: 2250 * ms}, ""},
		{"x epoch past", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1767323000"), Limits{}, ""},
		{"x epoch far ahead", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1999999999"), Limits{Wait: Max}, ""},
		{"x too large", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "100000000000000"), Limits{},
			"X-RateLimit-Reset: too large"},
		{"x reset negative", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "-3"), Limits{},
			"X-RateLimit-Reset: not a non-negative number"},
		{"x reset a date", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "Fri, 02 Jan 2026 03:04:08 GMT"),
			Limits{}, "X-RateLimit-Reset: not a non-negative number"},
		{"x reset bad but quota left: not read", fields("X-RateLimit-Remaining", "5", "X-RateLimit-Reset", "soon"), Limits{}, ""},
		{"x reset exponent", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1e3"), Limits{}, "not a non-negative number"},
		{"x reset two points", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1.2.3"), Limits{}, "not a non-negative number"},
		{"x reset just a point", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "."), Limits{}, "not a non-negative number"},
		{"x repeated: the first", fields("X-RateLimit-Remaining", "0", "X-RateLimit-Remaining", "7", "X-RateLimit-Reset", "3"),
			Limits{Wait: 3 * time.Second}, ""},
		{"x remaining without its reset, the other's reset not taken", fields("X-RateLimit-Remaining", "0", "RateLimit-Reset", "3"),
			Limits{}, ""},

		// Several families: the strictest.
		{"the longest wait of all", fields("RateLimit", `"p";r=0;t=3`, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "9"),
			Limits{Wait: 9 * time.Second}, ""},
		{"the longest spacing of all", fields("RateLimit-Policy", `"p";q=5;w=1`, "RateLimit-Limit", `1;w=1`),
			Limits{Spacing: time.Second}, ""},
		{"two bad fields, both said", fields("RateLimit-Policy", `"p";q=x;w=1`, "X-RateLimit-Remaining", "-"),
			Limits{}, "RateLimit-Policy: item 1: q is not a non-negative integer; X-RateLimit-Remaining: not"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.fields.Read(now)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got error %q, want none", err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("got no error, want one with %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("got error %q, want one with %q", err, tt.wantErr)
			}
			var e *Error
			if err != nil && !errors.As(err, &e) {
				t.Errorf("got error %T, want *Error", err)
			}
		})
	}
}

// TestErrorHoldsNoValue: a malformed field is named, never quoted, so a
// warning cannot carry what a server put there.
func TestErrorHoldsNoValue(t *testing.T) {
	const secret = "token-abc123"
	_, err := fields("RateLimit-Policy", `"`+secret, "RateLimit", `"`+secret+`";r=x`,
		"X-RateLimit-Remaining", secret).Read(now)
	if err == nil {
		t.Fatal("got no error, want one")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("got error %q, want none quoting the value", err)
	}
}

func TestAdd(t *testing.T) {
	var f Fields
	if !f.IsZero() {
		t.Error("got a zero Fields that is not zero")
	}
	for _, name := range []string{"RateLimit-Policy", "ratelimit", "RATELIMIT-LIMIT", "RateLimit-Remaining",
		"RateLimit-Reset", "X-RateLimit-Remaining", "x-ratelimit-reset"} {
		if !f.Add(name, "1") {
			t.Errorf("Add(%q): got false, want true", name)
		}
	}
	for _, name := range []string{"Retry-After", "X-RateLimit-Limit", "RateLimit-Policy-X", ""} {
		if f.Add(name, "1") {
			t.Errorf("Add(%q): got true, want false", name)
		}
	}
	if f.IsZero() {
		t.Error("got a Fields with fields that is zero")
	}
	var g Fields
	g.Add("RateLimit-Policy", `"a";q=1;w=1`)
	g.Add("RateLimit-Policy", `"b";q=1;w=2`)
	if want := "\"a\";q=1;w=1\n\"b\";q=1;w=2"; g.policy != want {
		t.Errorf("got %q, want %q", g.policy, want)
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		in   string
		want int // members; -1 for a syntax error
	}{
		{``, 0},
		{`   `, 0},
		{`a`, 1},
		{`"a", b, 1, 1.5, -2, ?1, :AQ==:, @1659578233, %"f%c3%bc"`, 9},
		{`a;b;c=?0;d="x";e=1.500`, 1},
		{`(a "b" 1);p=1, x`, 2},
		{`()`, 1},
		{`a,,b`, -1},
		{`a ,b`, 2},
		{`,a`, -1},
		{`a b`, -1},
		{`"a\"b\\c"`, 1},
		{`"a\b"`, -1},
		{"\"a\x01\"", -1},
		{"\"é\"", -1},
		{`1.`, -1},
		{`.5`, -1},
		{`1.2345`, -1},
		{`1234567890123.1`, -1},
		{`123456789012.123`, 1},
		{`-`, -1},
		{`?2`, -1},
		{`:AQ==`, -1},
		{`:A Q:`, -1},
		{`@1.5`, -1},
		{`a,@`, -1},
		{`%"A"`, 1},
		{`%"%ZZ"`, -1},
		{`%x`, -1},
		{`a;`, -1},
		{`a;B=1`, -1},
		{`a;b=`, -1},
		{`(a`, -1},
		{`(a)b`, -1},
		{`(a"b")`, -1},
		{`{`, -1},
	}
	for _, tt := range tests {
		items, err := parseList(tt.in)
		got := len(items)
		if err != nil {
			got = -1
		}
		if got != tt.want {
			t.Errorf("parseList(%q): got %d members (err %v), want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestParseValues(t *testing.T) {
	items, err := parseList(`"a\"b";q=5;w=1.25;n=-7;t=tok/en:1;f`)
	if err != nil {
		t.Fatal(err)
	}
	it := items[0]
	if it.val.kind != kString || it.val.s != `a"b` {
		t.Errorf("got value %+v, want the string a\"b", it.val)
	}
	for _, c := range []struct {
		key  string
		want bare
	}{
		{"q", bare{kind: kInteger, n: 5}},
		{"w", bare{kind: kDecimal, f: 1.25}},
		{"n", bare{kind: kInteger, n: -7}},
		{"t", bare{kind: kToken, s: "tok/en:1"}},
		{"f", bare{kind: kBoolean, n: 1}},
	} {
		if got, _ := it.param(c.key); got != c.want {
			t.Errorf("param %s: got %+v, want %+v", c.key, got, c.want)
		}
	}
	d, err := parseDictionary(`limit=10, remaining=0;x, reset`)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 3 || d[1].key != "remaining" || d[1].val.n != 0 || d[2].val.kind != kBoolean {
		t.Errorf("got dictionary %+v, want limit, remaining 0, reset true", d)
	}
}

func TestSpacing(t *testing.T) {
	tests := []struct {
		w, q uint64
		want time.Duration
	}{
		{1, 5, 200 * time.Millisecond},
		{1, 3, 333333334},
		{60, 50, 1200 * time.Millisecond},
		{3599, 1, 3599 * time.Second},
		{3600, 1, Max},
		{1 << 62, 1, Max},
		{999999999999999, 999999999999998, time.Second + 1},
		{1, 999999999999999, 1},
	}
	for _, tt := range tests {
		if got := spacing(tt.w, tt.q); got != tt.want {
			t.Errorf("spacing(%d, %d): got %v, want %v", tt.w, tt.q, got, tt.want)
		}
	}
}
