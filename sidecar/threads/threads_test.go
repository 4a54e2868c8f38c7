package threads

import (
	"context"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const tick = 10 * time.Millisecond

// load is a share of one core over one tick.
func load(share float64) time.Duration { return time.Duration(share * float64(tick)) }

func TestControllerFollowsTheLoad(t *testing.T) {
	c := NewController(Options{Max: 2, Tick: tick})
	if c.Procs() != 1 {
		t.Fatalf("starts on %d threads, want 1", c.Procs())
	}
	// Light load stays on one thread, however long.
	for range 500 {
		if n, changed := c.Observe(load(0.45), tick); changed || n != 1 {
			t.Fatalf("at 0.45 of a core: %d threads (changed %v), want 1", n, changed)
		}
	}
	// Load that fills the thread brings both back within a few ticks
	// (the window's average: (0.45×4 + 1)/5 = 0.56, then 0.67).
	if n, changed := c.Observe(load(1), tick); changed || n != 1 {
		t.Fatalf("first busy tick: %d threads (changed %v), want still 1", n, changed)
	}
	if n, changed := c.Observe(load(1), tick); !changed || n != 2 {
		t.Fatalf("second busy tick: %d threads (changed %v), want 2", n, changed)
	}
	// Over Down it stays on two, window after window.
	for range 300 {
		if n, changed := c.Observe(load(0.7), tick); changed || n != 2 {
			t.Fatalf("at 0.7 of a core: %d threads (changed %v), want 2", n, changed)
		}
	}
	// A quiet second returns to one, not before it ends.
	for i := range 100 {
		n, changed := c.Observe(load(0.55), tick)
		if i < 99 && (changed || n != 2) {
			t.Fatalf("tick %d of a quiet second: %d threads (changed %v)", i, n, changed)
		}
		if i == 99 && (!changed || n != 1) {
			t.Fatalf("after a quiet second: %d threads (changed %v), want 1", n, changed)
		}
	}
}

// A busy tick alone is no load: ticks that fill the thread now and then
// (a collection's mark phase, a scrape) among light ones keep one thread;
// the fifth of a run above Up, the whole window above it, brings two.
func TestControllerIgnoresASingleBusyTick(t *testing.T) {
	c := NewController(Options{Max: 2, Tick: tick})
	for i := range 1000 {
		used := load(0.3)
		if i%7 == 0 {
			used = load(1)
		}
		if n, changed := c.Observe(used, tick); changed || n != 1 {
			t.Fatalf("tick %d: %d threads (changed %v), want 1", i, n, changed)
		}
	}
	for i := range 5 {
		n, _ := c.Observe(load(0.65), tick)
		if want := map[bool]int{true: 2, false: 1}[i == 4]; n != want {
			t.Fatalf("tick %d at 0.65 of a core: %d threads, want %d", i, n, want)
		}
	}
}

// With UpAfter under a tick every tick is judged alone (the controller
// before the window).
func TestControllerWithAShortUpAfterJudgesEachTick(t *testing.T) {
	c := NewController(Options{Max: 2, Tick: tick, UpAfter: time.Millisecond})
	if n, _ := c.Observe(load(0.59), tick); n != 1 {
		t.Fatalf("at 0.59 of a core: %d threads, want 1", n)
	}
	if n, _ := c.Observe(load(0.6), tick); n != 2 {
		t.Fatalf("at 0.6 of a core: %d threads, want 2", n)
	}
}

// A quiet window counts only once it is over: a burst inside it keeps
// both threads.
func TestControllerAveragesTheWindow(t *testing.T) {
	c := NewController(Options{Max: 4, Tick: tick})
	for c.Procs() == 1 {
		c.Observe(load(1), tick)
	}
	for i := range 100 {
		used := load(0.1)
		if i == 50 {
			used = load(60) // 600 ms of CPU within one tick on four threads
		}
		if n, _ := c.Observe(used, tick); n != 4 {
			t.Fatalf("tick %d: %d threads, want 4", i, n)
		}
	}
}

// A load that came back to one thread keeps it through bursts that would
// take a fresh load's thread count up (Up judges UpAfterSettled, not
// UpAfter); a load that fills the thread still brings the full count
// back; and once a reading was near idle, the short window applies again.
func TestControllerSettlesAfterComingDown(t *testing.T) {
	// Five busy ticks in every fifty, light ones between: each burst
	// fills a 50 ms window, no 500 ms one ((5 + 45 × 0.45)/50 = 0.505).
	bursty := func(i int) time.Duration {
		if i%50 < 5 {
			return load(1)
		}
		return load(0.45)
	}
	fresh := NewController(Options{Max: 2, Tick: tick})
	for i := range 50 {
		fresh.Observe(bursty(i), tick)
	}
	if fresh.Procs() != 2 {
		t.Fatalf("a fresh load's burst: %d threads, want 2 (the test's bursts must fill the short window)", fresh.Procs())
	}

	c := NewController(Options{Max: 2, Tick: tick})
	down := func() {
		for c.Procs() == 1 {
			c.Observe(load(1), tick)
		}
		for range 100 {
			c.Observe(load(0.5), tick) // a second under Down on two
		}
		if c.Procs() != 1 {
			t.Fatalf("after a second at 0.5 of a core on two: %d threads, want 1", c.Procs())
		}
	}
	down()
	for i := range 1000 {
		if n, changed := c.Observe(bursty(i), tick); changed || n != 1 {
			t.Fatalf("settled, tick %d: %d threads (changed %v), want 1", i, n, changed)
		}
	}
	busy := 0
	for c.Procs() == 1 {
		c.Observe(load(1), tick)
		busy++
	}
	if busy <= 5 || busy > 25 {
		t.Fatalf("settled, a filled thread brought two after %d ticks, want 6–25 (more than the short window, within half the long one)", busy)
	}

	down()
	if n, _ := c.Observe(load(0.01), tick); n != 1 {
		t.Fatalf("near idle: %d threads", n)
	}
	for i := range 5 {
		c.Observe(load(1), tick)
		if i == 4 && c.Procs() != 2 {
			t.Fatalf("after a reading near idle, five busy ticks: %d threads, want 2", c.Procs())
		}
	}
}

// A tick the ticker delivered late is judged by the time that passed.
func TestControllerUsesTheTimePassed(t *testing.T) {
	c := NewController(Options{Max: 2, Tick: tick})
	if n, _ := c.Observe(8*time.Millisecond, 20*time.Millisecond); n != 1 {
		t.Fatalf("0.4 of a core over a late tick: %d threads, want 1", n)
	}
	if n, _ := c.Observe(0, 0); n != 1 {
		t.Fatalf("no time passed: %d threads", n)
	}
}

// TestRunAdaptsTheRuntime runs the controller on the real runtime: a
// goroutine that burns a core brings GOMAXPROCS to Max, and when it stops
// the count returns to one; the gauge follows, and the end restores Max.
func TestRunAdaptsTheRuntime(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		Run(ctx, Options{Max: 2, Registerer: reg, DownAfter: 200 * time.Millisecond})
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 10s (GOMAXPROCS %d)", what, runtime.GOMAXPROCS(0))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	gauge := func() float64 { return value(t, reg, "tether_gomaxprocs") }
	waitFor("start on one thread", func() bool { return runtime.GOMAXPROCS(0) == 1 && gauge() == 1 })

	var stop atomic.Bool
	burned := make(chan struct{})
	go func() {
		defer close(burned)
		for !stop.Load() {
			for i := 0; i < 1e5; i++ {
				_ = i * i
			}
		}
	}()
	waitFor("two threads under load", func() bool { return runtime.GOMAXPROCS(0) == 2 && gauge() == 2 })
	stop.Store(true)
	<-burned
	waitFor("one thread once the load went", func() bool { return runtime.GOMAXPROCS(0) == 1 })

	cancel()
	<-done
	if n := runtime.GOMAXPROCS(0); n != 2 {
		t.Fatalf("after Run: GOMAXPROCS %d, want Max (2)", n)
	}
	if n := value(t, reg, "tether_gomaxprocs_changes_total"); n < 2 {
		t.Fatalf("%v thread count changes counted, want at least 2 (up, down)", n)
	}
	// Both counts ran for a while: one at the start and the end, two
	// while the goroutine burned (at least the Up window's readings).
	one, two := value(t, reg, "tether_gomaxprocs_seconds_total", "threads", "1"), value(t, reg, "tether_gomaxprocs_seconds_total", "threads", "2")
	if one <= 0 || two < DefaultUpAfter.Seconds() || one+two > time.Since(start).Seconds() {
		t.Fatalf("tether_gomaxprocs_seconds_total: %.3fs on one thread, %.3fs on two, in %v of Run", one, two, time.Since(start))
	}
}

// value is the sum of a metric family's values in reg (0 without it),
// of its samples with label (a name and a value) when one is given.
func value(t *testing.T, reg *prometheus.Registry, name string, label ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(label) == 2 && !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == label[0] && l.GetValue() == label[1]
			}) {
				continue
			}
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

func TestRunWithOneThreadDoesNothing(t *testing.T) {
	set := 0
	Run(context.Background(), Options{Max: 1, Set: func(int) { set++ }})
	if set != 0 {
		t.Fatalf("set the thread count %d times with Max 1", set)
	}
}

// A near-idle sidecar reads its CPU time every IdleTick, not every Tick;
// a reading with load in it, or two threads, bring the short tick back.
func TestControllerReadsLessOftenWhenIdle(t *testing.T) {
	c := NewController(Options{Max: 2, Tick: tick})
	if got := c.Next(); got != DefaultIdleTick {
		t.Fatalf("at start (idle): next reading after %v, want %v", got, DefaultIdleTick)
	}
	c.Observe(load(0.04), tick)
	if got := c.Next(); got != DefaultIdleTick {
		t.Fatalf("after 0.04 of a core: next reading after %v, want %v", got, DefaultIdleTick)
	}
	c.Observe(load(0.05), tick)
	if got := c.Next(); got != tick {
		t.Fatalf("after 0.05 of a core: next reading after %v, want %v", got, tick)
	}
	for c.Procs() == 1 {
		c.Observe(load(1), tick)
	}
	c.Observe(0, tick)
	if got := c.Next(); got != tick {
		t.Fatalf("idle on two threads: next reading after %v, want %v (the quiet window is counted in ticks)", got, tick)
	}
}

// Up judges the last UpAfter of time: a long reading (after IdleTick)
// counts for the part of it inside the window, not as a whole.
func TestControllerJudgesTheLastUpAfterOfALongReading(t *testing.T) {
	long := DefaultIdleTick
	c := NewController(Options{Max: 2, Tick: tick})
	c.Observe(0, long)
	// A long reading the load filled: its last 50 ms were full, so two
	// threads at once.
	if n, _ := c.Observe(long, long); n != 2 {
		t.Fatalf("a long reading at a full core: %d threads, want 2", n)
	}

	c = NewController(Options{Max: 2, Tick: tick})
	c.Observe(0, long)
	// A long reading at 0.3 of a core, then ticks at a full one: the
	// window is 30 ms of the long reading and 20 ms of ticks after two
	// (0.58), 20 and 30 after three (0.72).
	c.Observe(time.Duration(0.3*float64(long)), long)
	for i, want := range []int{1, 1, 2} {
		if n, _ := c.Observe(load(1), tick); n != want {
			t.Fatalf("tick %d at a full core after a long reading at 0.3: %d threads, want %d", i+1, n, want)
		}
	}
}

// Run reads every IdleTick while idle and every Tick under load (fake
// time: the synctest bubble's clock).
func TestRunReadsLessOftenWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var cpu, reads atomic.Int64
		var procs atomic.Int32
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			Run(ctx, Options{
				Max: 2,
				CPU: func() time.Duration { reads.Add(1); return time.Duration(cpu.Load()) },
				Set: func(n int) { procs.Store(int32(n)) },
			})
		}()
		time.Sleep(time.Second + time.Millisecond)
		if n := reads.Load(); n != 11 { // at start, then one per IdleTick
			t.Fatalf("idle for 1s: %d readings, want 11", n)
		}
		// A full core from now on.
		start := time.Now()
		loaded := make(chan struct{})
		defer func() { cancel(); <-loaded }()
		go func() {
			defer close(loaded)
			for ctx.Err() == nil {
				time.Sleep(time.Millisecond)
				cpu.Store(int64(time.Since(start)))
			}
		}()
		time.Sleep(time.Second)
		if n := reads.Load() - 11; n < 90 {
			t.Fatalf("under load for 1s: %d readings, want about 100 (one per Tick)", n)
		}
		if p := procs.Load(); p != 2 {
			t.Fatalf("under load: %d threads, want 2", p)
		}
	})
}
