package usage

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsByDecision(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	p := NewMetrics(reg).Pool("default/llm")
	p.Observe("miss", Usage{PromptTokens: 400, CachedTokens: 256, HasCached: true}) // system prompt cached
	p.Observe("hit", Usage{PromptTokens: 1000, CachedTokens: 960, HasCached: true})
	p.Observe("rebind", Usage{PromptTokens: 1100, CachedTokens: 0, HasCached: true})
	p.Observe("hit", Usage{PromptTokens: 50}) // a backend that reports no cached tokens
	p.Observe("error", Usage{PromptTokens: 7, HasCached: true})
	var none *PoolMetrics
	none.Observe("hit", Usage{PromptTokens: 1}) // usage not counted: no panic

	for _, c := range []struct {
		vec      string
		decision string
		want     float64
	}{
		{"prompt", "miss", 400}, {"prompt", "hit", 1050}, {"prompt", "rebind", 1100}, {"prompt", "broken", 0},
		{"cached", "miss", 256}, {"cached", "hit", 960}, {"cached", "rebind", 0},
	} {
		vec := p.prompt
		if c.vec == "cached" {
			vec = p.cached
		}
		if got := testutil.ToFloat64(vec[c.decision]); got != c.want {
			t.Errorf("%s tokens, decision %s: %v, want %v", c.vec, c.decision, got, c.want)
		}
	}
	// Two turns after the first reported cached tokens: 0.96 and 0.
	if n := testutil.CollectAndCount(reg, "tether_turn_cache_hit_ratio"); n != 1 {
		t.Fatalf("%d ratio series", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "tether_turn_cache_hit_ratio" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() != 0.96 {
				t.Fatalf("ratio histogram: %d samples, sum %v; want 2, 0.96", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	if got := testutil.CollectAndCount(reg, "tether_prompt_tokens_total"); got != len(Decisions) {
		t.Fatalf("%d prompt token series, want one per decision (%d)", got, len(Decisions))
	}
}
