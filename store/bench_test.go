package store

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdp-throttle/cdp-throttle/breaker"
	"github.com/cdp-throttle/cdp-throttle/limiter"
)

// benchStore is a store on a redis-server of the benchmark's own, with the
// default timeout: what a relay runs.
func benchStore(b *testing.B, cfg limiter.Config) *Redis {
	b.Helper()
	srv := startRedis(b)
	s, err := NewRedis(b.Context(), srv.URL(), cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// report adds the share of calls that missed the default timeout and were
// answered by the local limiter instead: a benchmark with many of them
// measured the fallback, not Redis.
func report(b *testing.B, s *Redis) {
	b.ReportMetric(float64(s.Fallbacks())/float64(b.N), "fallbacks/op")
}

// BenchmarkReserve books slots on one host through Redis, one call at a
// time: the round trip and the script every navigation pays.
func BenchmarkReserve(b *testing.B) {
	s := benchStore(b, limiter.Config{})
	b.ReportAllocs()
	for b.Loop() {
		s.Reserve("example.com", time.Now())
	}
	report(b, s)
}

// BenchmarkBreakerAllow asks a closed breaker whether a navigation may
// go, one call at a time: what --host-errors adds to every navigation's
// booking with --store, a round trip of its own beside BenchmarkReserve's.
func BenchmarkBreakerAllow(b *testing.B) {
	s := benchStore(b, limiter.Config{})
	br := s.Breaker(breaker.Config{Failures: 5, Window: time.Minute}, limiter.NewRand(1))
	b.ReportAllocs()
	for b.Loop() {
		if !br.Allow("example.com", time.Now()).Go {
			b.Fatal("a closed breaker refused")
		}
	}
	report(b, s)
}

// BenchmarkReserveParallel books slots from every core at once, each
// goroutine a crawl worker with hosts of its own, through one store.
func BenchmarkReserveParallel(b *testing.B) {
	s := benchStore(b, limiter.Config{})
	var worker atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := strconv.FormatInt(worker.Add(1), 10)
		for i := 0; pb.Next(); i++ {
			s.Reserve("host-"+w+"-"+strconv.Itoa(i%1024)+".example.com", time.Now())
		}
	})
	report(b, s)
}

// BenchmarkReserveOneHostParallel books one host from every core at once:
// the worst case, every step on the same key.
func BenchmarkReserveOneHostParallel(b *testing.B) {
	s := benchStore(b, limiter.Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Reserve("example.com", time.Now())
		}
	})
	report(b, s)
}

// BenchmarkObserve feeds a 503 back through Redis. Answers that change
// nothing (a 200) never reach Redis.
func BenchmarkObserve(b *testing.B) {
	s := benchStore(b, limiter.Config{})
	b.ReportAllocs()
	for b.Loop() {
		s.Observe("example.com", limiter.Outcome{Status: 503}, time.Now())
	}
	report(b, s)
}

// BenchmarkReserveRedisDown books while Redis is gone: the local fallback
// plus the check that it is not yet time to probe.
func BenchmarkReserveRedisDown(b *testing.B) {
	srv := startRedis(b)
	s, err := NewRedis(b.Context(), srv.URL(), limiter.Config{}, Options{ProbeInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	srv.stop()
	s.Reserve("example.com", time.Now()) // notices the outage
	if s.Outages() != 1 {
		b.Fatalf("outages: got %d, want 1", s.Outages())
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Reserve("example.com", time.Now())
	}
}

// BenchmarkInflightEnterLeave takes and gives back a place in flight in
// Redis, one call each: what a capped navigation pays with --store.
func BenchmarkInflightEnterLeave(b *testing.B) {
	s := benchStore(b, limiter.Config{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := strconv.Itoa(i)
		i++
		s.Enter("example.com", id, 2)
		s.Leave("example.com", id)
	}
	report(b, s)
}
