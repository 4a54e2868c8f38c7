package gossip

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/storebench"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Clusters that benchmarks keep across Go's b.N rounds (starting 30
// memberlist nodes per round would dominate the run); TestMain closes them.
var (
	sharedMu sync.Mutex
	shared   = map[string][]*Store{}
)

func sharedCluster(b *testing.B, name string, n int, opts ...nodeOpt) []*Store {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if nodes, ok := shared[name]; ok {
		return nodes
	}
	tn := newTestNet()
	var nodes []*Store
	for i := range n {
		var join []string
		if i > 0 {
			join = []string{nodes[0].selfAddr}
		}
		s, err := newNode(tn, fmt.Sprint("n", i), join, opts...)
		if err != nil {
			b.Fatal(err)
		}
		nodes = append(nodes, s)
	}
	shared[name] = nodes
	waitMembers(b, nodes, n, 60*time.Second)
	return nodes
}

func closeShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	var wg sync.WaitGroup
	for _, nodes := range shared {
		for _, s := range nodes {
			wg.Go(func() { _ = s.Close() })
		}
	}
	wg.Wait()
	clear(shared)
}

// BenchmarkConvergence measures, with production timers, the time from a
// Create on one node until every other node of N holds the binding.
//
//	go test -run '^$' -bench Convergence -benchtime 300x ./sidecar/store/gossip/
func BenchmarkConvergence(b *testing.B) {
	for _, n := range []int{3, 10, 30} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			nodes := sharedCluster(b, fmt.Sprint("convergence-", n), n, production)
			var (
				mu      sync.Mutex
				pending = map[key]int{}
				done    = map[key]chan struct{}{}
			)
			hook := func(k key, res applyResult) {
				if res != applyAdopted {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if c, ok := pending[k]; ok {
					if pending[k] = c - 1; c == 1 {
						close(done[k])
					}
				}
			}
			for _, s := range nodes {
				s.hook.Store(&hook)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				k := session.StoreKey("bench", fmt.Sprint(n, "-", i, "-", rand.Int()))
				ch := make(chan struct{})
				mu.Lock()
				pending[keyOf(k)], done[keyOf(k)] = n-1, ch
				mu.Unlock()
				start := time.Now()
				if _, err := nodes[i%n].Create(context.Background(), k, store.Binding{Pod: "pod-1"}, time.Minute); err != nil {
					b.Fatal(err)
				}
				select {
				case <-ch:
				case <-time.After(10 * time.Second):
					b.Fatalf("binding %d not on all %d nodes after 10s", i, n)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			for _, s := range nodes {
				s.hook.Store(nil)
			}
			slices.Sort(lat)
			ms := func(q float64) float64 {
				return float64(lat[min(int(q*float64(len(lat))), len(lat)-1)].Microseconds()) / 1000
			}
			b.ReportMetric(ms(0.50), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
		})
	}
}

// BenchmarkRefreshTraffic measures the bytes every node writes to the
// network (all of memberlist's traffic, counted at the transport) while one
// of three nodes serves 1,000 lookups per second. Sessions are pre-aged so
// that their announced expiries are spread over the last quarter TTL, as in
// a steady state; the announce rate is then min(lookups/s, sessions/(TTL/4)).
//
//	go test -run '^$' -bench RefreshTraffic ./sidecar/store/gossip/
func BenchmarkRefreshTraffic(b *testing.B) {
	const (
		nodesN  = 3
		rate    = 1000
		warmup  = 2 * time.Second
		measure = 8 * time.Second
	)
	for _, c := range []struct {
		sessions int
		ttl      time.Duration
	}{{0, 0}, {100, 300 * time.Second}, {10_000, 300 * time.Second}, {10_000, 20 * time.Second}} {
		name := fmt.Sprintf("sessions=%d/ttl=%s", c.sessions, c.ttl)
		if c.sessions == 0 {
			name = "idle"
		}
		b.Run(name, func(b *testing.B) {
			var offset atomic.Int64 // node 0's clock offset, for pre-aging
			clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			tn := newTestNet()
			nodes := []*Store{startNode(b, tn, "n0", nil, production, func(_ *configGossip, o *Options) { o.Clock = clock })}
			for i := 1; i < nodesN; i++ {
				nodes = append(nodes, startNode(b, tn, fmt.Sprint("n", i), []string{nodes[0].selfAddr}, production))
			}
			waitMembers(b, nodes, nodesN, 20*time.Second)
			keys := make([]string, c.sessions)
			r := rand.New(rand.NewPCG(1, 1))
			for i := range keys {
				keys[i] = session.StoreKey("bench", fmt.Sprint(i))
				offset.Store(-r.Int64N(int64(c.ttl / 4)))
				if _, err := nodes[0].Create(context.Background(), keys[i], store.Binding{Pod: fmt.Sprintf("vllm-decode-7f9c8d-%05d", i%16)}, c.ttl); err != nil {
					b.Fatal(err)
				}
				if i%500 == 499 {
					time.Sleep(10 * time.Millisecond) // let the direct sends drain
				}
			}
			offset.Store(0)
			testkit.Eventually(b, 20*time.Second, "every node to hold every session", func() error {
				for _, s := range nodes {
					if s.Len() != c.sessions {
						return fmt.Errorf("%s holds %d of %d", s.name, s.Len(), c.sessions)
					}
				}
				return nil
			})
			var hits atomic.Int64
			lookups := func(d time.Duration) {
				if c.sessions == 0 {
					time.Sleep(d)
					return
				}
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
					for range rate / 100 {
						if _, ok, _ := nodes[0].Lookup(context.Background(), keys[r.IntN(len(keys))], c.ttl); ok {
							hits.Add(1)
						}
					}
				}
			}
			lookups(warmup)
			before := make([]int64, nodesN)
			for i, s := range nodes {
				before[i] = tn.counter(portOf(s.selfAddr)).Load()
			}
			hits.Store(0)
			start := time.Now()
			lookups(measure)
			secs := time.Since(start).Seconds()
			var total float64
			perNode := make([]float64, nodesN)
			for i, s := range nodes {
				perNode[i] = float64(tn.counter(portOf(s.selfAddr)).Load()-before[i]) / secs
				total += perNode[i]
			}
			b.ReportMetric(total/nodesN, "B/s/node")
			b.ReportMetric(perNode[0], "origin-B/s")
			b.ReportMetric(float64(hits.Load())/secs, "refreshes/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkBytesPerBinding measures the live heap one replica takes per
// binding at 1,000,000 bindings, from before New (memberlist included) to
// after the last Create through the public API, with keys as the resolver
// makes them and 100 pod-shaped backend IDs (the workload of
// e2e/bench/scale).
//
//	go test -run '^$' -bench BytesPerBinding -benchtime 1x ./sidecar/store/gossip/
func BenchmarkBytesPerBinding(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		before := storebench.HeapAlloc()
		s := startNode(b, newTestNet(), "holder", nil, production)
		if err := storebench.Fill(s, 0, n, time.Hour); err != nil {
			b.Fatal(err)
		}
		after := storebench.HeapAlloc()
		if got := s.Len(); got != n {
			b.Fatalf("replica holds %d of %d bindings", got, n)
		}
		b.ReportMetric(float64(int64(after)-int64(before))/n, "bytes/binding")
		runtime.KeepAlive(s)
		_ = s.Close()
	}
}

// BenchmarkStoreCreate is a new session's commit through the public API of
// a replica alone in its ring, at its cap of 100,000 bindings (each Create
// evicts one), from one goroutine per core. It includes the announcement
// (encoding the delta, queueing it for gossip and the direct sends).
func BenchmarkStoreCreate(b *testing.B) {
	ks := storebench.CreateKeys()
	s := startNode(b, newTestNet(), "creator", nil, production,
		func(c *configGossip, _ *Options) { c.MaxEntries = len(ks) / 10 })
	for i := range len(ks) / 10 {
		if _, err := s.Create(context.Background(), ks[i], storebench.Binding(i), time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	start := len(ks) / 10
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		i := start
		start += len(ks) / 4
		mu.Unlock()
		ctx := context.Background()
		for pb.Next() {
			k := i % len(ks)
			if _, err := s.Create(ctx, ks[k], storebench.Binding(k), time.Hour); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkStoreLookup is the sticky hot path through the public API: a
// lookup-and-refresh of one of 100,000 bindings, from parallel goroutines.
func BenchmarkStoreLookup(b *testing.B) {
	const n = 100_000
	ks := storebench.CreateKeys()[:n]
	s := startNode(b, newTestNet(), "looker", nil, production)
	for i, k := range ks {
		if _, err := s.Create(context.Background(), k, storebench.Binding(i), time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 0))
		ctx := context.Background()
		for pb.Next() {
			if _, ok, _ := s.Lookup(ctx, ks[r.IntN(n)], time.Hour); !ok {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkLookup is the request path: a lookup-and-refresh on one node's
// local state of 100,000 bindings, from parallel goroutines.
//
//	go test -run '^$' -bench Lookup -benchmem ./sidecar/store/gossip/
func BenchmarkLookup(b *testing.B) {
	const n = 100_000
	st := newState(n, 0)
	keys := make([]key, n)
	for i := range keys {
		keys[i] = keyOf(session.StoreKey("pool", fmt.Sprint(i)))
		st.create(keys[i], value{Pod: "vllm-decode-0"}, 0, 300_000)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 0))
		now := int64(1000)
		for pb.Next() {
			if _, ok := st.lookup(keys[r.IntN(n)], now, 300_000, true); !ok {
				b.Fatal("miss")
			}
		}
	})
}
