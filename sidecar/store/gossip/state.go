package gossip

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/internal/table"
)

// The local state: a bounded table from key to entry, split into shards so
// that a sweep or a state transfer never holds one lock over a million
// entries, and so that lookups on different sessions rarely contend.
//
// An entry is 40 bytes plus its 16-byte key, no pointers, in the slots of
// internal/table (about 70 bytes a binding with the index, at a million):
// backend IDs are interned per shard (a uint32 instead of a string
// header), times are unix ms, and the refresh bookkeeping is one uint32
// and a flag bit.
//
// Eviction is the table's CLOCK, by local use: a local Lookup or Create
// marks an entry; values merged from peers and tombstones do not. The
// entry evicted is the first the hand finds unmarked since its last pass,
// or expired: an approximation of least recently used on this replica,
// whatever the expiries (a long TTL buys no protection). Sessions this
// replica served (flagLocal, kept for the entry's life) are spared while
// the hand finds an unmarked entry from the ring within a short scan, so a
// flood of records from the ring, forged or not, evicts other such
// records, never the sessions served here.

const (
	flagTomb  = 1 << iota // the binding was deleted (compare-and-delete)
	flagDirty             // the key waits in shard.dirty for a refresh announcement
	// flagLocal: this replica created or served the session. Eviction
	// takes entries without it first, so records from the ring (a flood
	// of them included) never push out the sessions this replica serves.
	flagLocal
)

// announceTick is the resolution of entry.announced.
const announceTick = 100 // ms

// maxShards bounds the shard count; small stores (tests, tiny maxEntries)
// keep fewer shards so that eviction, which is per shard, chooses among
// many entries.
const (
	maxShards       = 64
	minShardEntries = 4096 // per shard at maxEntries
)

type entry struct {
	gen     uint64
	created int64 // unix ms
	expires int64 // unix ms, local clock
	pod     uint32
	prefill uint32
	// announced is the expiry the ring last heard for this binding, in
	// announceTick units since state.epoch: a refresh is announced again
	// only once the local expiry runs a quarter TTL ahead of it.
	announced uint32
	flags     uint8
}

type shard struct {
	mu    sync.Mutex
	t     table.Table[entry]
	names table.Names
	// tombs counts, per name ID, the tombstones naming it: a tombstone
	// keeps its binding's names (the merge compares them), and
	// countBindings takes them off the names' references.
	tombs map[uint32]int
	dirty []key
}

type state struct {
	shards  []shard
	mask    uint16
	epoch   int64 // unix ms; origin of entry.announced
	max     int64 // maxEntries, tombstones included
	count   atomic.Int64
	live    atomic.Int64
	evicted atomic.Uint64
}

// pair is a key with a copy of its value, handed out of the locks.
type pair struct {
	k key
	v value
}

func newState(maxEntries int, epoch int64) *state {
	n := 1
	for n < maxShards && maxEntries/(2*n) >= minShardEntries {
		n *= 2
	}
	s := &state{shards: make([]shard, n), mask: uint16(n - 1), epoch: epoch, max: int64(max(maxEntries, 1))}
	return s
}

func (s *state) shard(k key) *shard {
	return &s.shards[(uint16(k[0])<<8|uint16(k[1]))&s.mask]
}

func (s *state) ticks(ms int64) uint32 {
	t := (ms - s.epoch) / announceTick
	return uint32(min(max(t, 0), math.MaxUint32))
}

func (s *state) fromTicks(t uint32) int64 { return s.epoch + int64(t)*announceTick }

// lookup returns k's live binding; with refresh it slides the expiry to
// now+ttl and queues a refresh announcement when the ring's view of the
// expiry has fallen a quarter TTL behind.
func (s *state) lookup(k key, now, ttl int64, refresh bool) (value, bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var e *entry
	if refresh {
		e = sh.t.Use(k)
	} else {
		e = sh.t.Get(k)
	}
	if e == nil || e.flags&flagTomb != 0 || e.expires <= now {
		return value{}, false
	}
	if refresh {
		e.flags |= flagLocal
		e.expires = max(e.expires, now+ttl)
		if e.flags&flagDirty == 0 && e.expires-s.fromTicks(e.announced) >= ttl/4 {
			e.flags |= flagDirty
			sh.dirty = append(sh.dirty, k)
		}
	}
	return sh.value(e), true
}

// create commits v (expiring at now+ttl) unless k has a live binding, which
// it returns instead. Over a tombstone of generation g, v takes at least
// generation g+1: a creation after a delete must supersede the deleted
// binding on every replica, or the tombstone would win the merge.
func (s *state) create(k key, v value, now, ttl int64) (value, bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.t.Get(k)
	if e != nil && e.flags&flagTomb == 0 && e.expires > now {
		return sh.value(e), false
	}
	if e != nil && e.flags&flagTomb != 0 && e.gen >= v.Gen {
		v.Gen = store.NextGeneration(e.gen)
	}
	v.Tomb = false
	v.Expires = now + ttl
	s.put(sh, k, v, now, true)
	return v, true
}

// compareAndDelete turns k's live binding into a tombstone if it still is
// (gen, pod, prefill). The tombstone outlives every copy of the binding the
// ring may still hold: twice the binding's remaining TTL plus grace.
func (s *state) compareAndDelete(k key, gen uint64, pod, prefill string, now, grace int64) (value, bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.t.Get(k)
	if e == nil || e.flags&flagTomb != 0 || e.expires <= now || e.gen != gen ||
		sh.names.Name(e.pod) != pod || sh.names.Name(e.prefill) != prefill {
		return value{}, false
	}
	e.flags = flagTomb | e.flags&flagLocal
	sh.entomb(e)
	e.expires = now + 2*(e.expires-now) + grace
	e.announced = s.ticks(e.expires)
	s.live.Add(-1)
	return sh.value(e), true
}

// applyResult says what merging a remote value did.
type applyResult uint8

const (
	applyStale    applyResult = iota // expired, or nothing newer than what is held
	applyExtended                    // same binding, later expiry taken
	applyAdopted                     // nothing live was held; the value was taken
	applyReplaced                    // the value beat a different binding (a conflict)
	applyRejected                    // the held binding beat the value (a conflict)
)

// apply merges a remote value into k with merge, the rule every replica
// converges by, and says what that did. On applyRejected it also returns
// the winner held here, for a read-repair reply to the sender.
func (s *state) apply(k key, in value, now int64) (applyResult, value) {
	if in.Expires <= now {
		return applyStale, value{}
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.t.Get(k)
	if e == nil || e.expires <= now {
		s.put(sh, k, in, now, false)
		return applyAdopted, value{}
	}
	cur := sh.value(e)
	won := merge(cur, in)
	switch {
	case won == cur && sameIdentity(in, cur):
		return applyStale, value{}
	case won == cur:
		return applyRejected, cur
	case !sameIdentity(won, cur):
		s.put(sh, k, won, now, false)
		return applyReplaced, value{}
	}
	// The same binding with a later expiry: a refresh.
	e.expires = won.Expires
	e.announced = max(e.announced, s.ticks(won.Expires))
	return applyExtended, value{}
}

// put stores v under k, replacing whatever is there (the caller holds the
// lock and has decided v wins). local says this replica created or
// served it: the entry is marked as used (the CLOCK's reference mark) and
// as served here (flagLocal, which eviction spares); a session this
// replica served stays marked as such whatever replaces its binding. A new
// key past maxEntries evicts one entry of this shard: the bound is global,
// exceeded at most by one entry per shard that happened to be empty. The
// ring already knows v's expiry (v was just broadcast or received).
func (s *state) put(sh *shard, k key, v value, now int64, local bool) {
	if old := sh.t.Get(k); old != nil {
		sh.drop(*old)
		if old.flags&flagTomb == 0 {
			s.live.Add(-1)
		}
		local = local || old.flags&flagLocal != 0
	} else {
		if s.count.Load() >= s.max {
			s.evict(sh, now)
		}
		s.count.Add(1)
	}
	e := entry{
		gen:       v.Gen,
		created:   v.Created,
		expires:   v.Expires,
		pod:       sh.names.Intern(v.Pod),
		prefill:   sh.names.Intern(v.Prefill),
		announced: s.ticks(v.Expires),
	}
	if v.Tomb {
		e.flags = flagTomb
		sh.entomb(&e)
	} else {
		s.live.Add(1)
	}
	if local {
		e.flags |= flagLocal
	}
	sh.t.Put(k, e, local)
}

// evict removes one entry of sh: the first the CLOCK hand finds expired,
// or not used locally since it last passed and never served here; a
// session served here goes only when the hand finds nothing else nearby
// (see the top of this file).
func (s *state) evict(sh *shard, now int64) {
	_, e, ok := sh.t.EvictSparing(
		func(e *entry) bool { return e.expires <= now },
		func(e *entry) bool { return e.flags&flagLocal != 0 })
	if !ok {
		return
	}
	s.count.Add(-1)
	sh.drop(e)
	if e.flags&flagTomb == 0 {
		s.live.Add(-1)
	}
	s.evicted.Add(1)
}

// sweep drops every entry whose expiry has passed on this replica's clock,
// one shard lock at a time. It returns how many live bindings expired.
func (s *state) sweep(now int64) (expired int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.t.Range(func(_ key, e *entry) bool {
			if e.expires > now {
				return true
			}
			s.count.Add(-1)
			sh.drop(*e)
			if e.flags&flagTomb == 0 {
				s.live.Add(-1)
				expired++
			}
			return false
		})
		if sh.t.Len() == 0 && cap(sh.dirty) > 1024 {
			sh.dirty = nil
		}
		sh.mu.Unlock()
	}
	return expired
}

// takeDirty returns the live bindings whose refreshed expiry the ring has
// not heard yet, and marks that expiry as announced.
func (s *state) takeDirty(now int64) []pair {
	var out []pair
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, k := range sh.dirty {
			e := sh.t.Get(k)
			if e == nil || e.flags&flagDirty == 0 {
				continue
			}
			e.flags &^= flagDirty
			if e.flags&flagTomb == 0 && e.expires > now {
				e.announced = s.ticks(e.expires)
				out = append(out, pair{k, sh.value(e)})
			}
		}
		sh.dirty = sh.dirty[:0]
		sh.mu.Unlock()
	}
	return out
}

// snapshot copies shard i's unexpired entries, tombstones included (a
// joining replica must learn deletes too).
func (s *state) snapshot(i int, now int64) []pair {
	sh := &s.shards[i]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := make([]pair, 0, sh.t.Len())
	sh.t.Range(func(k key, e *entry) bool {
		if e.expires > now {
			out = append(out, pair{k, sh.value(e)})
		}
		return true
	})
	return out
}

// len counts bindings that are not tombstones; expired ones count until
// the next sweep.
func (s *state) len() int { return int(s.live.Load()) }

func (sh *shard) value(e *entry) value {
	return value{
		Gen:     e.gen,
		Created: e.created,
		Pod:     sh.names.Name(e.pod),
		Prefill: sh.names.Name(e.prefill),
		Tomb:    e.flags&flagTomb != 0,
		Expires: e.expires,
	}
}

func (sh *shard) drop(e entry) {
	if e.flags&flagTomb != 0 {
		for _, id := range [2]uint32{e.pod, e.prefill} {
			if sh.tombs[id]--; sh.tombs[id] <= 0 {
				delete(sh.tombs, id)
			}
		}
	}
	sh.names.Release(e.pod)
	sh.names.Release(e.prefill)
}

// entomb counts e, now a tombstone, in sh.tombs.
func (sh *shard) entomb(e *entry) {
	if sh.tombs == nil {
		sh.tombs = make(map[uint32]int)
	}
	for _, id := range [2]uint32{e.pod, e.prefill} {
		if id != 0 { // the empty name is never counted
			sh.tombs[id]++
		}
	}
}

// countBindings sets n[i] to the live bindings naming ids[i]: the names'
// references less the tombstones', a shard lock at a time. Expired
// bindings count until the sweep (every second) removes them.
func (s *state) countBindings(ids []string, n []int) {
	clear(n)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j, id := range ids {
			n[j] += sh.names.Refs(id) - sh.tombs[sh.names.ID(id)]
		}
		sh.mu.Unlock()
	}
}
