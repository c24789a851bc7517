// Package redistest starts real Redis deployments for tests: a master with
// a replica watched by three Redis Sentinels, and a Redis Cluster of
// masters, each process on a free loopback port in a temporary directory,
// all killed when the test ends. It runs Debian's redis-server,
// redis-sentinel and redis-cli (make redis installs them) and fails the
// test when they are missing: a test of failover without the real thing
// proves nothing.
//
// It is imported by tests only (the store's, and the end-to-end suite's).
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Process is one redis-server or redis-sentinel of a test's own.
type Process struct {
	t    testing.TB
	Port int
	args []string // after the program
	bin  string
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd     // guarded by mu; nil while stopped
	out    *buffer       // guarded by mu
	client *redis.Client // guarded by mu; made by Client
}

// Addr is 127.0.0.1:Port.
func (p *Process) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// Client is a plain client of the process, closed when the test ends.
func (p *Process) Client() *redis.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil {
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ReadTimeout: time.Second})
		p.client = c
		p.t.Cleanup(func() { c.Close() })
	}
	return p.client
}

// Kill kills the process with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	p.cmd = nil
}

// Running reports whether the process was started and not killed.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Output is what the process printed, for a failing test's log.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.out == nil {
		return ""
	}
	return p.out.String()
}

// quiet drops go-redis's own logging (a line per refused dial to a
// process a test killed on purpose).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func need(t testing.TB, bin string) string {
	t.Helper()
	redis.SetLogger(quiet{})
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("%s not found (%v): install Debian's redis-server, redis-sentinel and redis-tools (make redis)", bin, err)
	}
	return p
}

// start starts the process and waits until it answers PING.
func (p *Process) start() {
	p.t.Helper()
	p.mu.Lock()
	p.out = &buffer{}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		p.t.Fatalf("starting %s: %v", p.bin, err)
	}
	p.cmd = cmd
	p.mu.Unlock()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	defer c.Close()
	if err := Ping(c, time.Now().Add(10*time.Second), 20*time.Millisecond); err != nil {
		p.t.Fatalf("%s on port %d does not answer: %v\n%s", filepath.Base(p.bin), p.Port, err, p.Output())
	}
}

// Ping pings the server c talks to, every interval, until it answers or
// deadline passes; it returns the last error, nil when it answered.
func Ping(c *redis.Client, deadline time.Time, every time.Duration) error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(every)
	}
}

// freePort returns a loopback port nothing listens on; with bus, one whose
// port+10000 (a cluster node's bus) is free too.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		if l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000)); err == nil {
			l2.Close()
			return port
		}
	}
	t.Fatal("no free loopback port")
	return 0
}

func newProcess(t testing.TB, bin string, port int, dir string, args ...string) *Process {
	p := &Process{t: t, Port: port, bin: bin, dir: dir, args: args}
	p.start()
	t.Cleanup(p.Kill)
	return p
}

// serverArgs are the arguments of a redis-server with no persistence.
func serverArgs(port int, dir string, more ...string) []string {
	return append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning", "--repl-diskless-sync-delay", "0"}, more...)
}

// Sentinels is a master, its replica and three sentinels watching them.
type Sentinels struct {
	Name      string // the master's name
	Master    *Process
	Replica   *Process
	Sentinels []*Process
}

// DownAfter is how long the sentinels wait before they call a master that
// does not answer down (down-after-milliseconds); a failover follows within
// a few seconds.
const DownAfter = time.Second

// StartSentinels starts a master, a replica of it and three sentinels with
// a quorum of two, and waits until the replica is in sync and every
// sentinel knows the replica and the other sentinels.
func StartSentinels(t testing.TB) *Sentinels {
	t.Helper()
	server, sentinel := need(t, "redis-server"), need(t, "redis-sentinel")
	dir := t.TempDir()
	s := &Sentinels{Name: "cdpthrottle"}
	mp, rp := freePort(t, false), freePort(t, false)
	s.Master = newProcess(t, server, mp, dir, serverArgs(mp, dir, "--dbfilename", "master.rdb")...)
	s.Replica = newProcess(t, server, rp, dir, serverArgs(rp, dir, "--dbfilename", "replica.rdb", "--replicaof", "127.0.0.1", strconv.Itoa(mp))...)
	waitFor(t, "the replica in sync", 20*time.Second, func() bool {
		info, _ := s.Replica.Client().Info(context.Background(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	for i := range 3 {
		port := freePort(t, false)
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", i))
		body := strings.Join([]string{
			fmt.Sprintf("port %d", port), "bind 127.0.0.1", "daemonize no", "loglevel warning", "dir " + dir,
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", s.Name, mp),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.Name, DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s 10000", s.Name),
			fmt.Sprintf("sentinel parallel-syncs %s 1", s.Name),
		}, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		s.Sentinels = append(s.Sentinels, newProcess(t, sentinel, port, dir, conf))
	}
	waitFor(t, "the sentinels to know the replica and each other", 30*time.Second, func() bool {
		for _, sp := range s.Sentinels {
			m, err := sp.Client().Do(context.Background(), "SENTINEL", "MASTER", s.Name).Result()
			if err != nil {
				return false
			}
			f := fields(m)
			if f["num-slaves"] != "1" || f["num-other-sentinels"] != "2" {
				return false
			}
		}
		return true
	})
	return s
}

// URL is the store's --store URL for the master, through the sentinels.
func (s *Sentinels) URL() string {
	q := []string{"master_name=" + s.Name}
	for _, sp := range s.Sentinels[1:] {
		q = append(q, "addr="+sp.Addr())
	}
	return "redis://" + s.Sentinels[0].Addr() + "/0?" + strings.Join(q, "&")
}

// MasterAddr asks a sentinel where the master is now.
func (s *Sentinels) MasterAddr(ctx context.Context) (string, error) {
	for _, sp := range s.Sentinels {
		if !sp.Running() {
			continue
		}
		a, err := sp.Client().Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name).StringSlice()
		if err == nil && len(a) == 2 {
			return net.JoinHostPort(a[0], a[1]), nil
		}
	}
	return "", fmt.Errorf("redistest: no sentinel names a master")
}

// WaitFailover waits until the sentinels name a master other than from
// (the address of the one killed), and says how long that took. It may be
// called from any goroutine.
func (s *Sentinels) WaitFailover(from string, within time.Duration) (time.Duration, error) {
	began := time.Now()
	for {
		if a, err := s.MasterAddr(context.Background()); err == nil && a != from {
			return time.Since(began), nil
		}
		if time.Since(began) > within {
			return 0, fmt.Errorf("redistest: the sentinels named no master but %s within %v", from, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Roles returns the master and the replica as the sentinels name them now
// (the replica may be one that was killed).
func (s *Sentinels) Roles() (master, replica *Process) {
	a, err := s.MasterAddr(context.Background())
	if err == nil && a == s.Replica.Addr() {
		return s.Replica, s.Master
	}
	return s.Master, s.Replica
}

// Rejoin starts a killed server again as a replica of the master the
// sentinels name now, and waits until it is in sync.
func (s *Sentinels) Rejoin(p *Process) {
	p.t.Helper()
	if p.Running() {
		p.t.Fatalf("redistest: %s is running", p.Addr())
	}
	a, err := s.MasterAddr(context.Background())
	if err != nil {
		p.t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(a)
	p.args = serverArgs(p.Port, p.dir, "--dbfilename", fmt.Sprintf("rejoined-%d.rdb", p.Port), "--replicaof", host, port)
	p.start()
	waitFor(p.t, "the rejoined replica in sync", 20*time.Second, func() bool {
		info, _ := p.Client().Info(context.Background(), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
}

// fields reads a reply of alternating names and values (SENTINEL MASTER).
func fields(v any) map[string]string {
	out := map[string]string{}
	switch l := v.(type) {
	case []any:
		for i := 0; i+1 < len(l); i += 2 {
			out[fmt.Sprint(l[i])] = fmt.Sprint(l[i+1])
		}
	case map[any]any:
		for k, x := range l {
			out[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return out
}

// Cluster is a Redis Cluster of masters with no replicas, which keeps
// serving the slots of the nodes that answer when one does not
// (cluster-require-full-coverage no).
type Cluster struct {
	Nodes []*Process
}

// NodeTimeout is the cluster's cluster-node-timeout.
const NodeTimeout = 2 * time.Second

// StartCluster starts n masters, joins them with redis-cli --cluster
// create, and waits until every node says the cluster is ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	server, cli := need(t, "redis-server"), need(t, "redis-cli")
	dir := t.TempDir()
	c := &Cluster{}
	var addrs []string
	for i := range n {
		port := freePort(t, true)
		c.Nodes = append(c.Nodes, newProcess(t, server, port, dir, serverArgs(port, dir,
			"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", strconv.Itoa(int(NodeTimeout.Milliseconds())),
			"--cluster-require-full-coverage", "no", "--dbfilename", fmt.Sprintf("node-%d.rdb", i))...))
		addrs = append(addrs, c.Nodes[i].Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	waitFor(t, "the cluster to be ok on every node", 30*time.Second, func() bool {
		for _, p := range c.Nodes {
			info, err := p.Client().ClusterInfo(context.Background()).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	return c
}

// URL is the store's --store URL for the cluster.
func (c *Cluster) URL() string {
	q := make([]string, 0, len(c.Nodes)-1)
	for _, p := range c.Nodes[1:] {
		q = append(q, "addr="+p.Addr())
	}
	return "redis-cluster://" + c.Nodes[0].Addr() + "?" + strings.Join(q, "&")
}

// NodeOf returns the node that owns key's slot.
func (c *Cluster) NodeOf(t testing.TB, key string) *Process {
	t.Helper()
	var client *redis.Client
	for _, p := range c.Nodes {
		if p.Running() {
			client = p.Client()
			break
		}
	}
	slot, err := client.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	slots, err := client.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			for _, p := range c.Nodes {
				if p.Addr() == s.Nodes[0].Addr {
					return p
				}
			}
		}
	}
	t.Fatalf("no node owns slot %d of %q", slot, key)
	return nil
}

func waitFor(t testing.TB, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: no %s within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// buffer collects a process's output.
type buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil
	}
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
