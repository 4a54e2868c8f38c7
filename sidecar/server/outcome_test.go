package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestClientClosedStreamsAreAccounted: every stream a client abandons
// ends in one access-log line and one tether_requests_total sample with
// outcome client_closed, and does not count against the backend.
func TestClientClosedStreamsAreAccounted(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	sc := startSidecar(t, configFor("default/m", []string{heldStream(t, release)}, `[{type: Header, name: X-Session-ID}]`, ""))
	const n = 20
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", sc.url("default/m", "/v1/chat/completions"), strings.NewReader(`{"stream":true}`))
		req.Header.Set("X-Session-ID", fmt.Sprint("abandoned-", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(line, "first") {
			t.Fatalf("first event: %q %v", line, err)
		}
		cancel()
		resp.Body.Close()
	}
	testkit.Eventually(t, 10*time.Second, "an access-log line for every abandoned stream", func() bool {
		return len(sc.accessLogs(t)) == n
	})
	for _, a := range sc.accessLogs(t) {
		if a.Outcome != "client_closed" || a.Status != 200 || a.Bytes == 0 {
			t.Fatalf("abandoned stream logged as %+v, want outcome client_closed, status 200, the bytes streamed", a)
		}
	}
	if got := sc.metric(t, "tether_requests_total", "outcome", "client_closed"); got != n {
		t.Fatalf("tether_requests_total{outcome=client_closed} = %v, want %d", got, n)
	}
	if got := sc.metric(t, "tether_response_bytes_total", "pool", "default/m"); got == 0 {
		t.Fatal("no response bytes counted")
	}
	if got := sc.metric(t, "tether_requests_in_flight", "pool", "default/m"); got != 0 {
		t.Fatalf("in flight = %v after every stream ended", got)
	}
	for _, kind := range []string{"reset", "timeout", "5xx"} {
		if got := sc.metric(t, "tether_backend_failures_total", "kind", kind); got != 0 {
			t.Fatalf("a client going away counted as a backend failure (%s)", kind)
		}
	}
}

// TestBackendGoneMidStream: a backend that dies mid-stream cuts the
// client's stream (it must not hang or end as if complete), and the
// request is logged and counted as upstream_reset, a failure of that
// backend.
func TestBackendGoneMidStream(t *testing.T) {
	addr := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"token\":\"first\"}\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close() // the process died
		}
	})
	sc := startSidecar(t, configFor("default/m", []string{addr}, `[{type: Header, name: X-Session-ID}]`, ""))
	if got, err := readStream(t, sc); err == nil {
		t.Fatalf("the cut stream ended cleanly for the client: %q", got)
	}
	testkit.Eventually(t, 10*time.Second, "the access-log line", func() bool { return len(sc.accessLogs(t)) == 1 })
	a := sc.accessLogs(t)[0]
	if a.Outcome != "upstream_reset" || a.Status != 200 || a.Bytes == 0 || a.Error == "" {
		t.Fatalf("logged as %+v, want upstream_reset after the first event, with the error", a)
	}
	if got := sc.metric(t, "tether_requests_total", "outcome", "upstream_reset", "code", "200"); got != 1 {
		t.Fatalf("tether_requests_total{outcome=upstream_reset} = %v", got)
	}
	if got := sc.metric(t, "tether_backend_failures_total", "kind", "reset"); got != 1 {
		t.Fatalf("failures{kind=reset} = %v", got)
	}
}

// postStream sends a streamed chat completion to sc's pool default/m,
// bounded by 20 s (the bound's context, cancelled when the test ends, is
// returned with the response).
func postStream(t *testing.T, sc *sidecar) (*http.Response, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "POST", sc.url("default/m", "/v1/chat/completions"), strings.NewReader(`{"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, ctx
}

// readStream sends a streamed chat completion (postStream) and reads the
// response to its end or its cut: what the client got, and the read's
// error (nil for a stream that ended cleanly). A stream still open after
// 20 s fails the test: a cut stream must never hang.
func readStream(t *testing.T, sc *sidecar) (string, error) {
	t.Helper()
	resp, ctx := postStream(t, sc)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ctx.Err() != nil {
		t.Fatal("the stream hung until the client gave up")
	}
	return string(got), err
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestRequestIDAndTraceparent: the access log carries the request id, the
// client's when it sent one, else one generated and forwarded upstream;
// and the W3C traceparent when the request has a valid one.
func TestRequestIDAndTraceparent(t *testing.T) {
	seen := make(chan string, 10)
	addr := serve(t, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("X-Request-Id")
		w.Write([]byte("ok"))
	})
	sc := startSidecar(t, configFor("default/m", []string{addr}, `[{type: Header, name: X-Session-ID}]`, ""))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	send := func(set func(*http.Request)) (upstream string, logged accessLog) {
		t.Helper()
		n := len(sc.accessLogs(t))
		req, _ := http.NewRequest("POST", sc.url("default/m", "/v1/completions"), strings.NewReader("{}"))
		set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		upstream = <-seen
		testkit.Eventually(t, 5*time.Second, "the access-log line", func() bool { return len(sc.accessLogs(t)) > n })
		logs := sc.accessLogs(t)
		return upstream, logs[len(logs)-1]
	}
	up, a := send(func(r *http.Request) {
		r.Header.Set("X-Request-Id", "router-42")
		r.Header.Set("Traceparent", tp)
	})
	if up != "router-42" || a.RequestID != "router-42" || a.Traceparent != tp {
		t.Fatalf("client's id: upstream saw %q, log %q / %q", up, a.RequestID, a.Traceparent)
	}
	up, a = send(func(r *http.Request) { r.Header.Set("Traceparent", "not-a-trace") })
	if !uuidV4.MatchString(up) || a.RequestID != up || a.Traceparent != "" {
		t.Fatalf("generated id: upstream saw %q, log %q, traceparent %q", up, a.RequestID, a.Traceparent)
	}
	up2, _ := send(func(*http.Request) {})
	if up2 == up {
		t.Fatal("two requests got the same generated id")
	}
	up, a = send(func(r *http.Request) { r.Header.Set("X-Request-Id", strings.Repeat("x", 200)) })
	if !uuidV4.MatchString(up) || a.RequestID != up {
		t.Fatalf("an over-long id is replaced: upstream saw %q, log %q", up, a.RequestID)
	}
}
