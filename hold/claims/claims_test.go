package claims

import (
	"context"
	"testing"
	"time"
)

// TestSet: a page claimed is a client's until forgotten; each claim is
// told once; a page whose creation is under way is waited for (Decide),
// and a wait that ends unsure says yes, so that politeness fails closed.
func TestSet(t *testing.T) {
	var s Set
	s.Init()
	var told []string
	s.OnClaim = func(target string) { told = append(told, target) }
	if s.Any() || s.Claimed("A") {
		t.Fatal("an empty set claims something")
	}
	s.Claim("A")
	s.Claim("A")
	s.Claim("")
	if !s.Claimed("A") || s.Claimed("B") || !s.Any() || len(told) != 1 {
		t.Fatalf("after claiming A: A %v, B %v, any %v, told %q", s.Claimed("A"), s.Claimed("B"), s.Any(), told)
	}
	s.Forget("A")
	if s.Claimed("A") || s.Any() {
		t.Fatal("A is still claimed once forgotten")
	}

	// A creation under way: B's first request waits to learn whose it is.
	s.Creating()
	if !s.Unsure() || !s.Any() {
		t.Fatal("a creation under way leaves the set sure, or empty")
	}
	decided := make(chan bool)
	go func() { decided <- s.Decide(context.Background(), "B") }()
	time.Sleep(20 * time.Millisecond)
	s.Created("B")
	if !<-decided || !s.Claimed("B") || s.Unsure() {
		t.Fatal("B, created while its request waited, is not the client's")
	}
	// Another page, while a creation goes on: not the client's once it
	// ends with another id, yes when the wait runs out unsure.
	s.Creating()
	go func() { decided <- s.Decide(context.Background(), "C") }()
	time.Sleep(20 * time.Millisecond)
	s.Created("D")
	if <-decided {
		t.Error("C is the client's, though the creation under way made D")
	}
	s.Creating()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if !s.Decide(ctx, "E") {
		t.Error("a wait that ran out unsure said no: politeness fails closed")
	}
	s.Created("")
}

// TestClaimAllAndBound: ClaimAll makes every page a client's; past Max
// pages the set starts over rather than grow.
func TestClaimAllAndBound(t *testing.T) {
	var s Set
	s.Init()
	for i := range Max + 1 {
		s.addLocked(string(rune(i)))
	}
	if n := len(s.pages); n > Max {
		t.Errorf("the set holds %d pages, want at most %d", n, Max)
	}
	var all Set
	all.Init()
	all.ClaimAll()
	if !all.Claimed("anything") || !all.Any() || !all.Decide(context.Background(), "x") {
		t.Error("ClaimAll does not claim every page")
	}
}
