package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// startQueueingBackends starts modelsim backends that run one request at
// a time, so extra requests wait (vllm:num_requests_waiting > 0).
func startQueueingBackends(t *testing.T, n int) []*backend {
	t.Helper()
	bs := make([]*backend, n)
	for i := range bs {
		s := sim.New(sim.Options{ID: fmt.Sprintf("sim-%d", i), MaxRunning: 1})
		bs[i] = &backend{sim: s, srv: httptest.NewServer(s)}
		t.Cleanup(bs[i].srv.Close)
	}
	return bs
}

func affinityConfig(bs []*backend, affinity, extra string) string {
	return affinityConfigAt(addrs(bs), affinity, extra)
}

// affinityConfigAt is affinityConfig for backends at static addresses.
func affinityConfigAt(static []string, affinity, extra string) string {
	a, _ := json.Marshal(static)
	return fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: default/m
    sessionSticky:
      sources: [{type: Header, name: X-Session-ID}]
    backends:
      static: %s
    affinity: %s
    loadMetrics: {interval: 50ms, timeout: 50ms}
%s`, a, affinity, extra)
}

// jam makes b slow (an hour per output token) and queues n requests on it
// directly, as other replicas' sessions would; the returned function
// makes b fast again and waits for the jam to drain.
func jam(t *testing.T, b *backend, n int) (release func()) {
	t.Helper()
	b.sim.SetTiming(0, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", b.srv.URL+"/v1/completions", strings.NewReader(`{"model":"modelsim","prompt":"other replica","max_tokens":2}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	testkit.Eventually(t, 10*time.Second, "jam queued", func() bool { return b.sim.Stats().Waiting == n-1 })
	released := false
	release = func() {
		if !released {
			released = true
			b.sim.SetTiming(0, 0)
			cancel()
			wg.Wait()
		}
	}
	t.Cleanup(release)
	return release
}

// scraped waits until the sidecar's scrape shows b's queue at waiting.
func scraped(t *testing.T, sc *sidecar, b *backend, waiting int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("a scrape of %s with %d waiting", b.addr(), waiting), func() bool {
		v, err := testkit.FindMetric(sc.srv.Registry(), "tether_backend_waiting_requests", "backend", b.addr(), "pool", "default/m")
		return err == nil && v == float64(waiting)
	})
}

// queuedTurn sends turn of session s1 and waits until it is queued on b
// (b's queue at waiting), then releases b's jam and returns the answer. A
// turn that went elsewhere never queues on b, and the wait fails.
func queuedTurn(t *testing.T, url string, turn int, b *backend, waiting int, release func()) result {
	t.Helper()
	done := make(chan result, 1)
	go func() { done <- chat(t, url, conversation(turn), session("s1")) }()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("turn %d queued on %s", turn, b.sim.ID()), func() bool { return b.sim.Stats().Waiting == waiting })
	release()
	return <-done
}

func byID(bs []*backend, id string) *backend {
	for _, b := range bs {
		if b.sim.ID() == id {
			return b
		}
	}
	return nil
}

func session(id string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("X-Session-ID", id) }
}

// TestHardAffinityStaysOnQueuedBackend: with hard affinity the next turn
// goes to its backend however long that backend's queue is.
func TestHardAffinityStaysOnQueuedBackend(t *testing.T) {
	bs := startQueueingBackends(t, 2)
	sc := startSidecar(t, affinityConfig(bs, "{mode: hard}", ""))
	first := chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), session("s1"))
	pinned := byID(bs, first.backend)
	release := jam(t, pinned, 12)
	scraped(t, sc, pinned, 11)

	if r := queuedTurn(t, sc.url("default/m", "/v1/chat/completions"), 2, pinned, 12, release); r.status != 200 || r.backend != first.backend {
		t.Fatalf("turn 2 = %d on %s, want 200 on %s", r.status, r.backend, first.backend)
	}
	if _, err := testkit.FindMetric(sc.srv.Registry(), "tether_affinity_broken_total"); !errors.Is(err, testkit.ErrNotFound) {
		t.Fatalf("hard affinity broke a pin: tether_affinity_broken_total %v", err)
	}
}

// TestSoftAffinityMovesOnceAndStays: with soft affinity the turn after
// the pinned backend's queue grew past maxWaiting (and loadMargin above
// the other's) goes to the other backend, counted broken, and the
// following turns stay there (hits on its now warm cache).
func TestSoftAffinityMovesOnceAndStays(t *testing.T) {
	bs := startQueueingBackends(t, 2)
	sc := startSidecar(t, affinityConfig(bs, "{mode: soft, maxWaiting: 8, loadMargin: 4, cooldown: 300ms}", ""))
	url := sc.url("default/m", "/v1/chat/completions")
	first := chat(t, url, conversation(1), session("s1"))
	pinned := byID(bs, first.backend)
	jam(t, pinned, 12)
	scraped(t, sc, pinned, 11)

	moved := chat(t, url, conversation(2), session("s1"))
	if moved.status != 200 || moved.backend == first.backend {
		t.Fatalf("turn 2 = %d on %s, want it moved off %s", moved.status, moved.backend, first.backend)
	}
	for turn := 3; turn <= 6; turn++ {
		r := chat(t, url, conversation(turn), session("s1"))
		if r.status != 200 || r.backend != moved.backend || r.cached == 0 {
			t.Fatalf("turn %d = %d on %s (cached %d), want a cache hit on %s", turn, r.status, r.backend, r.cached, moved.backend)
		}
	}
	reg := sc.srv.Registry()
	for _, want := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"tether_affinity_broken_total", []string{"pool", "default/m", "reason", "overload"}, 1},
		{"tether_session_lookups_total", []string{"pool", "default/m", "result", "broken"}, 1},
		{"tether_session_lookups_total", []string{"pool", "default/m", "result", "hit"}, 4},
	} {
		if v := testkit.Metric(t, reg, want.name, want.labels...); v != want.value {
			t.Errorf("%s%q = %v, want %v", want.name, want.labels, v, want.value)
		}
	}
	var broken int
	for _, line := range strings.Split(sc.logs.String(), "\n") {
		if strings.Contains(line, `"decision":"broken"`) {
			broken++
			if !strings.Contains(line, `"selected_pod":"`+moved.backend) && !strings.Contains(line, byID(bs, moved.backend).addr()) {
				t.Errorf("broken access-log line names another pod: %s", line)
			}
		}
	}
	if broken != 1 {
		t.Fatalf("%d access-log lines with decision broken, want 1", broken)
	}
}

// TestSoftAffinityMovedPinCoolsDown: a pin soft affinity moved keeps its
// new backend for the cool-down, even once that backend is overloaded in
// turn and the old one idle: the session is not moved again within it.
func TestSoftAffinityMovedPinCoolsDown(t *testing.T) {
	bs := startQueueingBackends(t, 2)
	sc := startSidecar(t, affinityConfig(bs, "{mode: soft, maxWaiting: 8, loadMargin: 4, cooldown: 1h}", ""))
	url := sc.url("default/m", "/v1/chat/completions")
	first := chat(t, url, conversation(1), session("s1"))
	pinned := byID(bs, first.backend)
	releasePinned := jam(t, pinned, 12)
	scraped(t, sc, pinned, 11)
	moved := chat(t, url, conversation(2), session("s1"))
	if moved.status != 200 || moved.backend == first.backend {
		t.Fatalf("turn 2 = %d on %s, want it moved off %s", moved.status, moved.backend, first.backend)
	}
	releasePinned()
	scraped(t, sc, pinned, 0)
	target := byID(bs, moved.backend)
	releaseTarget := jam(t, target, 12)
	scraped(t, sc, target, 11)

	if r := queuedTurn(t, url, 3, target, 12, releaseTarget); r.status != 200 || r.backend != moved.backend {
		t.Fatalf("turn 3 = %d on %s, want 200 on %s (within the cool-down of the move)", r.status, r.backend, moved.backend)
	}
	if v := testkit.Metric(t, sc.srv.Registry(), "tether_affinity_broken_total", "pool", "default/m", "reason", "overload"); v != 1 {
		t.Fatalf("%v pins broken, want 1", v)
	}
}

// TestSessionTokenRoundTrip: the response to a request with a session key
// carries a signed token of the backend (a keyless one gets none); a
// request carrying it goes there with no session key and no shared store,
// and a forged token is ignored.
func TestSessionTokenRoundTrip(t *testing.T) {
	bs := startBackends(t, 3)
	key := filepath.Join(t.TempDir(), "key")
	os.WriteFile(key, []byte(strings.Repeat("k", 32)), 0o600)
	a, _ := json.Marshal(addrs(bs))
	sc := startSidecar(t, fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
pools:
  - name: default/m
    sessionSticky:
      sources: [{type: Token, name: x-session-token}, {type: Header, name: X-Session-ID}]
    sessionToken: {keyFile: %s}
    backends:
      static: %s
`, key, a))
	url := sc.url("default/m", "/v1/chat/completions")
	body := `{"model":"modelsim","max_tokens":2,"messages":` + conversation(1) + `}`
	send := func(tok string, session ...string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("X-Session-Token", tok)
		}
		for _, s := range session {
			req.Header.Set("X-Session-ID", s)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp, resp.Header.Get("X-Modelsim-Id")
	}
	if resp, _ := send(""); resp.Header.Get("X-Session-Token") != "" {
		t.Fatal("a request without a session key got a token")
	}
	resp, first := send("", "conversation-1")
	tok := resp.Header.Get("X-Session-Token")
	if tok == "" || !strings.Contains(tok, ".") {
		t.Fatalf("no signed token in the response: %q", tok)
	}
	for i := 0; i < 10; i++ {
		if _, got := send(tok); got != first {
			t.Fatalf("request %d with the token went to %s, want %s", i, got, first)
		}
	}
	// A forged token (llm-d style, unsigned) naming another backend is
	// ignored: requests are balanced, so over 30 some land elsewhere.
	var other string
	for _, b := range bs {
		if b.sim.ID() != first {
			other = b.addr()
		}
	}
	forged := base64Std(other)
	seen := map[string]bool{}
	for i := 0; i < 30; i++ {
		_, got := send(forged)
		seen[got] = true
	}
	if len(seen) < 2 {
		t.Fatalf("forged token pinned every request to %v", seen)
	}
	if v := testkit.Metric(t, sc.srv.Registry(), "tether_session_lookups_total", "pool", "default/m", "result", "hit"); v != 10 {
		t.Fatalf("%v token hits counted, want 10", v)
	}
}

func base64Std(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
