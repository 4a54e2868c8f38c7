package sim

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Response headers that carry the simulation's view of a request.
const (
	HeaderID        = "X-Modelsim-Id"        // the server's Options.ID, on every response
	HeaderPrefiller = "X-Modelsim-Prefiller" // echo of the request's x-prefiller-host-port
	prefillerHeader = "X-Prefiller-Host-Port"
)

// Server is one simulated model server. It starts no goroutines of its own:
// all work happens in the handlers of the requests it serves.
type Server struct {
	opts    Options
	timing  *timing
	queue   *admission
	metrics *metrics
	mux     *http.ServeMux
	created int64 // unix seconds, for /v1/models

	mu    sync.Mutex // guards cache
	cache *prefixCache

	responses *responseStore // the Responses API's stored responses

	laneMu   sync.Mutex // guards laneFree
	laneFree time.Time  // SerialPrefill: when the prefill lane is next idle

	fault atomic.Pointer[Fault]

	heldBlocks       atomic.Int64 // KV blocks of the running requests
	requests         atomic.Int64
	promptTokens     atomic.Int64
	cachedTokens     atomic.Int64
	completionTokens atomic.Int64
}

// New returns a Server with o's zero fields set to the defaults.
func New(o Options) *Server {
	o.setDefaults()
	s := &Server{
		opts:      o,
		timing:    newTiming(o.PrefillPerToken, o.DecodePerToken),
		queue:     &admission{max: o.MaxRunning},
		cache:     newPrefixCache(o.CacheBlocks),
		created:   time.Now().Unix(),
		responses: &responseStore{m: map[string]*stored{}, max: o.MaxStoredResponses},
	}
	s.metrics = newMetrics(s)
	s.SetFault(o.Fault)
	mux := http.NewServeMux()
	route := func(method, path string, h http.HandlerFunc) {
		mux.HandleFunc(method+" "+path, h)
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { // any other method
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "use "+method+" for "+path)
		})
	}
	// Completion-like routes (the Responses API's included) fail under
	// the current fault; the others keep answering.
	faulty := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !s.failed(w, r) {
				h(w, r)
			}
		}
	}
	route("POST", "/v1/chat/completions", faulty(func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, Chat) }))
	route("POST", "/v1/completions", faulty(func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, Completion) }))
	mux.HandleFunc("POST /v1/responses", faulty(s.createResponse))
	mux.HandleFunc("GET /v1/responses/{id}", faulty(s.getResponse))
	mux.HandleFunc("DELETE /v1/responses/{id}", faulty(s.deleteResponse))
	mux.HandleFunc("POST /v1/responses/{id}/cancel", faulty(s.cancelResponse))
	mux.HandleFunc("GET /v1/responses/{id}/input_items", faulty(s.inputItems))
	route("GET", "/v1/models", s.models)
	route("GET", "/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	route("GET", "/metrics", promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{}).ServeHTTP)
	route("GET", "/sim/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	mux.HandleFunc("GET /sim/timing", s.getTiming)
	route("POST", "/sim/timing", s.postTiming)
	mux.HandleFunc("GET /sim/fault", s.getFault)
	route("POST", "/sim/fault", s.postFault)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", "no route for "+r.Method+" "+r.URL.Path)
	})
	s.mux = mux
	return s
}

// ID returns the server's identity.
func (s *Server) ID() string { return s.opts.ID }

// ServeHTTP serves the OpenAI API, /health, /metrics and the /sim/ control
// endpoints. Every response names the server in X-Modelsim-Id.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderID, s.opts.ID)
	if p := r.Header.Get(prefillerHeader); p != "" {
		w.Header().Set(HeaderPrefiller, p)
	}
	s.mux.ServeHTTP(w, r)
}

// SetTiming changes the per-token costs at run time; waits in progress
// re-measure themselves at once with the new costs. Negative values count as 0.
func (s *Server) SetTiming(prefill, decode time.Duration) { s.timing.set(prefill, decode) }

// Timing returns the current per-token costs.
func (s *Server) Timing() (prefill, decode time.Duration) {
	p, d, _ := s.timing.get()
	return p, d
}

// Stats are the counters of GET /sim/stats. Requests counts valid completion
// requests on arrival; the token counters count requests that were admitted
// (left the queue), when their prefix-cache lookup happened.
type Stats struct {
	ID               string `json:"id"`
	Requests         int64  `json:"requests"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CachedTokens     int64  `json:"cached_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	Running          int    `json:"running"`
	Waiting          int    `json:"waiting"`
	CachedBlocks     int    `json:"cached_blocks"`
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	running, waiting := s.queue.counts()
	return Stats{
		ID:               s.opts.ID,
		Requests:         s.requests.Load(),
		PromptTokens:     s.promptTokens.Load(),
		CachedTokens:     s.cachedTokens.Load(),
		CompletionTokens: s.completionTokens.Load(),
		Running:          running,
		Waiting:          waiting,
		CachedBlocks:     int(s.cachedBlocks()),
	}
}

// kvUsage is vLLM's KV-cache usage: the blocks held by running requests
// (prompt plus tokens generated so far) over the capacity. Cached blocks of
// finished requests are free in vLLM (evictable) and do not count.
func (s *Server) kvUsage() float64 {
	return min(1, float64(s.heldBlocks.Load())/float64(s.opts.CacheBlocks))
}

func (s *Server) cachedBlocks() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.cache.len())
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.opts.Model, "object": "model", "created": s.created, "owned_by": "modelsim",
			"root": s.opts.Model,
		}},
	})
}

type timingJSON struct {
	PrefillPerToken string `json:"prefillPerToken"`
	DecodePerToken  string `json:"decodePerToken"`
}

func (s *Server) getTiming(w http.ResponseWriter, _ *http.Request) {
	p, d := s.Timing()
	writeJSON(w, http.StatusOK, timingJSON{p.String(), d.String()})
}

// postTiming is SetTiming for tests of separate processes:
// POST /sim/timing?prefillPerToken=2ms&decodePerToken=5ms (either may be left out).
func (s *Server) postTiming(w http.ResponseWriter, r *http.Request) {
	p, d := s.Timing()
	for name, dst := range map[string]*time.Duration{"prefillPerToken": &p, "decodePerToken": &d} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		x, err := time.ParseDuration(v)
		if err != nil || x < 0 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", name+" must be a non-negative Go duration such as 2ms")
			return
		}
		*dst = x
	}
	s.SetTiming(p, d)
	s.getTiming(w, r)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes an error in the OpenAI shape, which OpenAI clients parse.
func writeError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": code,
	}})
}
