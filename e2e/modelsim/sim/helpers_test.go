package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start serves a new Server on loopback for the test's duration.
func start(t *testing.T, o Options) (*Server, *httptest.Server) {
	t.Helper()
	s := New(o)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// post sends a JSON body and returns the response (closed at cleanup).
func post(t *testing.T, ctx context.Context, url string, body any, hdr ...string) *http.Response {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// answer is the part of a non-streamed response the tests read.
type answer struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Text    string `json:"text"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta        map[string]string `json:"delta"`
		FinishReason *string           `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

func decode(t *testing.T, resp *http.Response, want int) answer {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != want {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, want, b)
	}
	var a answer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return a
}

// scrape reads /metrics once, as a Prometheus scraper would.
func scrape(t *testing.T, url string) prometheus.Gatherer { return testkit.Scrape(t, url+"/metrics") }

// value returns the single sample of a family, checking its model_name label.
func value(t *testing.T, g prometheus.Gatherer, name, model string) float64 {
	t.Helper()
	testkit.Metric(t, g, name)                             // the family has one sample ...
	return testkit.Metric(t, g, name, "model_name", model) // ... and it is model's
}

func chatBody(stream bool, maxTokens int, msgs ...string) map[string]any {
	var ms []map[string]any
	for i := 0; i+1 < len(msgs); i += 2 {
		ms = append(ms, map[string]any{"role": msgs[i], "content": msgs[i+1]})
	}
	b := map[string]any{"model": "m", "messages": ms, "stream": stream}
	if maxTokens > 0 {
		b["max_tokens"] = maxTokens
	}
	return b
}

func words(n int, prefix string) string {
	w := make([]string, n)
	for i := range w {
		w[i] = prefix + strings.Repeat("x", i%3) + string(rune('a'+i%26))
	}
	return strings.Join(w, " ")
}
