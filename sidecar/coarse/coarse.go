// Package coarse puts the data path's short per-request timers on a
// shared grid, so that the timers of requests close in time fall due
// together.
//
// Why: a request sets timers that it usually outlives by far less than
// their delay (the client watch's start, the first deadline of the wait
// for a backend's answer, 5 ms each), and Go's poller wakes a thread
// asleep in epoll_wait for a timer's time even after the timer was
// stopped: the runtime keeps a stopped timer in its heap, with its time,
// until it comes due or stopped timers are over a quarter of the heap
// (runtime/time.go, timers.check). Below a few hundred requests a second
// a sidecar is asleep between requests, so each request's timers cost it
// a wake-up of its own after the request has ended (two: the poller's
// wait is rounded down to whole milliseconds). On a grid, every timer
// set within one step falls due at the same point: one wake-up per
// step, whatever the rate (docs/hop-cost.md, "Two timers per request, at
// low rates").
package coarse

import "time"

// Step is the grid the data path's per-request timers share by default
// (upstream's first wait, downstream's watch): a timer falls due at
// most this much later than asked, and an idle sidecar wakes for them at
// most 1/Step times a second.
const Step = 50 * time.Millisecond

// Ceil returns t rounded up to a multiple of step since the zero time
// (t itself when it is one). The result has no monotonic clock reading,
// as time.Time.Truncate's has none: it is a point of the wall clock,
// shared by every caller using the same step. A timer or deadline set
// to it counts from the moment it is set (time.Until, a deadline's
// conversion), so a step of the wall clock moves no timer already set,
// only the points of those set after it. step <= 0 returns t.
func Ceil(t time.Time, step time.Duration) time.Time {
	if step <= 0 {
		return t
	}
	r := t.Truncate(step)
	if r.Before(t) {
		r = r.Add(step)
	}
	return r
}
