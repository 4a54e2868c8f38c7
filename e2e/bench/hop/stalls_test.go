package hop

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

func TestStallsGroupSlowRequestsThatWaitedTogether(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	at := func(due, lat float64) loadgen.Sample { return loadgen.Sample{Due: ms(due), Latency: ms(lat)} }
	samples := []loadgen.Sample{
		// Fast requests never count.
		at(0, 0.3), at(0.5, 0.4), at(1, 0.2),
		// A stop from 10 ms to 16 ms: every request due meanwhile is
		// answered at about 16 ms, the last one (due at 15.5, before the
		// first's answer) at 17.1.
		at(10, 6), at(10.5, 5.5), at(11, 5.1), at(15.5, 1.6),
		// Completion order is not due order.
		at(12, 4.2),
		// Two slow requests together are an episode, not a burst.
		at(40, 2), at(41, 1.6),
		// One alone.
		at(80, 3),
		// Due after the answer of the slow one before it: a new episode,
		// however close.
		at(83.1, 2),
		// After the measured part's first second.
		at(1500, 3),
	}
	s := StallsOf(samples, ms(1.5), 2*time.Second)
	if s.Slow != 10 {
		t.Errorf("Slow = %d, want 10", s.Slow)
	}
	if s.Episodes != 5 {
		t.Errorf("Episodes = %d, want 5 (the stop, the pair, three alone)", s.Episodes)
	}
	if s.FirstSecond != 9 {
		t.Errorf("FirstSecond = %d, want 9 (all but the last)", s.FirstSecond)
	}
	if s.Bursts != 1 || s.InBursts != 5 {
		t.Errorf("Bursts = %d with %d requests, want 1 with 5", s.Bursts, s.InBursts)
	}
	// From the first due (10) to the last answer (15.5 + 1.6).
	if want := ms(7.1); s.BurstSpan != want {
		t.Errorf("BurstSpan = %v, want %v", s.BurstSpan, want)
	}
	if none := StallsOf(samples[:3], ms(1.5), time.Second); none.Slow != 0 || none.Episodes != 0 || none.BurstSpan != 0 {
		t.Errorf("no slow request: %+v", none)
	}
}

func TestStallsTableNamesEachPoint(t *testing.T) {
	s := Stalls{Slow: 10, Episodes: 4, Bursts: 2, InBursts: 8, BurstSpan: 5 * time.Millisecond, Measured: 4 * time.Second, FirstSecond: 3}
	r := &Results{Points: []Point{
		{Proxy: HAProxy, Mode: NonStreaming, Rate: 2000, Res: &loadgen.Result{}, Stalls: &s},
		{Proxy: Tether, Mode: NonStreaming, Rate: 2000, Res: &loadgen.Result{}}, // measured without
	}}
	tab := r.StallsTable()
	if tab == nil || len(tab.Rows) != 1 {
		t.Fatalf("table %+v, want one row", tab)
	}
	got := strings.Join(tab.Rows[0], " | ")
	if want := Labels[HAProxy] + " | non-streaming | 2000 | 10 | 4 | 2 | 0.5 | 80% | 5.00 | 30%"; got != want {
		t.Errorf("row %q, want %q", got, want)
	}
	if (&Results{Points: []Point{{Proxy: Tether, Res: &loadgen.Result{}}}}).StallsTable() != nil {
		t.Error("a table without a point that kept its samples")
	}
}
