package sticky

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
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

// Print writes one table per (R, B), ratios against the oracle and round robin.
func Print(w io.Writer, o Options, res []*Result) {
	for _, b := range o.Backends {
		for _, r := range o.Replicas {
			fmt.Fprintf(w, "\nR=%d router replicas, B=%d backends:\n", r, b)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, strings.Join([]string{"policy", "requests", "errors", "hit rate", "÷ oracle",
				"session hit p50", "session hit p10", "TTFT p50 ms", "TTFT p99 ms", "RR p50 ÷ p50", "req/s", "imbalance"}, "\t")+"\t")
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
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%s\t%.1f%%\t%.1f%%\t%s\t%s\t%s\t%.1f\t%.2f\t\n",
					Labels[p], x.Requests, x.Errors, 100*x.HitRate(), vsOracle, 100*x.SessionP50, 100*x.SessionP10,
					ms(x.TTFT.Quantile(0.5)), ms(x.TTFT.Quantile(0.99)), vsRR, x.Throughput, x.Imbalance)
			}
			tw.Flush()
		}
	}
}
