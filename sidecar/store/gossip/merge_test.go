package gossip

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestCompareIdentity(t *testing.T) {
	base := value{Gen: 1, Created: 1000, Pod: "b", Prefill: "p"}
	with := func(f func(*value)) value { v := base; f(&v); return v }
	cases := []struct {
		name string
		win  value
		lose value
	}{
		{"higher gen beats earlier created", with(func(v *value) { v.Gen, v.Created = 2, 5000 }), base},
		{"earlier created wins at equal gen", with(func(v *value) { v.Created = 999 }), base},
		{"smaller pod breaks a created tie", with(func(v *value) { v.Pod = "a" }), base},
		{"smaller prefill breaks a pod tie", with(func(v *value) { v.Prefill = "o" }), base},
		{"tombstone beats the binding it deletes", with(func(v *value) { v.Tomb = true }), base},
		{"tombstone of gen g loses to gen g+1", with(func(v *value) { v.Gen = 2 }), with(func(v *value) { v.Tomb = true })},
		{"earlier binding beats a later one's tombstone", base, with(func(v *value) { v.Created, v.Pod, v.Tomb = 2000, "z", true })},
		{"earlier tombstone beats a later concurrent binding", with(func(v *value) { v.Tomb = true }), with(func(v *value) { v.Created, v.Pod = 2000, "a" })},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if compareIdentity(c.win, c.lose) <= 0 || compareIdentity(c.lose, c.win) >= 0 {
				t.Fatalf("want %+v to beat %+v", c.win, c.lose)
			}
			if m := merge(c.lose, c.win); m != c.win {
				t.Fatalf("merge = %+v, want %+v", m, c.win)
			}
		})
	}
	if m := merge(with(func(v *value) { v.Expires = 5 }), with(func(v *value) { v.Expires = 9 })); m.Expires != 9 {
		t.Fatalf("same binding: merge kept expiry %d, want the later 9", m.Expires)
	}
}

// deltas is a set of values for one key that covers every rule: two
// concurrent creations, a same-ms tie, a delete, a rebind, refreshes.
func deltas() []value {
	return []value{
		{Gen: 0, Created: 100, Pod: "pod-b", Expires: 5000},
		{Gen: 0, Created: 100, Pod: "pod-b", Expires: 7000}, // refresh of the above
		{Gen: 0, Created: 100, Pod: "pod-a", Expires: 4000}, // same ms, smaller pod
		{Gen: 0, Created: 90, Pod: "pod-c", Expires: 3000},  // earlier creation
		{Gen: 0, Created: 90, Pod: "pod-c", Tomb: true, Expires: 9000},
		{Gen: 1, Created: 300, Pod: "pod-d", Expires: 8000}, // rebind
		{Gen: 1, Created: 310, Pod: "pod-e", Expires: 8500}, // concurrent rebind, later
		{Gen: 1, Created: 300, Pod: "pod-d", Expires: 9500}, // refresh of the rebind
	}
}

func permutations(n int, f func([]int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(int)
	rec = func(k int) {
		if k == n {
			f(p)
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}

// TestMergeOrderIndependent folds the deltas in every order (40,320) and
// with duplicates: one result.
func TestMergeOrderIndependent(t *testing.T) {
	ds := deltas()
	want := value{Gen: 1, Created: 300, Pod: "pod-d", Expires: 9500}
	permutations(len(ds), func(p []int) {
		got := ds[p[0]]
		for _, i := range p[1:] {
			got = merge(got, ds[i])
			got = merge(got, ds[i]) // idempotent
		}
		if got != want {
			t.Fatalf("order %v: got %+v, want %+v", p, got, want)
		}
	})
}

func TestMergeAssociativeRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rv := func() value {
		return value{
			Gen: uint64(r.IntN(3)), Created: int64(r.IntN(3)), Pod: fmt.Sprint("p", r.IntN(2)),
			Prefill: fmt.Sprint("f", r.IntN(2)), Tomb: r.IntN(2) == 0, Expires: int64(r.IntN(5)),
		}
	}
	for range 20000 {
		a, b, c := rv(), rv(), rv()
		if merge(merge(a, b), c) != merge(a, merge(b, c)) || merge(a, b) != merge(b, a) || merge(a, a) != a {
			t.Fatalf("merge laws broken for %+v %+v %+v", a, b, c)
		}
	}
}

// TestStateApplyOrderIndependent applies the deltas to a replica's state
// (the path remote values take) in every order: same binding every time.
func TestStateApplyOrderIndependent(t *testing.T) {
	ds := deltas()
	k := keyOf("0123456789abcdef0123456789abcdef")
	const now = 50
	permutations(len(ds), func(p []int) {
		st := newState(10, 0)
		for _, i := range p {
			st.apply(k, ds[i], now)
		}
		sh := st.shard(k)
		got := sh.value(sh.t.Get(k))
		if want := (value{Gen: 1, Created: 300, Pod: "pod-d", Expires: 9500}); got != want {
			t.Fatalf("order %v: got %+v, want %+v", p, got, want)
		}
		if st.len() != 1 {
			t.Fatalf("order %v: len %d", p, st.len())
		}
	})
}
