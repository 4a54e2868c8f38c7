// Package table is the compact hash table under the memory and gossip
// stores: a map from a 16-byte Key to a small fixed-size value, built to
// hold millions of bindings at a few tens of bytes each, where a Go map of
// strings to pointers costs two hundred.
//
// Entries live in slots, in pages of slotsPerPage, with no pointers when
// the value has none, so the garbage collector never scans them. The index
// is a separate open-addressing array (linear probing) of 8-byte words,
// each a 32-bit hash tag and a slot number: a probe compares tags without
// touching the slots, and the index, not the entries, pays for the load
// factor's slack. The index grows by half (load between 1/2 and 3/4), and
// shrinks with the slots when a sweep leaves them three-quarters empty.
//
// Eviction is CLOCK (second chance): each slot has a reference mark, set
// when the caller says a use is local (Use, Put with use); Evict advances a
// hand over the slots, clears the marks it passes and removes the first
// entry that is unmarked or that the caller calls dead (expired). That
// approximates least-recently-used without a list through the entries.
//
// The hash is seeded per table, so keys chosen to collide (a session key
// ground until its store key falls in one bucket) cannot lengthen probes.
//
// A Table is not safe for concurrent use; the stores lock per shard. Its
// zero value is an empty table.
package table

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
)

const (
	slotsPerPage = 512 // a multiple of 64, for the bitmaps
	firstPage    = 64  // the first page starts here and doubles to slotsPerPage
	minIndex     = 8
)

type slot[V any] struct {
	key Key
	val V
}

// Table maps Keys to values of type V, which should hold no pointers.
type Table[V any] struct {
	seed0, seed1 uint64
	// index: 0 is empty; otherwise tag<<32 | slot+1.
	index []uint64
	pages [][]slot[V]
	used  []uint64 // a bit per slot: holds an entry
	ref   []uint64 // a bit per slot: used locally since the hand last passed
	n     int      // entries
	slots uint32   // slots allocated in pages
	high  uint32   // slots handed out at least once: [0, high)
	free  uint32   // head of the free list (slot+1; 0: empty), threaded through the free slots' keys
	hand  uint32   // the clock hand
}

// Len counts the entries.
func (t *Table[V]) Len() int { return t.n }

// Get returns k's value, or nil. The pointer is valid until the next call
// that changes the table.
func (t *Table[V]) Get(k Key) *V {
	if _, s, ok := t.find(&k, t.tag(&k)); ok {
		return &t.slot(s).val
	}
	return nil
}

// Use is Get that also marks the entry as used locally (for eviction).
func (t *Table[V]) Use(k Key) *V {
	if _, s, ok := t.find(&k, t.tag(&k)); ok {
		setBit(t.ref, s)
		return &t.slot(s).val
	}
	return nil
}

// Put sets k's value, adding the entry if k is absent, and returns a
// pointer to it (valid until the next change). With use it marks the entry
// as used locally; without, a new entry starts unmarked and an existing one
// keeps its mark.
func (t *Table[V]) Put(k Key, v V, use bool) *V {
	if (t.n+1)*4 > len(t.index)*3 {
		t.growIndex()
	}
	tg := t.tag(&k)
	pos, s, ok := t.find(&k, tg)
	if !ok {
		s = t.alloc()
		t.slot(s).key = k
		setBit(t.used, s)
		clearBit(t.ref, s)
		t.index[pos] = uint64(tg)<<32 | uint64(s+1)
		t.n++
	}
	if use {
		setBit(t.ref, s)
	}
	sl := t.slot(s)
	sl.val = v
	return &sl.val
}

// Delete removes k and returns the value it had.
func (t *Table[V]) Delete(k Key) (V, bool) {
	pos, s, ok := t.find(&k, t.tag(&k))
	if !ok {
		var zero V
		return zero, false
	}
	v := t.slot(s).val
	t.remove(pos, s)
	return v, true
}

// Evict removes one entry and returns it: from the clock hand on, the
// first entry that dead reports (nil: none is) or that is not marked as
// used since the hand last passed it; the marks it passes are cleared. It
// returns false only on an empty table.
func (t *Table[V]) Evict(dead func(*V) bool) (Key, V, bool) {
	return t.EvictSparing(dead, nil)
}

// maxSpared bounds how many unmarked entries EvictSparing passes over
// because spare keeps them, so that one eviction stays cheap however many
// entries are spared.
const maxSpared = 64

// EvictSparing is Evict that also passes over unmarked entries spare
// reports (nil: none), such as the sessions a replica serves: it removes
// the first unmarked entry spare does not keep, or, once it has passed
// maxSpared spared entries (or a whole turn finds no other), the first
// spared entry it passed. A dead entry goes whatever spare says.
func (t *Table[V]) EvictSparing(dead, spare func(*V) bool) (Key, V, bool) {
	var (
		spared   int
		fallback uint32 // slot+1 of the first spared entry passed; 0: none
	)
	// Within one turn every mark is cleared, so the second finds an entry.
	for range 2*t.high + 1 {
		if t.n == 0 {
			break
		}
		if t.hand >= t.high {
			t.hand = 0
		}
		s := t.hand
		t.hand++
		if !bit(t.used, s) {
			continue
		}
		sl := t.slot(s)
		if dead != nil && dead(&sl.val) {
			return t.evictSlot(s)
		}
		if bit(t.ref, s) {
			clearBit(t.ref, s)
			continue
		}
		if spare != nil && spare(&sl.val) {
			if spared == 0 {
				fallback = s + 1
			}
			if spared++; spared < maxSpared {
				continue
			}
			return t.evictSlot(fallback - 1)
		}
		return t.evictSlot(s)
	}
	if fallback != 0 && bit(t.used, fallback-1) {
		return t.evictSlot(fallback - 1)
	}
	var zero V
	return Key{}, zero, false
}

// evictSlot removes the entry in slot s and returns it.
func (t *Table[V]) evictSlot(s uint32) (Key, V, bool) {
	sl := t.slot(s)
	k, v := sl.key, sl.val
	pos, _, _ := t.find(&k, t.tag(&k))
	t.remove(pos, s)
	return k, v, true
}

// Range calls f for every entry, in slot order, and removes those for
// which f returns false. f must not call the table. Afterwards the table
// shrinks if it is mostly empty (after removals here or by Delete).
func (t *Table[V]) Range(f func(k Key, v *V) (keep bool)) {
	for s := range t.high {
		if !bit(t.used, s) {
			continue
		}
		sl := t.slot(s)
		if f(sl.key, &sl.val) {
			continue
		}
		k := sl.key
		pos, _, _ := t.find(&k, t.tag(&k))
		t.remove(pos, s)
	}
	t.maybeShrink()
}

// tag is k's seeded 32-bit hash: the index word's tag and, scaled to the
// index's length, its home position.
func (t *Table[V]) tag(k *Key) uint32 {
	a := binary.LittleEndian.Uint64(k[:8])
	b := binary.LittleEndian.Uint64(k[8:])
	hi, lo := bits.Mul64(a^t.seed0, b^t.seed1)
	h := hi ^ lo
	return uint32(h>>32) ^ uint32(h)
}

func (t *Table[V]) home(tag uint32) int {
	return int(uint64(tag) * uint64(len(t.index)) >> 32)
}

// find probes for k: its index position and slot if present, else the
// empty position where it would go (-1 with no index).
func (t *Table[V]) find(k *Key, tg uint32) (pos int, s uint32, ok bool) {
	n := len(t.index)
	if n == 0 {
		return -1, 0, false
	}
	for i := t.home(tg); ; {
		x := t.index[i]
		if x == 0 {
			return i, 0, false
		}
		if uint32(x>>32) == tg {
			if s := uint32(x) - 1; t.slot(s).key == *k {
				return i, s, true
			}
		}
		if i++; i == n {
			i = 0
		}
	}
}

func (t *Table[V]) slot(s uint32) *slot[V] {
	return &t.pages[s/slotsPerPage][s%slotsPerPage]
}

// alloc returns a free slot: a freed one first, then a new one.
func (t *Table[V]) alloc() uint32 {
	if t.free != 0 {
		s := t.free - 1
		t.free = binary.LittleEndian.Uint32(t.slot(s).key[:4])
		return s
	}
	if t.high == t.slots {
		t.growSlots()
	}
	t.high++
	return t.high - 1
}

// remove frees slot s, whose index word is at pos.
func (t *Table[V]) remove(pos int, s uint32) {
	t.unindex(pos)
	clearBit(t.used, s)
	clearBit(t.ref, s)
	sl := t.slot(s)
	*sl = slot[V]{}
	binary.LittleEndian.PutUint32(sl.key[:4], t.free)
	t.free = s + 1
	t.n--
}

// unindex empties index position i and shifts back the words after it
// whose probe sequence passed through it (deletion without tombstones).
func (t *Table[V]) unindex(i int) {
	n := len(t.index)
	for {
		t.index[i] = 0
		j := i
		for {
			if j++; j == n {
				j = 0
			}
			x := t.index[j]
			if x == 0 {
				return
			}
			// x may move to i if i lies on its probe path [home, j).
			h := t.home(uint32(x >> 32))
			if (i < j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
				t.index[i] = x
				i = j
				break
			}
		}
	}
}

// growIndex makes the index half as large again (at least room for one
// more entry at load 3/4) and re-places every word by its tag.
func (t *Table[V]) growIndex() {
	if t.seed0 == 0 && t.seed1 == 0 {
		t.seed0, t.seed1 = rand.Uint64()|1, rand.Uint64()
	}
	t.reindex(max(minIndex, len(t.index)*3/2, (t.n+1)*4/3+1))
}

func (t *Table[V]) reindex(size int) {
	old := t.index
	t.index = make([]uint64, size)
	for _, x := range old {
		if x == 0 {
			continue
		}
		i := t.home(uint32(x >> 32))
		for t.index[i] != 0 {
			if i++; i == size {
				i = 0
			}
		}
		t.index[i] = x
	}
}

// growSlots adds a page, or doubles the first page while it is small.
func (t *Table[V]) growSlots() {
	switch {
	case len(t.pages) == 0:
		t.pages = [][]slot[V]{make([]slot[V], firstPage)}
	case len(t.pages) == 1 && len(t.pages[0]) < slotsPerPage:
		p := make([]slot[V], 2*len(t.pages[0]))
		copy(p, t.pages[0])
		t.pages[0] = p
	default:
		t.pages = append(t.pages, make([]slot[V], slotsPerPage))
	}
	t.slots = uint32((len(t.pages)-1)*slotsPerPage + len(t.pages[len(t.pages)-1]))
	words := int(t.slots / 64)
	t.used = append(t.used, make([]uint64, words-len(t.used))...)
	t.ref = append(t.ref, make([]uint64, words-len(t.ref))...)
}

// maybeShrink rebuilds the table at its size once three quarters of its
// slots are free (after a sweep of many expired entries), so memory
// follows the bindings held down as well as up.
func (t *Table[V]) maybeShrink() {
	if t.high <= firstPage || uint32(t.n)*4 > t.high {
		return
	}
	nt := Table[V]{seed0: t.seed0, seed1: t.seed1}
	if t.n > 0 {
		nt.index = make([]uint64, max(minIndex, t.n*2))
	}
	for s := range t.high {
		if !bit(t.used, s) {
			continue
		}
		sl := t.slot(s)
		nt.Put(sl.key, sl.val, bit(t.ref, s))
	}
	*t = nt
}

func bit(b []uint64, s uint32) bool { return b[s/64]&(1<<(s%64)) != 0 }
func setBit(b []uint64, s uint32)   { b[s/64] |= 1 << (s % 64) }
func clearBit(b []uint64, s uint32) { b[s/64] &^= 1 << (s % 64) }
