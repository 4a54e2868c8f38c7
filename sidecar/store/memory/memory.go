// Package memory is the per-process binding store: a sharded map with a
// sliding TTL and a hard entry cap. It is the default store and the
// reference semantics the shared stores follow.
package memory

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
)

// shardCount spreads lock contention; a power of two.
const shardCount = 64

// Store is a bounded, TTL-sliding in-memory store. The zero value is not
// usable; call New.
type Store struct {
	shards   [shardCount]shard
	seed     maphash.Seed
	perShard int
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
}

// shard is a map plus an intrusive doubly linked list in recency order
// (head = most recently used), so eviction of the least recently used
// entry is O(1) and needs no extra allocation per binding.
type shard struct {
	mu         sync.Mutex
	m          map[string]*entry
	head, tail *entry
}

type entry struct {
	key        string
	b          store.Binding
	expires    time.Time
	prev, next *entry
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
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
	}
	go s.sweepLoop(o.SweepInterval)
	return s, nil
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&(shardCount-1)]
}

// Lookup returns the live binding and slides its expiry to now+ttl.
func (s *Store) Lookup(_ context.Context, key string, ttl time.Duration) (store.Binding, bool, error) {
	sh := s.shard(key)
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.live(key, now)
	if e == nil {
		return store.Binding{}, false, nil
	}
	e.expires = now.Add(ttl)
	sh.moveToFront(e)
	return e.binding(), true, nil
}

// Create stores b unless a live binding exists, and returns the one that holds.
func (s *Store) Create(_ context.Context, key string, b store.Binding, ttl time.Duration) (store.Binding, error) {
	sh := s.shard(key)
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.live(key, now); e != nil {
		return e.binding(), nil
	}
	e := &entry{key: key, b: b, expires: now.Add(ttl)}
	e.b.ExpiresAt = time.Time{}
	sh.m[key] = e
	sh.pushFront(e)
	for len(sh.m) > s.perShard {
		sh.remove(sh.tail)
	}
	return e.binding(), nil
}

// CompareAndDelete removes key's binding only while it is still old.
func (s *Store) CompareAndDelete(_ context.Context, key string, old store.Binding) (bool, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil || !e.b.SameTarget(old) {
		return false, nil
	}
	sh.remove(e)
	return true, nil
}

// Peek returns the live binding without refreshing it.
func (s *Store) Peek(_ context.Context, key string) (store.Binding, bool, error) {
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.live(key, time.Now()); e != nil {
		return e.binding(), true, nil
	}
	return store.Binding{}, false, nil
}

// Len counts stored bindings, including expired ones not yet swept.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Close stops the sweeper. It is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// sweepLoop frees expired entries, one shard per tick, so no tick holds a
// lock for long and every shard is swept once per interval.
func (s *Store) sweepLoop(interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval / shardCount)
	defer t.Stop()
	for i := 0; ; i = (i + 1) % shardCount {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.shards[i].sweep(time.Now())
		}
	}
}

// Sweep frees every expired entry now (tests call it in a synctest bubble).
func (s *Store) Sweep() {
	now := time.Now()
	for i := range s.shards {
		s.shards[i].sweep(now)
	}
}

func (sh *shard) sweep(now time.Time) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, e := range sh.m {
		if !now.Before(e.expires) {
			sh.remove(e)
		}
	}
}

// live returns key's entry if it has not expired; an expired one is removed.
func (sh *shard) live(key string, now time.Time) *entry {
	e := sh.m[key]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		sh.remove(e)
		return nil
	}
	return e
}

func (e *entry) binding() store.Binding {
	b := e.b
	b.ExpiresAt = e.expires
	return b
}

func (sh *shard) pushFront(e *entry) {
	e.prev, e.next = nil, sh.head
	if sh.head != nil {
		sh.head.prev = e
	}
	sh.head = e
	if sh.tail == nil {
		sh.tail = e
	}
}

func (sh *shard) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		sh.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		sh.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (sh *shard) moveToFront(e *entry) {
	if sh.head == e {
		return
	}
	sh.unlink(e)
	sh.pushFront(e)
}

func (sh *shard) remove(e *entry) {
	sh.unlink(e)
	delete(sh.m, e.key)
}
