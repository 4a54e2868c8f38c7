package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
)

// TestCountBindingsCountsWhatThisReplicaSaw: two replicas on one Redis.
// Each counts the bindings it created, looked up (another's included) or
// lost a creation race to, by backend, and forgets those it deleted or
// that moved to another backend; what it never saw it does not count.
func TestCountBindingsCountsWhatThisReplicaSaw(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newEnv(t, srv, nil, Options{}).s, newEnv(t, srv, nil, Options{}).s
	var _ store.BindingCounter = a
	ids := []string{"pod-1", "pod-2", "prefill-1"}
	count := func(s *Store) string {
		n := make([]int, len(ids))
		s.CountBindings(ids, n)
		return fmt.Sprint(n)
	}
	for i := range 3 {
		if _, err := a.Create(ctx, fmt.Sprint("a-", i), binding("pod-1", "", 0), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Create(ctx, "b-0", binding("pod-2", "prefill-1", 0), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := count(a); got != "[3 0 0]" {
		t.Fatalf("replica a counts %s of %q, want its own 3 on pod-1", got, ids)
	}
	if got := count(b); got != "[0 1 1]" {
		t.Fatalf("replica b counts %s, want its own binding on pod-2 and prefill-1", got)
	}
	// b looks up one of a's and loses a race for another.
	if _, ok, err := b.Lookup(ctx, "a-0", time.Minute); !ok || err != nil {
		t.Fatalf("Lookup: %v %v", ok, err)
	}
	if got, err := b.Create(ctx, "a-1", binding("pod-2", "", 0), time.Minute); err != nil || got.Pod != "pod-1" {
		t.Fatalf("Create over a's binding: %+v %v", got, err)
	}
	if got := count(b); got != "[2 1 1]" {
		t.Fatalf("replica b counts %s after seeing two of a's, want [2 1 1]", got)
	}
	// a deletes one and rebinds it elsewhere; b sees the new binding.
	old, _, _ := a.Lookup(ctx, "a-0", time.Minute)
	if ok, err := a.CompareAndDelete(ctx, "a-0", old); !ok || err != nil {
		t.Fatalf("CompareAndDelete: %v %v", ok, err)
	}
	if _, err := a.Create(ctx, "a-0", binding("pod-2", "", 1), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := count(a); got != "[2 1 0]" {
		t.Fatalf("replica a counts %s after moving a-0 to pod-2, want [2 1 0]", got)
	}
	if _, ok, _ := b.Lookup(ctx, "a-0", time.Minute); !ok {
		t.Fatal("b does not find a-0")
	}
	if got := count(b); got != "[1 2 1]" {
		t.Fatalf("replica b counts %s after seeing a-0 moved, want [1 2 1]", got)
	}
}
