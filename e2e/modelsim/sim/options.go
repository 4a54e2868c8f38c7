// Package sim is a simulated OpenAI/vLLM model server: it speaks the
// OpenAI completions APIs, keeps a vLLM-like prefix cache of token blocks and
// spends simulated time on prefill (uncached prompt tokens only) and decode,
// so that tests and benchmarks of a sticky router can see cache hits, queueing
// and time to first token without a GPU.
//
// Everything is per Server (metrics registry included), so many simulated
// backends can run in one test process.
package sim

import (
	"log/slog"
	"time"
)

// Defaults applied by New to zero fields of Options.
const (
	DefaultBlockTokens = 16
	DefaultCacheBlocks = 4096
	DefaultMaxRunning  = 256 // vLLM's default max_num_seqs
	DefaultModel       = "modelsim"
	DefaultMaxTokens   = 16   // output tokens when the request names none
	MaxOutputTokens    = 4096 // larger max_tokens are clamped to this
	MaxBodyBytes       = 16 << 20
	// DefaultMaxStoredResponses bounds the Responses API's store (vLLM's
	// is unbounded; a simulator that runs for days should not be).
	DefaultMaxStoredResponses = 10000
)

// Options configure a simulated server. Zero values take the defaults above.
type Options struct {
	// ID names this server in every response (header X-Modelsim-Id and the
	// body's system_fingerprint) and in /sim/stats.
	ID string
	// BlockTokens is the prefix-cache block size in tokens (vLLM's block_size).
	BlockTokens int
	// CacheBlocks is the prefix-cache capacity in blocks; the least recently
	// used blocks are evicted beyond it.
	CacheBlocks int
	// PrefillPerToken is the time spent per uncached prompt token.
	PrefillPerToken time.Duration
	// DecodePerToken is the time spent before each output token.
	DecodePerToken time.Duration
	// SerialPrefill makes prefill one shared resource, as a GPU's compute
	// is: the uncached prompt tokens of all requests are computed one
	// request at a time, in admission order, at PrefillPerToken each, so a
	// request's prefill also waits for the prefills admitted before it.
	// Without it every running request prefills in parallel, as if the
	// server had unlimited compute. (vLLM batches prefill tokens up to a
	// budget per step, which bounds the aggregate prefill rate the same
	// way.) A prefill's duration is fixed when it is queued: timing changed
	// later applies to later prefills.
	SerialPrefill bool
	// MaxRunning bounds the requests served at once; the rest wait in FIFO
	// order and are counted by vllm:num_requests_waiting.
	MaxRunning int
	// Model is the served model name (responses, /v1/models, the model_name
	// label of every metric). Requests naming another model are still served.
	Model string
	// MaxStoredResponses bounds the stored responses of the Responses
	// API; the oldest are forgotten beyond it.
	MaxStoredResponses int
	// Logger receives one line per finished completion request; nil discards.
	Logger *slog.Logger
	// Fault, if set, fails every completion request from the start
	// (SetFault changes it at run time).
	Fault Fault

	maxBody int64 // MaxBodyBytes; smaller in tests
}

func (o *Options) setDefaults() {
	if o.BlockTokens <= 0 {
		o.BlockTokens = DefaultBlockTokens
	}
	if o.CacheBlocks <= 0 {
		o.CacheBlocks = DefaultCacheBlocks
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = DefaultMaxRunning
	}
	if o.Model == "" {
		o.Model = DefaultModel
	}
	if o.ID == "" {
		o.ID = o.Model
	}
	if o.PrefillPerToken < 0 {
		o.PrefillPerToken = 0
	}
	if o.DecodePerToken < 0 {
		o.DecodePerToken = 0
	}
	if o.MaxStoredResponses <= 0 {
		o.MaxStoredResponses = DefaultMaxStoredResponses
	}
	if o.maxBody <= 0 {
		o.maxBody = MaxBodyBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}
