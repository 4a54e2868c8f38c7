package hop

import (
	"time"

	"github.com/tetherproxy/tether/e2e/bench/bootstrap"
	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// DefaultBlockWidth is Options.BlockWidth's default: longer than the
// bursts a tail is made of (a few milliseconds, docs/hop-cost.md "Where
// the tail comes from"), so each stays whole, and short enough that a
// point of 2.5 s has 25 blocks to draw.
const DefaultBlockWidth = 100 * time.Millisecond

// QuantileRatioInterval is the central interval holding level (0.9: 90%)
// of p's q-quantile over ref's, over bootstrap.Draws resamples of each
// point's blocks of requests (a block bootstrap, each point drawn on its
// own: the two ran at different times). It says how far the ratio of one
// run could land on another draw of this run's seconds, not what moves a
// whole run (the machine's next quarter hour; docs/hop-cost.md "How much
// one run decides") nor a state that lasts a whole point: measured with
// one build in two slots it held their run-to-run spread at 2,000
// requests/s and was too narrow at 5,000 (docs/hop-cost.md "An interval
// for one run's p99"). ok is false when a point has no blocks or a draw
// of ref held no request.
func QuantileRatioInterval(p, ref *Point, q, level float64) (lo, hi float64, ok bool) {
	if p.Blocks == nil || ref.Blocks == nil || p.Blocks.Len() == 0 || ref.Blocks.Len() == 0 {
		return 0, 0, false
	}
	r := bootstrap.Rand(p.Blocks.Len() + ref.Blocks.Len())
	var a, b loadgen.Resample
	ratios := make([]float64, bootstrap.Draws)
	for d := range ratios {
		p.Blocks.Draw(r, &a)
		ref.Blocks.Draw(r, &b)
		den := b.Quantile(q)
		if den == 0 {
			return 0, 0, false
		}
		ratios[d] = float64(a.Quantile(q)) / float64(den)
	}
	lo, hi = bootstrap.Central(ratios, level)
	return lo, hi, true
}
