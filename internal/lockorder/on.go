//go:build lockorder

package lockorder

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Mutex is a sync.Mutex with its place in the lock order, R; Lock checks
// it against what its goroutine holds.
type Mutex[R Rank] struct{ mu sync.Mutex }

// Lock locks m, first noting a break of the order.
func (m *Mutex[R]) Lock() {
	var r R
	g := goid()
	taking(g, m, rankName(r), r.Level(), r.Alone())
	m.mu.Lock()
}

// TryLock tries to lock m; a try cannot wait, so it breaks no order, but
// what it takes counts for what is taken under it.
func (m *Mutex[R]) TryLock() bool {
	if !m.mu.TryLock() {
		return false
	}
	var r R
	held.push(goid(), heldLock{m: m, name: rankName(r), level: r.Level()})
	return true
}

// Unlock unlocks m.
func (m *Mutex[R]) Unlock() {
	held.drop(goid(), m)
	m.mu.Unlock()
}

// heldLock is a mutex a goroutine holds.
type heldLock struct {
	m     any
	name  string
	level int
}

// holders are the mutexes each goroutine holds, and the breaks seen.
type holders struct {
	mu     sync.Mutex
	by     map[uint64][]heldLock
	broken map[string]string // "taken under held" → the first stack that did it
}

var held = holders{by: map[uint64][]heldLock{}, broken: map[string]string{}}

// taking checks a lock about to be taken, and notes it held.
func taking(g uint64, m any, name string, level int, alone bool) {
	held.mu.Lock()
	for _, h := range held.by[g] {
		if alone || h.level >= level {
			key := name + " taken while holding " + h.name
			if _, seen := held.broken[key]; !seen {
				held.broken[key] = stack()
			}
		}
	}
	held.by[g] = append(held.by[g], heldLock{m: m, name: name, level: level})
	held.mu.Unlock()
}

func (hs *holders) push(g uint64, h heldLock) {
	hs.mu.Lock()
	hs.by[g] = append(hs.by[g], h)
	hs.mu.Unlock()
}

// drop forgets m, held by goroutine g, or by another (a mutex may be let
// go by a goroutine that did not take it).
func (hs *holders) drop(g uint64, m any) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.dropFrom(g, m) {
		return
	}
	for o := range hs.by {
		if hs.dropFrom(o, m) {
			return
		}
	}
}

func (hs *holders) dropFrom(g uint64, m any) bool {
	hl := hs.by[g]
	for i := len(hl) - 1; i >= 0; i-- {
		if hl[i].m == m {
			hl = append(hl[:i], hl[i+1:]...)
			if len(hl) == 0 {
				delete(hs.by, g)
			} else {
				hs.by[g] = hl
			}
			return true
		}
	}
	return false
}

// Broken reports each break of the order seen, with the stack of its
// first, sorted.
func Broken() []string {
	held.mu.Lock()
	defer held.mu.Unlock()
	var out []string
	for k, st := range held.broken {
		out = append(out, k+"\n"+st)
	}
	return out
}

// Checked runs m's tests, then fails the binary when the order was
// broken, saying where.
func Checked(m TestingM) TestingM { return checked{m} }

type checked struct{ m TestingM }

func (c checked) Run() int {
	code := c.m.Run()
	if b := Broken(); len(b) > 0 {
		fmt.Fprintf(os.Stderr, "lockorder: %d breaks of hold.go's lock order:\n%s\n", len(b), strings.Join(b, "\n"))
		if code == 0 {
			code = 1
		}
	}
	return code
}

func rankName(r Rank) string { return strings.TrimPrefix(fmt.Sprintf("%T", r), "*") }

// goid is the running goroutine's id, read from its stack's first line
// ("goroutine 18 [running]:"): slow, for a debugging build only.
func goid() uint64 {
	var b [64]byte
	n := runtime.Stack(b[:], false)
	f := bytes.Fields(b[:n])
	if len(f) < 2 {
		return 0
	}
	id, _ := strconv.ParseUint(string(f[1]), 10, 64)
	return id
}

func stack() string {
	b := make([]byte, 8<<10)
	return string(b[:runtime.Stack(b, false)])
}
