// Package bootstrap is what the benchmarks' resampled intervals share:
// how many draws, their seeded source, and the central interval of the
// figures the draws gave. A figure of one run (a hit rate over a few
// hundred conversations, a p99 over a few thousand requests) is one draw
// of many the same machine and workload could have given; resampling
// the run's own parts says how far another draw could land.
package bootstrap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Draws is how many resamples an interval is drawn from.
const Draws = 1000

// Rand is the source of a resample's draws, seeded by n (the number of
// parts drawn from): the same run gives the same draws, so a report
// shows the same interval each time it is written.
func Rand(n int) *rand.Rand { return rand.New(rand.NewPCG(1, uint64(n))) }

// Central returns the central interval holding level (0.9: 90%) of figs,
// the figures of the draws, which it sorts: the range of the middle 90%.
// figs must not be empty.
func Central(figs []float64, level float64) (lo, hi float64) {
	slices.Sort(figs)
	tail := (1 - level) / 2
	at := func(q float64) float64 {
		// The small term keeps a rank that is whole on paper whole in
		// floating point ((1-0.9)/2 is 0.0499…).
		return figs[min(len(figs)-1, int(math.Floor(q*float64(len(figs))+1e-9)))]
	}
	return at(tail), at(1 - tail)
}

// Format writes an interval as the reports print it, "0.93–2.59", or a
// dash when there is none (ok false).
func Format(lo, hi float64, ok bool) string {
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}
