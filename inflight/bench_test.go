package inflight

import (
	"context"
	"strconv"
	"testing"
)

// BenchmarkEnterLeave takes and gives back a place of a bucket that has
// one free: what every capped navigation pays in process.
func BenchmarkEnterLeave(b *testing.B) {
	c := &Cap{}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, _ := c.Enter(ctx, "example.com", 2)
		p.Leave()
	}
}

// BenchmarkEnterLeaveParallel does so from every core, each goroutine on
// hosts of its own.
func BenchmarkEnterLeaveParallel(b *testing.B) {
	c := &Cap{}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			p, _ := c.Enter(ctx, "host-"+strconv.Itoa(i%1024)+".example.com", 2)
			p.Leave()
		}
	})
}
