package balance

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// setWork gives each backend a recent work that does not decay while the
// test runs, so the bound's arithmetic is exact.
func setWork(b *Balancer, work map[string]float64) {
	clear(b.work)
	for id, v := range work {
		b.work[id] = decayed{v: v, at: math.MaxInt64}
	}
}

func TestPlaceSkipsABackendCarryingTooMuchWork(t *testing.T) {
	cands := backends("a", "b", "c", "d")
	var passed []string
	bindings := fixedBindings(map[string]int{})
	b := New(WithHashPlacement(DefaultHashEpsilon), WithBindingBound(DefaultBindingEpsilon, bindings),
		WithWorkBound(0.25), WithPassedOver(func(bound string) { passed = append(passed, bound) }))
	key := keyFirstOn(b, cands, "a")
	// A mean of 8 KB a backend: the bound is 1.25 × 8 = 10.
	setWork(b, map[string]float64{"a": 10e3, "b": 8e3, "c": 7e3, "d": 7e3})
	if got, _ := b.Place(key, cands, nil); got.ID != "a" {
		t.Fatalf("a at the bound (10 KB of a mean of 8) lost the key to %s", got.ID)
	}
	setWork(b, map[string]float64{"a": 11e3, "b": 7e3, "c": 7e3, "d": 7e3})
	got, _ := b.Place(key, cands, nil)
	if got.ID == "a" {
		t.Fatal("placed on a backend carrying 11 KB against a bound of 10")
	}
	if fmt.Sprint(passed) != "[work]" {
		t.Fatalf("passed over reported %v, want one [work]", passed)
	}
	// While the store is down only the hash and the load count.
	if agreed, _ := b.PlaceAgreed(key, cands, nil); agreed.ID != "a" {
		t.Fatalf("PlaceAgreed passed over a for its work, to %s", agreed.ID)
	}
	// Without the bindings bound (a per-replica memory store) neither does work.
	alone := New(WithHashPlacement(DefaultHashEpsilon), WithWorkBound(0.25))
	setWork(alone, map[string]float64{"a": 11e3})
	if plain, _ := alone.Place(key, cands, nil); plain.ID != "a" {
		t.Fatalf("a balancer bounded by work but not by bindings placed on %s", plain.ID)
	}
	// Nothing sent yet: no bound.
	fresh := New(WithHashPlacement(DefaultHashEpsilon), WithBindingBound(DefaultBindingEpsilon, bindings), WithWorkBound(0))
	if first, _ := fresh.Place(key, cands, nil); first.ID != "a" {
		t.Fatalf("a balancer that sent nothing passed over a, to %s", first.ID)
	}
}

func TestPlaceLetsBindingsGiveWayBeforeWork(t *testing.T) {
	cands := backends("a", "b")
	// a holds every binding; b carries all the work.
	b := New(WithHashPlacement(DefaultHashEpsilon), WithBindingBound(0, fixedBindings(map[string]int{"a": 100})), WithWorkBound(0))
	setWork(b, map[string]float64{"b": 1e6})
	for i := range 50 {
		if got, ok := b.Place(fmt.Sprint("k", i), cands, nil); !ok || got.ID != "a" {
			t.Fatalf("placed on %s (%v); with the bindings set aside the work bound leaves only a", got.ID, ok)
		}
	}
}

func TestCarryCountsRequestBytesThatDecay(t *testing.T) {
	now := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	b := New(WithHashPlacement(DefaultHashEpsilon), WithWorkBound(DefaultWorkEpsilon), WithClock(func() time.Time { return now }))
	b.Carry("a", 3000)
	b.Carry("a", 1000)
	b.Carry("b", 0) // nothing
	if w := b.Work("a"); w != 4000 {
		t.Fatalf("Work(a) = %v right after 4,000 bytes", w)
	}
	if w := b.Work("b"); w != 0 {
		t.Fatalf("Work(b) = %v after no bytes", w)
	}
	now = now.Add(WorkHalfLife)
	if w := b.Work("a"); math.Abs(w-2000) > 1e-6 {
		t.Fatalf("Work(a) = %v one half-life after 4,000 bytes, want 2,000", w)
	}
	b.Carry("a", 500) // on top of what is left
	now = now.Add(2 * WorkHalfLife)
	if w := b.Work("a"); math.Abs(w-625) > 1e-6 {
		t.Fatalf("Work(a) = %v, want (2,000 + 500) / 4", w)
	}
	// A balancer not bounded by work keeps no count.
	plain := New(WithHashPlacement(DefaultHashEpsilon))
	plain.Carry("a", 1000)
	if w := plain.Work("a"); w != 0 || plain.work != nil {
		t.Fatalf("a balancer without the work bound counted %v", w)
	}
}

func TestCarryForgetsIdleBackendsWhenManyCame(t *testing.T) {
	b := New(WithHashPlacement(DefaultHashEpsilon), WithWorkBound(DefaultWorkEpsilon))
	for i := range sweepAbove {
		b.work[fmt.Sprint("gone-", i)] = decayed{v: 1000, at: -time.Hour.Microseconds()} // long decayed
	}
	b.Carry("live", 1000)
	if n := len(b.work); n != 1 {
		t.Fatalf("%d backends' work kept, want only the live one", n)
	}
	// A pool of more live backends than that sweeps again only once the
	// map has doubled, not on every request.
	for i := range 2 * sweepAbove {
		b.Carry(fmt.Sprint("live-", i), 1000)
	}
	if b.workSweepAbove < 2*sweepAbove {
		t.Fatalf("after a sweep that kept %d live backends the next waits for %d", len(b.work), b.workSweepAbove)
	}
}

// BenchmarkCarry is the work bound's cost on every request.
func BenchmarkCarry(b *testing.B) {
	bal := New(WithHashPlacement(DefaultHashEpsilon), WithWorkBound(DefaultWorkEpsilon))
	b.ReportAllocs()
	for b.Loop() {
		bal.Carry("llm/vllm-3/u3", 12000)
	}
}

// TestPlaceReadsTheSharedWorkView: with a view shared by every replica
// (WithWorkView), the bound reads the view, not the replica's own counts,
// which Carry still keeps for WorkAt to share.
func TestPlaceReadsTheSharedWorkView(t *testing.T) {
	cands := backends("a", "b", "c", "d")
	shared := map[string]float64{}
	view := func(ids []string, w []float64) {
		for i, id := range ids {
			w[i] = shared[id]
		}
	}
	b := New(WithHashPlacement(DefaultHashEpsilon), WithBindingBound(DefaultBindingEpsilon, fixedBindings(map[string]int{})),
		WithWorkBound(0.25), WithWorkView(view))
	key := keyFirstOn(b, cands, "a")
	// This replica sent a all the work; the view says nothing yet.
	b.Carry("a", 50e3)
	if got, _ := b.Place(key, cands, nil); got.ID != "a" {
		t.Fatalf("placed on %s by this replica's own counts; the view has none", got.ID)
	}
	shared["a"], shared["b"] = 30e3, 10e3
	if got, _ := b.Place(key, cands, nil); got.ID == "a" {
		t.Fatal("the view has a at 3x the mean, and a still got the key")
	}
	// WorkAt shares what Carry counted, decayed to the instant asked.
	var sent map[string]float64
	collect := func(at time.Time) {
		sent = map[string]float64{}
		b.WorkAt(at, func(id string, v float64) { sent[id] += v })
	}
	collect(time.Now())
	if len(sent) != 1 || math.Abs(sent["a"]-50e3) > 50 {
		t.Fatalf("WorkAt now shared %v, want a: 50000", sent)
	}
	collect(time.Now().Add(WorkHalfLife))
	if math.Abs(sent["a"]-25e3) > 50 {
		t.Fatalf("WorkAt a half-life on shared %v, want a: 25000", sent)
	}
}
