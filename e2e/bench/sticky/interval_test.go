package sticky

import (
	"math/rand/v2"
	"testing"
	"time"
)

// result builds a Result of n conversations whose hit rates hit(i)
// gives, each of 1,000 prompt tokens and turns with TTFT ttft(i).
func result(n int, hit func(i int) float64, ttft func(i int) time.Duration) *Result {
	res := &Result{Convs: map[int]*Conv{}}
	for i := range n {
		c := &Conv{Prompt: 1000, Cached: int64(1000 * hit(i)), TTFT: []time.Duration{ttft(i), ttft(i) + ttft(i)/2}}
		res.Convs[i] = c
		res.Prompt, res.Cached = res.Prompt+c.Prompt, res.Cached+c.Cached
	}
	return res
}

func ttftOf(i int) time.Duration { return time.Duration(10+i%7) * time.Millisecond }

// The draws are paired: two policies whose every conversation differs by
// the same factor have that ratio in every draw, however much the
// conversations differ from each other (draws of each policy on its own
// would spread it widely).
func TestRatioIntervalPairsTheDraws(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	hits := make([]float64, 200)
	for i := range hits {
		hits[i] = 0.05 + 0.4*r.Float64()
	}
	den := result(200, func(i int) float64 { return hits[i] }, ttftOf)
	num := result(200, func(i int) float64 { return 2 * hits[i] }, func(i int) time.Duration { return ttftOf(i) / 2 })
	if lo, hi, ok := RatioInterval(num, den, HitRateStat, 0.9); !ok || hi-lo > 0.01 || lo < 1.99 || hi > 2.01 {
		t.Errorf("hit rate ratio interval %.3f–%.3f (ok %v), want 2 in every draw", lo, hi, ok)
	}
	if lo, hi, ok := RatioInterval(den, num, TTFTP50Stat, 0.9); !ok || lo != 2 || hi != 2 {
		t.Errorf("TTFT p50 ratio interval %.3f–%.3f (ok %v), want 2 in every draw", lo, hi, ok)
	}
	if lo, hi, _ := RatioInterval(den, den, HitRateStat, 0.9); lo != 1 || hi != 1 {
		t.Errorf("a policy against itself: %v–%v, want 1–1", lo, hi)
	}
}

// Where conversations differ in how a policy served them, the interval
// holds the run's own ratio, narrows as the conversations grow in number
// (about as one over their square root), and is the same each time the
// report is written.
func TestRatioIntervalSpreadsWithTheDraw(t *testing.T) {
	spread := func(n int) (lo, hi, point float64) {
		// The baseline's conversations met their previous backend or
		// not: a hit rate of 0.75 or 0.25, one in three of the first.
		den := result(n, func(i int) float64 {
			if i%3 == 0 {
				return 0.75
			}
			return 0.25
		}, ttftOf)
		num := result(n, func(int) float64 { return 0.75 }, ttftOf)
		lo, hi, ok := RatioInterval(num, den, HitRateStat, 0.9)
		if !ok {
			t.Fatalf("n = %d: no interval", n)
		}
		if lo2, hi2, _ := RatioInterval(num, den, HitRateStat, 0.9); lo2 != lo || hi2 != hi {
			t.Errorf("n = %d: %v–%v, then %v–%v: the draws are not seeded", n, lo, hi, lo2, hi2)
		}
		return lo, hi, num.HitRate() / den.HitRate()
	}
	lo, hi, point := spread(150)
	if !(lo < point && point < hi) {
		t.Errorf("150 conversations: interval %.3f–%.3f does not hold the run's ratio %.3f", lo, hi, point)
	}
	lo4, hi4, point4 := spread(600)
	if !(lo4 < point4 && point4 < hi4) {
		t.Errorf("600 conversations: interval %.3f–%.3f does not hold the run's ratio %.3f", lo4, hi4, point4)
	}
	if w, w4 := hi-lo, hi4-lo4; w4 < 0.35*w || w4 > 0.65*w {
		t.Errorf("interval width %.3f at 150 conversations, %.3f at 600: want about half", w, w4)
	}
}

// No conversations, or a baseline with nothing to divide by, give no
// interval (the report shows a dash).
func TestRatioIntervalNeedsADenominator(t *testing.T) {
	if _, _, ok := RatioInterval(&Result{}, &Result{}, HitRateStat, 0.9); ok {
		t.Error("no conversations: ok")
	}
	zero := result(10, func(int) float64 { return 0 }, ttftOf)
	some := result(10, func(int) float64 { return 0.5 }, ttftOf)
	if _, _, ok := RatioInterval(some, zero, HitRateStat, 0.9); ok {
		t.Error("a baseline with no cached tokens: ok")
	}
}
