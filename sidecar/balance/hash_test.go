package balance

import (
	"fmt"
	"testing"

	"github.com/tetherproxy/tether/sidecar/discovery"
)

func TestPlaceAgreesAcrossReplicas(t *testing.T) {
	cands := backends("llm/vllm-0/u0", "llm/vllm-1/u1", "llm/vllm-2/u2", "llm/vllm-3/u3")
	r1, r2 := New(WithHashPlacement(DefaultHashEpsilon)), New(WithHashPlacement(DefaultHashEpsilon))
	// Replica 2 has a request of its own in flight: light loads do not
	// split the replicas' choices.
	r2.Acquire("llm/vllm-1/u1")
	count := map[string]int{}
	const keys = 8000
	for i := range keys {
		k := fmt.Sprintf("%032x", i*2654435761)
		a, ok1 := r1.Place(k, cands, nil)
		b, ok2 := r2.Place(k, cands, nil)
		if !ok1 || !ok2 || a.ID != b.ID {
			t.Fatalf("key %s: replica 1 chose %q, replica 2 %q", k, a.ID, b.ID)
		}
		count[a.ID]++
	}
	for _, c := range cands {
		if n := count[c.ID]; n < keys/4*8/10 || n > keys/4*12/10 {
			t.Errorf("%s got %d of %d keys, want a quarter ±20%%: %v", c.ID, n, keys, count)
		}
	}
}

func TestPlaceMovesOnlyTheSessionsOfALostBackend(t *testing.T) {
	all := backends("a", "b", "c", "d")
	b := New(WithHashPlacement(DefaultHashEpsilon))
	withoutC := func(c discovery.Backend) bool { return c.ID != "c" }
	moved := 0
	for i := range 2000 {
		k := fmt.Sprint("session-", i)
		before, _ := b.Place(k, all, nil)
		after, _ := b.Place(k, all, withoutC)
		if after.ID == "c" {
			t.Fatalf("%s placed on the unusable backend", k)
		}
		if before.ID != "c" && after.ID != before.ID {
			t.Fatalf("%s moved from %s to %s though %s is still usable", k, before.ID, after.ID, before.ID)
		}
		if before.ID == "c" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatal("no session was on c: the test shows nothing")
	}
}

func TestPlaceSkipsABackendAboveTheBound(t *testing.T) {
	cands := backends("a", "b", "c", "d")
	b := New(WithHashPlacement(DefaultHashEpsilon))
	key := keyFirstOn(b, cands, "a")
	// mean load 1.5 over four backends: the bound is 1.25×1.5+1 = 2.875.
	for range 6 {
		b.Acquire("a")
	}
	var passed []string
	WithPassedOver(func(bound string) { passed = append(passed, bound) })(b)
	got, _ := b.Place(key, cands, nil)
	if got.ID == "a" {
		t.Fatal("placed on a backend with 6 outstanding against a mean of 1.5")
	}
	if fmt.Sprint(passed) != "[load]" {
		t.Fatalf("passed over reported %v, want one [load]", passed)
	}
	again, _ := b.Place(key, cands, nil)
	if again.ID != got.ID {
		t.Fatalf("second choice not deterministic: %s then %s", got.ID, again.ID)
	}
	// One outstanding request of a replica's own (mean 0.25, bound 1.31)
	// does not move the key: the slack that keeps replicas agreeing.
	b2 := New(WithHashPlacement(DefaultHashEpsilon))
	b2.Acquire("a")
	if back, _ := b2.Place(key, cands, nil); back.ID != "a" {
		t.Fatalf("one outstanding request moved the key to %s", back.ID)
	}
}

// fixedBindings is a BindingCounter over a map (what a store would count).
// keyFirstOn returns a session key that b, as it stands (before a test
// loads its backends), places on backend id.
func keyFirstOn(b *Balancer, cands []discovery.Backend, id string) string {
	for i := 0; ; i++ {
		key := fmt.Sprint("k", i)
		if got, _ := b.Place(key, cands, nil); got.ID == id {
			return key
		}
	}
}

func fixedBindings(m map[string]int) BindingCounter {
	return func(ids []string, n []int) {
		for i, id := range ids {
			n[i] = m[id]
		}
	}
}

func TestPlaceSkipsABackendHoldingTooManyBindings(t *testing.T) {
	cands := backends("a", "b", "c", "d")
	held := map[string]int{}
	var passed []string
	b := New(WithHashPlacement(DefaultHashEpsilon), WithBindingBound(DefaultBindingEpsilon, fixedBindings(held)),
		WithPassedOver(func(bound string) { passed = append(passed, bound) }))
	key := keyFirstOn(b, cands, "a")
	// 40 bindings, a mean of 10 per backend: the bound is 1.1×10+1 = 12.
	held["a"], held["b"], held["c"], held["d"] = 12, 10, 9, 9
	if got, _ := b.Place(key, cands, nil); got.ID != "a" {
		t.Fatalf("a at the bound (12 of a mean of 10) lost the key to %s", got.ID)
	}
	held["a"], held["b"] = 13, 9
	got, _ := b.Place(key, cands, nil)
	if got.ID == "a" {
		t.Fatal("placed on a backend holding 13 bindings against a bound of 12")
	}
	if fmt.Sprint(passed) != "[bindings]" {
		t.Fatalf("passed over reported %v, want one [bindings]", passed)
	}
	// While the store is down the bindings do not count.
	if agreed, _ := b.PlaceAgreed(key, cands, nil); agreed.ID != "a" {
		t.Fatalf("PlaceAgreed passed over a for its bindings, to %s", agreed.ID)
	}
	// The key's next choice, the same on every replica that counts alike.
	other := New(WithHashPlacement(DefaultHashEpsilon), WithBindingBound(DefaultBindingEpsilon, fixedBindings(held)))
	if again, _ := other.Place(key, cands, nil); again.ID != got.ID {
		t.Fatalf("two replicas counting the same bindings chose %s and %s", got.ID, again.ID)
	}
	// Without the bound the bindings do not count.
	if plain, _ := New(WithHashPlacement(DefaultHashEpsilon)).Place(key, cands, nil); plain.ID != "a" {
		t.Fatalf("a balancer without the bindings bound placed on %s", plain.ID)
	}
}

func TestPlaceFallsBackToTheLoadBoundWhenBothBoundsExcludeAll(t *testing.T) {
	cands := backends("a", "b")
	// a holds every binding; b has every request in flight.
	b := New(WithHashPlacement(0), WithBindingBound(0, fixedBindings(map[string]int{"a": 100})))
	for range 10 {
		b.Acquire("b")
	}
	for i := range 50 {
		if got, ok := b.Place(fmt.Sprint("k", i), cands, nil); !ok || got.ID != "a" {
			t.Fatalf("placed on %s (%v); the load bound leaves only a", got.ID, ok)
		}
	}
}

func TestPlaceWithoutHashingOrKeyIsPick(t *testing.T) {
	cands := backends("a", "b")
	plain := New()
	plain.Acquire("a")
	plain.Acquire("a")
	for range 50 {
		if got, _ := plain.Place("some-key", cands, nil); got.ID != "b" {
			t.Fatalf("a balancer without hashing placed on %s, not the least loaded", got.ID)
		}
	}
	hashing := New(WithHashPlacement(0))
	if _, ok := hashing.Place("k", cands, func(discovery.Backend) bool { return false }); ok {
		t.Fatal("placed with no usable backend")
	}
}

func TestPlacePairKeepsTheGroup(t *testing.T) {
	decode := []discovery.Backend{{ID: "d1", Group: "g1"}, {ID: "d2", Group: "g2"}, {ID: "d3", Group: "g3"}}
	prefill := []discovery.Backend{{ID: "p1", Group: "g1"}, {ID: "p2a", Group: "g2"}, {ID: "p2b", Group: "g2"}}
	r1, r2 := New(WithHashPlacement(DefaultHashEpsilon)), New(WithHashPlacement(DefaultHashEpsilon))
	for i := range 300 {
		k := fmt.Sprint("s", i)
		d, p, ok := r1.PlacePair(k, decode, prefill, nil)
		if !ok || d.Group != p.Group || d.ID == "d3" {
			t.Fatalf("%s: %v %v %v (d3 has no prefill)", k, d, p, ok)
		}
		d2, p2, _ := r2.PlacePair(k, decode, prefill, nil)
		if d2.ID != d.ID || p2.ID != p.ID {
			t.Fatalf("%s: replicas disagree on the pair", k)
		}
	}
}

func BenchmarkPlace(b *testing.B) {
	cands := backends("llm/vllm-0/u0", "llm/vllm-1/u1", "llm/vllm-2/u2", "llm/vllm-3/u3", "llm/vllm-4/u4", "llm/vllm-5/u5", "llm/vllm-6/u6", "llm/vllm-7/u7")
	for _, bc := range []struct {
		name string
		bal  *Balancer
	}{
		{"load-bound", New(WithHashPlacement(DefaultHashEpsilon))},
		{"binding-bound", New(WithHashPlacement(DefaultHashEpsilon),
			WithBindingBound(DefaultBindingEpsilon, fixedBindings(map[string]int{"llm/vllm-0/u0": 10})))},
		{"binding-and-work-bounds", New(WithHashPlacement(DefaultHashEpsilon),
			WithBindingBound(DefaultBindingEpsilon, fixedBindings(map[string]int{"llm/vllm-0/u0": 10})), WithWorkBound(DefaultWorkEpsilon))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.bal.Place("0123456789abcdef0123456789abcdef", cands, nil)
			}
		})
	}
}
