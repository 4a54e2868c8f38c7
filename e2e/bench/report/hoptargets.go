package report

import (
	"fmt"

	"github.com/tetherproxy/tether/e2e/bench/bootstrap"
	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/table"
)

// hopTargetTables are section 1's targets in the benchmarks issue, as
// measured in this run: tether's added p99 no worse than HAProxy's at
// each rate of each mode (the same comparison as their p99s: direct's is
// subtracted from both), each with the 90% interval of the p99 ratio over
// the points' requests resampled in blocks; and the highest rate within
// 1.5× of HAProxy's.
func hopTargetTables(r *hop.Results) []*table.Table {
	t := &table.Table{Title: "issue targets, as measured in this run",
		Head: []string{"target", "mode", "requests/s", "measured", fmt.Sprintf("90%% interval, %d ms blocks of requests resampled", r.Opts.BlockWidth.Milliseconds()), "added p99: tether vs HAProxy"}}
	for _, mode := range r.Opts.Modes {
		for _, rate := range r.Opts.RatesOf(mode) {
			tp, hp := r.Point(hop.Tether, mode, rate), r.Point(hop.HAProxy, mode, rate)
			if tp == nil || hp == nil || hp.Res.OK == 0 {
				continue
			}
			ta, _ := r.Added(tp, 0.99)
			ha, _ := r.Added(hp, 0.99)
			t.Add("tether's added p99 no worse than HAProxy's (p99 ÷ HAProxy's)", string(mode), fmt.Sprintf("%.0f", rate),
				checkAtMost(float64(tp.Res.Latency.Quantile(0.99))/float64(hp.Res.Latency.Quantile(0.99)), 1),
				p99Interval(tp, hp), fmt.Sprintf("%s vs %s", msf(ta), msf(ha)))
		}
	}
	for _, mode := range r.Opts.Modes {
		tr, hr := r.MaxOf(hop.Tether, mode), r.MaxOf(hop.HAProxy, mode)
		if tr == nil || hr == nil {
			continue
		}
		t.Add("tether's highest rate within 1.5× of HAProxy's (rate ÷ HAProxy's)", string(mode), "—",
			rateCheck(*tr, *hr), "— (one search each: a rung is a 1 s probe)", fmt.Sprintf("%s vs %s req/s", tr.Label(), hr.Label()))
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return []*table.Table{t}
}

// p99Interval formats the 90% interval of p's p99 over ref's
// (hop.QuantileRatioInterval).
func p99Interval(p, ref *hop.Point) string {
	return bootstrap.Format(hop.QuantileRatioInterval(p, ref, 0.99, 0.9))
}

// rateCheck is the highest-rate target's cell: tether's rate over
// HAProxy's at least 1/1.5. A search that reached the ladder's top
// bounds its ratio on one side only, which may leave the target open.
func rateCheck(tr, hr hop.MaxRate) string {
	const least = 1 / 1.5
	ratio := tr.RatioTo(hr)
	switch {
	case tr.Capped && hr.Capped:
		return ratio + " (both at the ladder's top) ✓"
	case tr.Rate == 0:
		return ratio + " (tether's search failed its first rung) ✗ not met"
	case hr.Rate == 0 || tr.Capped:
		return ratio + " ✓" // tether's rate is at least HAProxy's
	case hr.Capped && tr.Rate/hr.Rate >= least:
		return ratio + " (HAProxy's search reached the ladder's top: undecided)"
	}
	return check(tr.Rate/hr.Rate, least)
}
