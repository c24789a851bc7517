package hold

import (
	"time"

	"github.com/cdp-throttle/cdp-throttle/hold/claims"
	"github.com/cdp-throttle/cdp-throttle/internal/lockorder"
)

// MaxClaims bounds what the ways remember per page of a browser, as the
// clients' pages are bounded (claims.Max).
const MaxClaims = claims.Max

// ClaimWait bounds how long a page's first request waits to learn whether
// a client is creating that page.
const ClaimWait = 3 * time.Second

// warnOnce remembers the hosts already warned about, so each is warned
// once for the life of the process. Memory is bounded: past max hosts the
// older half is forgotten, and a host from it may be warned once more.
type warnOnce struct {
	mu       lockorder.Mutex[lockorder.Lone] // taken under no other, takes none
	cur, old map[string]struct{}             // guarded by mu
}

const maxWarned = 100_000

// first reports whether host has not been warned about, and marks it.
func (w *warnOnce) first(host string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.cur[host]; ok {
		return false
	}
	if _, ok := w.old[host]; ok {
		return false
	}
	if w.cur == nil || len(w.cur) >= maxWarned/2 {
		w.old, w.cur = w.cur, make(map[string]struct{})
	}
	w.cur[host] = struct{}{}
	return true
}
