package hop

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// spreadRun makes one run's results at 2,000 req/s: direct, HAProxy and tether
// with every latency at the given p99 and the given CPU per 1,000. Half
// of HAProxy's CPU is in the kernel, and tether spends as much there as
// HAProxy does: the rest of tether's is in user space.
func spreadRun(directP99, haproxyP99, tetherP99 time.Duration, haproxyCPU, tetherCPU time.Duration) *Results {
	tether := point(Tether, tetherP99, tetherCPU)
	tether.SysCPUPer1k = haproxyCPU / 2
	return &Results{
		Opts: Options{Proxies: []string{Direct, HAProxy, Tether}, Modes: []Mode{NonStreaming}, Rates: []float64{2000}},
		Points: []Point{
			point(Direct, directP99, 0),
			point(HAProxy, haproxyP99, haproxyCPU),
			tether,
		},
	}
}

// point is one proxy at 2,000 req/s, every latency lat, CPU per 1,000
// requests cpu.
func point(proxy string, lat, cpu time.Duration) Point {
	r := &loadgen.Result{Offered: 2000, Sent: 100, OK: 100, Latency: &loadgen.Histogram{}, Lateness: &loadgen.Histogram{}}
	var samples []loadgen.Sample
	for i := range 100 {
		r.Latency.Record(lat)
		samples = append(samples, loadgen.Sample{Due: time.Duration(i) * time.Second / 2000, Latency: lat})
	}
	return Point{Proxy: proxy, Mode: NonStreaming, Rate: 2000, Res: r, CPUPer1k: cpu, SysCPUPer1k: cpu / 2,
		Blocks: loadgen.BlocksOf(samples, DefaultBlockWidth)}
}

func TestSpreadTakesEachRunsOwnRatios(t *testing.T) {
	ms := time.Millisecond
	runs := []*Results{
		spreadRun(1*ms, 2*ms, 4*ms, 100*ms, 150*ms),  // p99 2×, CPU 1.5× (user 2×), added 3 ms
		spreadRun(5*ms, 10*ms, 5*ms, 100*ms, 130*ms), // p99 0.5×, CPU 1.3× (user 1.6×), added 0
		spreadRun(1*ms, 2*ms, 2*ms, 80*ms, 112*ms),   // p99 1×, CPU 1.4× (user 1.8×), added 1 ms
	}
	tables := Spread(runs)
	if len(tables) != 1 || len(tables[0].Rows) != 1 {
		t.Fatalf("want one table with tether's row, got %d tables", len(tables))
	}
	row := tables[0].Rows[0]
	want := []string{Labels[Tether], "3", "1.40× (1.30×–1.50×)", "1.80× (1.60×–2.00×)", "1.00× (1.00×–1.00×)", "1.00× (0.50×–2.00×)", "1 / 1 / 1", "1.00× (0.50×–2.00×)", "1.00 (0.00–3.00)", "1.00 (1.00–5.00)"}
	// Every latency of a point is the same value, which the histogram
	// gives back exactly (its quantile is capped by the largest value).
	for i := range want {
		if row[i] != want[i] {
			t.Errorf("column %q: %q, want %q", tables[0].Head[i], row[i], want[i])
		}
	}
	if !strings.Contains(tables[0].Title, "over 3 runs") {
		t.Errorf("title %q does not say how many runs", tables[0].Title)
	}
}

func TestSpreadFormatsMedianAndRange(t *testing.T) {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, c := range []struct {
		vs   []float64
		want string
	}{
		{nil, "—"},
		{[]float64{2}, "2"},
		{[]float64{3, 1, 2}, "2 (1–3)"},
		{[]float64{4, 1, 2, 3}, "2.5 (1–4)"},
	} {
		if got := spread(c.vs, f); got != c.want {
			t.Errorf("spread(%v) = %q, want %q", c.vs, got, c.want)
		}
	}
}

func TestPairedComparesTetherWithItsBaselineInEachRun(t *testing.T) {
	ms := time.Millisecond
	run := func(tetherP99, baseP99, tetherCPU, baseCPU time.Duration) *Results {
		return &Results{
			Opts:   Options{Proxies: []string{Direct, HAProxy, Tether, TetherBaseline}, Modes: []Mode{NonStreaming}, Rates: []float64{2000}},
			Points: []Point{point(Direct, ms, 0), point(HAProxy, 2*ms, 80*ms), point(Tether, tetherP99, tetherCPU), point(TetherBaseline, baseP99, baseCPU)},
		}
	}
	runs := []*Results{
		run(2*ms, 4*ms, 90*ms, 100*ms),          // CPU 0.9×, p99 0.5×
		run(3*ms, 3*ms, 110*ms, 100*ms),         // CPU 1.1×, p99 1×
		run(8*ms, 4*ms, 95*ms, 100*ms),          // CPU 0.95×, p99 2×
		spreadRun(ms, 2*ms, 2*ms, 80*ms, 50*ms), // no baseline in this run: left out
	}
	tab := Paired(runs)
	if tab == nil || len(tab.Rows) != 1 {
		t.Fatalf("want one row, got %+v", tab)
	}
	want := []string{"non-streaming, 2000/s", "3", "0.95× (0.90×–1.10×)", "2 of 3", "1.00× (0.50×–2.00×)", "1 / 1 / 1", "1.00× (0.50×–2.00×)"}
	for i, w := range want {
		if got := tab.Rows[0][i]; got != w {
			t.Errorf("column %q: %q, want %q", tab.Head[i], got, w)
		}
	}
	if !strings.Contains(tab.Title, "over 4 runs") {
		t.Errorf("title %q", tab.Title)
	}
	if Paired(runs[3:]) != nil || Paired(nil) != nil {
		t.Error("a table for runs without a baseline")
	}
}

func TestOrderAlternatesByRateAndReversed(t *testing.T) {
	o := Options{Proxies: []string{Direct, HAProxy, Tether}}
	fwd, rev := []string{Direct, HAProxy, Tether}, []string{Tether, HAProxy, Direct}
	for _, c := range []struct {
		reversed bool
		ri       int
		want     []string
	}{{false, 0, fwd}, {false, 1, rev}, {false, 2, fwd}, {true, 0, rev}, {true, 1, fwd}} {
		o.Reversed = c.reversed
		if got := o.order(c.ri); !slices.Equal(got, c.want) {
			t.Errorf("Reversed %v, rate %d: %v, want %v", c.reversed, c.ri, got, c.want)
		}
	}
	if !slices.Equal(o.Proxies, fwd) {
		t.Errorf("order changed the options' list: %v", o.Proxies)
	}
}
