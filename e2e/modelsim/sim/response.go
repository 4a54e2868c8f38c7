package sim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"hash/fnv"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// run is the state of one admitted request.
type run struct {
	s         *Server
	req       *Request
	kind      Kind
	id        string
	created   int64
	admitted  time.Time
	cached    int   // prompt tokens found in the prefix cache
	generated int   // output tokens so far
	held      int64 // KV blocks this request holds (counted in Server.heldBlocks)
	words     []string
}

// hold sets the KV blocks this request holds to those of tokens tokens.
func (run *run) hold(tokens int) {
	bt := run.s.opts.BlockTokens
	blocks := int64((tokens + bt - 1) / bt)
	run.s.heldBlocks.Add(blocks - run.held)
	run.held = blocks
}

// log writes one line per request and returns the blocks it held.
func (run *run) log(r *http.Request, arrived time.Time, ctxErr error) {
	run.s.heldBlocks.Add(-run.held)
	run.held = 0
	queued := time.Duration(0)
	if !run.admitted.IsZero() {
		queued = run.admitted.Sub(arrived)
	}
	run.s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "completion",
		slog.String("id", run.id), slog.String("path", r.URL.Path), slog.Bool("stream", run.req.Stream),
		slog.Int("prompt_tokens", len(run.req.Tokens)), slog.Int("cached_tokens", run.cached),
		slog.Int("completion_tokens", run.generated), slog.Float64("queued_ms", ms(queued)),
		slog.Float64("duration_ms", ms(time.Since(arrived))), slog.Bool("canceled", ctxErr != nil))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// vocabulary of the generated text. The output is a deterministic function
// of the prompt, so two servers answer a prompt with the same words.
var vocabulary = strings.Fields(`the a model server cache token block prefix session pod
	router sidecar stream turn reply prompt request queue decode prefill sticky
	pin load batch kv hit miss route agent tool answer context window`)

func (run *run) word(i int) string {
	if run.words == nil {
		h := fnv.New64a()
		for _, t := range run.req.Tokens {
			h.Write([]byte(t))
			h.Write([]byte{0})
		}
		seed := h.Sum64()
		run.words = make([]string, run.req.MaxTokens)
		for j := range run.words {
			run.words[j] = vocabulary[(seed+uint64(j)*7)%uint64(len(vocabulary))]
		}
	}
	return run.words[i]
}

func (run *run) text() string {
	for i := range run.generated {
		run.word(i)
	}
	return strings.Join(run.words[:run.generated], " ")
}

func (run *run) finishReason() string {
	if run.req.MaxTokensSet {
		return "length"
	}
	return "stop" // as if the model ended its answer by itself
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (run *run) usage() *usage {
	u := &usage{PromptTokens: len(run.req.Tokens), CompletionTokens: run.generated,
		TotalTokens: len(run.req.Tokens) + run.generated}
	u.PromptTokensDetails.CachedTokens = run.cached
	return u
}

// envelope is the part common to responses and chunks. The server's identity
// is in system_fingerprint, a field OpenAI defines for "the backend
// configuration the model runs with", which clients keep and log.
type envelope struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []any  `json:"choices"`
	Usage             *usage `json:"usage,omitempty"`
}

func (run *run) envelope(object string) envelope {
	return envelope{ID: run.id, Object: object, Created: run.created, Model: run.s.opts.Model,
		SystemFingerprint: run.s.opts.ID, Choices: []any{}}
}

// chunk is the streamed event for output token i.
func (run *run) chunk(i int) []byte {
	content := run.word(i)
	if i > 0 {
		content = " " + content
	}
	var finish *string
	if i == run.req.MaxTokens-1 {
		f := run.finishReason()
		finish = &f
	}
	var e envelope
	switch run.kind {
	case Chat:
		e = run.envelope("chat.completion.chunk")
		delta := map[string]string{"content": content}
		if i == 0 {
			delta["role"] = "assistant"
		}
		e.Choices = []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}
	default:
		e = run.envelope("text_completion")
		e.Choices = []any{map[string]any{"index": 0, "text": content, "logprobs": nil, "finish_reason": finish}}
	}
	b, _ := json.Marshal(e)
	return b
}

// usageChunk is the last event of a stream with include_usage: no choices.
func (run *run) usageChunk() []byte {
	object := "text_completion"
	if run.kind == Chat {
		object = "chat.completion.chunk"
	}
	e := run.envelope(object)
	e.Usage = run.usage()
	b, _ := json.Marshal(e)
	return b
}

// response is the non-streamed answer.
func (run *run) response() envelope {
	var e envelope
	switch run.kind {
	case Chat:
		e = run.envelope("chat.completion")
		e.Choices = []any{map[string]any{"index": 0, "logprobs": nil, "finish_reason": run.finishReason(),
			"message": map[string]string{"role": "assistant", "content": run.text()}}}
	default:
		e = run.envelope("text_completion")
		e.Choices = []any{map[string]any{"index": 0, "text": run.text(), "logprobs": nil, "finish_reason": run.finishReason()}}
	}
	e.Usage = run.usage()
	return e
}

func newID(kind Kind) string {
	prefix := "cmpl-"
	if kind == Chat {
		prefix = "chatcmpl-"
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
