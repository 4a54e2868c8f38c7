// Package storebench is the workload that the stores' Go benchmarks and
// the scale benchmark (e2e/bench/scale) share, so that their figures of
// memory per binding measure the same thing: keys as the resolver makes
// them (session.StoreKey of a pool and a session key) and backend IDs as
// Kubernetes discovery makes them (namespace/name/uid), 100 distinct ones
// shared by the bindings as discovery's strings would be.
package storebench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
)

// PodIDs are 100 backend IDs shaped like Kubernetes pods.
var PodIDs = func() []string {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("llm/vllm-decode-7f9c8d-%05d/%08x-4e1f-4b8a-9c3d-%012x", i, i*7919, i*104729)
	}
	return ids
}()

// Pool is the benchmarks' pool identity.
const Pool = "default/llm"

// Key is the store key of session i of Pool, as the resolver computes it.
func Key(i int) string { return session.StoreKey(Pool, "session-"+strconv.Itoa(i)) }

// Binding is session i's binding.
func Binding(i int) store.Binding {
	return store.Binding{Pod: PodIDs[i%len(PodIDs)], Created: time.Now()}
}

// HeapAlloc is the live heap after a collection.
func HeapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Fill creates the bindings of sessions [from, to) in s with ttl. Each key
// is made as the resolver makes it, per request, so the store holds what
// it keeps of a key and nothing the caller keeps.
func Fill(s store.Store, from, to int, ttl time.Duration) error {
	ctx := context.Background()
	for i := from; i < to; i++ {
		if _, err := s.Create(ctx, Key(i), Binding(i), ttl); err != nil {
			return err
		}
	}
	return nil
}

// BytesPerBinding is the live heap that s grew by over the bindings of
// sessions [from, to), created by Fill, after a collection on both sides.
func BytesPerBinding(s store.Store, from, to int, ttl time.Duration) (float64, error) {
	before := HeapAlloc()
	if err := Fill(s, from, to, ttl); err != nil {
		return 0, err
	}
	after := HeapAlloc()
	return float64(int64(after)-int64(before)) / float64(to-from), nil
}

// CreateKeys are the keys the stores' Create benchmarks cycle through,
// built once: ten times the 100,000-binding cap those benchmarks set, so
// that once a store is full every Create evicts.
var CreateKeys = sync.OnceValue(func() []string {
	ks := make([]string, 1_000_000)
	for i := range ks {
		ks[i] = Key(i)
	}
	return ks
})
