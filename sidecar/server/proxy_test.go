package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestStreamingChunksArriveBeforeStreamEnds: the backend sends one SSE event,
// then blocks until the test has read that event through the sidecar. A
// proxy that buffered the stream would never deliver it, and the test
// would time out instead of passing.
func TestStreamingChunksArriveBeforeStreamEnds(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	sc := startSidecar(t, configFor("default/m", []string{heldStream(t, release)}, `[{type: Header, name: X-Session-ID}]`, ""))

	resp, _ := postStream(t, sc)
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatalf("first event never arrived while the stream was open: %v", err)
	}
	if !strings.Contains(line, "first") {
		t.Fatalf("first line = %q", line)
	}
}

// TestClientCancellationReachesBackend: a client that goes away mid-request
// cancels the backend's request context.
func TestClientCancellationReachesBackend(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body as a model server does: Go's server notices a
		// closed connection only once the body is consumed.
		io.Copy(io.Discard, r.Body)
		close(started)
		<-r.Context().Done()
		close(cancelled)
	}))
	defer backend.Close()
	sc := startSidecar(t, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", sc.url("default/m", "/v1/chat/completions"), strings.NewReader(`{}`))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	testkit.Eventually(t, 20*time.Second, "request reached the backend", testkit.Closed(started))
	cancel()
	testkit.Eventually(t, 20*time.Second, "backend saw the cancellation", testkit.Closed(cancelled))
	<-errc
}

// echoBackend answers with what it received, for header tests.
func echoBackend(t *testing.T, hits *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		w.Header().Set("X-Got-Host", r.Host)
		w.Header().Set("X-Got-Prefiller", r.Header.Get("x-prefiller-host-port"))
		w.Header().Set("X-Got-Connection-Token", r.Header.Get("X-Hop"))
		w.Header().Set("X-Got-Forwarded-For", r.Header.Get("X-Forwarded-For"))
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}))
	t.Cleanup(s.Close)
	return s
}

func TestHeadersAndLimits(t *testing.T) {
	var hits atomic.Int64
	backend := echoBackend(t, &hits)
	baddr := strings.TrimPrefix(backend.URL, "http://")
	sc := startSidecar(t, configFor("default/m", []string{baddr}, `[{type: Header, name: X-Session-ID}]`,
		"proxy: {maxRequestBodyBytes: 1024, maxRequestHeaderBytes: 4096}"))
	url := sc.url("default/m", "/v1/completions")

	t.Run("client cannot aim the request elsewhere", func(t *testing.T) {
		req, _ := http.NewRequest("POST", url, strings.NewReader("{}"))
		req.Host = "evil.example:80"
		req.Header.Set("x-prefiller-host-port", "10.0.0.1:8000")
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "hop-by-hop")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if got := resp.Header.Get("X-Got-Host"); got != baddr {
			t.Fatalf("backend saw Host %q, want its own address %q", got, baddr)
		}
		if got := resp.Header.Get("X-Got-Prefiller"); got != "" {
			t.Fatalf("client's prefill header reached the backend: %q", got)
		}
		if got := resp.Header.Get("X-Got-Connection-Token"); got != "" {
			t.Fatalf("hop-by-hop header named in Connection was forwarded: %q", got)
		}
		if got := resp.Header.Get("X-Got-Forwarded-For"); !strings.HasPrefix(got, "127.0.0.1") {
			t.Fatalf("X-Forwarded-For = %q", got)
		}
	})
	t.Run("oversized headers get 431", func(t *testing.T) {
		before := hits.Load()
		req, _ := http.NewRequest("POST", url, strings.NewReader("{}"))
		req.Header.Set("X-Big", strings.Repeat("a", 16<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d, want 431", resp.StatusCode)
		}
		if hits.Load() != before {
			t.Fatal("oversized request reached the backend")
		}
	})
	t.Run("oversized body gets 413", func(t *testing.T) {
		before := hits.Load()
		resp, err := http.Post(url, "application/json", strings.NewReader(strings.Repeat("x", 2048)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413", resp.StatusCode)
		}
		if hits.Load() != before {
			t.Fatal("oversized body reached the backend")
		}
	})
}

func TestNoBackendAnswers503(t *testing.T) {
	// A port nothing listens on: the only backend refuses, is marked
	// failed, and the retry finds no other backend.
	ln := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(ln.URL, "http://")
	ln.Close()
	sc := startSidecar(t, configFor("default/m", []string{addr}, `[{type: Header, name: X-Session-ID}]`, ""))
	resp, err := http.Post(sc.url("default/m", "/v1/completions"), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("first request: %d, want 502 (the only backend refused)", resp.StatusCode)
	}
	resp, _ = http.Post(sc.url("default/m", "/v1/completions"), "application/json", strings.NewReader("{}"))
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("while the only backend is failed: %d, want 503 with Retry-After", resp.StatusCode)
	}
}

// TestSharedListenerRoutesByModel: two pools on one listener are told
// apart by the body's "model".
func TestSharedListenerRoutesByModel(t *testing.T) {
	a := startBackends(t, 1)
	b := startBackends(t, 1)
	doc := fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: ns/a
    models: [model-a]
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: [%q]}
  - name: ns/b
    models: [model-b, model-b-large]
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: [%q]}
`, a[0].addr(), b[0].addr())
	sc := startSidecar(t, doc)
	for model, want := range map[string]string{"model-a": a[0].sim.ID(), "model-b": b[0].sim.ID(), "model-b-large": b[0].sim.ID()} {
		resp, err := http.Post(sc.url("ns/a", "/v1/completions"), "application/json", strings.NewReader(`{"model":"`+model+`","prompt":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Modelsim-Id"); resp.StatusCode != 200 || got != want {
			t.Fatalf("model %s: %d from %q, want %q", model, resp.StatusCode, got, want)
		}
	}
	resp, _ := http.Post(sc.url("ns/a", "/v1/completions"), "application/json", strings.NewReader(`{"model":"other"}`))
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown model: %d, want 404", resp.StatusCode)
	}
}
