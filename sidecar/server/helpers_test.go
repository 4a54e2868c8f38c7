package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/logjson"
	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// backend is a modelsim server on a real loopback port.
type backend struct {
	sim *sim.Server
	srv *httptest.Server
}

func (b *backend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

func startBackends(t *testing.T, n int) []*backend {
	t.Helper()
	bs := make([]*backend, n)
	for i := range bs {
		s := sim.New(sim.Options{ID: fmt.Sprintf("sim-%d", i)})
		bs[i] = &backend{sim: s, srv: httptest.NewServer(s)}
		t.Cleanup(bs[i].srv.Close)
	}
	return bs
}

func addrs(bs []*backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.addr()
	}
	return out
}

// heldStream starts a backend that sends one SSE event, holds the stream
// open until release is closed (or the request is cancelled), then sends
// the rest; it returns the backend's address.
func heldStream(t *testing.T, release <-chan struct{}) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"token\":\"first\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: {\"token\":\"second\"}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// sidecar is a running server.Server on loopback ports.
type sidecar struct {
	srv  *server.Server
	logs *testkit.SyncBuffer
	// stop ends Run (as SIGTERM does), waits for it and returns its
	// error; the test's cleanup calls it too.
	stop func() error
}

// startSidecar parses doc (YAML; listen addresses may use port 0), starts
// the server with deps (the zero Deps but for what the options set) and
// waits until it is ready.
func startSidecar(t testing.TB, doc string, opts ...func(*server.Deps)) *sidecar {
	t.Helper()
	var deps server.Deps
	for _, o := range opts {
		o(&deps)
	}
	return startSidecarWith(t, doc, deps)
}

// startSidecarWith is startSidecar with Kubernetes clients (fakes) and
// the pod's identity.
func startSidecarWith(t testing.TB, doc string, deps server.Deps) *sidecar {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logs := &testkit.SyncBuffer{}
	hopts := &slog.HandlerOptions{}
	if deps.LogLevel != nil {
		hopts.Level = deps.LogLevel
	}
	log := slog.New(logjson.New(logs, hopts)) // as main: the access log's fast path
	srv, err := server.New(context.Background(), cfg, log, deps)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	var runErr error
	sc := &sidecar{srv: srv, logs: logs, stop: func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}}
	t.Cleanup(func() {
		if err := sc.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.Eventually(t, 10*time.Second, "sidecar ready", func() bool {
		resp, err := http.Get(sc.admin("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return sc
}

func (s *sidecar) url(pool, path string) string { return "http://" + s.srv.PoolAddr(pool) + path }
func (s *sidecar) admin(path string) string     { return "http://" + s.srv.AdminAddr() + path }

// chat sends one chat completion and returns the status, the serving
// backend's id and the cached prompt tokens it reported.
type result struct {
	status  int
	backend string
	cached  int
	body    string
}

func chat(t *testing.T, url string, msgs string, set func(*http.Request)) result {
	t.Helper()
	body := `{"model":"modelsim","max_tokens":4,"messages":` + msgs + `}`
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if set != nil {
		set(req)
	}
	// A turn that went to a jammed backend would wait for an hour: fail
	// fast instead.
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, backend: resp.Header.Get("X-Modelsim-Id"), body: string(b)}
	var out struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	json.Unmarshal(b, &out)
	r.cached = out.Usage.Details.Cached
	return r
}

// conversation is a growing multi-turn chat with enough words per turn to
// fill prefix-cache blocks.
func conversation(turns int) string {
	var msgs []string
	for i := 0; i < turns; i++ {
		words := strings.Repeat(fmt.Sprintf("turn%d word ", i), 20)
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, words))
		if i < turns-1 {
			msgs = append(msgs, `{"role":"assistant","content":"ok ok ok ok"}`)
		}
	}
	return "[" + strings.Join(msgs, ",") + "]"
}

func configFor(pool string, backends []string, sources string, extra string) string {
	bs, _ := json.Marshal(backends)
	return fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
%s
pools:
  - name: %s
    sessionSticky:
      sessionAffinitySeconds: 300
      sources: %s
    backends:
      static: %s
`, extra, pool, sources, bs)
}
