// Package memory is the per-process binding store: a sharded table with a
// sliding TTL and a hard entry cap. It is the default store and the
// reference semantics the shared stores follow.
//
// A binding costs about 60 bytes at a million (BenchmarkBytesPerBinding):
// the key is held in its 16 bytes (not as a 32-character hex string),
// backend IDs are interned per shard (a uint32 instead of a string), times
// are int64 nanoseconds, and the entries sit in the pointer-free slots of
// internal/table, whose index, not the entries, pays for the load factor.
package memory

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/internal/table"
)

// shardCount spreads lock contention; a power of two.
const shardCount = 64

// Store is a bounded, TTL-sliding in-memory store. The zero value is not
// usable; call New.
type Store struct {
	shards   [shardCount]shard
	seed     maphash.Seed
	perShard int
	// base is the origin of entry.expires: the store's expiries follow
	// the monotonic clock, so a step of the wall clock (NTP, a VM resumed)
	// neither expires nor prolongs bindings.
	base time.Time
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// shard is a table of bindings and the backend names they use. Eviction
// is the table's CLOCK: a Lookup or Create marks an entry as used, and the
// entry evicted is the first the hand finds unmarked since its last pass
// (an expired one goes at once), an approximation of least recently used.
type shard struct {
	mu    sync.Mutex
	t     table.Table[entry]
	names table.Names
}

// entry is a binding in 32 bytes, no pointers.
type entry struct {
	expires      int64 // ns since Store.base
	created      int64 // unix ns; 0: the binding had no Created
	gen          uint64
	pod, prefill uint32 // in shard.names
}

// Options tune a Store beyond its config.
type Options struct {
	// SweepInterval is how often expired entries are freed (they are never
	// returned in between). Default 1s.
	SweepInterval time.Duration
}

// New returns a Store of at most cfg.MaxEntries bindings (the least
// recently used go first when a new one would exceed it) and starts its
// sweeper; Close stops it. It has the shape of every store's New; nothing
// here can fail or wait, so ctx is unused and the error always nil.
func New(_ context.Context, cfg *config.MemoryStore, o Options) (*Store, error) {
	maxEntries := max(cfg.MaxEntries, 1)
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	s := &Store{
		seed: maphash.MakeSeed(),
		// Round the per-shard cap up so the total is never below MaxEntries
		// and never more than shardCount-1 above it.
		perShard: (maxEntries + shardCount - 1) / shardCount,
		base:     time.Now(),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go s.sweepLoop(o.SweepInterval)
	return s, nil
}

func (s *Store) shard(key string) *shard {
	sh, _ := s.shardOf(key)
	return sh
}

// shardOf converts key at the store's boundary and picks its shard.
func (s *Store) shardOf(key string) (*shard, table.Key) {
	k := table.KeyOf(key)
	h := maphash.Comparable(s.seed, binary.LittleEndian.Uint64(k[:8])^binary.LittleEndian.Uint64(k[8:]))
	return &s.shards[h&(shardCount-1)], k
}

// now is the store's clock: nanoseconds since base, monotonic.
func (s *Store) now() int64 { return int64(time.Since(s.base)) }

// expiry is now+ttl, saturated instead of wrapping into the past.
func expiry(now int64, ttl time.Duration) int64 {
	if int64(ttl) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(ttl)
}

// Lookup returns the live binding and slides its expiry to now+ttl.
func (s *Store) Lookup(_ context.Context, key string, ttl time.Duration) (store.Binding, bool, error) {
	sh, k := s.shardOf(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.live(k, now, true)
	if e == nil {
		return store.Binding{}, false, nil
	}
	e.expires = expiry(now, ttl)
	return s.binding(sh, e), true, nil
}

// Create stores b unless a live binding exists, and returns the one that holds.
func (s *Store) Create(_ context.Context, key string, b store.Binding, ttl time.Duration) (store.Binding, error) {
	sh, k := s.shardOf(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.live(k, now, false); e != nil {
		return s.binding(sh, e), nil
	}
	for sh.t.Len() >= s.perShard {
		_, old, ok := sh.t.Evict(func(e *entry) bool { return e.expires <= now })
		if !ok {
			break
		}
		sh.release(old)
	}
	e := entry{expires: expiry(now, ttl), gen: b.Gen,
		pod: sh.names.Intern(b.Pod), prefill: sh.names.Intern(b.PrefillPod)}
	if !b.Created.IsZero() {
		e.created = b.Created.UnixNano()
	}
	return s.binding(sh, sh.t.Put(k, e, true)), nil
}

// CompareAndDelete removes key's binding only while it is still old.
func (s *Store) CompareAndDelete(_ context.Context, key string, old store.Binding) (bool, error) {
	sh, k := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.t.Get(k)
	if e == nil || e.gen != old.Gen || sh.names.Name(e.pod) != old.Pod || sh.names.Name(e.prefill) != old.PrefillPod {
		return false, nil
	}
	sh.delete(k)
	return true, nil
}

// Peek returns the live binding without refreshing it.
func (s *Store) Peek(_ context.Context, key string) (store.Binding, bool, error) {
	sh, k := s.shardOf(key)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.live(k, now, false); e != nil {
		return s.binding(sh, e), true, nil
	}
	return store.Binding{}, false, nil
}

// Len counts stored bindings, including expired ones not yet swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.Len()
		sh.mu.Unlock()
	}
	return n
}

// CountBindings sets n[i] to the bindings naming ids[i] (store.BindingCounter):
// the backend names' reference counts, a shard lock at a time.
func (s *Store) CountBindings(ids []string, n []int) {
	clear(n)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j, id := range ids {
			n[j] += sh.names.Refs(id)
		}
		sh.mu.Unlock()
	}
}

// Close stops the sweeper. It is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// sweepLoop frees expired entries: every shard once per interval, in one
// wake-up (a tick per shard woke an idle sidecar 64 times a second),
// yielding the thread between shards so that a sweep of a million
// bindings does not hold it for a whole pass while requests wait.
func (s *Store) sweepLoop(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		for i := range s.shards {
			s.shards[i].sweep(s.now())
			runtime.Gosched()
		}
	}
}

// Sweep frees every expired entry now (tests call it in a synctest bubble).
func (s *Store) Sweep() {
	now := s.now()
	for i := range s.shards {
		s.shards[i].sweep(now)
	}
}

func (sh *shard) sweep(now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.t.Range(func(_ table.Key, e *entry) bool {
		if e.expires > now {
			return true
		}
		sh.release(*e)
		return false
	})
}

// live returns key's entry if it has not expired (marked as used with
// use); an expired one is removed. The pointer is valid until the next
// change of the shard.
func (sh *shard) live(k table.Key, now int64, use bool) *entry {
	var e *entry
	if use {
		e = sh.t.Use(k)
	} else {
		e = sh.t.Get(k)
	}
	if e == nil {
		return nil
	}
	if e.expires <= now {
		sh.delete(k)
		return nil
	}
	return e
}

func (sh *shard) delete(k table.Key) {
	if e, ok := sh.t.Delete(k); ok {
		sh.release(e)
	}
}

func (sh *shard) release(e entry) {
	sh.names.Release(e.pod)
	sh.names.Release(e.prefill)
}

func (s *Store) binding(sh *shard, e *entry) store.Binding {
	b := store.Binding{
		Pod:        sh.names.Name(e.pod),
		PrefillPod: sh.names.Name(e.prefill),
		Gen:        e.gen,
		ExpiresAt:  s.base.Add(time.Duration(e.expires)),
	}
	if e.created != 0 {
		b.Created = time.Unix(0, e.created)
	}
	return b
}
