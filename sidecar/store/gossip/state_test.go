package gossip

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func k(i int) key { return keyOf(fmt.Sprintf("%032x", i)) }

func TestKeyOf(t *testing.T) {
	hexKey := "00112233445566778899aabbccddeeff"
	if got := keyOf(hexKey); fmt.Sprintf("%x", got[:]) != hexKey {
		t.Fatalf("hex key not decoded: %x", got)
	}
	if a, b := keyOf("session-1"), keyOf("session-1"); a != b || a == keyOf("session-2") {
		t.Fatal("non-hex keys must hash deterministically and distinctly")
	}
}

func TestStateCreate(t *testing.T) {
	st := newState(100, 0)
	v, ok := st.create(k(1), value{Created: 10, Pod: "a"}, 10, 1000)
	if !ok || v.Expires != 1010 {
		t.Fatalf("create: %+v %v", v, ok)
	}
	if got, ok := st.create(k(1), value{Created: 20, Pod: "b"}, 20, 1000); ok || got.Pod != "a" {
		t.Fatalf("second create must return the live binding, got %+v %v", got, ok)
	}
	// Expired: absent, a new create takes it.
	if got, ok := st.create(k(1), value{Created: 2000, Pod: "c"}, 2000, 1000); !ok || got.Pod != "c" || got.Gen != 0 {
		t.Fatalf("create over an expired binding: %+v %v", got, ok)
	}
	// A delete then a create of the same generation: the create is bumped
	// past the tombstone, or the tombstone would win everywhere.
	if _, ok := st.compareAndDelete(k(1), 0, "c", "", 2100, 0); !ok {
		t.Fatal("compare-and-delete of the live binding failed")
	}
	if _, ok := st.lookup(k(1), 2100, 1000, true); ok {
		t.Fatal("deleted binding still found")
	}
	got, ok := st.create(k(1), value{Created: 2200, Pod: "d"}, 2200, 1000)
	if !ok || got.Gen != 1 {
		t.Fatalf("create over tombstone gen 0: %+v, want gen 1", got)
	}
	if st.len() != 1 {
		t.Fatalf("len %d", st.len())
	}
}

func TestStateCompareAndDelete(t *testing.T) {
	st := newState(100, 0)
	st.create(k(1), value{Gen: 3, Created: 1, Pod: "a", Prefill: "p"}, 0, 1000)
	for _, c := range []struct {
		gen          uint64
		pod, prefill string
	}{{2, "a", "p"}, {3, "b", "p"}, {3, "a", ""}} {
		if _, ok := st.compareAndDelete(k(1), c.gen, c.pod, c.prefill, 10, 0); ok {
			t.Fatalf("deleted with mismatched %+v", c)
		}
	}
	tomb, ok := st.compareAndDelete(k(1), 3, "a", "p", 400, 500)
	if !ok || !tomb.Tomb || tomb.Expires != 400+2*600+500 {
		t.Fatalf("tombstone %+v %v", tomb, ok)
	}
	// Late gossip of the deleted binding does not resurrect it.
	if res, _ := st.apply(k(1), value{Gen: 3, Created: 1, Pod: "a", Prefill: "p", Expires: 5000}, 500); res != applyRejected {
		t.Fatalf("late gossip of deleted binding: %v", res)
	}
	if _, ok := st.lookup(k(1), 500, 1000, false); ok {
		t.Fatal("resurrected")
	}
}

func TestStateRefreshCoalescing(t *testing.T) {
	st := newState(100, 0)
	const ttl = 4000
	st.create(k(1), value{Created: 0, Pod: "a"}, 0, ttl)
	// Lookups within a quarter TTL of the announced expiry stay local.
	for now := int64(100); now < 1000; now += 100 {
		st.lookup(k(1), now, ttl, true)
	}
	if d := st.takeDirty(1000); len(d) != 0 {
		t.Fatalf("refresh announced before a quarter TTL: %+v", d)
	}
	for now := int64(1000); now <= 1500; now += 100 {
		st.lookup(k(1), now, ttl, true)
	}
	d := st.takeDirty(1500)
	if len(d) != 1 || d[0].v.Expires != 1500+ttl {
		t.Fatalf("want one refresh to %d, got %+v", 1500+ttl, d)
	}
	if d := st.takeDirty(1600); len(d) != 0 {
		t.Fatalf("announced twice: %+v", d)
	}
	// A refresh heard from a peer counts as announced.
	st.apply(k(1), value{Created: 0, Pod: "a", Expires: 9000}, 1700)
	st.lookup(k(1), 1800, ttl, true)
	if d := st.takeDirty(1800); len(d) != 0 {
		t.Fatalf("re-announced what the ring already knows: %+v", d)
	}
}

func TestStateSweepAndEvict(t *testing.T) {
	st := newState(100, 0)
	for i := range 300 {
		st.create(k(i), value{Created: int64(i), Pod: fmt.Sprint("pod-", i%7)}, int64(i), 1000)
	}
	if n := st.shards[0].t.Len(); n != 100 || st.len() != 100 {
		t.Fatalf("bound: %d entries, len %d; want 100", n, st.len())
	}
	if st.evicted.Load() != 200 {
		t.Fatalf("evicted %d, want 200", st.evicted.Load())
	}
	st.compareAndDelete(k(299), 0, "pod-5", "", 300, 0)
	if got := st.sweep(1250); got == 0 || st.len() != 100-got-1 {
		t.Fatalf("sweep expired %d, len %d", got, st.len())
	}
	st.sweep(1e9)
	sh := &st.shards[0]
	if sh.t.Len() != 0 || sh.names.Len() != 0 || st.len() != 0 {
		t.Fatalf("after sweeping everything: %d entries, %d interned names, len %d", sh.t.Len(), sh.names.Len(), st.len())
	}
}

func TestStateShards(t *testing.T) {
	if n := len(newState(1_000_000, 0).shards); n != maxShards {
		t.Fatalf("%d shards at 1M entries, want %d", n, maxShards)
	}
	if n := len(newState(100, 0).shards); n != 1 {
		t.Fatalf("%d shards at 100 entries, want 1", n)
	}
	// The bound is global, whatever the spread over shards.
	st := newState(20_000, 0)
	for i := range 50_000 {
		st.create(keyOf(fmt.Sprint("s", i)), value{Pod: "p"}, 0, 1000)
	}
	if n := st.count.Load(); n < 20_000 || n > 20_000+int64(len(st.shards)) {
		t.Fatalf("%d entries for maxEntries 20000 over %d shards", n, len(st.shards))
	}
}

// TestStateEvictsByLocalUse: eviction follows local use, not expiry: a
// binding with a far expiry gets no protection from it, and values merged
// from peers go before bindings this replica uses.
func TestStateEvictsByLocalUse(t *testing.T) {
	st := newState(2, 0)
	st.create(k(1), value{Pod: "far"}, 0, maxTTL)
	st.create(k(2), value{Pod: "near"}, 0, 1000)
	st.lookup(k(2), 10, 1000, true)
	st.create(k(3), value{Pod: "new"}, 20, 1000)
	if _, ok := st.lookup(k(1), 30, 0, false); ok {
		t.Fatal("the binding with the far expiry was kept over the one in use")
	}
	if _, ok := st.lookup(k(2), 30, 0, false); !ok {
		t.Fatal("the binding in use was evicted")
	}

	st = newState(2, 0)
	st.create(k(1), value{Pod: "local"}, 0, 1000)
	st.apply(k(2), value{Pod: "remote", Expires: maxTTL}, 0)
	st.create(k(3), value{Pod: "new"}, 10, 1000)
	if _, ok := st.lookup(k(2), 20, 0, false); ok {
		t.Fatal("a value merged from a peer was kept over a local binding")
	}
	for _, i := range []int{1, 3} {
		if _, ok := st.lookup(k(i), 20, 0, false); !ok {
			t.Fatalf("local binding %d evicted", i)
		}
	}
}

func TestStateCountsLiveBindingsNotTombstones(t *testing.T) {
	st := newState(100, 0)
	st.create(k(1), value{Pod: "a"}, 0, 1000)
	st.create(k(2), value{Pod: "a"}, 0, 1000)
	st.create(k(3), value{Pod: "b", Prefill: "p"}, 0, 1000)
	// A tombstone from the ring and one made here both keep their names.
	st.apply(k(4), value{Pod: "b", Tomb: true, Expires: 5000}, 0)
	if _, ok := st.compareAndDelete(k(1), 0, "a", "", 10, 0); !ok {
		t.Fatal("compare-and-delete failed")
	}
	ids := []string{"a", "b", "p", "", "z"}
	n := make([]int, len(ids))
	st.countBindings(ids, n)
	if want := []int{1, 1, 1, 0, 0}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("counts of %q: %v, want %v", ids, n, want)
	}
	// A creation over the tombstone counts again; the swept tombstones
	// and expired bindings leave nothing behind.
	st.create(k(1), value{Pod: "b"}, 20, 1000)
	st.countBindings(ids, n)
	if want := []int{1, 2, 1, 0, 0}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("after a create over the tombstone: %v, want %v", n, want)
	}
	st.sweep(10000)
	st.countBindings(ids, n)
	if want := []int{0, 0, 0, 0, 0}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("after everything expired: %v, want %v", n, want)
	}
	for i := range st.shards {
		if len(st.shards[i].tombs) != 0 {
			t.Fatalf("shard %d still counts tombstones: %v", i, st.shards[i].tombs)
		}
	}
}

// TestStateCountsMatchTheTableUnderRandomOps: whatever mix of local
// creates, deletes, merges from the ring (tombstones included), sweeps and
// evictions (a small maxEntries) a state goes through, countBindings
// agrees with a count of the live entries themselves, and no tombstone
// count outlives its entries.
func TestStateCountsMatchTheTableUnderRandomOps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	pods := []string{"a", "b", "c"}
	st := newState(64, 0)
	var now int64
	for op := range 20000 {
		now += int64(r.IntN(5))
		kk := k(r.IntN(200))
		pod, prefill := pods[r.IntN(3)], []string{"", "p"}[r.IntN(2)]
		switch r.IntN(5) {
		case 0, 1:
			st.create(kk, value{Pod: pod, Prefill: prefill, Created: now}, now, int64(100+r.IntN(400)))
		case 2:
			if v, ok := st.lookup(kk, now, 0, false); ok {
				st.compareAndDelete(kk, v.Gen, v.Pod, v.Prefill, now, int64(r.IntN(50)))
			}
		case 3:
			st.apply(kk, value{Gen: uint64(r.IntN(3)), Created: int64(r.IntN(1000)), Pod: pod, Prefill: prefill,
				Tomb: r.IntN(3) == 0, Expires: now + int64(1+r.IntN(400))}, now)
		case 4:
			if r.IntN(20) == 0 {
				st.sweep(now)
			}
		}
		if op%500 != 0 {
			continue
		}
		ids := append(append([]string{}, pods...), "p")
		got := make([]int, len(ids))
		st.countBindings(ids, got)
		want := make([]int, len(ids))
		for i := range st.shards {
			st.shards[i].t.Range(func(_ key, e *entry) bool {
				if e.flags&flagTomb == 0 {
					for j, id := range ids {
						if st.shards[i].names.Name(e.pod) == id || st.shards[i].names.Name(e.prefill) == id {
							want[j]++
						}
					}
				}
				return true
			})
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("op %d: counted %v, the table holds %v (of %q)", op, got, want, ids)
		}
	}
	st.sweep(now + 1_000_000)
	for i := range st.shards {
		if len(st.shards[i].tombs) != 0 {
			t.Fatalf("shard %d counts tombstones of an empty table: %v", i, st.shards[i].tombs)
		}
	}
}
