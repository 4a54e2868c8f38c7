package gcfloor

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goal is the runtime's heap goal for a live heap at GOGC=p (stacks and
// globals aside).
func goal(live uint64, p int) float64 {
	return max(float64(live)*(1+float64(p)/100), runtimeHeapMinimum*float64(p)/100)
}

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		base int
		want int
	}{
		{0, 100, 800}, // before the first collection: the minimum sets the goal
		{1 * mib, 100, 800},
		{3 * mib, 100, 800},
		{4 * mib, 100, 700},
		{8 * mib, 100, 300},
		{16 * mib, 100, 100},
		{31 * mib, 100, 100},
		{32 * mib, 100, 100},
		{500 * mib, 100, 100}, // a store full of bindings: Go's rule
		{16 * mib, 150, 150},  // never below the base
		{8 * mib, 400, 400},
	} {
		got := Percent(c.live, DefaultFloor, c.base)
		if got != c.want {
			t.Errorf("Percent(%d MiB, 32 MiB, %d) = %d, want %d", c.live/mib, c.base, got, c.want)
		}
		// What the rule promises: the goal reaches the floor, with the
		// smallest GOGC that does (unless the base already does).
		if g := goal(c.live, got); g < DefaultFloor && c.live < DefaultFloor {
			t.Errorf("live %d MiB, GOGC %d: goal %.1f MiB is under the floor", c.live/mib, got, g/mib)
		}
		if got > c.base && goal(c.live, got-1) >= DefaultFloor {
			t.Errorf("live %d MiB: GOGC %d reaches the floor too", c.live/mib, got-1)
		}
	}
}

func TestGoal(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name            string
		live, allocated uint64
		since           time.Duration
		want            uint64
	}{
		{"room for half the last second's allocation", 2 * mib, 40 * mib, time.Second, 22 * mib},
		{"the same rate over a shorter cycle", 2 * mib, 10 * mib, 250 * time.Millisecond, 22 * mib},
		{"a slow cycle", 2 * mib, 4 * mib, time.Second, 4 * mib},
		{"at most the floor", 2 * mib, 1000 * mib, time.Second, 32 * mib},
		{"a live heap past the floor", 100 * mib, 40 * mib, time.Second, 32 * mib},
		{"no cycle measured", 2 * mib, 40 * mib, 0, 0},
	} {
		if got := Goal(c.live, c.allocated, c.since, 500*time.Millisecond, DefaultFloor); got != c.want {
			t.Errorf("%s: Goal = %.2f MiB, want %.2f", c.name, float64(got)/mib, float64(c.want)/mib)
		}
	}
	// What the goals make of GOGC: a slow sidecar keeps Go's rule (its
	// room is under Go's own), a busy one gets the room, never a goal
	// under a live heap past it.
	for _, c := range []struct {
		live, goal uint64
		want       int
	}{
		{2 * mib, 3 * mib, 100},
		{2 * mib, 4 * mib, 100},
		{2 * mib, 12 * mib, 300}, // min(100 × 12/4, 100 × 10/2)
		{100 * mib, 32 * mib, 100},
		{2 * mib, 0, 100},
	} {
		if got := Percent(c.live, c.goal, DefaultPercent); got != c.want {
			t.Errorf("Percent(%d MiB, goal %d MiB) = %d, want %d", c.live/mib, c.goal/mib, got, c.want)
		}
	}
}

// ticking is a clock and an allocation counter for Run: every reading
// of the clock is a second after the one before, and every reading of
// the counter has rate more bytes allocated, so each collection Run sees
// measures a cycle of one second at rate.
type ticking struct {
	seconds   atomic.Int64
	allocated atomic.Uint64
	rate      atomic.Uint64
}

func (k *ticking) now() time.Time { return time.Unix(k.seconds.Add(1), 0) }
func (k *ticking) total() uint64  { return k.allocated.Add(k.rate.Load()) }

// options are Run's with k's clock and counter, and the interval the
// tests' goals are worked out for.
func (k *ticking) options() Options {
	return Options{Now: k.now, Allocated: k.total, Interval: 500 * time.Millisecond}
}

// TestRunFollowsTheHeap: after each collection GOGC is set for the live
// heap and the allocation rate then; the gauge follows; when ctx ends
// the base comes back and Run returns.
func TestRunFollowsTheHeap(t *testing.T) {
	const mib = 1 << 20
	var live atomic.Uint64
	live.Store(2 * mib)
	clock := &ticking{}
	clock.rate.Store(4 * mib) // room 2 MiB: Go's rule leaves more
	var mu sync.Mutex
	var sets []int
	last := func() int {
		mu.Lock()
		defer mu.Unlock()
		if len(sets) == 0 {
			return 0
		}
		return sets[len(sets)-1]
	}
	reg := prometheus.NewPedanticRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	o := clock.options()
	o.Live = live.Load
	o.Set = func(p int) { mu.Lock(); sets = append(sets, p); mu.Unlock() }
	o.Registerer = reg
	go func() { defer close(done); Run(ctx, o) }()
	testkit.Eventually(t, 5*time.Second, "Go's rule to begin with", func() bool { return last() == 100 })

	collectedAt := func(what string, want int) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, what, func() error {
			runtime.GC()
			if p := last(); p != want {
				return fmt.Errorf("GOGC %d, want %d", p, want)
			}
			return nil
		})
	}
	clock.rate.Store(40 * mib) // room 20 MiB: goal 22 MiB
	collectedAt("GOGC for 40 MiB/s on a 2 MiB heap", 550)
	if n, err := testkit.FindMetric(reg, "tether_gc_percent"); err != nil || n != 550 {
		t.Fatalf("tether_gc_percent = %v, %v", n, err)
	}
	clock.rate.Store(1 << 30)
	collectedAt("GOGC for the floor (1 GiB/s)", 800)
	live.Store(8 * mib)
	collectedAt("GOGC for the floor on an 8 MiB heap", 300)
	live.Store(100 * mib)
	collectedAt("Go's rule for a large heap", 100)
	live.Store(2 * mib)
	clock.rate.Store(4 * mib)
	collectedAt("Go's rule for a slow rate", 100)

	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if sets[len(sets)-1] != 100 {
		t.Fatalf("GOGC after Run: %v", sets)
	}
	// Set only on a change: the collections with an unchanged heap set
	// nothing.
	for i := 1; i < len(sets); i++ {
		if sets[i] == sets[i-1] {
			t.Fatalf("GOGC set twice to the same value: %v", sets)
		}
	}
}

// TestRunSetsTheRuntime: with the runtime's own live heap and GOGC,
// GOGC (as the runtime reports it) rises for this test's small heap at a
// rate that fills the floor, and comes back to 100 when Run ends.
func TestRunSetsTheRuntime(t *testing.T) {
	gogc := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // Go's default, whatever GOGC the test runs with
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	clock := &ticking{}
	clock.rate.Store(1 << 30)
	go func() { defer close(done); Run(ctx, clock.options()) }()
	testkit.Eventually(t, 5*time.Second, "GOGC raised for a small heap", func() error {
		runtime.GC()
		want := Percent(LiveHeap(), DefaultFloor, DefaultPercent)
		if got := gogc(); got != uint64(want) || want <= 100 {
			return fmt.Errorf("GOGC %d, want %d (live heap %d bytes)", got, want, LiveHeap())
		}
		return nil
	})
	cancel()
	<-done
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC after Run: %d", got)
	}
}

// TestAllocatedCounts: the runtime's count of allocated bytes grows by
// at least what is allocated.
func TestAllocatedCounts(t *testing.T) {
	before := Allocated()
	sink = make([]byte, 1<<20)
	if grew := Allocated() - before; grew < 1<<20 {
		t.Fatalf("Allocated grew by %d bytes over a 1 MiB allocation", grew)
	}
}

var sink []byte
