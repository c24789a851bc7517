package ownership

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cdp-throttle/cdp-throttle/cdp"
)

const timeout = 30 * time.Second

// closed records what a Registry hands to Close.
type closed struct {
	mu  sync.Mutex
	got []Leftovers
}

func (c *closed) close(l Leftovers) {
	slices.Sort(l.Pages)
	slices.Sort(l.Contexts)
	c.mu.Lock()
	c.got = append(c.got, l)
	c.mu.Unlock()
}

func (c *closed) all() []Leftovers {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func newRegistry(t *testing.T, d time.Duration) (*Registry, *closed) {
	t.Helper()
	cl := &closed{}
	r := &Registry{Timeout: d, Close: cl.close}
	t.Cleanup(r.Stop)
	return r, cl
}

// client plays one client connection's messages into a Conn.
type client struct {
	t  *testing.T
	c  *Conn
	id int64
}

func join(t *testing.T, r *Registry, n uint64) *client {
	return &client{t: t, c: r.Join(n)}
}

func scan(t *testing.T, msg string) *cdp.Header {
	t.Helper()
	hd, err := cdp.Scan([]byte(msg))
	if err != nil {
		t.Fatalf("scanning %s: %v", msg, err)
	}
	return &hd
}

// call sends a command on session and answers it with result (an error
// when result is "").
func (cl *client) call(session, method, params, result string) {
	cl.t.Helper()
	cl.id++
	s := ""
	if session != "" {
		s = fmt.Sprintf(`,"sessionId":%q`, session)
	}
	cl.c.FromClient(scan(cl.t, fmt.Sprintf(`{"id":%d,"method":%q,"params":%s%s}`, cl.id, method, params, s)))
	reply := fmt.Sprintf(`{"id":%d,"result":%s%s}`, cl.id, result, s)
	if result == "" {
		reply = fmt.Sprintf(`{"id":%d,"error":{"code":-32000,"message":"no"}%s}`, cl.id, s)
	}
	wanted := cl.c.Wants([]byte(reply))
	if target := strings.HasPrefix(method, "Target."); wanted != target {
		cl.t.Fatalf("the answer to %s wanted: %v, want %v", method, wanted, target)
	}
	if wanted {
		cl.c.FromBrowser(scan(cl.t, reply), []byte(reply))
	}
}

func (cl *client) event(method, params string) {
	cl.t.Helper()
	msg := fmt.Sprintf(`{"method":%q,"params":%s}`, method, params)
	if !cl.c.Wants([]byte(msg)) {
		// Only a change to a page already settled goes by unread.
		if method != "Target.targetCreated" && method != "Target.targetInfoChanged" {
			cl.t.Fatalf("%s is not wanted", method)
		}
		return
	}
	cl.c.FromBrowser(scan(cl.t, msg), []byte(msg))
}

// attached announces session s attached to page target in context ctx.
func (cl *client) attached(s, target, ctx string) {
	cl.event("Target.attachedToTarget", fmt.Sprintf(`{"sessionId":%q,"targetInfo":{"targetId":%q,"type":"page","browserContextId":%q},"waitingForDebugger":false}`, s, target, ctx))
}

func (cl *client) newPage(target, ctx string) {
	params := `{"url":"about:blank"}`
	if ctx != "" {
		params = fmt.Sprintf(`{"url":"about:blank","browserContextId":%q}`, ctx)
	}
	cl.call("", "Target.createTarget", params, fmt.Sprintf(`{"targetId":%q}`, target))
}

func (cl *client) newContext(ctx string) {
	cl.call("", "Target.createBrowserContext", `{}`, fmt.Sprintf(`{"browserContextId":%q}`, ctx))
}

func (cl *client) drive(session string) {
	cl.call(session, "Runtime.evaluate", `{"expression":"1"}`, `{"result":{"type":"number","value":1}}`)
}

func TestOrphans(t *testing.T) {
	tests := []struct {
		name string
		play func(t *testing.T, r *Registry)
		want []Leftovers // what Close got, in order
	}{
		{
			name: "what a client created is closed once it has been gone the timeout",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.newPage("P1", "")
				a.newContext("C1")
				a.newPage("P2", "C1")
				a.c.Leave()
			},
			want: []Leftovers{{Client: 1, Pages: []string{"P1", "P2"}, Contexts: []string{"C1"}}},
		},
		{
			name: "a client that drives a page it did not create leaves it to the browser",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.attached("S0", "P0", "")
				a.drive("S0")
				a.c.Leave()
			},
		},
		{
			name: "another connection that drives the page takes it over, with its context",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.newContext("C1")
				a.newPage("P1", "C1")
				a.newPage("P2", "")
				a.c.Leave()
				b := join(t, r, 2)
				b.attached("S1", "P1", "C1")
				b.attached("S2", "P2", "")
				b.drive("S1")
				time.Sleep(2 * timeout) // P2 goes; P1 and C1 are b's now
				b.c.Leave()
			},
			want: []Leftovers{{Client: 1, Pages: []string{"P2"}}, {Client: 2, Pages: []string{"P1"}, Contexts: []string{"C1"}}},
		},
		{
			name: "attaching and setting a page up is not taking it over",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.newPage("P1", "")
				a.c.Leave()
				b := join(t, r, 2)
				b.attached("S1", "P1", "")
				b.call("S1", "Runtime.runIfWaitingForDebugger", `{}`, `{}`)
				b.call("S1", "Page.enable", `{}`, `{}`)
				b.call("S1", "Page.getFrameTree", `{}`, `{"frameTree":{}}`)
			},
			want: []Leftovers{{Client: 1, Pages: []string{"P1"}}},
		},
		{
			name: "attaching explicitly takes a page over",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.newPage("P1", "")
				a.c.Leave()
				b := join(t, r, 2)
				b.call("", "Target.attachToTarget", `{"targetId":"P1","flatten":true}`, `{"sessionId":"S1"}`)
			},
		},
		{
			name: "an attach the browser refused takes nothing over",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.newPage("P1", "")
				a.c.Leave()
				b := join(t, r, 2)
				b.call("", "Target.attachToTarget", `{"targetId":"P1","flatten":true}`, "")
			},
			want: []Leftovers{{Client: 1, Pages: []string{"P1"}}},
		},
		{
			name: "a page taken over before its creator left stays with the other one",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				b := join(t, r, 2)
				a.newPage("P1", "")
				b.attached("S1", "P1", "")
				b.drive("S1")
				a.c.Leave()
			},
		},
		{
			name: "popups of a client's pages are its own",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				b := join(t, r, 2)
				a.newPage("P1", "")
				ev := `{"targetInfo":{"targetId":"P9","type":"page","openerId":"P1","browserContextId":"D"}}`
				a.event("Target.targetCreated", ev)
				b.event("Target.targetCreated", ev) // b discovers targets too
				a.c.Leave()
				b.c.Leave()
			},
			want: []Leftovers{{Client: 1, Pages: []string{"P1", "P9"}}},
		},
		{
			name: "what is gone already is not closed again",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.newPage("P1", "")
				a.newPage("P2", "")
				a.newPage("P3", "")
				a.newContext("C1")
				a.newContext("C2")
				a.event("Target.targetDestroyed", `{"targetId":"P1"}`)
				a.call("", "Target.closeTarget", `{"targetId":"P2"}`, `{"success":true}`)
				a.call("", "Target.disposeBrowserContext", `{"browserContextId":"C1"}`, `{}`)
				a.c.Leave()
			},
			want: []Leftovers{{Client: 1, Pages: []string{"P3"}, Contexts: []string{"C2"}}},
		},
		{
			name: "a creation the browser refused owns nothing",
			play: func(t *testing.T, r *Registry) {
				a := join(t, r, 1)
				a.call("", "Target.createTarget", `{"url":"about:blank"}`, "")
				a.c.Leave()
			},
		},
		{
			name: "a page opened for no connection is closed unless one takes it",
			play: func(t *testing.T, r *Registry) {
				r.Opened("P1")
				r.Opened("P2")
				b := join(t, r, 2)
				b.c.Claim("P2") // its own socket
			},
			want: []Leftovers{{Client: 0, Pages: []string{"P1"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, cl := newRegistry(t, timeout)
				tt.play(t, r)
				time.Sleep(2 * timeout)
				synctest.Wait()
				if got := cl.all(); !equalLeftovers(got, tt.want) {
					t.Errorf("closed %v, want %v", got, tt.want)
				}
			})
		})
	}
}

func equalLeftovers(a, b []Leftovers) bool {
	return slices.EqualFunc(a, b, func(x, y Leftovers) bool {
		return x.Client == y.Client && slices.Equal(x.Pages, y.Pages) && slices.Equal(x.Contexts, y.Contexts)
	})
}

// TestNotBeforeTheTimeout checks what a client left stays until the
// timeout, to the nanosecond.
func TestNotBeforeTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, cl := newRegistry(t, timeout)
		a := join(t, r, 1)
		a.newPage("P1", "")
		time.Sleep(time.Minute) // how long it was connected does not count
		a.c.Leave()
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if got := cl.all(); len(got) != 0 {
			t.Fatalf("closed %v before the timeout", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got, want := cl.all(), []Leftovers{{Client: 1, Pages: []string{"P1"}}}; !equalLeftovers(got, want) {
			t.Errorf("closed %v at the timeout, want %v", got, want)
		}
		if n := r.Len(); n != 0 {
			t.Errorf("registry remembers %d items after closing them, want 0", n)
		}
	})
}

func TestKeepAndStop(t *testing.T) {
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		stop    bool
	}{
		{name: "timeout 0 keeps what clients leave", timeout: 0},
		{name: "negative keeps too", timeout: -1},
		{name: "stopped before the timeout", timeout: timeout, stop: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, cl := newRegistry(t, tt.timeout)
				a := join(t, r, 1)
				a.newPage("P1", "")
				a.newContext("C1")
				a.c.Leave()
				r.Opened("P2")
				if tt.timeout <= 0 && r.Len() != 0 {
					t.Errorf("registry remembers %d items, want none: nothing will be closed", r.Len())
				}
				if tt.stop {
					r.Stop()
				}
				time.Sleep(time.Hour)
				synctest.Wait()
				if got := cl.all(); len(got) != 0 {
					t.Errorf("closed %v, want nothing", got)
				}
			})
		})
	}
}

func TestCloseAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, cl := newRegistry(t, timeout)
		a := join(t, r, 1)
		b := join(t, r, 2)
		a.newPage("P1", "")
		a.newContext("C1")
		a.newPage("P2", "C1")
		a.attached("S0", "P0", "") // a page it did not create, and drives
		a.drive("S0")
		a.newPage("P3", "")
		b.attached("S3", "P3", "") // b drives a's page too: it stays b's
		b.drive("S3")
		b.newContext("C2")
		b.newPage("P4", "C2")

		got := a.c.CloseAll()
		slices.Sort(got.Pages)
		if want := (Leftovers{Client: 1, Pages: []string{"P0", "P1", "P2"}, Contexts: []string{"C1"}}); !equalLeftovers([]Leftovers{got}, []Leftovers{want}) {
			t.Errorf("CloseAll: %v, want %v", got, want)
		}
		if again := a.c.CloseAll(); !again.Empty() {
			t.Errorf("CloseAll again: %v, want nothing", again)
		}
		a.c.Leave()         // the pair ends after CloseAll: nothing left to orphan
		a.newPage("P5", "") // an answer that arrives after it: not a's
		time.Sleep(2 * timeout)
		synctest.Wait()
		if got := cl.all(); len(got) != 0 {
			t.Errorf("closed %v after CloseAll, want nothing", got)
		}
		b.c.Leave()
		time.Sleep(2 * timeout)
		synctest.Wait()
		if got, want := cl.all(), []Leftovers{{Client: 2, Pages: []string{"P3", "P4"}, Contexts: []string{"C2"}}}; !equalLeftovers(got, want) {
			t.Errorf("closed %v once b left, want %v", got, want)
		}
	})
}

// TestWaitDetached checks that the end of a closed browser waits for the
// detachment of the client's sessions on what it closed, and of no
// other.
func TestWaitDetached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, _ := newRegistry(t, timeout)
		a := join(t, r, 1)
		a.newPage("P1", "")
		a.newContext("C1")
		a.newPage("P2", "C1")
		a.attached("S1", "P1", "")
		a.attached("S2", "P2", "C1")
		a.attached("S9", "P9", "") // another client's page, which stays
		l := a.c.CloseAll()
		done := make(chan bool, 1)
		go func() { done <- a.c.WaitDetached(nil, l) }()
		for _, s := range []string{"S1", "S2"} {
			synctest.Wait()
			select {
			case <-done:
				t.Fatalf("the wait ended before %s detached", s)
			default:
			}
			a.event("Target.detachedFromTarget", fmt.Sprintf(`{"sessionId":%q,"targetId":"x"}`, s))
		}
		if !<-done {
			t.Error("WaitDetached: false once both sessions detached, want true")
		}
		a.attached("S3", "P1", "")
		stop := make(chan struct{})
		close(stop)
		if a.c.WaitDetached(stop, l) {
			t.Error("WaitDetached: true with a session still attached, want false once done")
		}
	})
}

func TestWants(t *testing.T) {
	r, _ := newRegistry(t, timeout)
	c := r.Join(1)
	for _, tt := range []struct {
		msg  string
		want bool
	}{
		{`{"method":"Target.attachedToTarget","params":{}}`, true},
		{`{"method":"Network.requestWillBeSent","params":{}}`, false},
		{`{"id":3,"result":{}}`, false},
		{`{"result":{},"id":3}`, true}, // not Chromium's order: looked at
	} {
		if got := c.Wants([]byte(tt.msg)); got != tt.want {
			t.Errorf("Wants(%s) = %v, want %v", tt.msg, got, tt.want)
		}
	}
	c.FromClient(scan(t, `{"id":3,"method":"Target.createTarget","params":{"url":"about:blank"}}`))
	if !c.Wants([]byte(`{"id":3,"result":{}}`)) {
		t.Errorf("an answer is not wanted while a Target command is under way")
	}
}

// TestWantsSettled: a change to a page known with its browser context is
// told from its first bytes and not wanted; any other Target event is.
func TestWantsSettled(t *testing.T) {
	r, _ := newRegistry(t, timeout)
	a := join(t, r, 1)
	a.newPage("P1", "")
	info := func(target, ctx string) string { // as Chromium writes it
		return fmt.Sprintf(`{"targetInfo":{"targetId":%q,"type":"page","title":"t","url":"http://a.test/","attached":true,"canAccessOpener":false,"browserContextId":%q}}`, target, ctx)
	}
	changed := func(method, target, ctx string) string {
		return fmt.Sprintf(`{"method":%q,"params":%s}`, method, info(target, ctx))
	}
	// P1 is known, its context not yet: the change says which it is.
	if !a.c.Wants([]byte(changed("Target.targetInfoChanged", "P1", "C1"))) {
		t.Fatal("a change to a page whose context is not known yet is not wanted")
	}
	a.event("Target.targetInfoChanged", info("P1", "C1"))
	for _, tt := range []struct {
		name, msg string
		want      bool
	}{
		{"a change to a settled page", changed("Target.targetInfoChanged", "P1", "C1"), false},
		{"a settled page created again", changed("Target.targetCreated", "P1", "C1"), false},
		{"a change to a page not known", changed("Target.targetInfoChanged", "P2", "C1"), true},
		{"a settled page destroyed", `{"method":"Target.targetDestroyed","params":{"targetId":"P1"}}`, true},
		{"a settled page attached", `{"method":"Target.attachedToTarget","params":{"sessionId":"S","targetInfo":{"targetId":"P1","type":"page","browserContextId":"C1"},"waitingForDebugger":false}}`, true},
		{"not Chromium's order", `{"method":"Target.targetInfoChanged","params":{"targetInfo":{"type":"page","targetId":"P1","browserContextId":"C1"}}}`, true},
		{"params not first", `{"method":"Target.targetInfoChanged","sessionId":"S","params":{"targetInfo":{"targetId":"P1","browserContextId":"C1"}}}`, true},
		{"an escaped id", `{"method":"Target.targetInfoChanged","params":{"targetInfo":{"targetId":"P\u0031","browserContextId":"C1"}}}`, true},
	} {
		if got := a.c.Wants([]byte(tt.msg)); got != tt.want {
			t.Errorf("%s: Wants = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestBounded checks a connection remembers a bounded number of pages.
func TestBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, cl := newRegistry(t, timeout)
		a := join(t, r, 1)
		for i := range maxTracked + 10 {
			a.newPage(fmt.Sprint("P", i), "")
		}
		if n := r.Len(); n != maxTracked {
			t.Errorf("registry remembers %d pages, want %d", n, maxTracked)
		}
		a.c.Leave()
		time.Sleep(2 * timeout)
		synctest.Wait()
		if got := cl.all(); len(got) != 1 || len(got[0].Pages) != maxTracked {
			t.Errorf("closed %d batches, want one of %d pages", len(got), maxTracked)
		}
	})
}
