// Package gcfloor keeps the garbage collector from running every few
// megabytes while the sidecar's heap is small.
//
// Why: with GOGC=100 the next collection starts when the heap has grown by
// its live size, and a sidecar without many bindings lives in 2–4 MiB, so
// at 2,000–5,000 requests/s (about 15 KB allocated per request) it
// collected four to five times a second (`GODEBUG=gctrace=1` under `bench
// hop`), each time stopping the world twice (0.7–1.1 ms on average on a
// loaded two-core VM) and running a mark worker beside the requests for
// several milliseconds. Marking costs the live heap, not the garbage, so
// a larger goal makes collections rarer at about the same cost each: with
// the floor, 1.3 a second at 5,000 requests/s, and 2–6% less CPU per
// request in five side-by-side runs (README "Threads"), for about 25 MB
// more resident memory.
//
// So after every collection Run sets GOGC so that the next goal is at
// least Floor bytes: GOGC = max(Percent, 100 × (Floor − live) / live),
// at most 800 for the default floor of 32 MiB (see func Percent). When the
// live heap is past Floor (a store holding many bindings) GOGC is Percent,
// Go's proportional rule unchanged. The Go memory limit (GOMEMLIMIT) still
// bounds the heap: a heap near it is collected at the limit, whatever
// GOGC says.
package gcfloor

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultFloor   = 32 << 20
	DefaultPercent = 100
)

// runtimeHeapMinimum is the Go runtime's smallest heap goal at GOGC=100
// (runtime.defaultHeapMinimum), scaled by GOGC/100 like the rest of the
// goal: for a live heap under it, GOGC alone sets the goal.
const runtimeHeapMinimum = 4 << 20

// Options configure Run. Zero values take the defaults.
type Options struct {
	// Floor is the smallest heap goal, in bytes.
	Floor uint64
	// Percent is GOGC once the live heap is past Floor.
	Percent int

	// Live returns the live heap after the last collection (the
	// runtime's /gc/heap/live:bytes); Set sets GOGC
	// (debug.SetGCPercent). Tests replace them.
	Live func() uint64
	Set  func(percent int)

	// Registerer takes tether_gc_percent; nil registers nothing.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

func (o *Options) defaults() {
	if o.Floor == 0 {
		o.Floor = DefaultFloor
	}
	if o.Percent <= 0 {
		o.Percent = DefaultPercent
	}
	if o.Live == nil {
		o.Live = LiveHeap
	}
	if o.Set == nil {
		o.Set = func(p int) { debug.SetGCPercent(p) }
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// Percent is the smallest GOGC, at least base, that makes the heap goal
// after a collection that left live bytes at least floor. The runtime's
// goal is the larger of live × (1 + GOGC/100) and 4 MiB × GOGC/100, so
// GOGC never needs to exceed 100 × floor / 4 MiB (800 for 32 MiB).
func Percent(live, floor uint64, base int) int {
	need := math.Ceil(100 * float64(floor) / runtimeHeapMinimum)
	if live > 0 {
		need = min(need, math.Ceil(100*(float64(floor)-float64(live))/float64(live)))
	}
	return max(base, int(need))
}

// LiveHeap is the heap marked live by the last collection.
func LiveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
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
		Help: "GOGC in effect: raised while the live heap is small so that the heap goal stays at least the floor (32 MiB), 100 once the heap is past it.",
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
	set(Percent(o.Live(), o.Floor, o.Percent))
	collected, disarm := afterEachGC()
	defer disarm()
	for {
		select {
		case <-ctx.Done():
			return
		case <-collected:
			set(Percent(o.Live(), o.Floor, o.Percent))
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
