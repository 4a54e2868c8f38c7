package loadgen

import (
	"math/rand/v2"
	"testing"
	"time"
)

// samplesWithBursts: 1,000 requests a second for 2 s, each 0.3 ms, but
// the ones due in four 10 ms windows answered 8 ms late.
func samplesWithBursts() []Sample {
	var s []Sample
	for i := range 2000 {
		due := time.Duration(i) * time.Millisecond
		lat := 300 * time.Microsecond
		if w := due % (500 * time.Millisecond); w >= 200*time.Millisecond && w < 210*time.Millisecond {
			lat = 8 * time.Millisecond
		}
		s = append(s, Sample{Due: due, Latency: lat})
	}
	return s
}

func TestBlocksHoldEveryRequestOnce(t *testing.T) {
	samples := samplesWithBursts()
	b := BlocksOf(samples, 100*time.Millisecond)
	if b.Len() != 20 {
		t.Fatalf("%d blocks of 100 ms in 2 s, want 20", b.Len())
	}
	var hist Histogram
	for _, s := range samples {
		hist.Record(s.Latency)
	}
	// Every block counted once (which a draw does only by chance) gives
	// the histogram's quantiles.
	var all Resample
	for _, blk := range b.blocks {
		for _, c := range blk {
			all.counts[c.bucket] += uint64(c.n)
			all.n += uint64(c.n)
		}
	}
	if all.n != uint64(len(samples)) {
		t.Fatalf("blocks hold %d requests, want %d", all.n, len(samples))
	}
	for _, q := range []float64{0.5, 0.98, 0.99, 0.999} {
		// The histogram's is clamped to the largest value recorded.
		if got, want := all.Quantile(q), h(hist.Quantile(q)); got != want {
			t.Errorf("q%v of the blocks = %v, the histogram's %v", q, got, want)
		}
	}
}

func TestDrawsKeepBurstsWhole(t *testing.T) {
	b := BlocksOf(samplesWithBursts(), 100*time.Millisecond)
	r := rand.New(rand.NewPCG(1, 2))
	var s Resample
	seen := map[time.Duration]int{}
	for range 500 {
		b.Draw(r, &s)
		if s.n != 2000 {
			t.Fatalf("a draw holds %d requests, want the point's 2,000 (20 blocks of 100)", s.n)
		}
		seen[s.Quantile(0.99)]++
	}
	// Four bursts of ten in 2,000 requests put the p99 (rank 1,980) at
	// 8 ms; a draw with two of the bursts' blocks or fewer (each block is
	// drawn 20 times with chance 1/20) puts it at 0.3 ms.
	fast, slow := seen[h(300*time.Microsecond)], seen[h(8*time.Millisecond)]
	if fast+slow != 500 || fast == 0 || slow == 0 {
		t.Fatalf("p99 of the draws: %v; want both 0.3 ms and 8 ms, nothing else", seen)
	}
}

// h is d as a histogram reports it (its bucket's highest value).
func h(d time.Duration) time.Duration { return time.Duration(upper(index(int64(d)))) }

func TestAnEmptyDrawHasNoQuantile(t *testing.T) {
	b := BlocksOf(nil, 100*time.Millisecond)
	if b.Len() != 0 {
		t.Fatalf("no samples, %d blocks", b.Len())
	}
	var s Resample
	b.Draw(rand.New(rand.NewPCG(1, 2)), &s)
	if q := s.Quantile(0.99); q != 0 {
		t.Fatalf("empty draw's p99 %v", q)
	}
}
