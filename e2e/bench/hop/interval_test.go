package hop

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// pointOf is a point of 1,000 requests a second for 5 s whose latency is
// lat(i) for the i-th request.
func pointOf(lat func(i int) time.Duration) *Point {
	var s []loadgen.Sample
	for i := range 5000 {
		s = append(s, loadgen.Sample{Due: time.Duration(i) * time.Millisecond, Latency: lat(i)})
	}
	return &Point{Blocks: loadgen.BlocksOf(s, DefaultBlockWidth)}
}

// varied is a latency between 0.3 and 0.8 ms that repeats every 97
// requests (no block like another).
func varied(i int) time.Duration {
	return 300*time.Microsecond + time.Duration(i%97)*5*time.Microsecond
}

func TestARatioOfTheSameShapeIsNarrow(t *testing.T) {
	ref := pointOf(varied)
	twice := pointOf(func(i int) time.Duration { return 2 * varied(i) })
	lo, hi, ok := QuantileRatioInterval(twice, ref, 0.99, 0.9)
	if !ok || lo < 1.95 || hi > 2.05 {
		t.Fatalf("p99 of twice the latencies over the same: %.3f–%.3f (ok %v), want about 2", lo, hi, ok)
	}
}

func TestBurstsWidenTheInterval(t *testing.T) {
	ref := pointOf(varied)
	// Seven bursts of 8 ms, 10 requests each: 1.4% of the requests, all
	// in seven of the 50 blocks, which a draw of 50 holds seven of on
	// average.
	bursty := pointOf(func(i int) time.Duration {
		if i%800 < 10 {
			return 8 * time.Millisecond
		}
		return varied(i)
	})
	lo, hi, ok := QuantileRatioInterval(bursty, ref, 0.99, 0.9)
	if !ok {
		t.Fatal("no interval")
	}
	// The point's own p99 (rank 4,950 of 5,000) is a burst's; a draw
	// with five of the burst blocks or fewer (about a third of them) has
	// a p99 of the varied ones: the ratio's interval spans both.
	if hi < 10 || lo > 1.1 {
		t.Fatalf("p99 ratio of a bursty point: %.2f–%.2f, want from about 1 (draws without enough bursts) to about 10", lo, hi)
	}
}

func TestNoIntervalWithoutBlocks(t *testing.T) {
	ref := pointOf(varied)
	if _, _, ok := QuantileRatioInterval(&Point{}, ref, 0.99, 0.9); ok {
		t.Fatal("an interval for a point without blocks")
	}
	if _, _, ok := QuantileRatioInterval(ref, &Point{Blocks: loadgen.BlocksOf(nil, DefaultBlockWidth)}, 0.99, 0.9); ok {
		t.Fatal("an interval over a point without requests")
	}
}

// The tables print each proxy's p99 ratio to HAProxy's with its interval,
// and HAProxy's own row without one.
func TestTablesCarryTheP99Interval(t *testing.T) {
	point := func(proxy string, f float64) Point {
		p := pointOf(func(i int) time.Duration { return time.Duration(f * float64(varied(i))) })
		p.Proxy, p.Mode, p.Rate = proxy, NonStreaming, 1000
		p.Res = &loadgen.Result{OK: 5000, Sent: 5000, Latency: &loadgen.Histogram{}}
		for i := range 5000 {
			p.Res.Latency.Record(time.Duration(f * float64(varied(i))))
		}
		return *p
	}
	r := &Results{Opts: Options{Modes: []Mode{NonStreaming}, Rates: []float64{1000}, Proxies: []string{HAProxy, Tether}}}
	r.Points = []Point{point(HAProxy, 1), point(Tether, 2)}
	rows := r.Tables()[0].Rows
	if got := rows[0][10]; got != "1.00×" {
		t.Errorf("HAProxy's own p99 ratio %q, want 1.00× without an interval", got)
	}
	var lo, hi float64
	if got := rows[1][10]; !strings.HasPrefix(got, "2.00× (") {
		t.Errorf("tether's p99 ratio %q, want 2.00× and its interval", got)
	} else if _, err := fmt.Sscanf(strings.TrimPrefix(got, "2.00× ("), "%f–%f)", &lo, &hi); err != nil || lo < 1.95 || hi > 2.05 {
		t.Errorf("tether's p99 ratio %q, want an interval about 2 (lo %v hi %v, %v)", got, lo, hi, err)
	}
}
