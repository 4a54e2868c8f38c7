package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// complete serves one completion request: queue → prefix-cache lookup →
// prefill of the uncached tokens (which yields the first token) → cache
// insert → one decode step per further token, streamed or answered at the
// end. The request's context is honoured at every wait, and every count it
// changed is restored when it ends.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, kind Kind) {
	tooLarge := func() {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request body larger than 16 MiB")
	}
	if r.ContentLength > s.opts.maxBody {
		tooLarge() // without reading it
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			tooLarge()
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "reading request body: "+err.Error())
		return
	}
	req, err := ParseRequest(body, kind)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	s.requests.Add(1)

	ctx := r.Context()
	arrived := time.Now()
	run := &run{s: s, req: req, kind: kind, id: newID(kind), created: arrived.Unix()}
	defer func() { run.log(r, arrived, ctx.Err()) }()

	if err := s.queue.acquire(ctx); err != nil {
		return // the client is gone: nothing to answer
	}
	defer s.queue.release()
	run.admitted = time.Now()

	s.prefill(ctx, run)
	if ctx.Err() != nil {
		return
	}
	if req.Stream {
		run.stream(ctx, w)
	} else {
		run.whole(ctx, w)
	}
}

// prefill looks the prompt up in the prefix cache, caches the prompt's
// full blocks, and spends the uncached tokens' time.
//
// The blocks are cached when they are allocated, before they are
// computed, as vLLM v1's KV cache manager does ("If an allocated block is
// already full of tokens, we immediately add it to the cache block, so
// that the block can be reused by other requests in the same batch",
// vLLM design docs, "Automatic Prefix Caching", Block Allocation): of
// several requests that arrive together with one uncached prefix (an
// agent's parallel tool calls), only the first computes it. Under
// --serial-prefill the later ones also start their prefill after it ends.
func (s *Server) prefill(ctx context.Context, run *run) {
	n, bt := len(run.req.Tokens), s.opts.BlockTokens
	hs := s.cache.hashes(run.req.Tokens, bt) // reads only the immutable seed: no lock
	s.mu.Lock()
	// As in vLLM, the last prompt token is always computed (its logits give
	// the first output token), so a full hit stops one block short.
	run.cached = s.cache.match(hs, (n-1)/bt) * bt
	s.cache.insert(hs)
	s.mu.Unlock()

	s.promptTokens.Add(int64(n))
	s.cachedTokens.Add(int64(run.cached))
	s.metrics.promptTokens.Add(float64(n))
	s.metrics.cacheQueries.Add(float64(n))
	s.metrics.cacheHits.Add(float64(run.cached))
	run.hold(n)

	if s.opts.SerialPrefill {
		if sleepCtx(ctx, s.reservePrefill(n-run.cached)) != nil {
			return
		}
	} else if s.timing.sleep(ctx, run.admitted, n-run.cached, prefillCost) != nil {
		return
	}
}

// nextToken waits one decode step and accounts for the new token. The first
// token needs none: as in vLLM, the prefill pass yields it (its logits come
// from the last prompt token), so time to first token = queue + prefill.
func (run *run) nextToken(ctx context.Context) error {
	if run.generated > 0 {
		if err := run.s.timing.sleep(ctx, time.Now(), 1, decodeCost); err != nil {
			return err
		}
	}
	run.generated++
	run.s.completionTokens.Add(1)
	run.s.metrics.generationTokens.Inc()
	run.hold(len(run.req.Tokens) + run.generated)
	return nil
}

// stream sends one SSE event per output token, flushed at once, then the
// usage chunk if asked for, then [DONE].
func (run *run) stream(ctx context.Context, w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(data []byte) bool {
		if _, err := w.Write(append(append([]byte("data: "), data...), '\n', '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if rc.Flush() != nil { // headers now: the client sees the stream open before the first token
		return
	}
	for run.generated < run.req.MaxTokens {
		if run.nextToken(ctx) != nil {
			return
		}
		if !send(run.chunk(run.generated - 1)) {
			return
		}
	}
	if run.req.IncludeUsage && !send(run.usageChunk()) {
		return
	}
	send([]byte("[DONE]"))
}

// whole answers once every output token is decoded.
func (run *run) whole(ctx context.Context, w http.ResponseWriter) {
	for run.generated < run.req.MaxTokens {
		if run.nextToken(ctx) != nil {
			return
		}
	}
	writeJSON(w, http.StatusOK, run.response())
}

// reservePrefill queues tokens uncached tokens on the serial prefill lane
// and returns when their computation ends.
func (s *Server) reservePrefill(tokens int) time.Time {
	per, _ := s.Timing()
	return s.reserveLane(time.Duration(tokens) * per)
}

// reserveLane queues d of work on the serial prefill lane and returns
// when it ends.
func (s *Server) reserveLane(d time.Duration) time.Time {
	s.laneMu.Lock()
	defer s.laneMu.Unlock()
	s.laneFree = later(s.laneFree, time.Now()).Add(d)
	return s.laneFree
}

// Occupy holds the serial prefill lane for d, as another tenant's
// prefill would (a batch job sharing the GPU): requests queue behind it.
// It touches neither the cache nor the counters. Without SerialPrefill it
// does nothing.
func (s *Server) Occupy(d time.Duration) {
	if s.opts.SerialPrefill {
		s.reserveLane(d)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sleepCtx waits until t or until ctx ends (then returns its error).
func sleepCtx(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}
