package limiter

import "testing"

// TestRand: a seed draws the same numbers each time, each in [−1, 1);
// nil and the zero Rand draw from the global source.
func TestRand(t *testing.T) {
	a, b := NewRand(3), NewRand(3)
	for i := range 1000 {
		x, y := a.Uniform(), b.Uniform()
		if x != y || x < -1 || x >= 1 {
			t.Fatalf("draw %d: got %v and %v from one seed, want the same, in [-1, 1)", i, x, y)
		}
	}
	var zero Rand
	var none *Rand
	if x, y := zero.Uniform(), none.Uniform(); x < -1 || x >= 1 || y < -1 || y >= 1 {
		t.Errorf("zero and nil Rand: got %v and %v, want them in [-1, 1)", x, y)
	}
}

// TestJittered: where a held slot goes for a draw u, at fixed instants
// (ms): uniform over the range within F × spacing of the grid and
// (1 ± F) × spacing after the navigation before; the earliest the gap
// allows when the two do not meet; a floor stays a floor.
func TestJittered(t *testing.T) {
	tests := []struct {
		name                            string
		grid, now, last, spacing, floor int64
		f, u                            float64
		want                            int64
	}{
		{"u −1: the earliest", 200, 10, 0, 200, 0, 0.5, -1, 100},
		{"u 0: the middle", 200, 10, 0, 200, 0, 0.5, 0, 200},
		{"u near 1: the latest", 200, 10, 0, 200, 0, 0.5, 0.999, 299},
		{"the one before late: its gap bounds the range", 200, 10, 80, 200, 0, 0.5, -1, 180},
		{"the one before early", 200, 10, -80, 200, 0, 0.5, 0.999, 219},
		{"never before now", 200, 150, 0, 200, 0, 0.5, -1, 150},
		{"ranges apart: the earliest the gap allows", 200, 10, 250, 200, 0, 0.5, 0.5, 350},
		{"no navigation before", 200, 10, noLast, 200, 0, 0.5, -1, 100},
		{"a floor over (1 − F) × spacing", 300, 10, 0, 300, 300, 0.5, -1, 300},
		{"F 0.25", 200, 10, 0, 200, 0, 0.25, -1, 150},
	}
	for _, tt := range tests {
		if got := jittered(tt.grid, tt.now, tt.last, tt.spacing, tt.floor, tt.f, tt.u); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.name, got, tt.want)
		}
	}
}
