// Package scale measures tether's stores at scale (the benchmarks'
// section 3), in this process through their public APIs: bytes per
// binding and lookups per CPU-second of the memory and gossip stores,
// Redis round trips per request through a real sidecar, gossip
// convergence over rings of in-process memberlist nodes, and how long a
// replica joining a ring that holds a million bindings takes to serve them.
package scale

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/storebench"
	"github.com/tetherproxy/tether/sidecar/threads"
)

// key and podIDs are the workload the stores' Go benchmarks share
// (storebench): keys as the resolver makes them, 100 pod-shaped backend IDs.
func key(i int) string { return storebench.Key(i) }

var podIDs = storebench.PodIDs

// fill creates bindings for sessions [from, to) and returns the heap the
// store grew by per binding (after a GC on both sides), keys included,
// since the store keeps them (as it keeps them: a store may hold a key in
// 16 bytes rather than as the 32-character string the resolver passes).
func fill(s store.Store, from, to int) (float64, error) {
	return storebench.BytesPerBinding(s, from, to, time.Hour)
}

// lookupRate runs lookup-and-refresh of random keys among the first n
// sessions from one goroutine per core for d, and returns lookups per
// second of CPU time (per core) and the misses (which must be none).
func lookupRate(s store.Store, n int, d time.Duration, extraCPU func() time.Duration) (perCPUSecond float64, misses int64, err error) {
	keys := make([]string, min(n, 100_000))
	r := rand.New(rand.NewPCG(7, 7))
	for i := range keys {
		keys[i] = key(r.IntN(n))
	}
	var total, missed atomic.Int64
	var firstErr atomic.Pointer[error]
	workers := runtime.GOMAXPROCS(0)
	if extraCPU != nil { // a network store: latency-bound, more in flight
		workers = 32
	}
	cpu0, extra0 := threads.ProcessCPU(), time.Duration(0)
	if extraCPU != nil {
		extra0 = extraCPU()
	}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			ctx := context.Background()
			var done, miss int64
			for i := w; time.Now().Before(end); i += workers {
				for range 64 {
					_, ok, err := s.Lookup(ctx, keys[i%len(keys)], time.Hour)
					if err != nil {
						firstErr.CompareAndSwap(nil, &err)
					}
					if !ok {
						miss++
					}
					done++
					i += workers
				}
			}
			total.Add(done)
			missed.Add(miss)
		})
	}
	wg.Wait()
	cpu := threads.ProcessCPU() - cpu0
	if extraCPU != nil {
		cpu += extraCPU() - extra0
	}
	if e := firstErr.Load(); e != nil {
		err = *e
	}
	return float64(total.Load()) / cpu.Seconds(), missed.Load(), err
}
