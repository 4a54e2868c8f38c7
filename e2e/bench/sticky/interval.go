package sticky

import (
	"slices"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/bootstrap"
)

// Conv is one conversation's share of a policy's result: the prompt
// tokens its answered turns sent and found cached, and their times to
// first token.
type Conv struct {
	Prompt, Cached int64
	TTFT           []time.Duration
}

// A Stat is a figure of a policy over a multiset of its conversations
// (one conversation may come more than once: a resample).
type Stat func(cs []*Conv) float64

// HitRateStat is cached over prompt tokens, as Result.HitRate.
func HitRateStat(cs []*Conv) float64 {
	var prompt, cached int64
	for _, c := range cs {
		prompt, cached = prompt+c.Prompt, cached+c.Cached
	}
	return float64(cached) / float64(max(prompt, 1))
}

// TTFTP50Stat is the median time to first token of the conversations'
// turns, in nanoseconds (exact, where Result.TTFT's is a histogram's).
func TTFTP50Stat(cs []*Conv) float64 {
	var all []time.Duration
	for _, c := range cs {
		all = append(all, c.TTFT...)
	}
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	return float64(all[len(all)/2])
}

// RatioInterval is the central interval holding level (0.9: 90%) of
// stat(num) / stat(den) over bootstrap.Draws resamples of the conversations,
// drawn with replacement from those the two served, each draw the same
// conversations for both (a paired bootstrap: both policies played the
// same workload). It says how far the ratio could land on another draw
// of conversations like these: a run's hit rates rest on a few hundred
// conversations, and which backend each one's turns met is a draw of its
// own. The draws are seeded, so a run's report shows the same interval
// each time it is written. ok is false when a draw had a zero
// denominator or there are no conversations.
func RatioInterval(num, den *Result, stat Stat, level float64) (lo, hi float64, ok bool) {
	var ids []int
	for id := range num.Convs {
		ids = append(ids, id)
	}
	for id := range den.Convs {
		if _, both := num.Convs[id]; !both {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, 0, false
	}
	slices.Sort(ids) // map order would make the seeded draws differ
	empty := &Conv{}
	conv := func(m map[int]*Conv, id int) *Conv {
		if c := m[id]; c != nil {
			return c
		}
		return empty // all its turns failed under this policy
	}
	r := bootstrap.Rand(len(ids))
	a, b := make([]*Conv, len(ids)), make([]*Conv, len(ids))
	ratios := make([]float64, bootstrap.Draws)
	for d := range ratios {
		for i := range ids {
			id := ids[r.IntN(len(ids))]
			a[i], b[i] = conv(num.Convs, id), conv(den.Convs, id)
		}
		x, y := stat(a), stat(b)
		if y == 0 {
			return 0, 0, false
		}
		ratios[d] = x / y
	}
	lo, hi = bootstrap.Central(ratios, level)
	return lo, hi, true
}
