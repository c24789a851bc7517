package session

import "testing"

// TestGlob checks the Fetch URL pattern matching the relay does for a
// client's own patterns.
func TestGlob(t *testing.T) {
	tests := []struct {
		pat, s string
		want   bool
	}{
		{"*", "http://a.test/", true},
		{"", "", true},
		{"*.js", "http://a.test/x.js", true},
		{"*.js", "http://a.test/x.css", false},
		{"http://a.test/?", "http://a.test/x", true},
		{"http://a.test/?", "http://a.test/", false},
		{`http://a.test/\*`, "http://a.test/*", true},
		{`http://a.test/\*`, "http://a.test/x", false},
		{"*a*b*c*", "xxaxxbxxcxx", true},
		{"*a*b*c*", "xxaxxcxxbxx", false},
	}
	for _, tt := range tests {
		if got := glob(tt.pat, tt.s); got != tt.want {
			t.Errorf("glob(%q, %q) = %v, want %v", tt.pat, tt.s, got, tt.want)
		}
	}
}
