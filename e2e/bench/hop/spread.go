package hop

import (
	"fmt"
	"slices"

	"github.com/tetherproxy/tether/e2e/bench/table"
)

// One run's p99 on this machine is a few bursts deep: the same binary
// measured twice in one run differed by 0.5–4× at p99 (docs/hop-cost.md
// "How much one run decides"), while CPU per request agreed within a few
// percent.
// A target on the tail is decided over several runs, each compared
// within itself: Spread puts the same-run ratios of several runs side by
// side, as their median and range.

// Spread returns, per mode and rate, each proxy's ratios to HAProxy's
// figures over runs (every run compared within itself): the median and
// the range of CPU per request, of its parts in user space and in the
// kernel, of p99 and p99.9, and of the p99 added over direct's; and in
// how many runs the p99 ratio's 90% interval (QuantileRatioInterval) lay
// above 1, held it, or lay below it: a run whose interval holds 1 did not
// tell the two tails apart beyond its own bursts. Proxies
// missing from a run, or runs without HAProxy, are left out of that row.
func Spread(runs []*Results) []*table.Table {
	if len(runs) == 0 {
		return nil
	}
	o := runs[0].Opts
	var out []*table.Table
	for _, mode := range o.Modes {
		for _, rate := range o.RatesOf(mode) {
			t := &table.Table{Title: fmt.Sprintf("%s, %.0f requests/s offered: over %d runs, median (lowest–highest) of each run's own ratios", mode, rate, len(runs)),
				Head: []string{"proxy", "runs", "CPU ×HAProxy", "user ×HAProxy", "kernel ×HAProxy", "p99 ×HAProxy", p99SidesHead, "p99.9 ×HAProxy", "added p99 ms", "HAProxy's added p99 ms"}}
			for _, name := range o.Proxies {
				if name == Direct || name == HAProxy {
					continue
				}
				var cpu, user, kernel, p99, p999, added, hAdded []float64
				var sides p99Sides
				for _, r := range runs {
					p, h := r.Point(name, mode, rate), r.Point(HAProxy, mode, rate)
					c, q99, q999, ok := against(p, h)
					if !ok {
						continue
					}
					sides.add(p, h)
					cpu, p99, p999 = append(cpu, c), append(p99, q99), append(p999, q999)
					if u, k, ok := cpuParts(p, h); ok {
						user, kernel = append(user, u), append(kernel, k)
					}
					if a, ok := r.Added(p, 0.99); ok {
						added = append(added, float64(a)/1e6)
					}
					if a, ok := r.Added(h, 0.99); ok {
						hAdded = append(hAdded, float64(a)/1e6)
					}
				}
				if len(cpu) == 0 {
					continue
				}
				ratio := func(v float64) string { return Ratio(v, 1) }
				ms := func(v float64) string { return fmt.Sprintf("%.2f", v) }
				t.Add(Labels[name], fmt.Sprint(len(cpu)), spread(cpu, ratio), spread(user, ratio), spread(kernel, ratio),
					spread(p99, ratio), sides.String(), spread(p999, ratio),
					spread(added, ms), spread(hAdded, ms))
			}
			if len(t.Rows) > 0 {
				out = append(out, t)
			}
		}
	}
	return out
}

// p99Sides counts runs by where their p99 ratio's 90% interval
// (QuantileRatioInterval) lay: above 1, holding it, below it.
type p99Sides [3]int

func (s *p99Sides) add(p, ref *Point) {
	lo, hi, ok := QuantileRatioInterval(p, ref, 0.99, 0.9)
	switch {
	case !ok:
	case lo > 1:
		s[0]++
	case hi < 1:
		s[2]++
	default:
		s[1]++
	}
}

func (s p99Sides) String() string { return fmt.Sprintf("%d / %d / %d", s[0], s[1], s[2]) }

// p99SidesHead names p99Sides' column.
const p99SidesHead = "runs whose p99 ratio's 90% interval is above 1 / holds 1 / is below 1"

// against is p's CPU per request, p99 and p99.9 over ref's in one run;
// false when either point is missing, has no answer, or ref no CPU.
func against(p, ref *Point) (cpu, p99, p999 float64, ok bool) {
	if p == nil || ref == nil || p.Res.OK == 0 || ref.Res.OK == 0 || ref.CPUPer1k == 0 {
		return 0, 0, 0, false
	}
	q := func(pt *Point, at float64) float64 { return float64(pt.Res.Latency.Quantile(at)) }
	return float64(p.CPUPer1k) / float64(ref.CPUPer1k), q(p, 0.99) / q(ref, 0.99), q(p, 0.999) / q(ref, 0.999), true
}

// cpuParts is p's CPU per request in user space and in the kernel, each
// over ref's; false when ref has no time in one of them (a point too
// short for the kernel's tick to split).
func cpuParts(p, ref *Point) (user, kernel float64, ok bool) {
	refUser := ref.CPUPer1k - ref.SysCPUPer1k
	if refUser <= 0 || ref.SysCPUPer1k <= 0 {
		return 0, 0, false
	}
	return float64(p.CPUPer1k-p.SysCPUPer1k) / float64(refUser), float64(p.SysCPUPer1k) / float64(ref.SysCPUPer1k), true
}

// spread formats the median and range of vs: "1.23× (1.10×–1.40×)".
func spread(vs []float64, f func(float64) string) string {
	if len(vs) == 0 {
		return "—"
	}
	s := slices.Sorted(slices.Values(vs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if len(s) == 1 {
		return f(med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(med), f(s[0]), f(s[len(s)-1]))
}

// Paired compares tether with the build in the TetherBaseline slot, each
// run within itself, at every mode and rate where both ran: the median
// and range of tether's CPU per request, p99 and p99.9 over the
// baseline's, and in how many runs tether used less CPU. A change moves
// CPU by a few percent, about what one run's noise does, so its verdict
// is the count over runs in both orders (-runs alternates them) rather
// than any one run. Nil when no run has both.
func Paired(runs []*Results) *table.Table {
	if len(runs) == 0 {
		return nil
	}
	o := runs[0].Opts
	t := &table.Table{Title: fmt.Sprintf("tether ÷ %s: over %d runs, median (lowest–highest) of each run's own ratios", Labels[TetherBaseline], len(runs)),
		Head: []string{"point", "runs", "CPU ×baseline", "tether's CPU lower in", "p99 ×baseline", p99SidesHead, "p99.9 ×baseline"}}
	for _, mode := range o.Modes {
		for _, rate := range o.RatesOf(mode) {
			var cpu, p99, p999 []float64
			var sides p99Sides
			lower := 0
			for _, r := range runs {
				p, b := r.Point(Tether, mode, rate), r.Point(TetherBaseline, mode, rate)
				c, q99, q999, ok := against(p, b)
				if !ok {
					continue
				}
				sides.add(p, b)
				cpu, p99, p999 = append(cpu, c), append(p99, q99), append(p999, q999)
				if c < 1 {
					lower++
				}
			}
			if len(cpu) == 0 {
				continue
			}
			ratio := func(v float64) string { return Ratio(v, 1) }
			t.Add(fmt.Sprintf("%s, %.0f/s", mode, rate), fmt.Sprint(len(cpu)), spread(cpu, ratio),
				fmt.Sprintf("%d of %d", lower, len(cpu)), spread(p99, ratio), sides.String(), spread(p999, ratio))
		}
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}
