package redisstore

import (
	"context"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/memory"
)

// Hashed placement is bounded by the bindings each backend carries
// (store.BindingCounter). Redis cannot count them per backend: a binding's
// key expires on its own, and no count follows it down. So the store
// counts the bindings this replica has seen, looked up or created, in a
// local memory store with the same sliding TTL. With one replica that is
// every binding; with several it is a sample of each backend's share, the
// larger the more turns a conversation has (each turn lands on a random
// replica).

// seenEntries bounds the bindings the local count holds (about 60 bytes
// each). Past it the least recently seen go, and the count becomes a
// sample of the backends' shares, which is all the bound compares.
const seenEntries = 100_000

func newSeen() *memory.Store {
	// memory.New never fails.
	s, _ := memory.New(context.Background(), &config.MemoryStore{MaxEntries: seenEntries}, memory.Options{})
	return s
}

// see records that key is bound to b for ttl from now.
func (s *Store) see(key string, b store.Binding, ttl time.Duration) {
	ctx := context.Background()
	if old, ok, _ := s.seen.Lookup(ctx, key, ttl); ok {
		if old.SameTarget(b) {
			return
		}
		s.seen.CompareAndDelete(ctx, key, old)
	}
	s.seen.Create(ctx, key, b, ttl)
}

// CountBindings sets n[i] to the live bindings naming ids[i] among those
// this replica has seen (store.BindingCounter).
func (s *Store) CountBindings(ids []string, n []int) { s.seen.CountBindings(ids, n) }
