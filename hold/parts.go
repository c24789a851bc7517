package hold

import (
	"os"
	"strings"
	"sync"
)

// Parts of holding can be switched off, for BENCHMARKS.md's breakdown of
// what holding costs the browser, with CDP_THROTTLE_PARTS_OFF, a list of:
//
//   - pace: held navigations' departures are not followed (package pace:
//     no wait for the one before to leave, no schedule moved);
//   - pauses: the relay's interception on its clients' pages pauses
//     nothing (a pattern that matches no request): what Chromium's
//     interceptor costs by being there; navigations go unheld.
//
// Never for a crawl: both weaken what the relay promises.
var partsOff = sync.OnceValue(func() map[string]bool {
	off := map[string]bool{}
	for _, p := range strings.Split(os.Getenv("CDP_THROTTLE_PARTS_OFF"), ",") {
		off[strings.TrimSpace(p)] = true
	}
	return off
})

// PartOff reports whether a part of holding is switched off.
func PartOff(part string) bool { return partsOff()[part] }
