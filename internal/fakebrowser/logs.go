package fakebrowser

import (
	"bytes"
	"strings"
	"sync"
	"time"
)

// Logs collects the logs of the relay (or the holding) under test, for a
// test to read while it runs. It is safe for concurrent use; its zero
// value is empty and ready.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write adds p to the logs.
func (b *Logs) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns the logs so far.
func (b *Logs) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many times s occurs in the logs so far.
func (b *Logs) Count(s string) int { return strings.Count(b.String(), s) }

// Lines returns the log lines that contain every one of parts.
func (b *Logs) Lines(parts ...string) []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		keep := l != ""
		for _, p := range parts {
			keep = keep && strings.Contains(l, p)
		}
		if keep {
			out = append(out, l)
		}
	}
	return out
}

// Wait waits, up to WaitFor, until a log line contains every one of
// parts, and reports whether one does; the caller says what a line that
// never came means, as a failure or as the count it checks next.
func (b *Logs) Wait(parts ...string) bool {
	deadline := time.Now().Add(WaitFor)
	for len(b.Lines(parts...)) == 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
