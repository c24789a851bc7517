package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// bookings makes a phase of navigations from their gaps in ms, a negative
// gap meaning the navigation was held.
func bookings(gaps ...float64) []Booking {
	navs := []Booking{{}}
	var at time.Duration
	for _, g := range gaps {
		waited := g < 0
		if waited {
			g = -g
		}
		at += time.Duration(g * float64(time.Millisecond))
		navs = append(navs, Booking{Start: at, Waited: waited})
	}
	return navs
}

// TestFirstAt: a row for each quantum up to 100 ms, even where the first
// held navigation came two quanta after the one before (said under the
// table); a Crawl-delay's jump is one row; notes wrap to fit a terminal.
func TestFirstAt(t *testing.T) {
	tests := []struct {
		name    string
		quantum time.Duration
		navs    []Booking
		want    string
	}{
		{"a level skipped", 20 * time.Millisecond, bookings(25, 25, -40.1, -40, -60, -80, -100), `enforced gap  first at navigation  after
0ms           1 to 3               0s
20ms          4                    0.09s
40ms          4                    0.09s
60ms          6                    0.19s
80ms          7                    0.27s
100ms         8                    0.37s
(no gap of 20ms was enforced: navigation 4, held, came 40.1ms after navigation
3; a row is the first gap of at least its size)
`},
		{"a level skipped, rounded", 20 * time.Millisecond, bookings(25, -32.4, -40), `enforced gap  first at navigation  after
0ms           1 to 2               0s
20ms          3                    0.06s
40ms          3                    0.06s
(no gap of 20ms was enforced: navigation 3, held, came 32.4ms after navigation
2; a row is the first gap of at least its size)
`},
		{"every level", 20 * time.Millisecond, bookings(0, -20, -40, -60, -80, -100), `enforced gap  first at navigation  after
0ms           1 to 2               0s
20ms          3                    0.02s
40ms          4                    0.06s
60ms          5                    0.12s
80ms          6                    0.20s
100ms         7                    0.30s
`},
		{"a Crawl-delay", 20 * time.Millisecond, bookings(-500, -500), `enforced gap  first at navigation  after
0ms           1                    0s
500ms         2                    0.50s
`},
		{"rounded", 20 * time.Millisecond, bookings(4.5, -15, -40), `enforced gap  first at navigation  after
0ms           1 to 2               0s
20ms          3                    0.02s
40ms          4                    0.06s
(gaps are counted in whole 20ms steps: navigation 3 waited for its slot but
came 15.0ms after navigation 2, which went later than its own slot, when the
crawl asked for it; that counts as 20ms)
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			writeFirstAt(&b, tt.quantum, tt.navs)
			if got := b.String(); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
			for _, line := range strings.Split(b.String(), "\n") {
				if len(line) > noteWidth {
					t.Errorf("line of %d characters, want at most %d: %q", len(line), noteWidth, line)
				}
			}
		})
	}
}
