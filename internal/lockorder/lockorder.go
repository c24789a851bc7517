// Package lockorder gives the mutexes of holding their places in its
// lock order (hold/hold.go), and, in a build with the tag lockorder,
// checks that every goroutine takes them in that order: a Mutex may be
// locked only while each one its goroutine holds has a lower Level, and
// an Alone one only while its goroutine holds none. What breaks the order
// is recorded, not panicked on (holding recovers panics, and a test must
// not pass because one was answered): a test binary run through Checked
// fails once its tests are done, naming each pair of mutexes taken out
// of order and where.
//
// Without the tag a Mutex is a sync.Mutex and costs nothing more.
package lockorder

// A Rank is a mutex's place in the order, a type of its own so that a
// Mutex's zero value knows it.
type Rank interface {
	// Level orders mutexes: one is taken only under lower ones.
	Level() int
	// Alone reports a mutex taken with no other held.
	Alone() bool
}

// Leaf ranks a mutex taken under any other, that takes none.
type Leaf struct{}

func (Leaf) Level() int  { return LeafLevel }
func (Leaf) Alone() bool { return false }

// Lone ranks a mutex taken under none, that takes none.
type Lone struct{}

func (Lone) Level() int  { return LeafLevel }
func (Lone) Alone() bool { return true }

// LeafLevel is the level of the leaves: above every other.
const LeafLevel = 1 << 20

// TestingM is what a test binary's TestMain is handed (testing.M), or a
// wrapper of it (goleak.VerifyTestMain takes one too).
type TestingM interface{ Run() int }
