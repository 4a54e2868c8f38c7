package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Turn 2 of a conversation re-sends turn 1 and the reply: its cached tokens
// are turn 1's full blocks.
func TestSecondTurnHitsPrefixCache(t *testing.T) {
	const bt = 4
	s, ts := start(t, Options{ID: "sim-a", BlockTokens: bt, Model: "m"})
	ctx := t.Context()
	turn1 := []string{"system", "You are a terse assistant.", "user", "What does a prefix cache keep between turns?"}

	a1 := decode(t, post(t, ctx, ts.URL+"/v1/chat/completions", chatBody(false, 5, turn1...)), 200)
	n1 := len(Tokenize("system: You are a terse assistant.\nuser: What does a prefix cache keep between turns?"))
	if a1.Usage.PromptTokens != n1 || a1.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("turn 1 usage %+v, want %d prompt tokens, none cached", a1.Usage, n1)
	}
	if a1.Usage.CompletionTokens != 5 || a1.Usage.TotalTokens != n1+5 {
		t.Fatalf("turn 1 usage %+v", a1.Usage)
	}
	reply := a1.Choices[0].Message.Content
	if len(Tokenize(reply)) != 5 || a1.Choices[0].Message.Role != "assistant" || *a1.Choices[0].FinishReason != "length" {
		t.Fatalf("turn 1 choice %+v", a1.Choices[0])
	}
	if a1.SystemFingerprint != "sim-a" || a1.Object != "chat.completion" || a1.Model != "m" {
		t.Fatalf("turn 1 envelope %+v", a1)
	}

	turn2 := append(turn1, "assistant", reply, "user", "And when is it evicted?")
	resp := post(t, ctx, ts.URL+"/v1/chat/completions", chatBody(false, 5, turn2...))
	if got := resp.Header.Get(HeaderID); got != "sim-a" {
		t.Fatalf("%s = %q", HeaderID, got)
	}
	a2 := decode(t, resp, 200)
	want := n1 / bt * bt
	if got := a2.Usage.PromptTokensDetails.CachedTokens; got != want || want == 0 {
		t.Fatalf("turn 2 cached %d tokens, want %d (turn 1's full blocks of %d tokens)", got, want, n1)
	}

	st := s.Stats()
	if st.Requests != 2 || st.CachedTokens != int64(want) || st.PromptTokens != int64(n1+a2.Usage.PromptTokens) ||
		st.CompletionTokens != 10 || st.Running != 0 || st.ID != "sim-a" {
		t.Fatalf("stats %+v", st)
	}
}

// The last prompt token is always computed, so an identical prompt whose
// length is a whole number of blocks hits one block less than it has.
func TestIdenticalPromptStopsOneBlockShort(t *testing.T) {
	_, ts := start(t, Options{BlockTokens: 4})
	body := map[string]any{"prompt": words(12, "w"), "max_tokens": 1}
	decode(t, post(t, t.Context(), ts.URL+"/v1/completions", body), 200)
	a := decode(t, post(t, t.Context(), ts.URL+"/v1/completions", body), 200)
	if got := a.Usage.PromptTokensDetails.CachedTokens; got != 8 {
		t.Fatalf("cached %d, want 8", got)
	}
	if a.Object != "text_completion" || len(Tokenize(a.Choices[0].Text)) != 1 {
		t.Fatalf("completion %+v", a)
	}
}

func TestLRUEvictionAtCapacity(t *testing.T) {
	s, ts := start(t, Options{BlockTokens: 2, CacheBlocks: 3})
	cached := func(prompt string) int {
		t.Helper()
		a := decode(t, post(t, t.Context(), ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1}), 200)
		return a.Usage.PromptTokensDetails.CachedTokens
	}
	const a, b = "a1 a2 a3 a4 a5", "b1 b2 b3 b4 b5" // two full blocks each
	for i, step := range []struct {
		prompt string
		want   int
	}{
		{a, 0},
		{a, 4}, // both blocks
		{b, 0}, // 4 blocks > 3: the least recently used, a's tail, goes
		{a, 2}, // a's head survived (heads are touched after tails); now b's tail goes
		{b, 2},
	} {
		if got := cached(step.prompt); got != step.want {
			t.Fatalf("step %d (%s): cached %d, want %d", i, step.prompt, got, step.want)
		}
	}
	if got := s.Stats().CachedBlocks; got != 3 {
		t.Fatalf("cache holds %d blocks, want its capacity 3", got)
	}
}

// readEvent reads one SSE event's data.
func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var data string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading event: %v (so far %q)", err, data+line)
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			return data
		}
		data += strings.TrimPrefix(line, "data: ")
	}
}

// The first token's event reaches the client while the server is still
// decoding: with a decode step of an hour the rest can only come after the
// test makes decoding fast.
func TestStreamSendsEachTokenAsItIsDecoded(t *testing.T) {
	s, ts := start(t, Options{ID: "sim-s", DecodePerToken: time.Hour})
	body := chatBody(true, 3, "user", "hello there")
	body["stream_options"] = map[string]any{"include_usage": true}
	resp := post(t, t.Context(), ts.URL+"/v1/chat/completions", body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)

	var first answer
	if err := json.Unmarshal([]byte(readEvent(t, r)), &first); err != nil {
		t.Fatal(err)
	}
	if first.Object != "chat.completion.chunk" || first.SystemFingerprint != "sim-s" ||
		first.Choices[0].Delta["role"] != "assistant" || first.Choices[0].Delta["content"] == "" || first.Choices[0].FinishReason != nil {
		t.Fatalf("first event %+v", first)
	}
	if st := s.Stats(); st.Running != 1 || st.CompletionTokens != 1 {
		t.Fatalf("after the first event: %+v, want the request still running with 1 token", st)
	}

	s.SetTiming(0, 0)
	var text strings.Builder
	text.WriteString(first.Choices[0].Delta["content"])
	for i := 1; i < 3; i++ {
		var c answer
		if err := json.Unmarshal([]byte(readEvent(t, r)), &c); err != nil {
			t.Fatal(err)
		}
		text.WriteString(c.Choices[0].Delta["content"])
		if fr := c.Choices[0].FinishReason; (i == 2) != (fr != nil && *fr == "length") {
			t.Fatalf("event %d finish_reason %v", i, fr)
		}
	}
	var u answer
	if err := json.Unmarshal([]byte(readEvent(t, r)), &u); err != nil {
		t.Fatal(err)
	}
	if u.Usage == nil || u.Usage.CompletionTokens != 3 || u.Usage.PromptTokens != 3 || len(u.Choices) != 0 {
		t.Fatalf("usage chunk %+v", u)
	}
	if got := readEvent(t, r); got != "[DONE]" {
		t.Fatalf("last event %q", got)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("after [DONE]: %v, want EOF", err)
	}
	if got := len(Tokenize(text.String())); got != 3 {
		t.Fatalf("streamed text %q", text.String())
	}
}

func TestStreamedCompletion(t *testing.T) {
	_, ts := start(t, Options{})
	resp := post(t, t.Context(), ts.URL+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3}, "stream": true, "max_tokens": 2})
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if len(events) != 3 || events[2] != "data: [DONE]" || !strings.Contains(events[0], `"object":"text_completion"`) {
		t.Fatalf("events %q", events)
	}
}

// Saturating MaxRunning queues requests, as vllm:num_requests_waiting shows;
// cancelled requests give their queue place and their slot back.
func TestQueueingAndCancellationInMetrics(t *testing.T) {
	s, ts := start(t, Options{Model: "q", MaxRunning: 1, PrefillPerToken: time.Hour})
	gauges := func() (running, waiting, kv float64) {
		mfs := scrape(t, ts.URL)
		return value(t, mfs, "vllm:num_requests_running", "q"), value(t, mfs, "vllm:num_requests_waiting", "q"),
			value(t, mfs, "vllm:kv_cache_usage_perc", "q")
	}
	send := func(ctx context.Context) chan error {
		done := make(chan error, 1)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions",
			strings.NewReader(`{"prompt":"`+words(40, "p")+`","max_tokens":1}`))
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
		return done
	}

	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	doneA := send(ctxA)
	testkit.Eventually(t, 20*time.Second, "A running", func() bool { r, _, _ := gauges(); return r == 1 })
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	doneB := send(ctxB)
	testkit.Eventually(t, 20*time.Second, "B waiting", func() bool { r, w, kv := gauges(); return r == 1 && w == 1 && kv > 0 })

	cancelB()
	<-doneB
	testkit.Eventually(t, 20*time.Second, "B left the queue", func() bool { r, w, _ := gauges(); return r == 1 && w == 0 })
	cancelA()
	<-doneA
	testkit.Eventually(t, 20*time.Second, "A released its slot", func() bool { r, w, kv := gauges(); return r == 0 && w == 0 && kv == 0 })

	// The released slot serves the next request.
	s.SetTiming(0, 0)
	a := decode(t, post(t, t.Context(), ts.URL+"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 1}), 200)
	if a.Usage.CompletionTokens != 1 {
		t.Fatalf("after cancellations: %+v", a)
	}
}

// A queued request is served once the running one finishes.
func TestQueuedRequestRunsAfterTheRunningOne(t *testing.T) {
	s, ts := start(t, Options{MaxRunning: 1, PrefillPerToken: time.Hour})
	results := make(chan answer, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a b c","max_tokens":2}`))
			if err != nil {
				results <- answer{}
				return
			}
			defer resp.Body.Close()
			var a answer
			_ = json.NewDecoder(resp.Body).Decode(&a)
			results <- a
		}()
	}
	testkit.Eventually(t, 20*time.Second, "one running, one waiting", func() bool { st := s.Stats(); return st.Running == 1 && st.Waiting == 1 })
	s.SetTiming(0, 0)
	for range 2 {
		if a := <-results; a.Usage == nil || a.Usage.CompletionTokens != 2 {
			t.Fatalf("answer %+v", a)
		}
	}
	if st := s.Stats(); st.Running != 0 || st.Waiting != 0 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMetricsHaveVLLMNames(t *testing.T) {
	_, ts := start(t, Options{Model: "llama", BlockTokens: 2})
	body := map[string]any{"prompt": "a b c d e", "max_tokens": 3}
	decode(t, post(t, t.Context(), ts.URL+"/v1/completions", body), 200)
	decode(t, post(t, t.Context(), ts.URL+"/v1/completions", body), 200)

	mfs := scrape(t, ts.URL)
	for name, want := range map[string]float64{
		"vllm:num_requests_running":       0,
		"vllm:num_requests_waiting":       0,
		"vllm:kv_cache_usage_perc":        0,
		"vllm:gpu_cache_usage_perc":       0,
		"vllm:prefix_cache_queries_total": 10, // tokens, as vLLM v1 counts
		"vllm:prefix_cache_hits_total":    4,
		"vllm:prompt_tokens_total":        10,
		"vllm:generation_tokens_total":    6,
		"modelsim_prefix_cache_blocks":    2,
	} {
		if got := value(t, mfs, name, "llama"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestBadInput(t *testing.T) {
	_, ts := start(t, Options{})
	for _, c := range []struct {
		name, path, body string
		code             int
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages":[`, 400},
		{"trailing garbage", "/v1/completions", `{"prompt":"a"} x`, 400},
		{"not an object", "/v1/completions", `[1,2]`, 400},
		{"messages not an array", "/v1/chat/completions", `{"messages":"hi"}`, 400},
		{"no messages", "/v1/chat/completions", `{"messages":[]}`, 400},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, 400},
		{"content a number", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400},
		{"content parts malformed", "/v1/chat/completions", `{"messages":[{"role":"user","content":[1]}]}`, 400},
		{"max_tokens a string", "/v1/completions", `{"prompt":"a","max_tokens":"8"}`, 400},
		{"max_tokens zero", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400},
		{"stream not a bool", "/v1/completions", `{"prompt":"a","stream":"yes"}`, 400},
		{"no prompt", "/v1/completions", `{"model":"m"}`, 400},
		{"prompt a number", "/v1/completions", `{"prompt":7}`, 400},
		{"batched prompts", "/v1/completions", `{"prompt":["a","b"]}`, 400},
		{"prompt empty array", "/v1/completions", `{"prompt":[]}`, 400},
		{"oversized body", "/v1/completions", `{"prompt":"` + strings.Repeat("a ", MaxBodyBytes/2) + `"}`, 413},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := decode(t, post(t, t.Context(), ts.URL+c.path, c.body), c.code)
			if a.Error == nil || a.Error.Message == "" || a.Error.Type != "invalid_request_error" {
				t.Fatalf("error body %+v", a.Error)
			}
		})
	}

	// A chunked body (no Content-Length) is cut at the limit while read.
	_, small := start(t, Options{maxBody: 1 << 10})
	resp, err := http.Post(small.URL+"/v1/completions", "application/json",
		io.MultiReader(strings.NewReader(`{"prompt":"`), strings.NewReader(strings.Repeat("a ", 1<<10)), strings.NewReader(`"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if a := decode(t, resp, 413); a.Error == nil {
		t.Fatalf("chunked oversized body: %+v", a)
	}

	resp, err = http.Get(ts.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET completions: %d", resp.StatusCode)
	}
	resp, err = http.Get(ts.URL + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	a := decode(t, resp, 404)
	if a.Error == nil || resp.Header.Get(HeaderID) == "" {
		t.Fatalf("404 %+v", a)
	}
}

func TestHeadersModelsHealth(t *testing.T) {
	_, ts := start(t, Options{ID: "decode-1", Model: "qwen"})
	resp := post(t, t.Context(), ts.URL+"/v1/chat/completions", chatBody(false, 1, "user", "hi"),
		"x-prefiller-host-port", "10.0.0.7:8000")
	if resp.Header.Get(HeaderPrefiller) != "10.0.0.7:8000" || resp.Header.Get(HeaderID) != "decode-1" {
		t.Fatalf("headers %v", resp.Header)
	}
	resp = post(t, t.Context(), ts.URL+"/v1/chat/completions", chatBody(false, 1, "user", "hi"))
	if _, ok := resp.Header[HeaderPrefiller]; ok {
		t.Fatal("prefiller header without a prefiller in the request")
	}

	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) != 1 || models.Data[0].ID != "qwen" {
		t.Fatalf("models %+v %v", models, err)
	}
	h, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	h.Body.Close()
	if h.StatusCode != 200 || h.Header.Get(HeaderID) != "decode-1" {
		t.Fatalf("health %d %v", h.StatusCode, h.Header)
	}
}

func TestTimingEndpoint(t *testing.T) {
	s, ts := start(t, Options{PrefillPerToken: time.Millisecond})
	resp := post(t, t.Context(), ts.URL+"/sim/timing?decodePerToken=5ms", "")
	var got timingJSON
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got != (timingJSON{"1ms", "5ms"}) {
		t.Fatalf("timing %+v %v", got, err)
	}
	post(t, t.Context(), ts.URL+"/sim/timing?prefillPerToken=2ms", "")
	if p, d := s.Timing(); p != 2*time.Millisecond || d != 5*time.Millisecond {
		t.Fatalf("timing %v %v", p, d)
	}
	for _, q := range []string{"prefillPerToken=fast", "decodePerToken=-1ms"} {
		if resp := post(t, t.Context(), ts.URL+"/sim/timing?"+q, ""); resp.StatusCode != 400 {
			t.Fatalf("%s: %d", q, resp.StatusCode)
		}
	}
	resp, err := http.Get(ts.URL + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.ID == "" {
		t.Fatalf("stats %+v %v", st, err)
	}
}

// Two servers given the same prompt answer the same words: the output is a
// function of the prompt only.
func TestOutputIsDeterministic(t *testing.T) {
	_, ts1 := start(t, Options{})
	_, ts2 := start(t, Options{})
	body := chatBody(false, 8, "user", "tell me something")
	a := decode(t, post(t, t.Context(), ts1.URL+"/v1/chat/completions", body), 200)
	b := decode(t, post(t, t.Context(), ts2.URL+"/v1/chat/completions", body), 200)
	if a.Choices[0].Message.Content != b.Choices[0].Message.Content || *a.Choices[0].FinishReason != "length" {
		t.Fatalf("%q vs %q", a.Choices[0].Message.Content, b.Choices[0].Message.Content)
	}
	c := decode(t, post(t, t.Context(), ts1.URL+"/v1/chat/completions", chatBody(false, 0, "user", "x")), 200)
	if c.Usage.CompletionTokens != DefaultMaxTokens || *c.Choices[0].FinishReason != "stop" {
		t.Fatalf("default max tokens: %+v", c.Usage)
	}
}

func BenchmarkChatCompletion(b *testing.B) {
	s := New(Options{})
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":16}`, words(2000, "t"))
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		w := &discardWriter{h: http.Header{}}
		s.ServeHTTP(w, req)
		if w.code != 200 {
			b.Fatal(w.code)
		}
	}
}

type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = 200
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(code int) { w.code = code }

// With SerialPrefill, two requests admitted together prefill one after the
// other: the later one's first token comes after both prefills (at least
// 300 ms here), not after its own 150 ms alone. (Only the lower bound is
// checked: sleeps never end early, but a busy machine may end them late.)
func TestSerialPrefillQueuesPrefills(t *testing.T) {
	_, ts := start(t, Options{PrefillPerToken: time.Millisecond, SerialPrefill: true})
	took := make(chan time.Duration, 2)
	for i := range 2 {
		go func() {
			begin := time.Now()
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, words(150, fmt.Sprint("p", i)))))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			took <- time.Since(begin)
		}()
	}
	if slowest := max(<-took, <-took); slowest < 300*time.Millisecond {
		t.Errorf("the later of two 150-token prefills finished after %v; one after the other they need 300ms", slowest)
	}
}

// Occupy holds the serial prefill lane as another tenant's prefill would:
// a request sent after it waits for it (lower bound only, as above), and
// the usage counters see nothing of it.
func TestOccupyDelaysPrefillsBehindIt(t *testing.T) {
	s, ts := start(t, Options{PrefillPerToken: time.Millisecond, SerialPrefill: true})
	s.Occupy(300 * time.Millisecond)
	begin := time.Now()
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, words(10, "after"))))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if took := time.Since(begin); took < 300*time.Millisecond {
		t.Errorf("a request sent behind a 300ms hold of the lane answered after %v", took)
	}
	if st := s.Stats(); st.PromptTokens != 10 || st.CachedTokens != 0 {
		t.Errorf("stats %+v: want the request's 10 prompt tokens alone", st)
	}
}

// Requests that arrive together with the same uncached prompt (an agent's
// parallel calls) compute it once: the blocks are cached when the first
// request is scheduled, as vLLM v1 caches full blocks at allocation, and
// under serial prefill the others start after it.
func TestConcurrentSamePromptComputedOnce(t *testing.T) {
	const bt, n = 4, 40
	s, ts := start(t, Options{BlockTokens: bt, PrefillPerToken: 2 * time.Millisecond, SerialPrefill: true})
	body, _ := json.Marshal(map[string]any{"prompt": words(n, "agent"), "max_tokens": 1})
	type result struct {
		a   answer
		err error
	}
	results := make(chan result, 4)
	for range cap(results) {
		go func() {
			var r result
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(string(body)))
			if r.err = err; err == nil {
				r.err = json.NewDecoder(resp.Body).Decode(&r.a)
				resp.Body.Close()
			}
			results <- r
		}()
	}
	var cached []int
	for range cap(results) {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		cached = append(cached, r.a.Usage.PromptTokensDetails.CachedTokens)
	}
	slices.Sort(cached)
	// One computed all 40 tokens; the others the last block only (the
	// last prompt token is always computed).
	if want := []int{0, n - bt, n - bt, n - bt}; !slices.Equal(cached, want) {
		t.Fatalf("cached tokens %v, want %v", cached, want)
	}
	if st := s.Stats(); st.CachedTokens != 3*(n-bt) {
		t.Fatalf("stats %+v", st)
	}
}
