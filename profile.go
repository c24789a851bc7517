package main

import (
	"os"
	"runtime/pprof"
)

// profileCPU profiles this process's CPU into the file
// CDP_THROTTLE_CPUPROFILE names, with suffix added, ending the profile
// it wrote so far. A guardian moves its own to ".guardian" before it
// starts the relay, which writes the file named.
func profileCPU(suffix string) {
	f := os.Getenv("CDP_THROTTLE_CPUPROFILE")
	if f == "" {
		return
	}
	pprof.StopCPUProfile()
	if out, err := os.Create(f + suffix); err == nil {
		pprof.StartCPUProfile(out)
	}
}
