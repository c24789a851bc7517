//go:build faultinject

package relay

import "github.com/cdp-throttle/cdp-throttle/cdp"

// FaultMethod is the method of a client command that makes a relay built
// with the faultinject tag panic in that client's connection, as a bug
// would: the tests of what a panic does (RELIABILITY.md) send it.
const FaultMethod = "CdpThrottle.panic"

func init() {
	faultHook = func(hd *cdp.Header) {
		if string(hd.Method) == FaultMethod {
			panic("a panic injected by " + FaultMethod + " (faultinject build)")
		}
	}
}
