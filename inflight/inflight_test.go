package inflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// entered records the order in which navigations got their places.
type entered struct {
	start time.Time // when the test began
	mu    sync.Mutex
	order []string
	at    map[string]time.Duration // since start
	place map[string]*Place
	errs  map[string]error
}

// newEntered records from now on: the test begins when it is called.
func newEntered() *entered {
	return &entered{start: time.Now(), at: map[string]time.Duration{}, place: map[string]*Place{}, errs: map[string]error{}}
}

// enter starts navigation name's Enter and waits until it has either its
// place or its turn to wait (synctest.Wait: every goroutine blocked).
func (e *entered) enter(ctx context.Context, c *Cap, name, bucket string, limit int) {
	go func() {
		p, err := c.Enter(ctx, bucket, limit)
		e.mu.Lock()
		defer e.mu.Unlock()
		if err != nil {
			e.errs[name] = err
			return
		}
		e.order = append(e.order, name)
		e.at[name] = time.Since(e.start)
		e.place[name] = p
	}()
	synctest.Wait()
}

func (e *entered) got() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.order)
}

// placeOf is name's place, nil while it has none.
func (e *entered) placeOf(name string) *Place {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.place[name]
}

func (e *entered) leave(name string) {
	e.mu.Lock()
	p := e.place[name]
	e.mu.Unlock()
	p.Leave()
	synctest.Wait()
}

// TestCapOrder: a table of steps, each an Enter or a Leave at an instant,
// with the navigations that have a place after it, in the order they got
// one.
func TestCapOrder(t *testing.T) {
	type step struct {
		at    time.Duration
		enter string // navigation entering (bucket: its first letter)
		limit int
		leave string // navigation giving its place back
		want  []string
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"under the cap nobody waits", []step{
			{0, "a1", 2, "", []string{"a1"}},
			{0, "a2", 2, "", []string{"a1", "a2"}},
		}},
		{"over the cap waits, in arrival order", []step{
			{0, "a1", 1, "", []string{"a1"}},
			{1 * time.Millisecond, "a2", 1, "", []string{"a1"}},
			{2 * time.Millisecond, "a3", 1, "", []string{"a1"}},
			{3 * time.Millisecond, "a4", 1, "", []string{"a1"}},
			{10 * time.Millisecond, "", 0, "a1", []string{"a1", "a2"}},
			{20 * time.Millisecond, "", 0, "a2", []string{"a1", "a2", "a3"}},
			{30 * time.Millisecond, "", 0, "a3", []string{"a1", "a2", "a3", "a4"}},
		}},
		{"a later navigation never overtakes, whatever its cap", []step{
			{0, "a1", 1, "", []string{"a1"}},
			{0, "a2", 1, "", []string{"a1"}},
			{0, "a3", 5, "", []string{"a1"}}, // its rule allows 5, but a2 is first in line
			{5 * time.Millisecond, "", 0, "a1", []string{"a1", "a2", "a3"}},
		}},
		{"buckets are independent", []step{
			{0, "a1", 1, "", []string{"a1"}},
			{0, "a2", 1, "", []string{"a1"}},
			{0, "b1", 1, "", []string{"a1", "b1"}},
			{0, "", 0, "b1", []string{"a1", "b1"}},
			{0, "", 0, "a1", []string{"a1", "b1", "a2"}},
		}},
		{"a place given back twice counts once", []step{
			{0, "a1", 1, "", []string{"a1"}},
			{0, "a2", 1, "", []string{"a1"}},
			{0, "a3", 1, "", []string{"a1"}},
			{1 * time.Millisecond, "", 0, "a1", []string{"a1", "a2"}},
			{2 * time.Millisecond, "", 0, "a1", []string{"a1", "a2"}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &Cap{}
				defer c.Close()
				e := newEntered()
				for i, s := range tc.steps {
					time.Sleep(s.at - time.Since(e.start))
					if s.enter != "" {
						e.enter(t.Context(), c, s.enter, s.enter[:1], s.limit)
					}
					if s.leave != "" {
						e.leave(s.leave)
					}
					if got := e.got(); !slices.Equal(got, s.want) {
						t.Fatalf("step %d: got places %v, want %v", i, got, s.want)
					}
				}
			})
		})
	}
}

// TestCapWaited: a place records how long its navigation waited for it.
func TestCapWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Cap{}
		defer c.Close()
		e := newEntered()
		e.enter(t.Context(), c, "a1", "a", 1)
		e.enter(t.Context(), c, "a2", "a", 1)
		time.Sleep(800 * time.Millisecond)
		e.leave("a1")
		if w := e.place["a1"].Waited; w != 0 {
			t.Errorf("a1 waited %v, want 0", w)
		}
		if w := e.place["a2"].Waited; w != 800*time.Millisecond {
			t.Errorf("a2 waited %v, want 800ms", w)
		}
	})
}

// slowTable takes a while to take a place, as a shared store does: the
// first in line is still taking its place when the next one arrives.
type slowTable struct {
	*table
	took chan struct{} // a value per Enter that reached the table, while there is room
}

func (s slowTable) Enter(bucket, id string, limit int) bool {
	select {
	case s.took <- struct{}{}:
	default:
	}
	time.Sleep(50 * time.Millisecond)
	return s.table.Enter(bucket, id, limit)
}

// TestCapWaitedOnlyForAPlace: a navigation that arrives while the one
// before it takes a free place has waited for nothing (Waited 0), though
// it stood in line behind it; one behind a navigation that found no place
// has waited.
func TestCapWaitedOnlyForAPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Cap{Table: slowTable{newTable(), make(chan struct{}, 8)}, Poll: 20 * time.Millisecond}
		defer c.Close()
		e := newEntered()
		e.enter(t.Context(), c, "a1", "a", 2)
		<-c.Table.(slowTable).took // a1 is taking its place
		e.enter(t.Context(), c, "a2", "a", 2)
		time.Sleep(time.Second)
		for _, id := range []string{"a1", "a2"} {
			if p := e.placeOf(id); p == nil || p.Waited != 0 {
				t.Errorf("%s: place %v, want one taken at once (Waited 0): a place was free for each", id, p)
			}
		}
		e.enter(t.Context(), c, "a3", "a", 2) // the cap is full: it waits
		e.enter(t.Context(), c, "a4", "a", 2) // behind it
		time.Sleep(time.Second)
		e.leave("a1")
		e.leave("a2")
		time.Sleep(time.Second)
		for _, id := range []string{"a3", "a4"} {
			if p := e.placeOf(id); p == nil || p.Waited == 0 {
				t.Errorf("%s: place %v, want one that waited for a place", id, p)
			}
		}
	})
}

// TestCapGivesUp: a navigation whose context ends while it waits leaves
// the line, and the next one takes its turn: first in line or not.
func TestCapGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Cap{}
		defer c.Close()
		e := newEntered()
		e.enter(t.Context(), c, "a1", "a", 1)
		ctx2, cancel2 := context.WithCancel(t.Context())
		e.enter(ctx2, c, "a2", "a", 1) // first in line
		e.enter(t.Context(), c, "a3", "a", 1)
		ctx4, cancel4 := context.WithCancel(t.Context())
		e.enter(ctx4, c, "a4", "a", 1) // in the middle of the line
		e.enter(t.Context(), c, "a5", "a", 1)
		cancel2()
		cancel4()
		synctest.Wait()
		if got := c.StateOf("a"); got.InFlight != 1 || got.Waiting != 2 {
			t.Errorf("after two gave up: %+v, want 1 in flight, 2 waiting", got)
		}
		e.leave("a1")
		e.leave("a3")
		if got, want := e.got(), []string{"a1", "a3", "a5"}; !slices.Equal(got, want) {
			t.Errorf("got places %v, want %v", got, want)
		}
		for _, n := range []string{"a2", "a4"} {
			if !errors.Is(e.errs[n], context.Canceled) {
				t.Errorf("%s: got %v, want context.Canceled", n, e.errs[n])
			}
		}
		e.leave("a5")
		if b := c.Busy(); len(b) != 0 {
			t.Errorf("all given back: Busy is %+v, want nothing", b)
		}
	})
}

// TestCapBound: a place never given back is given back by the bound, and
// counted; the navigation waiting for it goes then.
func TestCapBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Cap{Bound: 5 * time.Second}
		defer c.Close()
		e := newEntered()
		e.enter(t.Context(), c, "a1", "a", 1)
		e.enter(t.Context(), c, "a2", "a", 1)
		time.Sleep(5*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := e.got(); !slices.Equal(got, []string{"a1"}) {
			t.Fatalf("before the bound: places %v, want [a1]", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := e.got(); !slices.Equal(got, []string{"a1", "a2"}) || e.at["a2"] != 5*time.Second {
			t.Fatalf("at the bound: places %v, a2 at %v; want [a1 a2], 5s", got, e.at["a2"])
		}
		if n := c.Expired(); n != 1 {
			t.Errorf("expired %d, want 1", n)
		}
		e.leave("a1") // too late: given back already, not twice
		e.leave("a2")
		if n := c.Expired(); n != 1 {
			t.Errorf("expired %d after the others were given back in time, want 1", n)
		}
		if b := c.Busy(); len(b) != 0 {
			t.Errorf("Busy is %+v, want nothing", b)
		}
	})
}

// TestCapClose: closing gives back what is held and turns waiters away.
func TestCapClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tbl := newTable()
		c := &Cap{Table: tbl}
		e := newEntered()
		e.enter(t.Context(), c, "a1", "a", 1)
		e.enter(t.Context(), c, "a2", "a", 1)
		e.enter(t.Context(), c, "a3", "a", 1)
		c.Close()
		synctest.Wait()
		if n := tbl.InFlight("a"); n != 0 {
			t.Errorf("after Close the table holds %d places of a, want 0", n)
		}
		for _, n := range []string{"a2", "a3"} {
			if !errors.Is(e.errs[n], ErrClosed) {
				t.Errorf("%s: got %v, want ErrClosed", n, e.errs[n])
			}
		}
		if _, err := c.Enter(t.Context(), "b", 1); !errors.Is(err, ErrClosed) {
			t.Errorf("Enter after Close: %v, want ErrClosed", err)
		}
	})
}

// table is an in-memory Table shared by Caps standing for processes.
type table struct {
	mu     sync.Mutex
	places map[string]map[string]bool
	calls  int
}

func newTable() *table { return &table{places: map[string]map[string]bool{}} }

func (tb *table) Enter(bucket, id string, limit int) bool {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.calls++
	if len(tb.places[bucket]) >= limit {
		return false
	}
	if tb.places[bucket] == nil {
		tb.places[bucket] = map[string]bool{}
	}
	tb.places[bucket][id] = true
	return true
}

func (tb *table) Leave(bucket, id string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	delete(tb.places[bucket], id)
}

func (tb *table) InFlight(bucket string) int {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return len(tb.places[bucket])
}

// TestCapSharedTable: two processes on one table share the cap; a place
// given back by one is taken by the other's first waiter at its next poll;
// within each, arrival order holds; only the first waiter asks the table.
func TestCapSharedTable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tbl := newTable()
		// Ids are per process; the store makes them its own. Here two
		// processes on one table need distinct ids.
		p1 := &Cap{Table: prefixed{tbl, "p1:"}, Poll: 20 * time.Millisecond}
		p2 := &Cap{Table: prefixed{tbl, "p2:"}, Poll: 20 * time.Millisecond}
		defer p1.Close()
		defer p2.Close()
		e := newEntered()
		e.enter(t.Context(), p1, "x1", "h", 2)
		e.enter(t.Context(), p2, "y1", "h", 2)
		e.enter(t.Context(), p2, "y2", "h", 2)
		e.enter(t.Context(), p2, "y3", "h", 2)
		if got := tbl.InFlight("h"); got != 2 {
			t.Fatalf("in flight across both: %d, want 2", got)
		}
		tbl.mu.Lock()
		before := tbl.calls
		tbl.mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		tbl.mu.Lock()
		polls := tbl.calls - before
		tbl.mu.Unlock()
		if polls > 51 { // one waiter polling every 20 ms, not two
			t.Errorf("the table was asked %d times in a second, want at most 51 (only the first waiter asks)", polls)
		}
		time.Sleep(5 * time.Millisecond)
		e.leave("x1") // the other process's place: p2 finds it free at its next poll
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if got, want := e.got(), []string{"x1", "y1", "y2"}; !slices.Equal(got, want) {
			t.Fatalf("got places %v, want %v", got, want)
		}
		if d := e.at["y2"] - 1005*time.Millisecond; d < 0 || d > 20*time.Millisecond {
			t.Errorf("y2 took the freed place %v after it was given back, want within one poll (20ms)", d)
		}
		e.leave("y1") // its own: handed on at once, no poll
		if got, want := e.got(), []string{"x1", "y1", "y2", "y3"}; !slices.Equal(got, want) {
			t.Fatalf("got places %v, want %v", got, want)
		}
		e.leave("y2")
		e.leave("y3")
		if n := tbl.InFlight("h"); n != 0 {
			t.Errorf("table holds %d places after all were given back, want 0", n)
		}
	})
}

type prefixed struct {
	*table
	p string
}

func (p prefixed) Enter(bucket, id string, limit int) bool {
	return p.table.Enter(bucket, p.p+id, limit)
}
func (p prefixed) Leave(bucket, id string) { p.table.Leave(bucket, p.p+id) }

// TestCapManyAtOnce: under the race detector, many navigations of a few
// buckets: never more in flight than the cap, everyone served, nothing
// left.
func TestCapManyAtOnce(t *testing.T) {
	c := &Cap{}
	defer c.Close()
	var mu sync.Mutex
	in := map[string]int{}
	var wg sync.WaitGroup
	for i := range 400 {
		bucket := fmt.Sprintf("b%d", i%4)
		wg.Go(func() {
			p, err := c.Enter(context.Background(), bucket, 3)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			if in[bucket]++; in[bucket] > 3 {
				t.Errorf("%s: %d in flight, cap 3", bucket, in[bucket])
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			in[bucket]--
			mu.Unlock()
			p.Leave()
		})
	}
	wg.Wait()
	if b := c.Busy(); len(b) != 0 {
		t.Errorf("Busy is %+v, want nothing", b)
	}
}

// TestCapNoLimit: a limit of 0 is no cap: no place, no wait.
func TestCapNoLimit(t *testing.T) {
	c := &Cap{}
	defer c.Close()
	p, err := c.Enter(context.Background(), "a", 0)
	if p != nil || err != nil {
		t.Fatalf("Enter with no cap: %v, %v; want nil, nil", p, err)
	}
	p.Leave() // a nil place gives nothing back
}
