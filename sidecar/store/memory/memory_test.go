package memory

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock shared by a test and the store.
// newStore is a store whose sweeper does not run during a test. Tests of
// expiry run in a synctest bubble: time.Sleep moves the store's clock.
func newStore(t *testing.T, max int) *Store {
	t.Helper()
	s := mustNew(t, max, Options{SweepInterval: time.Hour})
	t.Cleanup(func() { s.Close() })
	return s
}

var ctx = context.Background()

func mustNew(t testing.TB, maxEntries int, o Options) *Store {
	t.Helper()
	s, err := New(ctx, &config.MemoryStore{MaxEntries: maxEntries}, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCreateThenLookup(t *testing.T) { synctest.Test(t, testCreateThenLookup) }

func testCreateThenLookup(t *testing.T) {
	s := newStore(t, 100)
	b := store.Binding{Pod: "a", Gen: 1, Created: time.Now()}
	got, err := s.Create(ctx, "k", b, 10*time.Second)
	if err != nil || got.Pod != "a" {
		t.Fatalf("Create = %+v, %v", got, err)
	}
	got, ok, err := s.Lookup(ctx, "k", 10*time.Second)
	if err != nil || !ok || got.Pod != "a" || got.Gen != 1 {
		t.Fatalf("Lookup = %+v %v %v", got, ok, err)
	}
	if want := time.Now().Add(10 * time.Second); !got.ExpiresAt.Equal(want) {
		t.Fatalf("ExpiresAt = %v, want %v", got.ExpiresAt, want)
	}
}

func TestCreateKeepsExistingLiveBinding(t *testing.T) {
	s := newStore(t, 100)
	s.Create(ctx, "k", store.Binding{Pod: "first"}, time.Minute)
	got, _ := s.Create(ctx, "k", store.Binding{Pod: "second"}, time.Minute)
	if got.Pod != "first" {
		t.Fatalf("second Create won: %+v", got)
	}
}

func TestTTLExpiresAndLookupSlides(t *testing.T) { synctest.Test(t, testTTLExpiresAndLookupSlides) }

func testTTLExpiresAndLookupSlides(t *testing.T) {
	s := newStore(t, 100)
	ttl := 10 * time.Second
	s.Create(ctx, "slid", store.Binding{Pod: "a"}, ttl)
	s.Create(ctx, "idle", store.Binding{Pod: "b"}, ttl)
	// Look "slid" up every 6s for a minute: each lookup pushes its expiry.
	for i := 0; i < 10; i++ {
		time.Sleep(6 * time.Second)
		if _, ok, _ := s.Lookup(ctx, "slid", ttl); !ok {
			t.Fatalf("sliding binding expired after %d refreshes", i)
		}
	}
	if _, ok, _ := s.Peek(ctx, "idle"); ok {
		t.Fatal("idle binding still returned after its TTL")
	}
	// Exactly at expiry the binding is gone.
	time.Sleep(ttl)
	if _, ok, _ := s.Lookup(ctx, "slid", ttl); ok {
		t.Fatal("binding returned at its expiry instant")
	}
}

func TestPeekDoesNotRefresh(t *testing.T) { synctest.Test(t, testPeekDoesNotRefresh) }

func testPeekDoesNotRefresh(t *testing.T) {
	s := newStore(t, 100)
	s.Create(ctx, "k", store.Binding{Pod: "a"}, 10*time.Second)
	time.Sleep(9 * time.Second)
	if _, ok, _ := s.Peek(ctx, "k"); !ok {
		t.Fatal("Peek missed a live binding")
	}
	time.Sleep(2 * time.Second)
	if _, ok, _ := s.Peek(ctx, "k"); ok {
		t.Fatal("Peek refreshed the binding")
	}
}

func TestExpiredIsReplacedByCreate(t *testing.T) { synctest.Test(t, testExpiredIsReplacedByCreate) }

func testExpiredIsReplacedByCreate(t *testing.T) {
	s := newStore(t, 100)
	s.Create(ctx, "k", store.Binding{Pod: "old"}, time.Second)
	time.Sleep(2 * time.Second)
	got, _ := s.Create(ctx, "k", store.Binding{Pod: "new"}, time.Second)
	if got.Pod != "new" {
		t.Fatalf("expired binding blocked Create: %+v", got)
	}
}

func TestCompareAndDelete(t *testing.T) {
	s := newStore(t, 100)
	old := store.Binding{Pod: "a", Gen: 1}
	s.Create(ctx, "k", old, time.Minute)
	if ok, _ := s.CompareAndDelete(ctx, "k", store.Binding{Pod: "b", Gen: 1}); ok {
		t.Fatal("deleted a binding to another pod")
	}
	if ok, _ := s.CompareAndDelete(ctx, "k", store.Binding{Pod: "a", Gen: 2}); ok {
		t.Fatal("deleted a binding of another generation")
	}
	if ok, _ := s.CompareAndDelete(ctx, "k", old); !ok {
		t.Fatal("did not delete the matching binding")
	}
	if _, ok, _ := s.Peek(ctx, "k"); ok {
		t.Fatal("binding survived its delete")
	}
	if ok, _ := s.CompareAndDelete(ctx, "missing", old); ok {
		t.Fatal("deleted a missing key")
	}
}

func TestCapHoldsUnderFlood(t *testing.T) {
	const max = 1000
	s := newStore(t, max)
	for i := 0; i < 50*max; i++ {
		s.Create(ctx, fmt.Sprintf("flood-%d", i), store.Binding{Pod: "a"}, time.Hour)
		if n := s.Len(); n > max+shardCount {
			t.Fatalf("after %d creates Len = %d, cap %d", i+1, n, max)
		}
	}
	if n := s.Len(); n < max/2 {
		t.Fatalf("Len = %d: the store evicts far more than the cap requires", n)
	}
}

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	// One entry per shard at most: MaxEntries = shardCount.
	s := newStore(t, shardCount)
	// Find two keys of one shard.
	var a, b string
	for i := 0; b == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		switch {
		case a == "":
			a = k
		case s.shard(k) == s.shard(a):
			b = k
		}
	}
	s.Create(ctx, a, store.Binding{Pod: "a"}, time.Hour)
	s.Create(ctx, b, store.Binding{Pod: "b"}, time.Hour)
	if _, ok, _ := s.Peek(ctx, a); ok {
		t.Fatal("oldest entry was not evicted")
	}
	if _, ok, _ := s.Peek(ctx, b); !ok {
		t.Fatal("newest entry was evicted")
	}
}

func TestBindingRoundTrips(t *testing.T) {
	s := newStore(t, 100)
	created := time.Unix(1700000000, 123456789)
	b := store.Binding{Pod: "ns/decode-1/uid-1", PrefillPod: "ns/prefill-1/uid-2", Gen: 1 << 40, Created: created}
	s.Create(ctx, "k", b, time.Minute)
	got, ok, _ := s.Peek(ctx, "k")
	if !ok || !got.SameTarget(b) || !got.Created.Equal(created) {
		t.Fatalf("Peek = %+v, want %+v", got, b)
	}
	s.Create(ctx, "no-created", store.Binding{Pod: "a"}, time.Minute)
	if got, _, _ := s.Peek(ctx, "no-created"); !got.Created.IsZero() {
		t.Fatalf("a binding without Created came back with %v", got.Created)
	}
}

// TestBackendNamesFreed: a store interns backend IDs; once no binding
// names a backend (deleted, evicted, expired), its ID is not held.
func TestBackendNamesFreed(t *testing.T) { synctest.Test(t, testBackendNamesFreed) }

func testBackendNamesFreed(t *testing.T) {
	s := newStore(t, shardCount*10)
	for i := range 2000 { // most are evicted
		s.Create(ctx, fmt.Sprint(i), store.Binding{Pod: fmt.Sprint("pod-", i), PrefillPod: fmt.Sprint("pf-", i%3)}, time.Second)
	}
	for i := range 10 {
		s.CompareAndDelete(ctx, fmt.Sprint(1990+i), store.Binding{Pod: fmt.Sprint("pod-", 1990+i), PrefillPod: fmt.Sprint("pf-", (1990+i)%3)})
	}
	names := func() (n int) {
		for i := range s.shards {
			n += s.shards[i].names.Len()
		}
		return n
	}
	if n, max := names(), 2*s.Len(); n > max {
		t.Fatalf("%d names held for %d bindings", n, s.Len())
	}
	time.Sleep(2 * time.Second)
	s.Sweep()
	if n := names(); n != 0 || s.Len() != 0 {
		t.Fatalf("after every binding expired: %d names, %d bindings", n, s.Len())
	}
}

func TestSweepFreesExpired(t *testing.T) { synctest.Test(t, testSweepFreesExpired) }

func testSweepFreesExpired(t *testing.T) {
	s := newStore(t, 1000)
	for i := 0; i < 100; i++ {
		s.Create(ctx, fmt.Sprint(i), store.Binding{Pod: "a"}, time.Second)
	}
	s.Create(ctx, "long", store.Binding{Pod: "a"}, time.Hour)
	time.Sleep(2 * time.Second)
	s.Sweep()
	if n := s.Len(); n != 1 {
		t.Fatalf("Len after sweep = %d, want 1", n)
	}
}

func TestBackgroundSweeper(t *testing.T) { synctest.Test(t, testBackgroundSweeper) }

func testBackgroundSweeper(t *testing.T) {
	s := mustNew(t, 100, Options{SweepInterval: 64 * time.Millisecond})
	defer s.Close()
	s.Create(ctx, "k", store.Binding{Pod: "a"}, time.Millisecond)
	time.Sleep(64 * time.Millisecond)
	synctest.Wait() // the sweep that the ticker woke has run
	if s.Len() != 0 {
		t.Fatal("sweeper never freed the expired entry")
	}
}

// The sweeper wakes once per interval and sweeps every shard then: an
// idle sidecar is woken once a second, not once per shard.
func TestSweeperWakesOncePerInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustNew(t, 1000, Options{SweepInterval: 64 * time.Millisecond})
		defer s.Close()
		for i := range 200 {
			s.Create(ctx, fmt.Sprint("k", i), store.Binding{Pod: "a"}, time.Millisecond)
		}
		time.Sleep(48 * time.Millisecond)
		synctest.Wait()
		if n := s.Len(); n != 200 {
			t.Fatalf("three quarters of an interval in: %d entries left, want all 200 (no sweep yet)", n)
		}
		time.Sleep(16 * time.Millisecond)
		synctest.Wait()
		if n := s.Len(); n != 0 {
			t.Fatalf("one interval in: %d entries left, want 0", n)
		}
	})
}

func TestConcurrentCreatesConverge(t *testing.T) {
	s := newStore(t, 1000)
	const n = 16
	results := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _ := s.Create(ctx, "race", store.Binding{Pod: fmt.Sprint(i)}, time.Minute)
			results[i] = got.Pod
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r != results[0] {
			t.Fatalf("racing creates disagree: %v", results)
		}
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	s := mustNew(t, 1, Options{})
	s.Close()
	s.Close()
}

// BenchmarkLookupRefresh is the sticky hot path: one lookup that slides the
// TTL of an existing binding, from many goroutines.
func BenchmarkLookupRefresh(b *testing.B) {
	s := mustNew(b, 1_000_000, Options{})
	defer s.Close()
	const keys = 100_000
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("%032x", i)
		s.Create(ctx, ks[i], store.Binding{Pod: "10.0.0.1:8000"}, time.Hour)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok, _ := s.Lookup(ctx, ks[i%keys], time.Hour); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

func TestHugeTTLDoesNotWrap(t *testing.T) {
	s := newStore(t, 10)
	s.Create(ctx, "k", store.Binding{Pod: "a"}, time.Duration(math.MaxInt64))
	if _, ok, _ := s.Lookup(ctx, "k", time.Duration(math.MaxInt64)); !ok {
		t.Fatal("a binding with the largest TTL expired at once")
	}
}

func TestCountBindings(t *testing.T) { synctest.Test(t, testCountBindings) }

func testCountBindings(t *testing.T) {
	s := newStore(t, 1000)
	var _ store.BindingCounter = s
	for i := range 3 {
		s.Create(ctx, fmt.Sprint("a", i), store.Binding{Pod: "a"}, time.Minute)
	}
	s.Create(ctx, "b0", store.Binding{Pod: "b", PrefillPod: "p"}, time.Minute)
	s.Create(ctx, "short", store.Binding{Pod: "b"}, time.Second)
	if ok, _ := s.CompareAndDelete(ctx, "a0", store.Binding{Pod: "a"}); !ok {
		t.Fatal("compare-and-delete failed")
	}
	ids := []string{"a", "b", "p", "z"}
	n := []int{9, 9, 9, 9} // CountBindings overwrites, never adds to, what is there
	s.CountBindings(ids, n)
	if want := []int{2, 2, 1, 0}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("counts of %v: %v, want %v", ids, n, want)
	}
	time.Sleep(2 * time.Second)
	s.Sweep()
	s.CountBindings(ids, n)
	if want := []int{2, 1, 1, 0}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Fatalf("after the short binding expired and was swept: %v, want %v", n, want)
	}
}
