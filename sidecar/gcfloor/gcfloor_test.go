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

// TestRunFollowsTheHeap: after each collection GOGC is set for the live
// heap then; the gauge follows; when ctx ends the base comes back and
// Run returns.
func TestRunFollowsTheHeap(t *testing.T) {
	var live atomic.Uint64
	live.Store(2 << 20)
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
	go func() {
		defer close(done)
		Run(ctx, Options{
			Live:       live.Load,
			Set:        func(p int) { mu.Lock(); sets = append(sets, p); mu.Unlock() },
			Registerer: reg,
		})
	}()
	testkit.Eventually(t, 5*time.Second, "GOGC for a 2 MiB heap", func() bool { return last() == 800 })

	live.Store(8 << 20)
	testkit.Eventually(t, 5*time.Second, "GOGC for an 8 MiB heap after a collection", func() error {
		runtime.GC()
		if p := last(); p != 300 {
			return fmt.Errorf("GOGC %d", p)
		}
		return nil
	})
	if n, err := testkit.FindMetric(reg, "tether_gc_percent"); err != nil || n != 300 {
		t.Fatalf("tether_gc_percent = %v, %v", n, err)
	}
	live.Store(100 << 20)
	testkit.Eventually(t, 5*time.Second, "Go's rule for a large heap", func() bool { runtime.GC(); return last() == 100 })

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

// TestRunSetsTheRuntime: with the runtime's own hooks, GOGC (as the
// runtime reports it) rises for this test's small heap and comes back to
// 100 when Run ends.
func TestRunSetsTheRuntime(t *testing.T) {
	gogc := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // Go's default, whatever GOGC the test runs with
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); Run(ctx, Options{}) }()
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
