package resolve

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

var (
	site    = netip.MustParseAddr("127.0.0.2")
	other   = netip.MustParseAddr("10.0.0.7")
	errNX   = errors.New("no such host")
	nothing = netip.Addr{}
)

// fakeResolver answers from a map, counting lookups; a name it lacks is
// not found, and one in hang never answers before ctx ends.
type fakeResolver struct {
	addrs map[string]netip.Addr
	hang  map[string]bool
	n     atomic.Int32
}

func (f *fakeResolver) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	f.n.Add(1)
	if f.hang[host] {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if a, ok := f.addrs[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, errNX
}

func TestKey(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"127.0.0.2", "127.0.0.2"},
		{"::1", "[::1]"},
		{"2001:db8::1", "[2001:db8::1]"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"fe80::1%eth0", "[fe80::1]"},
	}
	for _, tt := range tests {
		if got := Key(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Key(%s): got %s, want %s", tt.addr, got, tt.want)
		}
	}
}

func TestLearnedExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Cache{Source: Browser}
		defer c.Close()
		c.Learn("a.test", site)
		if a, ok := c.Peek("a.test"); !ok || a != site {
			t.Fatalf("just learned: got %v, %v; want %v", a, ok, site)
		}
		time.Sleep(DefaultLearnedTTL - time.Second)
		if a, ok := c.Addr(context.Background(), "a.test"); !ok || a != site {
			t.Fatalf("a second before its TTL: got %v, %v; want %v", a, ok, site)
		}
		time.Sleep(time.Second)
		if a, ok := c.Addr(context.Background(), "a.test"); ok {
			t.Fatalf("at its TTL: got %v; want unknown", a)
		}
		if n := c.Len(); n != 0 {
			t.Errorf("expired names kept: got %d, want 0", n)
		}
	})
}

func TestBoundLRU(t *testing.T) {
	c := &Cache{Source: Browser, Size: 3}
	defer c.Close()
	for _, n := range []string{"a.test", "b.test", "c.test"} {
		c.Learn(n, site)
	}
	c.Peek("a.test") // used: b.test is now the least recently used
	c.Learn("d.test", other)
	if n := c.Len(); n != 3 {
		t.Errorf("got %d names, want 3", n)
	}
	for name, want := range map[string]bool{"a.test": true, "b.test": false, "c.test": true, "d.test": true} {
		if _, ok := c.Peek(name); ok != want {
			t.Errorf("%s known: got %v, want %v", name, ok, want)
		}
	}

	big := &Cache{Source: Browser}
	defer big.Close()
	for i := range DefaultSize + 500 {
		big.Learn("h"+strconv.Itoa(i)+".test", site)
	}
	if n := big.Len(); n != DefaultSize {
		t.Errorf("default bound: got %d names, want %d", n, DefaultSize)
	}
	if _, ok := big.Peek("h0.test"); ok {
		t.Error("the first name learned is still kept past the bound")
	}
}

func TestUnknownFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{addrs: map[string]netip.Addr{"a.test": site}}
		tests := []struct {
			name   string
			source Source
			host   string
			want   netip.Addr
			ok     bool
			looked int32
		}{
			{"browser only: never asks the resolver", Browser, "a.test", nothing, false, 0},
			{"resolver", Resolver, "a.test", site, true, 1},
			{"both, nothing learned yet", Both, "a.test", site, true, 1},
			{"does not resolve", Both, "d.invalid", nothing, false, 1},
			{"an address is its own", Both, "127.0.0.3", netip.MustParseAddr("127.0.0.3"), true, 0},
			{"an IPv6 address, as limiter.Key writes it", Both, "[::1]", netip.MustParseAddr("::1"), true, 0},
		}
		for _, tt := range tests {
			r.n.Store(0)
			c := &Cache{Source: tt.source, Lookup: r.lookup}
			got, ok := c.Addr(context.Background(), tt.host)
			if got != tt.want || ok != tt.ok || r.n.Load() != tt.looked {
				t.Errorf("%s: got %v, %v after %d lookups; want %v, %v after %d", tt.name, got, ok, r.n.Load(), tt.want, tt.ok, tt.looked)
			}
			c.Close()
		}
	})
}

func TestBrowserWinsOverResolver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{addrs: map[string]netip.Addr{"a.test": other}}
		c := &Cache{Lookup: r.lookup}
		defer c.Close()
		if a, _ := c.Addr(context.Background(), "a.test"); a != other {
			t.Fatalf("resolver: got %v, want %v", a, other)
		}
		c.Learn("a.test", site)
		if a, _ := c.Addr(context.Background(), "a.test"); a != site {
			t.Errorf("after the browser connected elsewhere: got %v, want %v", a, site)
		}
		time.Sleep(DefaultLookupTTL) // a resolver answer would be gone; the browser's is not
		if a, _ := c.Addr(context.Background(), "a.test"); a != site || r.n.Load() != 1 {
			t.Errorf("a minute later: got %v after %d lookups, want %v after 1", a, r.n.Load(), site)
		}

		rc := &Cache{Source: Resolver, Lookup: r.lookup}
		defer rc.Close()
		rc.Learn("a.test", site)
		if a, _ := rc.Addr(context.Background(), "a.test"); a != other {
			t.Errorf("source resolver learns nothing from the browser: got %v, want %v", a, other)
		}
	})
}

func TestResolverAnswersKeptForTheirTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{addrs: map[string]netip.Addr{"a.test": site}}
		c := &Cache{Lookup: r.lookup}
		defer c.Close()
		c.Addr(context.Background(), "a.test")
		time.Sleep(DefaultLookupTTL - time.Second)
		c.Addr(context.Background(), "a.test")
		if n := r.n.Load(); n != 1 {
			t.Errorf("within its TTL: got %d lookups, want 1", n)
		}
		time.Sleep(time.Second)
		c.Addr(context.Background(), "a.test")
		if n := r.n.Load(); n != 2 {
			t.Errorf("at its TTL: got %d lookups, want 2", n)
		}
	})
}

func TestHangingLookupIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{hang: map[string]bool{"slow.test": true}}
		c := &Cache{Lookup: r.lookup}
		defer c.Close()
		steps := []struct {
			after  time.Duration // sleep before the step
			waited time.Duration // how long Addr takes
			looked int32         // lookups started so far
		}{
			{0, DefaultWait, 1},                 // the first navigation waits the bound, no longer
			{0, 0, 1},                           // the next does not wait for the same lookup
			{DefaultLookupTimeout / 2, 0, 1},    // nor while it runs on
			{DefaultLookupTimeout / 2, 0, 1},    // it timed out: unknown for UnknownTTL
			{DefaultUnknownTTL, DefaultWait, 2}, // then asked again, bounded again
			{DefaultLookupTimeout + DefaultUnknownTTL - 2*time.Second, 0, 2}, // unknown still: UnknownTTL from the lookup's end
		}
		for i, s := range steps {
			time.Sleep(s.after)
			start := time.Now()
			a, ok := c.Addr(context.Background(), "slow.test")
			if ok || time.Since(start) != s.waited || r.n.Load() != s.looked {
				t.Errorf("step %d: got %v, %v after %v and %d lookups; want unknown after %v and %d", i, a, ok, time.Since(start), r.n.Load(), s.waited, s.looked)
			}
		}
	})
}

func TestLateAnswerServesLaterNavigations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		c := &Cache{Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			<-release
			return []netip.Addr{site}, nil
		}}
		defer c.Close()
		if _, ok := c.Addr(context.Background(), "a.test"); ok {
			t.Fatal("known before the resolver answered")
		}
		close(release)
		synctest.Wait()
		if a, ok := c.Addr(context.Background(), "a.test"); !ok || a != site {
			t.Errorf("after a late answer: got %v, %v; want %v", a, ok, site)
		}
	})
}

func TestNegativeCaching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{}
		c := &Cache{Lookup: r.lookup}
		defer c.Close()
		for range 5 {
			if _, ok := c.Addr(context.Background(), "d.invalid"); ok {
				t.Fatal("d.invalid resolved")
			}
		}
		if n := r.n.Load(); n != 1 {
			t.Errorf("five navigations: got %d lookups, want 1", n)
		}
		time.Sleep(DefaultUnknownTTL)
		c.Addr(context.Background(), "d.invalid")
		if n := r.n.Load(); n != 2 {
			t.Errorf("after UnknownTTL: got %d lookups, want 2", n)
		}
		// The browser reaching it after all is news.
		c.Learn("d.invalid", site)
		if a, ok := c.Addr(context.Background(), "d.invalid"); !ok || a != site {
			t.Errorf("learned after a failed lookup: got %v, %v; want %v", a, ok, site)
		}
	})
}

func TestContextEndsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{hang: map[string]bool{"slow.test": true}}
		c := &Cache{Lookup: r.lookup}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, ok := c.Addr(ctx, "slow.test"); ok || time.Since(start) != 100*time.Millisecond {
			t.Errorf("got %v after %v; want unknown after 100ms", ok, time.Since(start))
		}
	})
}

func TestCloseEndsLookups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{hang: map[string]bool{"slow.test": true}}
		c := &Cache{Lookup: r.lookup, Wait: time.Millisecond}
		c.Addr(context.Background(), "slow.test")
		c.Close() // returns: the hanging lookup saw its context end
		if _, ok := c.Addr(context.Background(), "other.test"); ok || r.n.Load() != 1 {
			t.Errorf("after Close: got %v after %d lookups; want unknown after 1", ok, r.n.Load())
		}
	})
}

func TestRules(t *testing.T) {
	rules, err := ParseRules("MAP *.test 127.0.0.2, EXCLUDE keep.test,MAP alias.example real.example:443, MAP gone.example ~NOTFOUND, MAP v6.example [::1]:8080, MAP *.port:8080 10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, to string
		ok       bool
	}{
		{"a.test", "127.0.0.2", true},
		{"A.TEST", "", false}, // names reach it lower-cased, as limiter.Key writes them
		{"keep.test", "", false},
		{"alias.example", "real.example", true},
		{"gone.example", "~NOTFOUND", true},
		{"v6.example", "::1", true},
		{"x.port", "", false},
		{"example.com", "", false},
	}
	for _, tt := range tests {
		if to, ok := rules.Map(tt.name); to != tt.to || ok != tt.ok {
			t.Errorf("Map(%s): got %q, %v; want %q, %v", tt.name, to, ok, tt.to, tt.ok)
		}
	}
	for _, bad := range []string{"MAP *.test", "REWRITE a b", "EXCLUDE"} {
		if _, err := ParseRules(bad); err == nil {
			t.Errorf("ParseRules(%q): no error", bad)
		}
	}

	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{addrs: map[string]netip.Addr{"real.example": other}}
		c := &Cache{Lookup: r.lookup, Rules: rules}
		defer c.Close()
		for _, tt := range []struct {
			name string
			want netip.Addr
			ok   bool
		}{
			{"a.test", site, true},
			{"alias.example", other, true},
			{"gone.example", nothing, false},
			{"v6.example", netip.MustParseAddr("::1"), true},
		} {
			if a, ok := c.Addr(context.Background(), tt.name); a != tt.want || ok != tt.ok {
				t.Errorf("Addr(%s): got %v, %v; want %v, %v", tt.name, a, ok, tt.want, tt.ok)
			}
		}
		if a, ok := c.Peek("a.test"); !ok || a != site {
			t.Errorf("Peek(a.test) by the rules: got %v, %v; want %v", a, ok, site)
		}
		if n := r.n.Load(); n != 1 {
			t.Errorf("got %d lookups, want 1 (real.example's)", n)
		}
	})
}

// TestOneLookupPerName: navigations to a name asked for at once share one
// lookup.
func TestOneLookupPerName(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		c := &Cache{Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			n.Add(1)
			time.Sleep(100 * time.Millisecond)
			return []netip.Addr{site}, nil
		}}
		defer c.Close()
		var wg sync.WaitGroup
		var wrong atomic.Int32
		for range 50 {
			wg.Go(func() {
				if a, ok := c.Addr(context.Background(), "a.test"); !ok || a != site {
					wrong.Add(1)
				}
			})
		}
		wg.Wait()
		if n.Load() != 1 || wrong.Load() != 0 {
			t.Errorf("50 at once: %d lookups, %d without the address; want 1 and 0", n.Load(), wrong.Load())
		}
	})
}

func TestFitBrowser(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		sourceSet bool
		source    Source
		a         string // what a.test maps to, "" for nothing
		note      string // a part of the note, "" for none
	}{
		{"nothing", []string{"chromium", "--headless"}, nil, false, Both, "", ""},
		{"resolver rules", []string{"chromium", "--host-resolver-rules=MAP *.test 127.0.0.2"}, nil, false, Both, "127.0.0.2", ""},
		{"--host-resolver-rules wins over --host-rules", []string{"chromium", "--host-resolver-rules=MAP *.test 127.0.0.2", "--host-rules=MAP *.test 127.0.0.3"}, nil, false, Both, "127.0.0.2", ""},
		{"whichever comes first", []string{"chromium", "--host-rules=MAP *.test 127.0.0.3", "--host-resolver-rules=MAP *.test 127.0.0.2"}, nil, false, Both, "127.0.0.2", ""},
		{"a proxy", []string{"chromium", "--proxy-pac-url=http://p/pac"}, nil, false, Resolver, "", "resolver only"},
		{"a proxy, the source chosen", []string{"chromium", "--proxy-server=p:1"}, nil, true, Both, "", "shares one schedule"},
		{"a proxy in the environment", []string{"chromium"}, map[string]string{"ALL_PROXY": "socks5://p:1"}, false, Resolver, "", "$ALL_PROXY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cache{SourceSet: tt.sourceSet}
			note, err := c.FitBrowser(tt.args, func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			to, _ := c.Rules.Map("a.test")
			if c.Source != tt.source || to != tt.a || tt.note == "" && note != "" || !strings.Contains(note, tt.note) {
				t.Errorf("got source %v, a.test → %q, note %q; want %v, %q, one with %q", c.Source, to, note, tt.source, tt.a, tt.note)
			}
		})
	}
	if _, err := (&Cache{}).FitBrowser([]string{"--host-resolver-rules=MAP only-two"}, nil); err == nil {
		t.Error("bad rules: no error")
	}
}
