package table

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

type val struct{ a, b uint64 }

func key(i int) Key {
	var k Key
	binary.BigEndian.PutUint64(k[8:], uint64(i))
	return k
}

// check compares t with the model: the same entries, the same values, a
// consistent count, and every index word reachable from its home.
func check(t *testing.T, tb *Table[val], model map[Key]val) {
	t.Helper()
	if tb.Len() != len(model) {
		t.Fatalf("Len %d, model %d", tb.Len(), len(model))
	}
	for k, v := range model {
		if p := tb.Get(k); p == nil || *p != v {
			t.Fatalf("Get(%x) = %v, want %v", k, p, v)
		}
	}
	seen := 0
	tb.Range(func(k Key, v *val) bool {
		if mv, ok := model[k]; !ok || mv != *v {
			t.Fatalf("Range yields %x=%v, model %v %v", k, *v, mv, ok)
		}
		seen++
		return true
	})
	if seen != len(model) {
		t.Fatalf("Range saw %d of %d", seen, len(model))
	}
	words := 0
	for _, x := range tb.index {
		if x != 0 {
			words++
		}
	}
	if words != len(model) {
		t.Fatalf("%d index words for %d entries", words, len(model))
	}
}

// TestAgainstMap runs random puts, deletes, evictions and sweeps against
// a Go map, over few enough keys that every operation often hits.
func TestAgainstMap(t *testing.T) {
	for _, keys := range []int{10, 300, 5000} {
		t.Run(fmt.Sprint(keys, " keys"), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(keys), 1))
			var tb Table[val]
			model := map[Key]val{}
			for op := range 200_000 {
				k := key(r.IntN(keys))
				switch x := r.IntN(100); {
				case x < 50:
					v := val{r.Uint64(), uint64(op)}
					if p := tb.Put(k, v, r.IntN(2) == 0); *p != v {
						t.Fatalf("Put returned %v, want %v", *p, v)
					}
					model[k] = v
				case x < 75:
					v, ok := tb.Delete(k)
					mv, mok := model[k]
					if ok != mok || v != mv {
						t.Fatalf("Delete(%x) = %v %v, model %v %v", k, v, ok, mv, mok)
					}
					delete(model, k)
				case x < 85:
					p := tb.Use(k)
					if mv, in := model[k]; (p != nil) != in || (in && *p != mv) {
						t.Fatalf("Use(%x) = %v, model %v %v", k, p, mv, in)
					}
				case x < 95:
					ek, ev, ok := tb.Evict(nil)
					if ok != (len(model) > 0) {
						t.Fatalf("Evict ok=%v with %d entries", ok, len(model))
					}
					if ok {
						if mv, in := model[ek]; !in || mv != ev {
							t.Fatalf("evicted %x=%v, model %v %v", ek, ev, mv, in)
						}
						delete(model, ek)
					}
				case x < 96:
					// A sweep that drops most entries (and shrinks the table).
					cut := r.Uint64()
					tb.Range(func(k Key, v *val) bool {
						keep := v.a < cut/4
						if !keep {
							delete(model, k)
						}
						return keep
					})
				default:
					check(t, &tb, model)
				}
				if _, in := model[k]; (tb.Get(k) != nil) != in {
					t.Fatalf("op %d: key %x held %v, model %v", op, k, !in, in)
				}
			}
			check(t, &tb, model)
		})
	}
}

// TestEvictSecondChance: entries used since the hand passed survive one
// more turn; unused and dead ones go first.
func TestEvictSecondChance(t *testing.T) {
	var tb Table[val]
	for i := range 4 {
		tb.Put(key(i), val{a: uint64(i)}, true)
	}
	// All four are marked: a full turn clears them, then slot 0 goes.
	if k, _, _ := tb.Evict(nil); k != key(0) {
		t.Fatalf("evicted %x, want key 0", k)
	}
	// 1..3 are now unmarked; use 1 again: 2 goes next, not 1.
	tb.Use(key(1))
	if k, _, _ := tb.Evict(nil); k != key(2) {
		t.Fatalf("evicted %x, want key 2 (key 1 was used)", k)
	}
	// A dead entry goes even when marked.
	tb.Put(key(9), val{a: 99}, true) // takes the freed slot of key 2
	tb.Use(key(3))
	if k, _, _ := tb.Evict(func(v *val) bool { return v.a == 3 }); k != key(3) {
		t.Fatalf("evicted %x, want the dead key 3", k)
	}
	// An entry put without use is unmarked: it goes before used ones.
	var t2 Table[val]
	t2.Put(key(1), val{}, true)
	t2.Put(key(2), val{}, false)
	if k, _, _ := t2.Evict(nil); k != key(2) {
		t.Fatalf("evicted %x, want the unused key 2", k)
	}
	var empty Table[val]
	if _, _, ok := empty.Evict(nil); ok {
		t.Fatal("evicted from an empty table")
	}
}

// TestEvictSparing: spared entries (sessions a replica serves) outlast a
// stream of unspared ones however many turns it runs, dead ones go
// anyway, and with only spared entries left (or more than maxSpared of
// them in a row) one of them goes.
func TestEvictSparing(t *testing.T) {
	spare := func(v *val) bool { return v.b == 1 }
	dead := func(v *val) bool { return v.a == 1 }
	const capacity, served = 200, 20
	var tb Table[val]
	for i := range served {
		tb.Put(key(i), val{b: 1}, true)
	}
	for i := served; i < 50*capacity; i++ {
		if tb.Len() >= capacity {
			if k, v, _ := tb.EvictSparing(dead, spare); spare(&v) {
				t.Fatalf("evicted spared key %x while %d unspared entries were held", k, tb.Len()-served)
			}
		}
		tb.Put(key(i), val{}, false)
	}
	for i := range served {
		if tb.Get(key(i)) == nil {
			t.Fatalf("spared key %d evicted", i)
		}
	}
	// A dead entry goes though it is spared and marked.
	var t1 Table[val]
	t1.Put(key(1), val{a: 1, b: 1}, true)
	t1.Put(key(2), val{}, false)
	if k, _, _ := t1.EvictSparing(dead, spare); k != key(1) {
		t.Fatalf("evicted %x, want the dead spared key 1", k)
	}
	// Only spared entries: one of them goes all the same.
	var t2 Table[val]
	t2.Put(key(1), val{b: 1}, true)
	t2.Put(key(2), val{b: 1}, false)
	if _, v, ok := t2.EvictSparing(nil, spare); !ok || !spare(&v) || t2.Len() != 1 {
		t.Fatalf("ok=%v len=%d: a table of spared entries must still evict", ok, t2.Len())
	}
	// More than maxSpared unmarked spared entries before an unspared one:
	// the first spared one goes, so one eviction stays bounded.
	var t3 Table[val]
	for i := range maxSpared + 10 {
		t3.Put(key(i), val{b: 1}, false)
	}
	t3.Put(key(1000), val{}, false)
	if k, _, _ := t3.EvictSparing(nil, spare); k != key(0) {
		t.Fatalf("evicted %x, want key 0 after passing %d spared entries", k, maxSpared)
	}
}

// TestEvictApproximatesLRU: with a bounded table under a stream of new
// keys and a hot set used between them, the hot set survives once the
// stream has run a few turns (at the start every entry is marked, and one
// eviction may clear them all and take the first).
func TestEvictApproximatesLRU(t *testing.T) {
	const capacity, hot = 1000, 100
	var tb Table[val]
	for i := range hot {
		tb.Put(key(i), val{}, true)
	}
	for i := hot; i < 50*capacity; i++ {
		if tb.Len() >= capacity {
			tb.Evict(nil)
		}
		tb.Put(key(i), val{}, true)
		h := key(i % hot)
		if tb.Use(h) != nil {
			continue
		}
		if i > 3*capacity {
			t.Fatalf("hot key %d evicted after %d inserts", i%hot, i)
		}
		tb.Put(h, val{}, true) // lost in the first turns: back in
	}
}

func TestShrinkAndReuse(t *testing.T) {
	var tb Table[val]
	for i := range 100_000 {
		tb.Put(key(i), val{a: uint64(i)}, false)
	}
	big := len(tb.index)
	tb.Range(func(_ Key, v *val) bool { return v.a%100 == 0 })
	if tb.Len() != 1000 || len(tb.index) >= big/10 || tb.high != 1000 {
		t.Fatalf("after dropping 99%%: %d entries, index %d (was %d), %d slots in use", tb.Len(), len(tb.index), big, tb.high)
	}
	for i := range 100_000 {
		if p := tb.Get(key(i)); (p != nil) != (i%100 == 0) || (p != nil && p.a != uint64(i)) {
			t.Fatalf("key %d after shrink: %v", i, p)
		}
	}
	// Freed slots are reused before new ones are taken.
	tb.Delete(key(500))
	tb.Put(key(-1), val{}, false)
	if tb.high != 1000 {
		t.Fatalf("a freed slot was not reused: %d slots handed out", tb.high)
	}
	tb.Range(func(Key, *val) bool { return false })
	if tb.Len() != 0 || tb.index != nil || tb.pages != nil {
		t.Fatal("an emptied table keeps its memory")
	}
}

// TestLoadFactor: the index stays between half and three-quarters full
// (once past its minimum size) as the table grows.
func TestLoadFactor(t *testing.T) {
	var tb Table[val]
	for i := range 200_000 {
		tb.Put(key(i), val{}, false)
		if n := tb.Len(); n > 2*minIndex {
			if load := float64(n) / float64(len(tb.index)); load > 0.75 || load < 0.45 {
				t.Fatalf("load %.2f at %d entries", load, n)
			}
		}
	}
}

func BenchmarkGet(b *testing.B) {
	var tb Table[val]
	const n = 1 << 16
	for i := range n {
		tb.Put(key(i), val{}, false)
	}
	b.ResetTimer()
	for i := range b.N {
		if tb.Get(key(i&(n-1))) == nil {
			b.Fatal("miss")
		}
	}
}
