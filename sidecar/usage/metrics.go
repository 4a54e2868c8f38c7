package usage

import "github.com/prometheus/client_golang/prometheus"

// Decisions are the resolver's outcomes the token counters are split by:
// the hit rate of kept pins (hit) against that of new or moved ones is one
// PromQL division.
var Decisions = []string{"hit", "miss", "rebind", "broken", "none"}

// afterFirstTurn are the decisions of a session that already had a
// binding: turns whose prompt a backend may have cached.
var afterFirstTurn = map[string]bool{"hit": true, "rebind": true, "broken": true}

// ratioBuckets resolve the turns that lost their cache (near 0) from those
// that kept it (a turn's new text is typically a few percent of its
// prompt, so kept caches sit above 0.8).
var ratioBuckets = []float64{0.05, 0.1, 0.25, 0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98, 1}

// Metrics count the prompt tokens backends reported, and how many of them
// they served from their prefix cache.
type Metrics struct {
	prompt *prometheus.CounterVec   // pool, decision
	cached *prometheus.CounterVec   // pool, decision
	ratio  *prometheus.HistogramVec // pool
}

// NewMetrics registers the token metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		prompt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_prompt_tokens_total",
			Help: "Prompt tokens backends reported (usage.prompt_tokens), by pool and sticky decision.",
		}, []string{"pool", "decision"}),
		cached: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_cached_prompt_tokens_total",
			Help: "Prompt tokens backends served from their prefix cache (usage.prompt_tokens_details.cached_tokens), by pool and sticky decision. Counted only for responses that report cached tokens.",
		}, []string{"pool", "decision"}),
		ratio: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tether_turn_cache_hit_ratio",
			Help:    "Cached over prompt tokens of each turn after a session's first (decision hit, rebind or broken), for responses that report cached tokens.",
			Buckets: ratioBuckets,
		}, []string{"pool"}),
	}
	reg.MustRegister(m.prompt, m.cached, m.ratio)
	return m
}

// PoolMetrics are one pool's children, taken once so that counting a
// response looks up no labels.
type PoolMetrics struct {
	prompt, cached map[string]prometheus.Counter
	ratio          prometheus.Observer
}

// Pool returns pool's children; m may be nil (usage not counted).
func (m *Metrics) Pool(pool string) *PoolMetrics {
	if m == nil {
		return nil
	}
	p := &PoolMetrics{
		prompt: make(map[string]prometheus.Counter, len(Decisions)),
		cached: make(map[string]prometheus.Counter, len(Decisions)),
		ratio:  m.ratio.WithLabelValues(pool),
	}
	for _, d := range Decisions {
		p.prompt[d] = m.prompt.WithLabelValues(pool, d)
		p.cached[d] = m.cached.WithLabelValues(pool, d)
	}
	return p
}

// Observe counts one response's usage under the request's decision;
// decisions outside Decisions (a request that failed before one was
// made) are not counted.
func (p *PoolMetrics) Observe(decision string, u Usage) {
	if p == nil {
		return
	}
	prompt, ok := p.prompt[decision]
	if !ok {
		return
	}
	prompt.Add(float64(u.PromptTokens))
	if !u.HasCached {
		return
	}
	p.cached[decision].Add(float64(u.CachedTokens))
	if afterFirstTurn[decision] && u.PromptTokens > 0 {
		p.ratio.Observe(float64(u.CachedTokens) / float64(u.PromptTokens))
	}
}
