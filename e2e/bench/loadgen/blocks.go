package loadgen

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Blocks are a run's measured requests grouped by when they were due,
// in consecutive blocks of one width, each block's latencies counted in
// the Histogram's buckets: what a block bootstrap resamples. A p99 at
// these rates is made of bursts, requests due within a few milliseconds
// that waited out the same stop and were answered at about the same
// moment; blocks longer than a burst keep each whole, where drawing
// requests one by one would scatter a burst's requests over the draws
// and understate how far a p99 can move.
type Blocks struct {
	blocks [][]bucketCount
}

// bucketCount is how many of a block's requests fell into one bucket.
type bucketCount struct {
	bucket uint16 // < buckets
	n      uint32
}

// BlocksOf groups samples into blocks of width by their due time.
func BlocksOf(samples []Sample, width time.Duration) *Blocks {
	keys := make([]uint64, len(samples)) // block<<16 | bucket, sorted
	n := 0
	for i, s := range samples {
		block := int(max(s.Due, 0) / width)
		n = max(n, block+1)
		keys[i] = uint64(block)<<16 | uint64(index(int64(s.Latency)))
	}
	slices.Sort(keys)
	b := &Blocks{blocks: make([][]bucketCount, n)}
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j] == keys[i] {
			j++
		}
		block := keys[i] >> 16
		b.blocks[block] = append(b.blocks[block], bucketCount{bucket: uint16(keys[i]), n: uint32(j - i)})
		i = j
	}
	return b
}

// Len is the number of blocks.
func (b *Blocks) Len() int { return len(b.blocks) }

// A Resample is a draw of Blocks: as many blocks as there are, drawn
// with replacement, their requests counted together.
type Resample struct {
	counts [buckets]uint64
	n      uint64
}

// Draw fills s with a resample of b drawn from r.
func (b *Blocks) Draw(r *rand.Rand, s *Resample) {
	clear(s.counts[:])
	s.n = 0
	for range b.blocks {
		for _, c := range b.blocks[r.IntN(len(b.blocks))] {
			s.counts[c.bucket] += uint64(c.n)
			s.n += uint64(c.n)
		}
	}
}

// Quantile is the resample's q-quantile as Histogram.Quantile reports
// it (its bucket's highest value), or 0 when the draw holds no request.
func (s *Resample) Quantile(q float64) time.Duration {
	i, ok := quantileBucket(s.n, q, func(i int) uint64 { return s.counts[i] })
	if !ok {
		return 0
	}
	return time.Duration(upper(i))
}
