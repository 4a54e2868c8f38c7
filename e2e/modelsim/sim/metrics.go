package sim

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are vLLM's names (v1 engine), each labelled model_name as vLLM
// does, on a registry of this Server alone.
type metrics struct {
	registry         *prometheus.Registry
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	cacheQueries     prometheus.Counter
	cacheHits        prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	labels := prometheus.Labels{"model_name": s.opts.Model}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	gauge := func(name, help string, f func() float64) prometheus.GaugeFunc {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
	}
	m := &metrics{
		registry:         prometheus.NewRegistry(),
		promptTokens:     counter("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
		generationTokens: counter("vllm:generation_tokens_total", "Number of generation tokens processed."),
		// vLLM v1 counts prefix-cache queries and hits in tokens.
		cacheQueries: counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		cacheHits:    counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
	}
	running := func() float64 { r, _ := s.queue.counts(); return float64(r) }
	waiting := func() float64 { _, w := s.queue.counts(); return float64(w) }
	m.registry.MustRegister(
		m.promptTokens, m.generationTokens, m.cacheQueries, m.cacheHits,
		gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running),
		gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
		gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kvUsage),
		// The name before vLLM v0.10; load scrapers still look for it.
		gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", s.kvUsage),
		gauge("modelsim_prefix_cache_blocks", "Blocks held by modelsim's prefix cache (not a vLLM metric).", s.cachedBlocks),
	)
	return m
}
