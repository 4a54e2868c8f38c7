package hop

import (
	"fmt"
	"slices"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
	"github.com/tetherproxy/tether/e2e/bench/table"
)

// BurstSize is how many slow requests make a burst (Stalls.Bursts).
const BurstSize = 3

// Stalls says how a point's slow requests came: one by one, each slow
// on its own, or together, each due before the slow one before it had
// been answered, as when the proxy, a backend or the client stops for a
// few milliseconds and every request of those milliseconds waits it out
// (docs/hop-cost.md "Where the tail comes from"). A p99 counts them
// alike; which it is decides where to look.
type Stalls struct {
	Slow     int // requests over the threshold (Options.StallsOver)
	Episodes int // slow requests grouped as above (one alone is an episode of one)
	Bursts   int // episodes of BurstSize slow requests or more
	InBursts int // slow requests in bursts
	// BurstSpan is the mean span of a burst, from its first request's
	// due time to the last answer.
	BurstSpan time.Duration
	Measured  time.Duration // the point's measured time, for bursts per second
	// FirstSecond is the slow requests due in the measured part's first
	// second: where a point meets a backlog its warm-up left (a load that
	// starts cold, docs/hop-cost.md "Under a backlog"), they gather there;
	// spread evenly, a tenth of a 10 s point's are.
	FirstSecond int
}

// StallsOf groups the samples' requests slower than over.
func StallsOf(samples []loadgen.Sample, over, measured time.Duration) Stalls {
	s := Stalls{Measured: measured}
	var slow []loadgen.Sample
	for _, x := range samples {
		if x.Latency > over {
			slow = append(slow, x)
			if x.Due < time.Second {
				s.FirstSecond++
			}
		}
	}
	slices.SortFunc(slow, func(a, b loadgen.Sample) int { return int(a.Due - b.Due) })
	s.Slow = len(slow)
	var spans time.Duration
	for i := 0; i < len(slow); {
		first, end, j := slow[i].Due, slow[i].Due+slow[i].Latency, i+1
		for ; j < len(slow) && slow[j].Due <= end; j++ {
			end = max(end, slow[j].Due+slow[j].Latency)
		}
		s.Episodes++
		if n := j - i; n >= BurstSize {
			s.Bursts++
			s.InBursts += n
			spans += end - first
		}
		i = j
	}
	if s.Bursts > 0 {
		s.BurstSpan = spans / time.Duration(s.Bursts)
	}
	return s
}

// PerSecond is the bursts per second of measured time.
func (s *Stalls) PerSecond() float64 {
	if s.Measured <= 0 {
		return 0
	}
	return float64(s.Bursts) / s.Measured.Seconds()
}

// FirstSecondShare is the share of the slow requests due in the
// measured part's first second; false when none was slow.
func (s *Stalls) FirstSecondShare() (float64, bool) { return s.ofSlow(s.FirstSecond) }

// BurstShare is the share of the slow requests that came in bursts;
// false when none was slow.
func (s *Stalls) BurstShare() (float64, bool) { return s.ofSlow(s.InBursts) }

// ofSlow is n's share of the slow requests; false when none was slow.
func (s *Stalls) ofSlow(n int) (float64, bool) {
	if s.Slow == 0 {
		return 0, false
	}
	return float64(n) / float64(s.Slow), true
}

func perSecond(v float64) string { return fmt.Sprintf("%.1f", v) }
func percent(v float64) string   { return fmt.Sprintf("%.0f%%", 100*v) }

// StallsTable is the stalls of every point that has them; nil when none
// has.
func (r *Results) StallsTable() *table.Table {
	t := &table.Table{
		Title: fmt.Sprintf("slow requests (over %v), alone or in bursts: a burst is %d or more slow requests, each due before the slow one before it was answered (the proxy, a backend or the client stopped, and the requests of those milliseconds waited)", r.Opts.StallsOver, BurstSize),
		Head:  []string{"proxy", "mode", "requests/s", "slow", "episodes", "bursts", "bursts/s", "slow in bursts", "mean burst span ms", "slow due in the first second"},
	}
	for _, p := range r.Points {
		s := p.Stalls
		if s == nil {
			continue
		}
		share, first := "—", "—"
		if v, ok := s.BurstShare(); ok {
			share = percent(v)
		}
		if v, ok := s.FirstSecondShare(); ok {
			first = percent(v)
		}
		t.Add(Labels[p.Proxy], string(p.Mode), fmt.Sprintf("%.0f", p.Rate), fmt.Sprint(s.Slow), fmt.Sprint(s.Episodes),
			fmt.Sprint(s.Bursts), perSecond(s.PerSecond()), share, Ms(s.BurstSpan), first)
	}
	if len(t.Rows) == 0 {
		return nil
	}
	return t
}

// StallsSpread is each proxy's bursts per second and the share of its
// slow requests that came in bursts over runs: median (lowest–highest).
func StallsSpread(runs []*Results) *table.Table {
	if len(runs) == 0 || runs[0].Opts.StallsOver == 0 {
		return nil
	}
	o := runs[0].Opts
	t := &table.Table{Title: fmt.Sprintf("slow requests (over %v) over %d runs, median (lowest–highest)", o.StallsOver, len(runs)),
		Head: []string{"proxy", "mode", "requests/s", "slow", "bursts/s", "slow in bursts", "mean burst span ms", "slow due in the first second"}}
	for _, mode := range o.Modes {
		for _, rate := range o.RatesOf(mode) {
			for _, name := range o.Proxies {
				var slow, perSec, share, span, first []float64
				for _, r := range runs {
					p := r.Point(name, mode, rate)
					if p == nil || p.Stalls == nil {
						continue
					}
					s := p.Stalls
					slow = append(slow, float64(s.Slow))
					perSec = append(perSec, s.PerSecond())
					if v, ok := s.BurstShare(); ok {
						share = append(share, v)
					}
					if s.Bursts > 0 {
						span = append(span, float64(s.BurstSpan)/1e6)
					}
					if v, ok := s.FirstSecondShare(); ok {
						first = append(first, v)
					}
				}
				if len(slow) == 0 {
					continue
				}
				t.Add(Labels[name], string(mode), fmt.Sprintf("%.0f", rate),
					spread(slow, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
					spread(perSec, perSecond),
					spread(share, percent),
					spread(span, func(v float64) string { return fmt.Sprintf("%.2f", v) }),
					spread(first, percent))
			}
		}
	}
	return t
}
