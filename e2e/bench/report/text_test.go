package report

import (
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/hop"
	"github.com/tetherproxy/tether/e2e/bench/loadgen"

	"github.com/tetherproxy/tether/e2e/bench/sticky"
	"github.com/tetherproxy/tether/e2e/bench/workload"
)

// A ratio just under (or over) its target never prints as the target
// itself.
func TestCheckShowsAMissThatRoundsToTheTarget(t *testing.T) {
	atLeast, atMost := check, checkAtMost
	for _, c := range []struct {
		check     func(v, target float64) string
		v, target float64
		want      string
	}{
		{atLeast, 0.977, 0.98, "0.977 (target ≥ 0.98) ✗ not met"},
		{atLeast, 0.9799, 0.98, "0.9799 (target ≥ 0.98) ✗ not met"},
		{atLeast, 0.964, 0.98, "0.96 (target ≥ 0.98) ✗ not met"},
		{atLeast, 0.98, 0.98, "0.98 (target ≥ 0.98) ✓"},
		{atLeast, 1.007, 0.98, "1.01 (target ≥ 0.98) ✓"},
		{atLeast, 2.98, 3, "2.98 (target ≥ 3.00) ✗ not met"},
		{atLeast, 2.996, 3, "2.996 (target ≥ 3.00) ✗ not met"},
		{atMost, 1.004, 1, "1.004 (target ≤ 1.00) ✗ not met"},
		{atMost, 1.03, 1, "1.03 (target ≤ 1.00) ✗ not met"},
		{atMost, 1, 1, "1.00 (target ≤ 1.00) ✓"},
		{atMost, 0.62, 1, "0.62 (target ≤ 1.00) ✓"},
	} {
		if got := c.check(c.v, c.target); got != c.want {
			t.Errorf("(%v against %v) = %q, want %q", c.v, c.target, got, c.want)
		}
	}
}

// A longer system prompt adds the same cached tokens to every answered
// request: the uncached tokens stay, hit rates rise, their ratio shrinks.
func TestSystemPromptNoteRecomputesHitRatesWithALongerPrompt(t *testing.T) {
	// 10 requests, one failed; 400 more cached tokens per answered one.
	x := &sticky.Result{Requests: 10, Errors: 1, Prompt: 9000, Cached: 3000}
	if got, want := hitRateWithMore(x, 400), (3000.0+3600)/(9000+3600); got != want {
		t.Errorf("hitRateWithMore = %v, want %v", got, want)
	}
	in := &Input{StickyOpts: sticky.Options{Replicas: []int{1, 6}, Backends: []int{4},
		Workload: workload.Params{SystemTokens: 600}}}
	in.Sticky = []*sticky.Result{
		{Policy: sticky.TetherMemory, R: 6, B: 4, Requests: 10, Prompt: 10000, Cached: 4000},
		{Policy: sticky.TetherGossip, R: 6, B: 4, Requests: 10, Prompt: 10000, Cached: 8000},
		{Policy: sticky.TetherMemory, R: 1, B: 4, Requests: 10, Prompt: 10000, Cached: 7900},
	}
	// Uncached 6000 against 2000; hit rates 0.4 and 0.8 (2.00×); with
	// 400 × 10 more cached tokens, 8000/14000 and 12000/14000 (1.50×).
	want := " The system prompt's share moves hit rates, not the tokens recomputed: at R = 6, per-replica memory computed at B = 4, 3.0× the uncached prompt tokens of tether gossip, and a hit rate 2.00× below it, 1.50× had every prompt carried a 1000-token system prompt (the same run's counts, every request given 400 more cached tokens: a system prompt is cached on every backend after its first use)."
	if got := systemPromptNote(in); got != want {
		t.Errorf("systemPromptNote =\n%q, want\n%q", got, want)
	}
	in.StickyOpts.Workload.SystemTokens = longSystemPrompt
	if got := systemPromptNote(in); got != "" {
		t.Errorf("with the long prompt already, systemPromptNote = %q, want none", got)
	}
}

// The eviction note puts the two stores' hit rates side by side where
// they are compared with the oracle (R ≥ 3) and both routed every later
// turn to its previous backend.
func TestEvictionNoteComparesTheStoresWhereBothRoutedAsTheOracle(t *testing.T) {
	in := &Input{StickyOpts: sticky.Options{Replicas: []int{1, 3, 6}, Backends: []int{4}}}
	in.Sticky = []*sticky.Result{
		{Policy: sticky.TetherRedis, R: 1, B: 4, Prompt: 100, Cached: 70, Stayed: 1},
		{Policy: sticky.TetherGossip, R: 1, B: 4, Prompt: 100, Cached: 71, Stayed: 1},
		{Policy: sticky.TetherRedis, R: 3, B: 4, Prompt: 100, Cached: 74, Stayed: 1},
		{Policy: sticky.TetherGossip, R: 3, B: 4, Prompt: 100, Cached: 77, Stayed: 0.996},
		{Policy: sticky.TetherRedis, R: 6, B: 4, Prompt: 100, Cached: 60, Stayed: 0.9},
		{Policy: sticky.TetherGossip, R: 6, B: 4, Prompt: 100, Cached: 78, Stayed: 1},
	}
	got := evictionNote(in)
	if want := "their hit rates were 74.0% and 77.0% at R = 3, B = 4. "; !strings.Contains(got, want) {
		t.Errorf("evictionNote = %q, want it to contain %q (R = 1 is not compared, R = 6's Redis moved turns)", got, want)
	}
	in.Sticky[3].Stayed = 0.99
	if got := evictionNote(in); got != "" {
		t.Errorf("no (R ≥ 3, B) where both stores stayed: evictionNote = %q, want none", got)
	}
}

// A headline point where direct's own p99 was the slower (the machine
// stalled in its seconds) says so, instead of leaving a negative "added"
// latency unexplained; a point where it was not says nothing more.
func TestHeadlineExplainsANegativeAddedLatency(t *testing.T) {
	point := func(proxy string, p99 time.Duration) hop.Point {
		h := &loadgen.Histogram{}
		for range 99 {
			h.Record(time.Millisecond / 2)
		}
		h.Record(p99)
		h.Record(p99)
		return hop.Point{Proxy: proxy, Mode: hop.NonStreaming, Rate: 1000, Res: &loadgen.Result{OK: 101, Latency: h}, CPUPer1k: time.Second}
	}
	in := &Input{Hop: &hop.Results{Opts: hop.Options{Modes: []hop.Mode{hop.NonStreaming}, Rates: []float64{1000}}}}
	in.Hop.Points = []hop.Point{point(hop.Direct, 20*time.Millisecond), point(hop.HAProxy, 8*time.Millisecond), point(hop.Tether, 6*time.Millisecond)}
	var buf strings.Builder
	headline(in).Text(&buf)
	if !strings.Contains(buf.String(), "direct's own p99") {
		t.Errorf("direct's p99 above both proxies', headline does not explain the negative added latency:\n%s", buf.String())
	}
	in.Hop.Points[0] = point(hop.Direct, 2*time.Millisecond)
	buf.Reset()
	headline(in).Text(&buf)
	if strings.Contains(buf.String(), "direct's own p99") {
		t.Errorf("direct's p99 below both proxies', headline explains a stall that was not:\n%s", buf.String())
	}
}

// Each target carries the interval of its ratio over the conversations
// resampled, or a dash where the results kept no conversations.
func TestTargetsCarryTheirResampledInterval(t *testing.T) {
	convs := func(hits ...int64) map[int]*sticky.Conv {
		m := map[int]*sticky.Conv{}
		for i, h := range hits {
			m[i] = &sticky.Conv{Prompt: 100, Cached: h, TTFT: []time.Duration{time.Duration(10+i) * time.Millisecond}}
		}
		return m
	}
	res := func(policy string, hits ...int64) *sticky.Result {
		x := &sticky.Result{Policy: policy, R: 6, B: 4, TTFT: &loadgen.Histogram{}, Convs: convs(hits...)}
		for _, c := range x.Convs {
			x.Prompt, x.Cached = x.Prompt+c.Prompt, x.Cached+c.Cached
			x.TTFT.Record(c.TTFT[0])
		}
		return x
	}
	in := &Input{StickyOpts: sticky.Options{Replicas: []int{6}, Backends: []int{4}}}
	in.Sticky = []*sticky.Result{
		res(sticky.TetherGossip, 80, 80, 80, 80),
		res(sticky.Oracle, 80, 80, 80, 80),
		res(sticky.TetherMemory, 40, 40, 40, 40),
	}
	rows := map[string][]string{}
	for _, row := range targetTables(in)[0].Rows {
		rows[row[0]] = row
	}
	if got := rows["tether gossip hit rate ÷ oracle's"]; got == nil || got[4] != "1.00–1.00" {
		t.Errorf("÷ oracle row %q, want interval 1.00–1.00", got)
	}
	if got := rows["tether gossip hit rate ÷ per-replica memory's"]; got == nil || got[4] != "2.00–2.00" {
		t.Errorf("÷ per-replica row %q, want interval 2.00–2.00", got)
	}
	// The headline's cell for the 1.8× target: every B with both
	// policies (B = 8 has no per-replica store here).
	in.StickyOpts.Backends = []int{4, 8}
	in.Sticky = append(in.Sticky, &sticky.Result{Policy: sticky.TetherGossip, R: 6, B: 8, Prompt: 100, Cached: 80})
	if got, want := overPerReplica(in, 6), "2.00× (2.00–2.00) at B = 4"; got != want {
		t.Errorf("overPerReplica = %q, want %q", got, want)
	}
	in.Sticky[2].Convs = nil
	in.Sticky[2].Prompt, in.Sticky[2].Cached = 400, 160
	if got, want := overPerReplica(in, 6), "2.00× (—) at B = 4"; got != want {
		t.Errorf("without conversations: overPerReplica = %q, want %q", got, want)
	}
	if got := targetTables(in)[0].Rows; len(got) < 2 || got[1][4] != "—" {
		t.Errorf("a result without conversations: rows %q, want a dash for the interval", got)
	}
}
