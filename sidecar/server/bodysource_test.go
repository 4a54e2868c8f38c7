package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// postJSON sends body to url and returns the status and the serving backend.
func postJSON(t *testing.T, url string, body map[string]any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Post(url, "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Modelsim-Id")
}

// Each body field OpenAI-SDK clients can set keeps a session on one
// backend through a Body source, whichever replica of a shared store
// receives its turns.
func TestBodySources(t *testing.T) {
	bs := startBackends(t, 3)
	storeA, storeB := sharedStores(t, "redis")
	for _, tc := range []struct {
		path string
		set  func(body map[string]any, key string)
	}{
		{"prompt_cache_key", func(b map[string]any, k string) { b["prompt_cache_key"] = k }},
		{"user", func(b map[string]any, k string) { b["user"] = k }},
		{"safety_identifier", func(b map[string]any, k string) { b["safety_identifier"] = k }},
		{"metadata.session_id", func(b map[string]any, k string) { b["metadata"] = map[string]any{"tag": "x", "session_id": k} }},
	} {
		t.Run(tc.path, func(t *testing.T) {
			sources := fmt.Sprintf(`[{type: Header, name: X-Session-ID}, {type: Body, name: %s}]`, tc.path)
			a := startSidecar(t, configFor(respPool, addrs(bs), sources, storeA))
			b := startSidecar(t, configFor(respPool, addrs(bs), sources, storeB))
			homes := map[string]bool{}
			for k := range 6 {
				key := fmt.Sprintf("%s-key-%d", tc.path, k)
				home := ""
				for turn := range 4 {
					sc := []*sidecar{a, b}[turn%2]
					body := map[string]any{"model": "modelsim", "max_tokens": 2,
						"messages": []map[string]string{{"role": "user", "content": "hello"}}}
					tc.set(body, key)
					status, got := postJSON(t, sc.url(respPool, "/v1/chat/completions"), body)
					if status != 200 || (home != "" && got != home) {
						t.Fatalf("key %s turn %d: status %d on %s, bound to %s", key, turn, status, got, home)
					}
					home = got
				}
				homes[home] = true
			}
			if hits := a.logs.Count(`"source":"Body"`) + b.logs.Count(`"source":"Body"`); hits != 24 {
				t.Fatalf("%d of 24 requests were keyed by the Body source", hits)
			}
			t.Logf("Body:%s: 6 sessions × 4 turns across 2 replicas, each on one backend (%d backends used)", tc.path, len(homes))
		})
	}
}

// A listener serving two pools picks the pool by "model" and the key by
// a Body source from the same scan of the body; strings only, and a
// non-string value is no key.
func TestBodySourceWithModelRouting(t *testing.T) {
	bs := startBackends(t, 4)
	doc := fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: pool-a
    models: [model-a]
    sessionSticky: {sources: [{type: Body, name: user}]}
    backends: {static: [%q, %q]}
  - name: pool-b
    models: [model-b]
    sessionSticky: {sources: [{type: Body, name: user}]}
    backends: {static: [%q, %q]}
`, bs[0].addr(), bs[1].addr(), bs[2].addr(), bs[3].addr())
	sc := startSidecar(t, doc)
	url := sc.url("pool-a", "/v1/chat/completions")
	inPool := map[string][]string{"model-a": {"sim-0", "sim-1"}, "model-b": {"sim-2", "sim-3"}}
	for _, model := range []string{"model-a", "model-b"} {
		home := ""
		for turn := range 4 {
			status, got := postJSON(t, url, map[string]any{"model": model, "user": "alice", "max_tokens": 1,
				"messages": []map[string]string{{"role": "user", "content": "hi"}}})
			if status != 200 || (got != inPool[model][0] && got != inPool[model][1]) || (home != "" && got != home) {
				t.Fatalf("%s turn %d: %d on %s (home %s)", model, turn, status, got, home)
			}
			home = got
		}
	}
	status, _ := postJSON(t, url, map[string]any{"model": "model-a", "user": 42,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}})
	if status != 200 || sc.logs.Count(`"decision":"none"`) != 1 {
		t.Fatalf("a number as user: status %d, %d unkeyed requests", status, sc.logs.Count(`"decision":"none"`))
	}
	if status, _ := postJSON(t, url, map[string]any{"model": "model-c"}); status != http.StatusNotFound {
		t.Fatalf("unknown model: %d", status)
	}
}
