// Package loadgen is the benchmarks' open-loop load generator: requests are
// sent on a fixed schedule whatever the server does, and each latency is
// measured from the request's scheduled send time, so a stalled server or
// a late generator shows up in the percentiles instead of silently
// thinning the load (coordinated omission). Latencies go into a log-linear
// histogram with HdrHistogram's precision (under 1% relative error).
package loadgen

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// subBits sets the precision: 2^subBits buckets per power of two, so a
// recorded value is off by less than 1/128 of itself.
const subBits = 7

// buckets covers 0 to 2^40 ns (about 18 minutes); longer values are clamped.
const buckets = (40 - subBits + 1) << subBits

// Histogram counts durations in log-linear buckets. Record is safe for
// concurrent use and allocates nothing.
type Histogram struct {
	counts [buckets]atomic.Uint64
	n      atomic.Uint64
	max    atomic.Int64
}

func index(v int64) int {
	if v < 1<<subBits {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - subBits - 1 // v>>e is in [2^subBits, 2^(subBits+1))
	i := (e+1)<<subBits + int(v>>e) - 1<<subBits
	return min(i, buckets-1)
}

// upper is the highest value that falls into bucket i (HdrHistogram's
// "highest equivalent value"): percentiles never understate.
func upper(i int) int64 {
	if i < 1<<subBits {
		return int64(i)
	}
	e := i>>subBits - 1
	m := int64(i&(1<<subBits-1) + 1<<subBits)
	return (m+1)<<e - 1
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	h.counts[index(v)].Add(1)
	h.n.Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n.Load() }

// Max is the largest recorded value.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max.Load()) }

// Quantile returns the value below which a fraction q (0..1) of the
// recorded values fall, or 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	i, ok := quantileBucket(h.n.Load(), q, func(i int) uint64 { return h.counts[i].Load() })
	if !ok {
		return 0
	}
	return time.Duration(min(upper(i), h.max.Load()))
}

// quantileBucket is the bucket holding the q-quantile of n values counted
// by count; false when n is 0.
func quantileBucket(n uint64, q float64, count func(i int) uint64) (int, bool) {
	if n == 0 {
		return 0, false
	}
	rank := uint64(q*float64(n) + 0.5)
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range buckets {
		if seen += count(i); seen >= rank {
			return i, true
		}
	}
	return buckets - 1, true // counts short of n: a Record under way
}

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	for i := range o.counts {
		if c := o.counts[i].Load(); c > 0 {
			h.counts[i].Add(c)
		}
	}
	h.n.Add(o.n.Load())
	for {
		m, v := h.max.Load(), o.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}
