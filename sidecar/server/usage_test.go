package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// streamChat sends a streamed chat completion that asks for the usage
// chunk, reads the stream to its end and returns the usage it carried.
func streamChat(t *testing.T, url, session, msgs string) (prompt, cached int64) {
	t.Helper()
	body := `{"model":"modelsim","max_tokens":4,"stream":true,"stream_options":{"include_usage":true},"messages":` + msgs + `}`
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
	found := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Usage *struct {
				Prompt  int64 `json:"prompt_tokens"`
				Details struct {
					Cached int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if ev.Usage != nil {
			prompt, cached, found = ev.Usage.Prompt, ev.Usage.Details.Cached, true
		}
	}
	if !found {
		t.Fatal("the stream carried no usage chunk")
	}
	return prompt, cached
}

// TestUsageCountedByDecision: the prompt and cached tokens each backend
// reports, in JSON bodies and in a stream's usage chunk, reach the access
// log line of their request and the token counters under its decision,
// and the counters agree exactly with the backends' own counts.
func TestUsageCountedByDecision(t *testing.T) {
	bs := startBackends(t, 2)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`, ""))
	url := sc.url("default/m", "/v1/chat/completions")
	type turn struct{ prompt, cached int64 }
	var sent []turn
	for _, session := range []string{"a", "b"} {
		for n := 1; n <= 3; n++ {
			if n == 2 {
				p, c := streamChat(t, url, session, conversation(n))
				sent = append(sent, turn{p, c})
				continue
			}
			r := chat(t, url, conversation(n), func(r *http.Request) { r.Header.Set("X-Session-ID", session) })
			var out struct {
				Usage struct {
					Prompt int64 `json:"prompt_tokens"`
				} `json:"usage"`
			}
			json.Unmarshal([]byte(r.body), &out)
			sent = append(sent, turn{out.Usage.Prompt, int64(r.cached)})
		}
	}
	var logs []accessLog
	testkit.Eventually(t, 5*time.Second, "six access-log lines", func() bool { logs = sc.accessLogs(t); return len(logs) == 6 })
	byDecision := map[string]turn{}
	for i, l := range logs {
		if l.Prompt == nil || l.Cached == nil {
			t.Fatalf("line %d has no prompt_tokens/cached_tokens: %+v", i, l)
		}
		if got := (turn{*l.Prompt, *l.Cached}); got != sent[i] {
			t.Fatalf("line %d logs %+v, the response reported %+v", i, got, sent[i])
		}
		s := byDecision[l.Decision]
		byDecision[l.Decision] = turn{s.prompt + *l.Prompt, s.cached + *l.Cached}
	}
	if len(byDecision) != 2 || byDecision["miss"].prompt == 0 || byDecision["hit"].cached == 0 {
		t.Fatalf("by decision: %+v (want misses, and hits that found their cache)", byDecision)
	}
	var backendPrompt, backendCached int64
	for _, b := range bs {
		st := b.sim.Stats()
		backendPrompt += st.PromptTokens
		backendCached += st.CachedTokens
	}
	var prompt, cached float64
	for d, want := range byDecision {
		p := sc.metric(t, "tether_prompt_tokens_total", "pool", "default/m", "decision", d)
		c := sc.metric(t, "tether_cached_prompt_tokens_total", "pool", "default/m", "decision", d)
		if p != float64(want.prompt) || c != float64(want.cached) {
			t.Errorf("decision %s: counters %v/%v, logs %d/%d", d, p, c, want.prompt, want.cached)
		}
		prompt, cached = prompt+p, cached+c
	}
	if prompt != float64(backendPrompt) || cached != float64(backendCached) {
		t.Fatalf("sidecar counted %v prompt / %v cached tokens, the backends %d / %d", prompt, cached, backendPrompt, backendCached)
	}
	// Turns after the first (hits) are in the hit-ratio histogram.
	if n := sc.metric(t, "tether_turn_cache_hit_ratio", "pool", "default/m"); n != 4 {
		t.Fatalf("hit-ratio histogram counted %v turns, want 4", n)
	}
}

// TestUsageAbsentIsAbsent: a response without usage (a plain backend)
// logs no token fields and counts nothing.
func TestUsageAbsentIsAbsent(t *testing.T) {
	plain := newPlainBackend(t)
	sc := startSidecar(t, configFor("default/m", []string{plain}, `[{type: Header, name: X-Session-ID}]`, ""))
	chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), nil)
	var logs []accessLog
	testkit.Eventually(t, 5*time.Second, "an access-log line", func() bool { logs = sc.accessLogs(t); return len(logs) == 1 })
	if logs[0].Prompt != nil || logs[0].Cached != nil {
		t.Fatalf("token fields without usage: %+v", logs[0])
	}
	if n := sc.metric(t, "tether_prompt_tokens_total", "pool", "default/m", "decision", "none"); n != 0 {
		t.Fatalf("counted %v prompt tokens", n)
	}
}

// newPlainBackend answers every request with a JSON body without usage.
func newPlainBackend(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","choices":[{"message":{"content":"usage"}}]}`))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}
