//go:build lockorder

package lockorder

import (
	"strings"
	"testing"
)

type low struct{}

func (low) Level() int  { return 1 }
func (low) Alone() bool { return false }

type high struct{}

func (high) Level() int  { return 2 }
func (high) Alone() bool { return false }

// brokenSince returns the breaks seen since before, by their first line.
func brokenSince(before map[string]bool) []string {
	var out []string
	for _, b := range Broken() {
		first, _, _ := strings.Cut(b, "\n")
		if !before[first] {
			out = append(out, first)
		}
	}
	return out
}

func seen() map[string]bool {
	out := map[string]bool{}
	for _, b := range Broken() {
		first, _, _ := strings.Cut(b, "\n")
		out[first] = true
	}
	return out
}

// TestOrder: taking mutexes in their order breaks nothing; taking a lower
// one under a higher, one of the same level under another, anything under
// a leaf, or a Lone one under anything is a break, named by its ranks.
func TestOrder(t *testing.T) {
	var a Mutex[low]
	var b Mutex[high]
	var c, d Mutex[high]
	var leaf Mutex[Leaf]
	var lone Mutex[Lone]
	before := seen()
	a.Lock()
	b.Lock()
	leaf.Lock()
	leaf.Unlock()
	b.Unlock()
	a.Unlock()
	lone.Lock()
	lone.Unlock()
	if got := brokenSince(before); len(got) != 0 {
		t.Fatalf("the order kept, yet breaks: %q", got)
	}
	cases := []struct {
		name         string
		outer, inner func()
		want         string
	}{
		{"lower under higher", b.Lock, a.Lock, "lockorder.low taken while holding lockorder.high"},
		{"same level", c.Lock, d.Lock, "lockorder.high taken while holding lockorder.high"},
		{"under a leaf", leaf.Lock, b.Lock, "lockorder.high taken while holding lockorder.Leaf"},
		{"lone under anything", a.Lock, lone.Lock, "lockorder.Lone taken while holding lockorder.low"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := seen()
			tc.outer()
			tc.inner()
			got := brokenSince(before)
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("breaks %q, want [%q]", got, tc.want)
			}
		})
		// Let go of whatever the case took.
		a.forceUnlock()
		b.forceUnlock()
		c.forceUnlock()
		d.forceUnlock()
		leaf.forceUnlock()
		lone.forceUnlock()
	}
}

// forceUnlock unlocks m when it is locked, for the test's clean-up.
func (m *Mutex[R]) forceUnlock() {
	if m.mu.TryLock() {
		m.mu.Unlock()
		return
	}
	m.Unlock()
}
