package hold

// The ranks of holding's mutexes, in hold.go's lock order, which
// internal/lockorder checks in a build with the tag lockorder. The leaves
// are lockorder.Leaf, and the mutexes taken under none lockorder.Lone.
type (
	// RankConn ranks Watch.mu and the ways' own locks in a client
	// connection (session's sessionHold.mu, stream's streamHold.mu):
	// the first of the order, and never two of them together.
	RankConn struct{}
	// RankFetchNet ranks fetch's netPatterns.mu (net's pattern updates).
	RankFetchNet struct{}
	// RankFetch ranks fetch's fetchHold.mu.
	RankFetch struct{}
	// RankFetchWrite ranks fetch's fetchConn.wmu.
	RankFetchWrite struct{}
	// RankFetchConn ranks what one of fetch's connections owns for its
	// role: pagesState.mu, netState.mu.
	RankFetchConn struct{}
	// RankFetchWire ranks fetch's fetchConn.mu: the transport's own state
	// (its calls, whether it is closed) and what it knows of targets.
	RankFetchWire struct{}
	// RankFlight ranks Flight.mu.
	RankFlight struct{}
)

func (RankConn) Level() int       { return 10 }
func (RankFetchNet) Level() int   { return 20 }
func (RankFetch) Level() int      { return 30 }
func (RankFetchWrite) Level() int { return 40 }
func (RankFetchConn) Level() int  { return 50 }
func (RankFetchWire) Level() int  { return 55 }
func (RankFlight) Level() int     { return 60 }

func (RankConn) Alone() bool       { return false }
func (RankFetchNet) Alone() bool   { return false }
func (RankFetch) Alone() bool      { return false }
func (RankFetchWrite) Alone() bool { return false }
func (RankFetchConn) Alone() bool  { return false }
func (RankFetchWire) Alone() bool  { return false }
func (RankFlight) Alone() bool     { return false }
