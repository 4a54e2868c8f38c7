package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// accessLog is one access-log line.
type accessLog struct {
	Msg         string  `json:"msg"`
	RequestID   string  `json:"request_id"`
	Traceparent string  `json:"traceparent"`
	Pool        string  `json:"pool"`
	KeyHash     string  `json:"key_hash"`
	Decision    string  `json:"decision"`
	Source      string  `json:"source"`
	SelectedPod string  `json:"selected_pod"`
	Path        string  `json:"path"`
	Status      int     `json:"status"`
	Outcome     string  `json:"outcome"`
	Bytes       int64   `json:"bytes"`
	Retried     bool    `json:"retried"`
	RetryReason string  `json:"retry_reason"`
	FailedPod   string  `json:"failed_pod"`
	Pinned      bool    `json:"pinned"`
	Error       string  `json:"error"`
	UpstreamMS  float64 `json:"upstream_header_ms"`
	// Prompt and Cached are nil when the line has no such field.
	Prompt *int64 `json:"prompt_tokens"`
	Cached *int64 `json:"cached_tokens"`
}

// accessLogs are the sidecar's access-log lines so far.
func (s *sidecar) accessLogs(t *testing.T) []accessLog {
	t.Helper()
	var out []accessLog
	for _, l := range s.logs.Lines() {
		var a accessLog
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if a.Msg == "request" {
			out = append(out, a)
		}
	}
	return out
}

func (s *sidecar) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, err := testkit.FindMetric(s.srv.Registry(), name, labels...)
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Fatal(err)
	}
	return v
}

// rawBackend is a backend on a bare TCP listener that reads each request
// and then, unless answer says to respond to the n-th request of its
// connection (n from 0), closes the connection without a response byte.
func rawBackend(t *testing.T, answer func(n int) bool) string {
	return tcpBackend(t, func(n int, _ received) bool { return answer(n) })
}

// TestRetryOnReusedConnectionClosed: the backend closes a keep-alive
// connection as the next request arrives on it (it went away, or closed
// the idle connection that moment). Nothing reached the client, so the
// turn is retried once on another backend, the session rebinds there, and
// the client never sees the failure.
func TestRetryOnReusedConnectionClosed(t *testing.T) {
	raw := rawBackend(t, func(n int) bool { return n == 0 })
	bs := startBackends(t, 1)
	sc := startSidecar(t, configFor("default/m", []string{raw, bs[0].addr()}, `[{type: Header, name: X-Session-ID}]`, ""))
	url := sc.url("default/m", "/v1/chat/completions")
	var key string
	for i := 0; key == ""; i++ {
		if i == 50 {
			t.Fatal("no session of 50 was placed on the raw backend")
		}
		k := fmt.Sprint("reuse-", i)
		if r := chat(t, url, conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", k) }); r.backend == "raw" {
			key = k
		}
	}
	set := func(r *http.Request) { r.Header.Set("X-Session-ID", key) }
	second := chat(t, url, conversation(2), set)
	if second.status != 200 || second.backend != bs[0].sim.ID() {
		t.Fatalf("turn 2: %d from %q, want 200 from %s after a retry", second.status, second.backend, bs[0].sim.ID())
	}
	logs := sc.accessLogs(t)
	last := logs[len(logs)-1]
	if !last.Retried || last.RetryReason != "empty_response" || last.FailedPod != raw || last.Decision != "rebind" || last.Outcome != "completed" {
		t.Fatalf("access log of the retried turn: %+v", last)
	}
	if third := chat(t, url, conversation(3), set); third.status != 200 || third.backend != bs[0].sim.ID() {
		t.Fatalf("turn 3: %d from %q, want the new binding", third.status, third.backend)
	}
	for _, m := range []struct {
		name, label string
	}{{"tether_upstream_retries_total", "reason"}, {"tether_session_rebinds_total", "reason"}} {
		if got := sc.metric(t, m.name, m.label, "empty_response"); got != 1 {
			t.Errorf("%s{reason=empty_response} = %v, want 1", m.name, got)
		}
	}
	if got := sc.metric(t, "tether_backend_failures_total", "kind", "empty_response"); got != 1 {
		t.Errorf("failures{kind=empty_response} = %v", got)
	}
}

// TestFailingBackendIsEjected: a backend that fails every request in one
// of the ways backends fail fails at most consecutiveFailures requests
// (one that drops them before any response byte, or never answers, fails
// none: each is retried elsewhere, unless retryOnTimeout is off); then it
// is ejected, and every later turn of every session, the ones that were
// bound to it included, succeeds elsewhere.
func TestFailingBackendIsEjected(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	cases := []struct {
		name    string
		backend func(t *testing.T) string
		status  int
		outcome string
		kind    string
		// retried: the failure came before any response byte, so the
		// client got the answer of another backend (status 200); the
		// retry's reason.
		retried string
		// proxy: more of the proxy block.
		proxy string
	}{
		{"drops every request", func(t *testing.T) string { return rawBackend(t, func(int) bool { return false }) },
			http.StatusOK, "completed", "reset", "empty_response", ""},
		{"answers 503", func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
			})
		}, http.StatusServiceUnavailable, "completed", "5xx", "", ""},
		{"never answers", func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			})
		}, http.StatusOK, "completed", "timeout", "timeout", ""},
		{"never answers, retryOnTimeout off", func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			})
		}, http.StatusGatewayTimeout, "timeout", "timeout", "", ", retryOnTimeout: false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.backend(t)
			bs := startBackends(t, 2)
			sc := startSidecar(t, configFor("default/m", []string{bad, bs[0].addr(), bs[1].addr()}, `[{type: Header, name: X-Session-ID}]`,
				"proxy: {firstByteTimeout: 300ms, outlierDetection: {consecutiveFailures: 3}"+tc.proxy+"}"))
			url := sc.url("default/m", "/v1/chat/completions")
			failed := map[string]bool{}
			for i := 0; len(failed) < 3; i++ {
				if i == 60 {
					t.Fatalf("only %d of 60 sessions failed: the backend was never chosen?", len(failed))
				}
				k := fmt.Sprint("s-", i)
				r := chat(t, url, conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", k) })
				logs := sc.accessLogs(t)
				switch last := logs[len(logs)-1]; {
				case tc.retried != "" && r.status == 200 && last.FailedPod == bad:
					if last.SelectedPod == bad || last.RetryReason != tc.retried || last.Outcome != "completed" {
						t.Fatalf("session %s: retried turn logged as %+v", k, last)
					}
					failed[k] = true
				case tc.retried == "" && r.status == tc.status:
					failed[k] = true
				case r.status == 200:
				default:
					t.Fatalf("session %s: status %d %s", k, r.status, r.body)
				}
				if strings.Contains(r.body, bad) {
					t.Fatalf("the error body names the backend's address: %s", r.body)
				}
			}
			if got := sc.metric(t, "tether_backends_ejected", "pool", "default/m"); got != 1 {
				t.Fatalf("tether_backends_ejected = %v after 3 failures in a row", got)
			}
			// Every later turn succeeds; the failed sessions move off the
			// ejected backend.
			for k := range failed {
				for turn := 2; turn <= 3; turn++ {
					r := chat(t, url, conversation(turn), func(r *http.Request) { r.Header.Set("X-Session-ID", k) })
					if r.status != 200 {
						t.Fatalf("session %s turn %d after the ejection: %d", k, turn, r.status)
					}
				}
			}
			for i := 0; i < 20; i++ {
				if r := chat(t, url, conversation(1), nil); r.status != 200 {
					t.Fatalf("keyless request after the ejection: %d", r.status)
				}
			}
			// The failed sessions rebound: at the retry, or on their next
			// turn because their backend was ejected.
			reason := "ejected"
			if tc.retried != "" {
				reason = tc.retried
				if got := sc.metric(t, "tether_upstream_retries_total", "reason", reason); got != 3 {
					t.Errorf("retries{reason=%s} = %v, want 3", reason, got)
				}
			}
			if got := sc.metric(t, "tether_session_rebinds_total", "reason", reason); got != 3 {
				t.Errorf("rebinds{reason=%s} = %v, want the 3 failed sessions", reason, got)
			}
			if got := sc.metric(t, "tether_backend_ejections_total", "reason", "consecutive_failures"); got != 1 {
				t.Errorf("ejections = %v", got)
			}
			if got := sc.metric(t, "tether_backend_failures_total", "kind", tc.kind); got != 3 {
				t.Errorf("failures{kind=%s} = %v, want 3", tc.kind, got)
			}
			if tc.retried != "" {
				n := 0
				for _, a := range sc.accessLogs(t) {
					if a.SelectedPod == bad || a.Status != 200 {
						t.Errorf("request logged as %+v: answered by the faulty backend, or failed", a)
					}
					if a.FailedPod == bad {
						n++
					}
				}
				if n != 3 {
					t.Errorf("%d access-log lines retried away from %s, want 3", n, bad)
				}
				return
			}
			n := 0
			for _, a := range sc.accessLogs(t) {
				if a.Status == tc.status {
					n++
					if a.Outcome != tc.outcome || a.SelectedPod != bad {
						t.Errorf("failed request logged as %+v, want outcome %s on %s", a, tc.outcome, bad)
					}
				}
			}
			if n != 3 {
				t.Errorf("%d access-log lines with status %d, want 3", n, tc.status)
			}
			if got := sc.metric(t, "tether_requests_total", "code", fmt.Sprint(tc.status), "outcome", tc.outcome); got != 3 {
				t.Errorf("tether_requests_total{code=%d,outcome=%s} = %v", tc.status, tc.outcome, got)
			}
		})
	}
}

// serve starts a backend with handler h and returns its address.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// TestPinnedResponseIsNotMoved: a request the resolver routes to the
// backend holding the stored response it names (a Responses API id tether
// bound) is not retried elsewhere when that backend fails before
// answering: moving it cannot succeed, so its failure is reported as it
// is. Outlier detection is off, so the crashed backend stays selectable
// and each request reaches it; a request without state is retried.
func TestPinnedResponseIsNotMoved(t *testing.T) {
	bs := startBackends(t, 2)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`,
		"proxy: {outlierDetection: {enabled: false}}"))
	base := sc.url("default/m", "")
	first := respond(t, base, map[string]any{"input": "hello"}, false)
	holder := simByID(bs, first.backend)
	if first.status != http.StatusOK || first.id == "" || holder == nil {
		t.Fatalf("first response: %+v", first)
	}
	holder.srv.Close() // crashed: its connections close, new ones are refused
	for _, c := range []struct {
		what string
		send func() turn
	}{
		{"GET /v1/responses/{id}", func() turn { return responseByID(t, base, "GET", first.id, "") }},
		{"previous_response_id", func() turn {
			return respond(t, base, map[string]any{"input": "next", "previous_response_id": first.id}, false)
		}},
	} {
		got := c.send()
		if got.status != http.StatusBadGateway || got.backend != "" {
			t.Fatalf("%s on the crashed holder: %+v, want 502 without a retry", c.what, got)
		}
		logs := sc.accessLogs(t)
		last := logs[len(logs)-1]
		if !last.Pinned || last.Retried || last.SelectedPod != holder.addr() {
			t.Fatalf("%s: access log %+v, want pinned to %s, not retried", c.what, last, holder.addr())
		}
	}
	for _, reason := range []string{"connect_failed", "empty_response"} {
		if got := sc.metric(t, "tether_upstream_retries_total", "reason", reason); got != 0 {
			t.Fatalf("retries{reason=%s} = %v, want 0", reason, got)
		}
	}
	// Without state the same failure is retried: a session placed on the
	// crashed backend is answered by the other.
	for j := 0; ; j++ {
		if j == 50 {
			t.Fatal("no session was placed on the crashed backend")
		}
		r := chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", fmt.Sprint("free-", j)) })
		logs := sc.accessLogs(t)
		if last := logs[len(logs)-1]; last.Retried {
			if r.status != http.StatusOK || last.FailedPod != holder.addr() {
				t.Fatalf("retried session: %d, access log %+v", r.status, last)
			}
			break
		}
	}
}

// TestFirstByteTimeoutPerPool: the pool's own firstByteTimeout wins over
// the top-level one.
func TestFirstByteTimeoutPerPool(t *testing.T) {
	slow := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(600 * time.Millisecond)
		w.Write([]byte("late"))
	})
	doc := fmt.Sprintf(`
listen: 127.0.0.1:0
admin: 127.0.0.1:0
proxy: {firstByteTimeout: 200ms}
pools:
  - name: strict
    models: [strict]
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: [%q]}
  - name: patient
    models: [patient]
    proxy: {firstByteTimeout: 5s}
    sessionSticky: {sources: [{type: Header, name: X-Session-ID}]}
    backends: {static: [%q]}
`, slow, slow)
	sc := startSidecar(t, doc)
	for pool, want := range map[string]int{"strict": http.StatusGatewayTimeout, "patient": http.StatusOK} {
		resp, err := http.Post(sc.url(pool, "/v1/completions"), "application/json", strings.NewReader(`{"model":"`+pool+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("pool %s: %d, want %d", pool, resp.StatusCode, want)
		}
	}
}
