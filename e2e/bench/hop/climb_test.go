package hop

import (
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

func TestClimbProbesCoversTheWorstCase(t *testing.T) {
	// Direct and two proxies over every rung, each proxy's failure
	// confirmed by probing direct and it again.
	if got, want := ClimbProbes(3, NonStreaming), len(ladder)*3+2*2; got != want {
		t.Errorf("ClimbProbes(3) = %d, want %d", got, want)
	}
	if got, want := ClimbProbes(3, Streaming), len(streamLadder)*3+4; got != want {
		t.Errorf("ClimbProbes(3, streaming) = %d, want %d", got, want)
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
