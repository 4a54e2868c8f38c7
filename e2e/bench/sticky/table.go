package sticky

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/table"
)

// Find returns the result of policy at (r, b), or nil.
func Find(res []*Result, policy string, r, b int) *Result {
	for _, x := range res {
		if x.Policy == policy && x.R == r && x.B == b {
			return x
		}
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }

// Tables returns one table per (R, B), with ratios to the oracle's hit
// rate and to round robin's TTFT.
func Tables(o Options, res []*Result) []*table.Table {
	var out []*table.Table
	for _, b := range o.Backends {
		for _, r := range o.Replicas {
			t := &table.Table{Title: fmt.Sprintf("R = %d router replicas, B = %d backends", r, b),
				Head: []string{"policy", "requests", "errors", "hit rate", "÷ oracle", "session hit p50", "session hit p10", "same backend",
					"TTFT p50 ms", "TTFT p99 ms", "RR TTFT p50 ÷", "req/s", "imbalance", "token imbalance", "prefill busy"}}
			oracle, rr := Find(res, Oracle, r, b), Find(res, RoundRobin, r, b)
			for _, p := range o.Policies {
				x := Find(res, p, r, b)
				if x == nil {
					continue
				}
				vsOracle, vsRR := "—", "—"
				if oracle != nil && oracle.HitRate() > 0 {
					vsOracle = fmt.Sprintf("%.3f", x.HitRate()/oracle.HitRate())
				}
				if rr != nil && x.TTFT.Quantile(0.5) > 0 {
					vsRR = fmt.Sprintf("%.2f×", float64(rr.TTFT.Quantile(0.5))/float64(x.TTFT.Quantile(0.5)))
				}
				t.Add(Labels[p], fmt.Sprint(x.Requests), fmt.Sprint(x.Errors), pct(x.HitRate()), vsOracle,
					pct(x.SessionP50), pct(x.SessionP10), pct(x.Stayed), ms(x.TTFT.Quantile(0.5)), ms(x.TTFT.Quantile(0.99)), vsRR,
					fmt.Sprintf("%.1f", x.Throughput), fmt.Sprintf("%.2f", x.Imbalance), fmt.Sprintf("%.2f", x.TokenImbalance), pct(x.PrefillBusy(o.Model)))
			}
			out = append(out, t)
		}
	}
	return out
}

// SweepTable shows the hit rate and TTFT p50 of each swept policy per
// cache size (the main run's results at the same R and B included).
func SweepTable(o Options, main, sweep []*Result) *table.Table {
	if len(sweep) == 0 {
		return nil
	}
	r, b := sweep[0].R, sweep[0].B
	all := append(slices.Clone(sweep), main...)
	sizes := []int{}
	for _, x := range all {
		if x.R == r && x.B == b && !slices.Contains(sizes, x.CacheBlocks) {
			sizes = append(sizes, x.CacheBlocks)
		}
	}
	slices.Sort(sizes)
	t := &table.Table{Title: fmt.Sprintf("prefix-cache size, R = %d, B = %d: hit rate / TTFT p50 ms", r, b), Head: []string{"policy"}}
	for _, c := range sizes {
		t.Head = append(t.Head, fmt.Sprintf("%d blocks (%dk tokens)", c, c*16/1000))
	}
	for _, p := range o.SweepPolicies {
		row := []string{Labels[p]}
		for _, c := range sizes {
			cell := "—"
			for _, x := range all {
				if x.Policy == p && x.R == r && x.B == b && x.CacheBlocks == c {
					cell = fmt.Sprintf("%s / %s", pct(x.HitRate()), ms(x.TTFT.Quantile(0.5)))
				}
			}
			row = append(row, cell)
		}
		t.Add(row...)
	}
	return t
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// Print writes the tables as text.
func Print(w io.Writer, o Options, res []*Result) {
	for _, t := range Tables(o, res) {
		t.Text(w)
	}
}
