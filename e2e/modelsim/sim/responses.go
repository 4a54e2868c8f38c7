package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The Responses API as vLLM serves it with VLLM_ENABLE_RESPONSES_API_STORE=1:
// responses are stored in this server's memory (bounded here by
// Options.MaxStoredResponses, oldest first out), so previous_response_id,
// GET /v1/responses/{id}, its cancel and input_items only work on the
// server that produced the response; anywhere else they are 404
// "Response with id '…' not found.", as in vLLM. A turn's prompt is the
// stored conversation so far (inputs and outputs) followed by the new
// input, so chained turns hit the prefix cache where they run.

// stored is one stored response.
type stored struct {
	mu       sync.Mutex
	obj      responseObject
	history  string      // the prompt text of this turn plus its output: the next turn's prefix
	items    []inputItem // this turn's input items (input_items)
	cancel   context.CancelFunc
	finished chan struct{} // closed when generation ends
}

type responseStore struct {
	mu    sync.Mutex
	m     map[string]*stored
	order []string // insertion order, for eviction
	max   int
}

func (rs *responseStore) get(id string) *stored {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.m[id]
}

func (rs *responseStore) put(id string, st *stored) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for len(rs.m) >= rs.max && len(rs.order) > 0 {
		delete(rs.m, rs.order[0])
		rs.order = rs.order[1:]
	}
	rs.m[id] = st
	rs.order = append(rs.order, id)
}

func (rs *responseStore) remove(id string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	_, ok := rs.m[id]
	delete(rs.m, id)
	return ok
}

type responseObject struct {
	ID                 string         `json:"id"`
	Object             string         `json:"object"`
	CreatedAt          int64          `json:"created_at"`
	Model              string         `json:"model"`
	Status             string         `json:"status"`
	Output             []outputItem   `json:"output"`
	PreviousResponseID *string        `json:"previous_response_id"`
	Instructions       *string        `json:"instructions"`
	MaxOutputTokens    *int           `json:"max_output_tokens"`
	Store              bool           `json:"store"`
	Metadata           map[string]any `json:"metadata"`
	Usage              *respUsage     `json:"usage"`
	Error              any            `json:"error"`
}

type outputItem struct {
	ID      string        `json:"id"`
	Type    string        `json:"type"`
	Status  string        `json:"status"`
	Role    string        `json:"role"`
	Content []outputQuote `json:"content"`
}

type outputQuote struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type inputItem struct {
	ID      string       `json:"id"`
	Type    string       `json:"type"`
	Role    string       `json:"role"`
	Content []inputQuote `json:"content"`
}

type inputQuote struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// responsesWire is the part of a POST /v1/responses body modelsim reads.
type responsesWire struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Metadata           map[string]any  `json:"metadata"`
}

// parseInput reads input: a string (one user message) or a list of
// messages whose content is a string or a list of parts with text.
func parseInput(raw json.RawMessage) ([]inputItem, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errors.New("input is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("input: %w", err)
		}
		return []inputItem{{ID: newHexID("msg_"), Type: "message", Role: "user", Content: []inputQuote{{"input_text", s}}}}, nil
	}
	var msgs []message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, errors.New("input must be a string or a list of messages")
	}
	items := make([]inputItem, 0, len(msgs))
	var err error
	for i, m := range msgs {
		role := m.Role
		if role == "" {
			role = "user"
		}
		var text string
		var parts []inputQuote // input_text (or output_text) parts
		if c := bytes.TrimSpace(m.Content); len(c) > 0 && c[0] == '[' {
			if err := json.Unmarshal(c, &parts); err != nil {
				return nil, fmt.Errorf("input[%d].content must be a string or a list of parts: %w", i, err)
			}
			texts := make([]string, len(parts))
			for j, p := range parts {
				texts[j] = p.Text
			}
			text = strings.Join(texts, "\n")
		} else if text, err = renderContent(m.Content); err != nil {
			return nil, fmt.Errorf("input[%d].content: %w", i, err)
		}
		items = append(items, inputItem{ID: newHexID("msg_"), Type: "message", Role: role, Content: []inputQuote{{"input_text", text}}})
	}
	return items, nil
}

// createResponse serves POST /v1/responses.
func (s *Server) createResponse(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var req responsesWire
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	items, err := parseInput(req.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	var prompt strings.Builder
	if req.PreviousResponseID != nil {
		prev := s.responses.get(*req.PreviousResponseID)
		if prev == nil {
			writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("Response with id '%s' not found.", *req.PreviousResponseID))
			return
		}
		prev.mu.Lock()
		prompt.WriteString(prev.history)
		prev.mu.Unlock()
	}
	if req.Instructions != nil {
		prompt.WriteString("\nsystem: " + *req.Instructions)
	}
	for _, it := range items {
		prompt.WriteString("\n" + it.Role + ": " + it.Content[0].Text)
	}
	maxTokens, maxSet := DefaultMaxTokens, false
	if req.MaxOutputTokens != nil {
		if *req.MaxOutputTokens < 1 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "max_output_tokens must be at least 1")
			return
		}
		maxTokens, maxSet = min(*req.MaxOutputTokens, MaxOutputTokens), true
	}
	store := req.Store == nil || *req.Store
	s.requests.Add(1)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	arrived := time.Now()
	run := &run{s: s, req: &Request{Model: req.Model, Tokens: Tokenize(prompt.String()), MaxTokens: maxTokens,
		MaxTokensSet: maxSet, Stream: req.Stream}, id: newHexID("resp_"), created: arrived.Unix()}
	defer func() { run.log(r, arrived, ctx.Err()) }()
	st := &stored{items: items, cancel: cancel, finished: make(chan struct{})}
	defer close(st.finished)
	st.obj = responseObject{ID: run.id, Object: "response", CreatedAt: run.created, Model: s.opts.Model,
		Status: "in_progress", Output: []outputItem{}, PreviousResponseID: req.PreviousResponseID,
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Store: store, Metadata: req.Metadata}
	if st.obj.Metadata == nil {
		st.obj.Metadata = map[string]any{}
	}
	if store {
		// Stored from the start, so it can be retrieved and cancelled
		// while it is generated.
		s.responses.put(run.id, st)
	}

	if err := s.queue.acquire(ctx); err != nil {
		st.finish(run, prompt.String(), "cancelled")
		return
	}
	defer s.queue.release()
	run.admitted = time.Now()
	s.prefill(ctx, run)
	if ctx.Err() != nil {
		st.finish(run, prompt.String(), "cancelled")
		if r.Context().Err() == nil && !req.Stream { // cancelled by POST .../cancel
			writeJSON(w, http.StatusOK, st.snapshot())
		}
		return
	}
	if req.Stream {
		run.streamResponse(ctx, w, st, prompt.String())
		return
	}
	for run.generated < run.req.MaxTokens {
		if run.nextToken(ctx) != nil {
			st.finish(run, prompt.String(), "cancelled")
			if r.Context().Err() == nil { // cancelled by POST .../cancel
				writeJSON(w, http.StatusOK, st.snapshot())
			}
			return
		}
	}
	st.finish(run, prompt.String(), "completed")
	writeJSON(w, http.StatusOK, st.snapshot())
}

// finish records the outcome of generation in st's object.
func (st *stored) finish(run *run, prompt, status string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.obj.Status == "cancelled" {
		status = "cancelled"
	}
	st.obj.Status = status
	text := run.text()
	st.obj.Output = []outputItem{run.outputItem(text, "completed")}
	st.obj.Usage = run.responsesUsage()
	st.history = prompt + "\nassistant: " + text
}

func (st *stored) snapshot() responseObject {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.obj
}

func (run *run) outputItem(text, status string) outputItem {
	content := []outputQuote{}
	if text != "" || status == "completed" {
		content = []outputQuote{{Type: "output_text", Text: text, Annotations: []any{}}}
	}
	return outputItem{ID: "msg_" + run.id[len("resp_"):], Type: "message", Status: status, Role: "assistant", Content: content}
}

func (run *run) responsesUsage() *respUsage {
	u := &respUsage{InputTokens: len(run.req.Tokens), OutputTokens: run.generated, TotalTokens: len(run.req.Tokens) + run.generated}
	u.InputTokensDetails.CachedTokens = run.cached
	return u
}

// streamResponse sends the Responses API's events: response.created, then
// the output item, its text deltas (one per token) and the closing
// events, and response.completed.
func (run *run) streamResponse(ctx context.Context, w http.ResponseWriter, st *stored, prompt string) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	seq := 0
	send := func(typ string, fields map[string]any) bool {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		data, _ := json.Marshal(fields)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	itemID := "msg_" + run.id[len("resp_"):]
	if !send("response.created", map[string]any{"response": st.snapshot()}) ||
		!send("response.in_progress", map[string]any{"response": st.snapshot()}) ||
		!send("response.output_item.added", map[string]any{"output_index": 0, "item": run.outputItem("", "in_progress")}) ||
		!send("response.content_part.added", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0,
			"part": outputQuote{Type: "output_text", Annotations: []any{}}}) {
		st.finish(run, prompt, "cancelled")
		return
	}
	for run.generated < run.req.MaxTokens {
		if run.nextToken(ctx) != nil {
			st.finish(run, prompt, "cancelled")
			return // cancelled (POST .../cancel) or the client is gone: the stream ends
		}
		delta := run.word(run.generated - 1)
		if run.generated > 1 {
			delta = " " + delta
		}
		if !send("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "delta": delta}) {
			st.finish(run, prompt, "cancelled")
			return
		}
	}
	st.finish(run, prompt, "completed")
	text := run.text()
	part := outputQuote{Type: "output_text", Text: text, Annotations: []any{}}
	_ = send("response.output_text.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "text": text}) &&
		send("response.content_part.done", map[string]any{"item_id": itemID, "output_index": 0, "content_index": 0, "part": part}) &&
		send("response.output_item.done", map[string]any{"output_index": 0, "item": run.outputItem(text, "completed")}) &&
		send("response.completed", map[string]any{"response": st.snapshot()})
}

// lookup finds the stored response of the path's id, or answers 404 as vLLM does.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *stored {
	id := r.PathValue("id")
	st := s.responses.get(id)
	if st == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("Response with id '%s' not found.", id))
	}
	return st
}

func (s *Server) getResponse(w http.ResponseWriter, r *http.Request) {
	if st := s.lookup(w, r); st != nil {
		writeJSON(w, http.StatusOK, st.snapshot())
	}
}

// cancelResponse cancels a response that is still being generated and
// answers with it; a finished one cannot be cancelled (400).
func (s *Server) cancelResponse(w http.ResponseWriter, r *http.Request) {
	st := s.lookup(w, r)
	if st == nil {
		return
	}
	st.mu.Lock()
	status := st.obj.Status
	if status == "in_progress" || status == "queued" {
		st.obj.Status = "cancelled"
	}
	st.mu.Unlock()
	if status != "in_progress" && status != "queued" {
		writeError(w, http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("Cannot cancel response '%s': its status is %s, only queued or in-progress responses can be cancelled.", r.PathValue("id"), status))
		return
	}
	st.cancel()
	select { // the generation notices at its next wait
	case <-st.finished:
	case <-r.Context().Done():
		return
	}
	writeJSON(w, http.StatusOK, st.snapshot())
}

func (s *Server) deleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.responses.remove(id) {
		writeError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("Response with id '%s' not found.", id))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
}

func (s *Server) inputItems(w http.ResponseWriter, r *http.Request) {
	st := s.lookup(w, r)
	if st == nil {
		return
	}
	items := st.items
	out := map[string]any{"object": "list", "data": items, "has_more": false, "first_id": nil, "last_id": nil}
	if len(items) > 0 {
		out["first_id"], out["last_id"] = items[0].ID, items[len(items)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

// readBody reads a request body within the size limit, or answers the error.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request body larger than 16 MiB")
	}
	if r.ContentLength > s.opts.maxBody {
		tooLarge()
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			tooLarge()
		} else {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "reading request body: "+err.Error())
		}
		return nil, false
	}
	return body, true
}

// newHexID returns prefix and 32 random hex digits, the shape of vLLM's ids.
func newHexID(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
