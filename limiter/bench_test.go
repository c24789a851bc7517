package limiter

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkReserveKnownHost books slots on one host that is already
// remembered: the cost every navigation to a busy host pays.
func BenchmarkReserveKnownHost(b *testing.B) {
	l := New(Config{})
	now := time.Now()
	l.Reserve("example.com", now)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.Reserve("example.com", now.Add(time.Duration(i)*time.Millisecond))
	}
}

// BenchmarkObserve feeds a 200 answer back: the common case, which changes nothing.
func BenchmarkObserve(b *testing.B) {
	l := New(Config{})
	now := time.Now()
	l.Reserve("example.com", now)
	b.ReportAllocs()
	for b.Loop() {
		l.Observe("example.com", Outcome{Status: 503}, now)
	}
}

// BenchmarkMillionHosts remembers a million distinct hosts, none idle yet,
// and reports the heap each one costs.
func BenchmarkMillionHosts(b *testing.B) {
	const hosts = 1_000_000
	names := make([]string, hosts)
	for i := range names {
		names[i] = "host-" + strconv.Itoa(i) + ".example.com"
	}
	var perHost float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		l := New(Config{})
		now := time.Now()
		for _, n := range names {
			l.Reserve(n, now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if l.Len() != hosts {
			b.Fatalf("Len: got %d, want %d", l.Len(), hosts)
		}
		perHost = float64(after.HeapAlloc-before.HeapAlloc) / hosts
		runtime.KeepAlive(l)
	}
	b.ReportMetric(perHost, "B/host")
}

// BenchmarkReserveParallel books slots from every core at once, each
// goroutine a crawl worker with its own 1,024 hosts. Compare ns/op at -cpu 1
// and -cpu 2: with no lock shared between hosts it halves.
func BenchmarkReserveParallel(b *testing.B) {
	l := New(Config{})
	now := time.Now()
	const workers, hosts = 8, 1024
	names := make([][]string, workers)
	for w := range names {
		names[w] = make([]string, hosts)
		for i := range names[w] {
			names[w][i] = "host-" + strconv.Itoa(w) + "-" + strconv.Itoa(i) + ".example.com"
			l.Reserve(names[w][i], now)
		}
	}
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mine := names[int(worker.Add(1)-1)%workers]
		for i := 0; pb.Next(); i++ {
			l.Reserve(mine[i%hosts], now)
		}
	})
}
