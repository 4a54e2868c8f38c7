// Package gcfloor keeps the garbage collector from running many times a
// second while the sidecar's heap is small, without holding a large heap
// where that costs more than it saves.
//
// Why: with GOGC=100 the next collection starts when the heap has grown by
// its live size, and a sidecar without many bindings lives in 2–4 MiB, so
// at 5,000 requests/s (about 4.7 KB allocated per request) it would
// collect several times a second, each time stopping the world twice and
// running a mark worker beside the requests. Marking costs the live heap,
// not the garbage, so a larger goal makes collections rarer at about the
// same cost each.
//
// A larger goal is not free, though, even in CPU: every allocation takes
// memory the heap has not touched since the collection before, and a
// heap that cycles through 32 MiB in four seconds allocates, most likely,
// from memory the CPU's caches have let go, where one of 5 MiB allocates
// from memory still in them. At 1,000 requests/s a fixed 32 MiB floor cost
// 13–15% more CPU per request than Go's default; at 5,000 it saved a
// few percent (docs/hop-cost.md "The heap floor, measured").
//
// So after every collection Run measures how fast the heap was allocated
// since the one before and sets GOGC so that the next goal leaves room
// for Interval of that (500 ms: about two collections a second), and no
// more: GOGC = max(Percent, 100 × (goal − live) / live) with goal =
// min(Floor, live + rate × Interval). At 1,000 requests/s that room is
// under what Go's rule leaves, and GOGC stays at Percent (a 5.5 MiB goal
// under `bench hop`); at 5,000 the goal is about 17 MiB; it never exceeds
// Floor (32 MiB). When the live heap is past the goal (a store holding
// many bindings) GOGC is Percent, Go's proportional rule unchanged. The
// Go memory limit (GOMEMLIMIT) still bounds the heap: a heap near it is
// collected at the limit, whatever GOGC says.
package gcfloor

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultFloor    = 32 << 20
	DefaultInterval = 500 * time.Millisecond
	DefaultPercent  = 100
)

// runtimeHeapMinimum is the Go runtime's smallest heap goal at GOGC=100
// (runtime.defaultHeapMinimum), scaled by GOGC/100 like the rest of the
// goal: for a live heap under it, GOGC alone sets the goal.
const runtimeHeapMinimum = 4 << 20

// Options configure Run. Zero values take the defaults.
type Options struct {
	// Floor is the highest the heap goal is raised to, in bytes.
	Floor uint64
	// Interval is the time between collections the goal leaves room
	// for, at the rate the heap was allocated in the last cycle.
	Interval time.Duration
	// Percent is GOGC once the live heap is past the goal.
	Percent int

	// Live returns the live heap after the last collection (the
	// runtime's /gc/heap/live:bytes), Allocated the bytes allocated
	// since the process started (/gc/heap/allocs:bytes), Now the time;
	// Set sets GOGC (debug.SetGCPercent). Tests replace them.
	Live      func() uint64
	Allocated func() uint64
	Now       func() time.Time
	Set       func(percent int)

	// Registerer takes tether_gc_percent; nil registers nothing.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

func (o *Options) defaults() {
	if o.Floor == 0 {
		o.Floor = DefaultFloor
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Percent <= 0 {
		o.Percent = DefaultPercent
	}
	if o.Live == nil {
		o.Live = LiveHeap
	}
	if o.Allocated == nil {
		o.Allocated = Allocated
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Set == nil {
		o.Set = func(p int) { debug.SetGCPercent(p) }
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Goal is the heap goal that leaves room, above live bytes, for interval
// at the rate allocated bytes took since (the last cycle), at most
// floor; 0 when since is not a time.
func Goal(live, allocated uint64, since, interval time.Duration, floor uint64) uint64 {
	if since <= 0 {
		return 0
	}
	room := float64(allocated) * float64(interval) / float64(since)
	return uint64(min(float64(floor), float64(live)+room))
}

// Percent is the smallest GOGC, at least base, that makes the heap goal
// after a collection that left live bytes at least goal. The runtime's
// goal is the larger of live × (1 + GOGC/100) and 4 MiB × GOGC/100, so
// GOGC never needs to exceed 100 × goal / 4 MiB (800 for 32 MiB).
func Percent(live, goal uint64, base int) int {
	need := math.Ceil(100 * float64(goal) / runtimeHeapMinimum)
	if live > 0 {
		need = min(need, math.Ceil(100*(float64(goal)-float64(live))/float64(live)))
	}
	return max(base, int(need))
}

// LiveHeap is the heap marked live by the last collection.
func LiveHeap() uint64 { return readUint64("/gc/heap/live:bytes") }

// Allocated is the bytes the heap has allocated since the process
// started.
func Allocated() uint64 { return readUint64("/gc/heap/allocs:bytes") }

func readUint64(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Run sets GOGC after every collection until ctx ends, then restores
// Percent.
func Run(ctx context.Context, o Options) {
	o.defaults()
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tether_gc_percent",
		Help: fmt.Sprintf("GOGC in effect: raised while the live heap is small so that the heap goal leaves room for %s of allocation at the last cycle's rate (at most %d MiB); %d when Go's rule leaves that room already.", o.Interval, o.Floor>>20, o.Percent),
	})
	if o.Registerer != nil {
		o.Registerer.MustRegister(gauge)
	}
	current := 0
	set := func(p int) {
		if p == current {
			return
		}
		o.Set(p)
		gauge.Set(float64(p))
		current = p
	}
	defer set(o.Percent)
	set(o.Percent)
	collected, disarm := afterEachGC()
	defer disarm()
	at, allocated := o.Now(), o.Allocated()
	for {
		select {
		case <-ctx.Done():
			return
		case <-collected:
			now, total := o.Now(), o.Allocated()
			live := o.Live()
			set(Percent(live, Goal(live, total-allocated, now.Sub(at), o.Interval, o.Floor), o.Percent))
			at, allocated = now, total
		}
	}
}

// afterEachGC signals on the channel after every garbage collection (at
// most one signal waits): a sentinel whose finalizer runs once a
// collection has found it unreachable, and re-arms itself there. disarm
// stops the re-arming; the sentinel is freed by a later collection.
func afterEachGC() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	done := make(chan struct{})
	var arm func(*sentinel)
	arm = func(s *sentinel) {
		select {
		case <-done:
			return
		default:
		}
		select {
		case c <- struct{}{}:
		default:
		}
		runtime.SetFinalizer(s, arm)
	}
	runtime.SetFinalizer(&sentinel{}, arm)
	return c, func() { close(done) }
}

// sentinel has a pointer, so the tiny allocator never packs it with other
// objects (a finalizer on a packed object waits for all of them).
type sentinel struct{ _ *byte }
