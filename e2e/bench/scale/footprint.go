// Package scale measures tether's stores at scale (the benchmarks'
// section 3), in this process through their public APIs: bytes per
// binding and lookups per CPU-second of the memory and gossip stores,
// Redis round trips per request through a real sidecar, gossip
// convergence over rings of in-process memberlist nodes, and how long a
// replica joining a ring that holds a million bindings takes to serve them.
package scale

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
)

// podIDs are backend IDs as Kubernetes discovery makes them
// (namespace/name/uid), shared by the bindings as they would be.
var podIDs = func() []string {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("llm/vllm-decode-7f9c8d-%05d/%08x-4e1f-4b8a-9c3d-%012x", i, i*7919, i*104729)
	}
	return ids
}()

// key is the store key of session i of the benchmark's pool, as the
// resolver computes it.
func key(i int) string { return session.StoreKey("default/llm", fmt.Sprint("session-", i)) }

// fill creates bindings for sessions [from, to) and returns the heap the
// store grew by per binding (after a GC on both sides), keys included,
// since the store keeps them.
func fill(s store.Store, from, to int) (float64, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ctx := context.Background()
	for i := from; i < to; i++ {
		if _, err := s.Create(ctx, key(i), store.Binding{Pod: podIDs[i%len(podIDs)], Created: time.Now()}, time.Hour); err != nil {
			return 0, err
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(to-from), nil
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
	cpu0, extra0 := cpuTime(), time.Duration(0)
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
	cpu := cpuTime() - cpu0
	if extraCPU != nil {
		cpu += extraCPU() - extra0
	}
	if e := firstErr.Load(); e != nil {
		err = *e
	}
	return float64(total.Load()) / cpu.Seconds(), missed.Load(), err
}
