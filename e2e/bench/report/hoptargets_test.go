package report

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// hopPoint is a point of 1,000 requests a second for 2 s, every request
// taking lat, its histogram and blocks both filled.
func hopPoint(proxy string, lat time.Duration) hop.Point {
	h := &loadgen.Histogram{}
	var s []loadgen.Sample
	for i := range 2000 {
		h.Record(lat)
		s = append(s, loadgen.Sample{Due: time.Duration(i) * time.Millisecond, Latency: lat})
	}
	return hop.Point{Proxy: proxy, Mode: hop.NonStreaming, Rate: 1000, CPUPer1k: time.Second,
		Res: &loadgen.Result{OK: 2000, Sent: 2000, Latency: h}, Blocks: loadgen.BlocksOf(s, hop.DefaultBlockWidth)}
}

func TestHopTargetsCheckTheTailWithItsInterval(t *testing.T) {
	r := &hop.Results{Opts: hop.Options{Modes: []hop.Mode{hop.NonStreaming}, Rates: []float64{1000}}}
	r.Points = []hop.Point{hopPoint(hop.Direct, time.Millisecond/2), hopPoint(hop.HAProxy, time.Millisecond), hopPoint(hop.Tether, 3*time.Millisecond/2)}
	ts := hopTargetTables(r)
	if len(ts) != 1 || len(ts[0].Rows) != 1 {
		t.Fatalf("tables %v, want one row (one rate, no rate search)", ts)
	}
	row := ts[0].Rows[0]
	if !strings.HasPrefix(row[3], "1.5") || !strings.HasSuffix(row[3], "(target ≤ 1.00) ✗ not met") {
		t.Errorf("tether's p99 1.5× HAProxy's: measured %q, want a miss at 1.5", row[3])
	}
	if row[4] != "1.50–1.50" { // every request alike: every draw the same
		t.Errorf("interval %q, want 1.50–1.50", row[4])
	}
	// Met when tether's tail is HAProxy's; a dash where the points were
	// measured without blocks.
	r.Points[2] = hopPoint(hop.Tether, time.Millisecond)
	r.Points[2].Blocks = nil
	row = hopTargetTables(r)[0].Rows[0]
	if !strings.HasSuffix(row[3], "(target ≤ 1.00) ✓") || row[4] != "—" {
		t.Errorf("the same p99, no blocks: %q", row)
	}
}

func TestHighestRateTargetReadsTheSearchBounds(t *testing.T) {
	mr := func(rate float64, capped bool) hop.MaxRate {
		return hop.MaxRate{Mode: hop.NonStreaming, Rate: rate, Capped: capped}
	}
	for _, c := range []struct {
		tether, haproxy hop.MaxRate
		want            string
	}{
		{mr(6000, false), mr(8000, false), "✓"},
		{mr(5000, false), mr(8000, false), "✗ not met"},
		{mr(6000, false), mr(8000, true), "undecided"}, // HAProxy's could be higher
		{mr(5000, false), mr(8000, true), "✗ not met"}, // 0.63 is a ceiling already
		{mr(8000, true), mr(6000, false), "✓"},         // at least HAProxy's
		{mr(8000, true), mr(8000, true), "✓"},          // both at the top
		{mr(0, false), mr(6000, false), "✗ not met"},   // failed the first rung
		{mr(1000, false), mr(0, false), "✓"},           // HAProxy failed it
	} {
		if got := rateCheck(c.tether, c.haproxy); !strings.Contains(got, c.want) {
			t.Errorf("tether %+v, HAProxy %+v: %q, want %q in it", c.tether, c.haproxy, got, c.want)
		}
	}
}
