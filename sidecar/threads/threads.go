// Package threads runs the sidecar's Go code on one thread while one
// keeps up, and on its full count (GOMAXPROCS, two by default) while the
// load needs more.
//
// Why: at a steady load a sidecar is idle between most requests, and
// with a second P every request that wakes one thread also wakes the
// other to look for work (a futex wake, a spin through the scheduler, an
// epoll_wait, a futex sleep), which measured 13–18% of its CPU per
// request at 1,000–2,000 requests/s (README "Threads"). One thread cannot
// absorb a burst, though: at 4,000 requests/s it fell seconds behind
// where two kept a 9 ms p99. So the controller watches the process's CPU
// time every tick: on one thread, the last UpAfter averaging Up of a core
// or more brings the full count back (a saturated thread within three
// ticks); on the full count, a window of DownAfter that averaged under
// Down of a core returns to one.
//
// Down is measured on the full count, which costs more per request than
// one thread does (the wake-ups above): 60% of a core on two threads is
// about 40–50% on one, under Up. Up looks at a few ticks rather than
// one because a single busy tick is no load: a garbage collection's mark
// phase, a metrics scrape or a few requests arriving together fill 10 ms
// of one thread now and then at loads one thread serves with a lower
// tail than two (docs/hop-cost.md "The thread rule, measured": at 2,000
// requests/s a one-tick Up kept two threads for good, at about 15% more
// CPU per request).
//
// A load that came back to one thread is one that thread carries, and
// its bursts would take the second back within a second, again and again
// (5,000 requests/s on the bench's machine: 40–50% of a core on one
// thread, 50 ms windows over 60% several times a second). So once the
// count has come down, Up judges the last UpAfterSettled instead, until
// a reading near idle (under Idle of a core) says that load has gone: a
// thread the load fills still brings the second, within 150–250 ms of
// that window, a burst no longer does. Without it, a Down high enough to
// return at such a load flapped; with Down low enough not to flap, two
// threads stayed for good at 1.4–1.75× the CPU per request one needs.
//
// While the sidecar is near idle (one thread, the last reading under Idle
// of a core) it reads every IdleTick instead: the 10 ms tick was 100
// wake-ups a second of a process that otherwise has nothing to do, a
// third of an idle sidecar's CPU. A load that fills the thread from idle
// is then seen at the next reading, at most IdleTick later; the window
// Up judges is the last UpAfter of time, so that reading counts for
// what it measured and no more.
package threads

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultTick           = 10 * time.Millisecond
	DefaultUp             = 0.6
	DefaultUpAfter        = 50 * time.Millisecond
	DefaultUpAfterSettled = 500 * time.Millisecond
	DefaultDown           = 0.6
	DefaultDownAfter      = time.Second
	DefaultIdle           = 0.05
	DefaultIdleTick       = 100 * time.Millisecond
)

// Options configure Run. Zero values take the defaults.
type Options struct {
	// Max is the thread count under load (GOMAXPROCS as the sidecar
	// starts); below 2 there is nothing to adapt and Run returns.
	Max int
	// Tick is how often the process's CPU time is read (IdleTick while
	// near idle).
	Tick time.Duration
	// Up is the share of one core, averaged over the last UpAfter on one
	// thread, that brings Max threads back. An UpAfter shorter than Tick
	// judges every tick alone.
	Up      float64
	UpAfter time.Duration
	// UpAfterSettled replaces UpAfter after a return to one thread,
	// until a reading under Idle: a load one thread was found to carry
	// takes the full count back only when it fills the thread for longer
	// than its bursts do.
	UpAfterSettled time.Duration
	// Down is the share of one core, averaged over DownAfter on Max
	// threads, under which the sidecar returns to one thread.
	Down      float64
	DownAfter time.Duration
	// Idle is the share of one core, over the last reading on one
	// thread, under which the next reading comes after IdleTick (longer
	// than Tick: fewer wake-ups of a sidecar with little to do).
	Idle     float64
	IdleTick time.Duration

	// CPU returns the process's CPU time so far (ProcessCPU); Set sets
	// the thread count (runtime.GOMAXPROCS). Tests replace them.
	CPU func() time.Duration
	Set func(n int)

	// Registerer takes tether_gomaxprocs and
	// tether_gomaxprocs_changes_total; nil registers nothing.
	Registerer prometheus.Registerer
	Log        *slog.Logger
}

func (o *Options) defaults() {
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.Up <= 0 {
		o.Up = DefaultUp
	}
	if o.UpAfter <= 0 {
		o.UpAfter = DefaultUpAfter
	}
	if o.UpAfterSettled <= 0 {
		o.UpAfterSettled = DefaultUpAfterSettled
	}
	if o.Down <= 0 {
		o.Down = DefaultDown
	}
	if o.DownAfter <= 0 {
		o.DownAfter = DefaultDownAfter
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.IdleTick <= 0 {
		o.IdleTick = DefaultIdleTick
	}
	if o.CPU == nil {
		o.CPU = ProcessCPU
	}
	if o.Set == nil {
		o.Set = func(n int) { runtime.GOMAXPROCS(n) }
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
}

// ProcessCPU is the CPU time (user and system) the process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Run adapts the thread count until ctx ends, then leaves Max threads.
// It starts on one thread.
func Run(ctx context.Context, o Options) {
	if o.Max < 2 {
		return
	}
	o.defaults()
	procs := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tether_gomaxprocs",
		Help: "Threads running the sidecar's Go code now (GOMAXPROCS): 1 while one keeps up, the full count while the load needs more.",
	})
	changes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_gomaxprocs_changes_total",
		Help: "Changes of the sidecar's thread count, by direction (up: load came; down: it went).",
	}, []string{"direction"})
	seconds := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tether_gomaxprocs_seconds_total",
		Help: "Time the sidecar ran with each thread count (threads: 1, or the full count), as the controller's readings measured it.",
	}, []string{"threads"})
	if o.Registerer != nil {
		o.Registerer.MustRegister(procs, changes, seconds)
	}
	// Resolved once: a reading adds to one of them every tick.
	onOne, onMax := seconds.WithLabelValues("1"), seconds.WithLabelValues(strconv.Itoa(o.Max))
	c := NewController(o)
	set := func(n int) {
		o.Set(n)
		procs.Set(float64(n))
	}
	set(c.Procs())
	defer set(o.Max)
	t := time.NewTimer(c.Next())
	defer t.Stop()
	last, lastAt := o.CPU(), time.Now()
	for {
		var at time.Time
		select {
		case <-ctx.Done():
			return
		case at = <-t.C:
		}
		now := o.CPU()
		if c.Procs() == 1 {
			onOne.Add(at.Sub(lastAt).Seconds())
		} else {
			onMax.Add(at.Sub(lastAt).Seconds())
		}
		if n, changed := c.Observe(now-last, at.Sub(lastAt)); changed {
			set(n)
			dir := "down"
			if n > 1 {
				dir = "up"
			}
			changes.WithLabelValues(dir).Inc()
			o.Log.Debug("go runtime: thread count changed", "gomaxprocs", n)
		}
		last, lastAt = now, at
		t.Reset(c.Next())
	}
}

// Controller decides the thread count from the CPU time each tick used.
type Controller struct {
	o     Options
	procs int
	// On Max threads: the CPU time used and the time passed in the
	// current window.
	used, passed time.Duration
	// The last readings, as many ticks as fit in the longer of UpAfter
	// and UpAfterSettled (on either count: the window is full when the
	// count drops to one), oldest at recent[next]; Up judges the last
	// UpAfter of them, or UpAfterSettled while settled (window).
	recent []sample
	next   int
	// settled: the count came down to one, and no reading since was
	// under Idle (the load that came down is still there).
	settled bool
}

type sample struct{ used, passed time.Duration }

// NewController starts on one thread.
func NewController(o Options) *Controller {
	o.defaults()
	// It starts as if idle for the window before (a burst at start waits
	// as a burst later would).
	recent := make([]sample, max(1, int(max(o.UpAfter, o.UpAfterSettled)/o.Tick)))
	for i := range recent {
		recent[i].passed = o.Tick
	}
	return &Controller{o: o, procs: 1, recent: recent}
}

// Procs is the thread count decided.
func (c *Controller) Procs() int { return c.procs }

// Observe takes the CPU time used in the time passed since the last
// call (a tick, or longer when the ticker fell behind) and returns the
// thread count, and whether it changed.
func (c *Controller) Observe(used, passed time.Duration) (int, bool) {
	if passed <= 0 {
		return c.procs, false
	}
	c.recent[c.next] = sample{used, passed}
	c.next = (c.next + 1) % len(c.recent)
	if c.procs == 1 {
		span := c.o.UpAfter
		if c.settled {
			if c.nearIdle(sample{used, passed}) {
				c.settled = false // that load has gone
			} else {
				span = c.o.UpAfterSettled
			}
		}
		if u, p := c.window(span); float64(u) >= c.o.Up*float64(p) {
			c.procs, c.used, c.passed = c.o.Max, 0, 0
			return c.procs, true
		}
		return 1, false
	}
	c.used += used
	c.passed += passed
	if c.passed < c.o.DownAfter {
		return c.procs, false
	}
	quiet := float64(c.used) < c.o.Down*float64(c.passed)
	c.used, c.passed = 0, 0
	if quiet {
		c.procs, c.settled = 1, true
		return 1, true
	}
	return c.procs, false
}

// window sums the readings of the last span, newest first, the oldest
// one that reaches past it counted for its part inside (a reading after
// IdleTick is longer than the window). Readings that together fall short
// of it (the ring holds the longer window's ticks, so only readings
// shorter than Tick, which Run does not make, can) are summed as they
// are.
func (c *Controller) window(span time.Duration) (used, passed time.Duration) {
	for i := range c.recent {
		s := c.ago(i)
		if left := span - passed; s.passed > left {
			return used + time.Duration(float64(s.used)*float64(left)/float64(s.passed)), span
		}
		used, passed = used+s.used, passed+s.passed
	}
	return used, passed
}

// Next is how long until the next reading: IdleTick on one thread after
// a reading under Idle of a core, Tick otherwise.
func (c *Controller) Next() time.Duration {
	if c.procs == 1 && c.nearIdle(c.ago(0)) {
		return c.o.IdleTick
	}
	return c.o.Tick
}

// nearIdle reports whether a reading used under Idle of a core: what
// ends a settled load and slows the readings.
func (c *Controller) nearIdle(s sample) bool {
	return float64(s.used) < c.o.Idle*float64(s.passed)
}

// ago is the reading i before the newest (0: the newest).
func (c *Controller) ago(i int) sample {
	n := len(c.recent)
	return c.recent[((c.next-1-i)%n+n)%n]
}
