package memory

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/storebench"
)

// BenchmarkBytesPerBinding measures the live heap the store takes per
// binding at 1,000,000 bindings, from before New to after the last Create
// (keys as the resolver makes them, 100 pod-shaped backend IDs). Its cap
// is twice that, as in e2e/bench/scale, so that no binding is evicted.
//
//	go test -run '^$' -bench BytesPerBinding -benchtime 1x ./sidecar/store/memory/
func BenchmarkBytesPerBinding(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		before := storebench.HeapAlloc()
		s := mustNew(b, 2*n, Options{SweepInterval: time.Hour})
		if err := storebench.Fill(s, 0, n, time.Hour); err != nil {
			b.Fatal(err)
		}
		after := storebench.HeapAlloc()
		if got := s.Len(); got != n {
			b.Fatalf("store holds %d of %d bindings", got, n)
		}
		b.ReportMetric(float64(int64(after)-int64(before))/n, "bytes/binding")
		runtime.KeepAlive(s)
		s.Close()
	}
}

// BenchmarkCreate is a new session's commit: a Create of a key the store
// does not hold, into a store at its cap of 100,000 bindings (each Create
// evicts one), from one goroutine per core.
func BenchmarkCreate(b *testing.B) {
	ks := storebench.CreateKeys()
	s := mustNew(b, len(ks)/10, Options{SweepInterval: time.Hour})
	defer s.Close()
	for i := range len(ks) / 10 {
		s.Create(ctx, ks[i], storebench.Binding(i), time.Hour)
	}
	var next sync.Mutex
	start := len(ks) / 10
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		i := start
		start += len(ks) / 4
		next.Unlock()
		for pb.Next() {
			k := i % len(ks)
			if _, err := s.Create(ctx, ks[k], storebench.Binding(k), time.Hour); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkCountBindings is what hashed placement's bindings bound costs a
// new session on the memory store: a lock of each shard, 8 backends.
func BenchmarkCountBindings(b *testing.B) {
	s := mustNew(b, 1_000_000, Options{SweepInterval: time.Hour})
	defer s.Close()
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = fmt.Sprintf("llm/vllm-%d/u%d", i, i)
	}
	for i := range 100_000 {
		s.Create(ctx, fmt.Sprintf("%032x", i), store.Binding{Pod: ids[i%len(ids)]}, time.Hour)
	}
	n := make([]int, len(ids))
	b.ReportAllocs()
	for b.Loop() {
		s.CountBindings(ids, n)
	}
}
