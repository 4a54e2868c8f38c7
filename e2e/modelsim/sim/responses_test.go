package sim

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

type respJSON struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Status string `json:"status"`
	Output []struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage struct {
		InputTokens  int `json:"input_tokens"`
		InputDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
	Error struct {
		Message string `json:"message"`
	} `json:"error"`
}

func decodeResp(t *testing.T, resp *http.Response, status int) respJSON {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	var out respJSON
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return out
}

// sseEvents reads a Responses API stream into its events' types and data.
func sseEvents(t *testing.T, resp *http.Response) (types []string, data []map[string]any) {
	t.Helper()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, v)
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			var m map[string]any
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				t.Fatalf("event data %q: %v", v, err)
			}
			data = append(data, m)
		}
	}
	return types, data
}

// A chain of responses: each turn continues the stored conversation (its
// prompt starts with the last turn's, so it hits the prefix cache), an
// unknown previous_response_id is vLLM's 404, and the stored responses
// can be read, listed and deleted by id.
func TestResponsesChain(t *testing.T) {
	_, ts := start(t, Options{ID: "sim-a", BlockTokens: 4})
	ctx := t.Context()
	words := strings.Repeat("tell me about prefix caches please ", 4)
	r1 := decodeResp(t, post(t, ctx, ts.URL+"/v1/responses", map[string]any{"model": "m", "input": words, "max_output_tokens": 3}), 200)
	if !strings.HasPrefix(r1.ID, "resp_") || r1.Object != "response" || r1.Status != "completed" || r1.Usage.OutputTokens != 3 {
		t.Fatalf("turn 1: %+v", r1)
	}
	r2 := decodeResp(t, post(t, ctx, ts.URL+"/v1/responses", map[string]any{"model": "m", "previous_response_id": r1.ID,
		"input": []map[string]any{{"role": "user", "content": []map[string]string{{"type": "input_text", "text": "and then?"}}}}}), 200)
	if r2.Usage.InputTokens <= r1.Usage.InputTokens+3 || r2.Usage.InputDetails.CachedTokens < r1.Usage.InputTokens/4*4-4 {
		t.Fatalf("turn 2 did not continue turn 1: %+v after %+v", r2.Usage, r1.Usage)
	}
	missing := decodeResp(t, post(t, ctx, ts.URL+"/v1/responses", map[string]any{"model": "m", "previous_response_id": "resp_nope", "input": "x"}), 404)
	if missing.Error.Message != "Response with id 'resp_nope' not found." {
		t.Fatalf("unknown previous_response_id: %+v", missing)
	}

	get := func(method, path string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, method, ts.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if got := decodeResp(t, get("GET", "/v1/responses/"+r2.ID), 200); got.ID != r2.ID || got.Output[0].Content[0].Text == "" {
		t.Fatalf("GET: %+v", got)
	}
	var items struct {
		Data []struct {
			Role    string                  `json:"role"`
			Content []struct{ Text string } `json:"content"`
		} `json:"data"`
	}
	json.NewDecoder(get("GET", "/v1/responses/"+r2.ID+"/input_items").Body).Decode(&items)
	if len(items.Data) != 1 || items.Data[0].Content[0].Text != "and then?" {
		t.Fatalf("input_items: %+v", items)
	}
	decodeResp(t, get("POST", "/v1/responses/"+r2.ID+"/cancel"), 400) // finished: not cancellable
	decodeResp(t, get("DELETE", "/v1/responses/"+r2.ID), 200)
	decodeResp(t, get("GET", "/v1/responses/"+r2.ID), 404)

	// store: false answers but keeps nothing.
	r3 := decodeResp(t, post(t, ctx, ts.URL+"/v1/responses", map[string]any{"model": "m", "input": "x", "store": false}), 200)
	decodeResp(t, get("GET", "/v1/responses/"+r3.ID), 404)
}

// A streamed response opens with response.created (carrying the id),
// sends one delta per token and ends with response.completed; while it
// runs it can be cancelled by id, which ends the stream.
func TestResponsesStreamAndCancel(t *testing.T) {
	s, ts := start(t, Options{ID: "sim-a"})
	ctx := t.Context()
	types, data := sseEvents(t, post(t, ctx, ts.URL+"/v1/responses", map[string]any{"model": "m", "input": "hi", "stream": true, "max_output_tokens": 4}))
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
		"response.output_text.delta", "response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v", types)
	}
	id := data[0]["response"].(map[string]any)["id"].(string)
	if data[len(data)-1]["response"].(map[string]any)["status"] != "completed" || data[0]["type"] != "response.created" {
		t.Fatalf("first/last events %v / %v", data[0], data[len(data)-1])
	}
	if got := decodeResp(t, post(t, ctx, ts.URL+"/v1/responses", map[string]any{"model": "m", "input": "more", "previous_response_id": id}), 200); got.Status != "completed" {
		t.Fatalf("continuing a streamed response: %+v", got)
	}

	s.SetTiming(0, 50*time.Millisecond)
	resp := post(t, ctx, ts.URL+"/v1/responses", map[string]any{"model": "m", "input": "long", "stream": true, "max_output_tokens": 1000})
	br := bufio.NewReader(resp.Body)
	br.ReadString('\n') // event: response.created
	line, _ := br.ReadString('\n')
	var created struct{ Response respJSON }
	json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &created)
	cancelled := decodeResp(t, post(t, ctx, ts.URL+"/v1/responses/"+created.Response.ID+"/cancel", ""), 200)
	if cancelled.Status != "cancelled" {
		t.Fatalf("cancel: %+v", cancelled)
	}
	rest, _ := io.ReadAll(br)
	if strings.Contains(string(rest), "response.completed") {
		t.Fatal("a cancelled stream completed")
	}
}
