package hop

import (
	"fmt"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// result is a run at 1,000 req/s whose p99 is p99 (98 fast requests of
// every hundred, two at p99).
func result(p99 time.Duration, errors int, completed float64) *loadgen.Result {
	h := new(loadgen.Histogram)
	for i := range 1000 {
		d := 500 * time.Microsecond
		if i%100 >= 98 {
			d = p99
		}
		h.Record(d)
	}
	return &loadgen.Result{Offered: 1000, OK: 1000 - errors, Errors: errors, Latency: h, Completed: completed}
}

func TestPassesJudgesTheAddedP99(t *testing.T) {
	const limit = 5 * time.Millisecond
	for _, c := range []struct {
		name   string
		res    *loadgen.Result
		direct time.Duration
		want   bool
	}{
		{"fast", result(2*time.Millisecond, 0, 1000), time.Millisecond, true},
		// The machine's own tail (direct's p99 of 9 ms) is not the proxy's.
		{"slow machine, little added", result(12*time.Millisecond, 0, 1000), 9 * time.Millisecond, true},
		{"6 ms added", result(15*time.Millisecond, 0, 1000), 9 * time.Millisecond, false},
		{"one error", result(time.Millisecond, 1, 1000), time.Millisecond, false},
		{"fell behind the offered rate", result(time.Millisecond, 0, 900), time.Millisecond, false},
	} {
		if got := passes(c.res, limit, c.direct); got != c.want {
			t.Errorf("%s: passes = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestClimbProbesCoversTheWorstCase: a progress bar plans ClimbProbes
// steps for a search and is told how many it did not need, so a search
// must never take more (it would run into the steps of what follows:
// the bar at 100% minutes early) and planned less skipped must be what
// it took. The worst case: every proxy fails its first probe at every
// rung, and the confirmation passes, keeping it on the ladder.
func TestClimbProbesCoversTheWorstCase(t *testing.T) {
	pass, fail := result(time.Millisecond, 0, 1000), result(time.Millisecond, 1, 1000)
	for _, c := range []struct {
		name string
		mode Mode
		// failsAt: whether the nth probe (from 1) of proxy at rate fails.
		failsAt func(proxy string, rate float64, nth int) bool
		worst   bool // the case ClimbProbes counts: it takes them all
	}{
		{"every first probe fails, every confirmation passes", NonStreaming, func(_ string, _ float64, nth int) bool { return nth == 1 }, true},
		{"the same, streamed", Streaming, func(_ string, _ float64, nth int) bool { return nth == 1 }, true},
		{"one proxy stops at 3,000, the other climbs to the top", NonStreaming, func(p string, rate float64, _ int) bool { return p == "a" && rate >= 3000 }, false},
		{"nothing fails", NonStreaming, func(string, float64, int) bool { return false }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Proxies: []string{Direct, "a", "b"}, P99Limit: 5 * time.Millisecond}
			steps, skipped := 0, -1
			o.Step = func(string) { steps++ }
			o.Skip = func(n int) { skipped = n }
			probes := map[string]int{}
			out, err := climb(o, c.mode, func(name string, rate float64) (*loadgen.Result, error) {
				key := fmt.Sprint(name, rate)
				probes[key]++
				if name != Direct && c.failsAt(name, rate, probes[key]) {
					return fail, nil
				}
				return pass, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			planned := ClimbProbes(len(o.Proxies), c.mode)
			if steps > planned || skipped < 0 || steps+skipped != planned {
				t.Errorf("planned %d, took %d, skipped %d: want took + skipped = planned", planned, steps, skipped)
			}
			if c.worst && steps != planned {
				t.Errorf("the worst case took %d probes, ClimbProbes counts %d", steps, planned)
			}
			total := 0
			for _, m := range out {
				total += m.Probes
			}
			if total != steps {
				t.Errorf("results count %d probes, the bar %d steps", total, steps)
			}
		})
	}
}

func TestMaxRateLabel(t *testing.T) {
	for _, c := range []struct {
		m    MaxRate
		want string
	}{
		{MaxRate{Mode: NonStreaming, Rate: 3000}, "3000"},
		{MaxRate{Mode: NonStreaming, Rate: 8000, Capped: true}, "≥ 8000"},
		{MaxRate{Mode: NonStreaming}, "< 1000"},
		{MaxRate{Mode: Streaming}, "< 100"},
	} {
		if got := c.m.Label(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
}

// A search that failed its first rung, or stopped at the ladder's top,
// gives a bound, never a ratio such as "0.00×".
func TestRatioToPrintsBoundsNotNumbers(t *testing.T) {
	at := func(rate float64, capped bool) MaxRate { return MaxRate{Rate: rate, Capped: capped} }
	for _, c := range []struct {
		m, h MaxRate
		want string
	}{
		{at(1000, false), at(2000, false), "0.50×"},
		{at(0, false), at(2000, false), "—"},
		{at(2000, false), at(0, false), "—"},
		{at(8000, true), at(2000, false), "≥ 4.00×"},
		{at(2000, false), at(8000, true), "≤ 0.25×"},
		{at(8000, true), at(8000, true), "—"},
	} {
		if got := c.m.RatioTo(c.h); got != c.want {
			t.Errorf("%+v.RatioTo(%+v) = %q, want %q", c.m, c.h, got, c.want)
		}
	}
}

// TestClimbRecordsWhatStoppedIt: a search that stopped at a failure
// keeps the confirming probe's figures, its p99 measured against the
// fresh direct probe before it (not the rung's first), and the table
// names every rule it broke.
func TestClimbRecordsWhatStoppedIt(t *testing.T) {
	const limit = 5 * time.Millisecond
	o := Options{Proxies: []string{Direct, "a", "b", "c"}, P99Limit: limit, Step: func(string) {}, Skip: func(int) {}}
	directs := map[float64]int{}
	out, err := climb(o, NonStreaming, func(name string, rate float64) (*loadgen.Result, error) {
		switch {
		case name == Direct:
			directs[rate]++
			if directs[rate] > 1 {
				return result(2*time.Millisecond, 0, 1000), nil // the fresh one
			}
			return result(time.Millisecond, 0, 1000), nil
		case name == "a" && rate >= 3000:
			return result(12*time.Millisecond, 0, 1000), nil
		case name == "b" && rate >= 2000:
			return result(time.Millisecond, 3, 900), nil
		}
		return result(time.Millisecond, 0, 1000), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := out[1], out[2], out[3]
	if a.Rate != 2000 || a.Stop == nil || a.Stop.Rate != 3000 {
		t.Fatalf("a: %+v, want stopped at 3000 after 2000", a)
	}
	// 12 ms over the fresh direct's 2 ms (the rung's first had 1 ms).
	if got, want := a.Stop.String(), "at 3000/s: p99 +10.0 ms"; got != want {
		t.Errorf("a: %q, want %q", got, want)
	}
	if b.Rate != 1500 || b.Stop == nil {
		t.Fatalf("b: %+v, want stopped at 2000 after 1500", b)
	}
	if got, want := b.Stop.String(), "at 2000/s: 3 errors, 90% of the rate completed"; got != want {
		t.Errorf("b: %q, want %q", got, want)
	}
	if !c.Capped || c.Stop != nil {
		t.Errorf("c: %+v, want capped at the ladder's top with no failure", c)
	}
}
