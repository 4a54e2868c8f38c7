package gossip

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(joinAddrEnv); addr != "" {
		os.Exit(joinAndReport(addr)) // BenchmarkStateTransfer's joiner
	}
	code := m.Run()
	closeShared() // clusters benchmarks keep across their b.N rounds
	if code == 0 {
		// klog (pulled in by client-go) starts a flush daemon at init.
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type configGossip = config.GossipStore

// testNet is a loopback network the test can cut: every node's transport is
// wrapped, drops packets and refuses streams between groups while split,
// and counts the bytes each node writes.
type testNet struct {
	mu       sync.RWMutex
	group    map[int]int // port → group
	split    bool
	isolated bool     // every node cut from every other
	bytes    sync.Map // port → *atomic.Int64
}

func newTestNet() *testNet { return &testNet{group: map[int]int{}} }

func (n *testNet) partition(groups ...[]*Store) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for g, ss := range groups {
		for _, s := range ss {
			n.group[portOf(s.selfAddr)] = g
		}
	}
	n.split = true
}

// isolate cuts every node from every other, nodes started later too,
// until heal.
func (n *testNet) isolate() {
	n.mu.Lock()
	n.isolated = true
	n.mu.Unlock()
}

func (n *testNet) heal() {
	n.mu.Lock()
	n.split, n.isolated = false, false
	n.mu.Unlock()
}

func (n *testNet) blocked(from int, to string) bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.isolated || n.split && n.group[from] != n.group[portOf(to)]
}

func (n *testNet) counter(port int) *atomic.Int64 {
	c, _ := n.bytes.LoadOrStore(port, new(atomic.Int64))
	return c.(*atomic.Int64)
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

type filterTransport struct {
	memberlist.NodeAwareTransport
	net  *testNet
	port int
	sent *atomic.Int64
}

var errPartitioned = errors.New("partitioned")

func (t *filterTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.net.blocked(t.port, a.Addr) {
		return time.Now(), nil // a lost packet, as on a real network
	}
	t.sent.Add(int64(len(b)))
	return t.NodeAwareTransport.WriteToAddress(b, a)
}

func (t *filterTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (t *filterTransport) DialAddressTimeout(a memberlist.Address, d time.Duration) (net.Conn, error) {
	if t.net.blocked(t.port, a.Addr) {
		return nil, errPartitioned
	}
	c, err := t.NodeAwareTransport.DialAddressTimeout(a, d)
	if err != nil {
		return nil, err
	}
	return countingConn{c, t.sent}, nil
}

func (t *filterTransport) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, d)
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// fastMemberlist shortens memberlist's timers so failure detection and
// healing take a second or two instead of tens.
func fastMemberlist(c *memberlist.Config) {
	c.ProbeInterval = 100 * time.Millisecond
	c.ProbeTimeout = 50 * time.Millisecond
	c.SuspicionMult = 2
	c.GossipInterval = 50 * time.Millisecond
	c.PushPullInterval = 2 * time.Second
	c.TCPTimeout = time.Second
	c.GossipToTheDeadTime = 5 * time.Second
	c.DeadNodeReclaimTime = time.Second
}

type nodeOpt func(*config.GossipStore, *Options)

func withGrace(d time.Duration) nodeOpt {
	return func(_ *config.GossipStore, o *Options) { o.StartupGrace = d }
}

func withKey(path string) nodeOpt {
	return func(c *config.GossipStore, _ *Options) { c.SecretKeyFile, c.Insecure = path, false }
}

func testLogger() *slog.Logger {
	if os.Getenv("GOSSIP_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startNode starts one store on 127.0.0.1 (port 0) joining join, with its
// transport on tn, closed at the end of the test.
func startNode(t testing.TB, tn *testNet, name string, join []string, opts ...nodeOpt) *Store {
	t.Helper()
	s, err := newNode(tn, name, join, opts...)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newNode(tn *testNet, name string, join []string, opts ...nodeOpt) (*Store, error) {
	cfg := &config.GossipStore{Bind: "127.0.0.1:0", Discovery: config.PeersStatic, Join: join, MaxEntries: 2_000_000, Insecure: true}
	o := Options{
		NodeName:        name,
		RefreshInterval: 100 * time.Millisecond,
		SweepInterval:   100 * time.Millisecond,
		RejoinInterval:  300 * time.Millisecond,
		TransferTimeout: 3 * time.Second,
		LeaveTimeout:    500 * time.Millisecond,
		ChunkRate:       1000,
		Memberlist:      fastMemberlist,
		WrapTransport: func(nt memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
			port := nt.(*memberlist.NetTransport).GetAutoBindPort()
			return &filterTransport{NodeAwareTransport: nt, net: tn, port: port, sent: tn.counter(port)}
		},
	}
	for _, f := range opts {
		f(cfg, &o)
	}
	o.Reg = prometheus.NewRegistry()
	if o.Log == nil {
		o.Log = testLogger().With("node", name)
	}
	return New(context.Background(), cfg, o)
}

// production undoes the test timers: memberlist's LAN defaults and the
// store's own defaults, as a sidecar runs.
func production(_ *config.GossipStore, o *Options) {
	*o = Options{NodeName: o.NodeName, WrapTransport: o.WrapTransport, Clock: o.Clock}
}

// startCluster starts n nodes joined through the first, and waits until
// every node sees all n.
func startCluster(t testing.TB, tn *testNet, n int, opts ...nodeOpt) []*Store {
	t.Helper()
	nodes := []*Store{startNode(t, tn, "n0", nil, opts...)}
	for i := 1; i < n; i++ {
		nodes = append(nodes, startNode(t, tn, fmt.Sprint("n", i), []string{nodes[0].selfAddr}, opts...))
	}
	waitMembers(t, nodes, n, 20*time.Second)
	return nodes
}

func waitMembers(t testing.TB, nodes []*Store, n int, d time.Duration) {
	t.Helper()
	testkit.Eventually(t, d, "every node to see all members", func() error {
		for _, s := range nodes {
			if m := s.Members(); m != n {
				return fmt.Errorf("%s sees %d members, want %d", s.name, m, n)
			}
		}
		return nil
	})
}

// agree checks that every node holds the same live binding for key (or
// none) and returns it.
func agree(nodes []*Store, key string) (store.Binding, bool, error) {
	first, ok, _ := nodes[0].Peek(context.Background(), key)
	for _, s := range nodes[1:] {
		b, ok2, _ := s.Peek(context.Background(), key)
		if ok2 != ok || !b.SameTarget(first) || !b.Created.Equal(first.Created) {
			return first, ok, fmt.Errorf("key %s: %s holds %+v (%v), %s holds %+v (%v)", key[:8], nodes[0].name, first, ok, s.name, b, ok2)
		}
	}
	return first, ok, nil
}

func skey(i int) string { return fmt.Sprintf("%032x", 0xa000000+i) }
