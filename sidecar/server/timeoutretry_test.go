package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// silentBackend accepts connections and reads whatever arrives on them,
// but never answers: a model server that is stuck. Its connections close
// when the sidecar gives up on them or the test ends.
func silentBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(io.Discard, c) })
		}
	})
	return ln.Addr().String()
}

// stallingBackend answers every request with response headers and one
// SSE event at once, then sends nothing for hold and cuts the connection
// (no end of the chunked body): a backend that dies mid-stream after the
// first byte.
func stallingBackend(t *testing.T, hold time.Duration) string {
	return serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Modelsim-Id", "stalling")
		fmt.Fprint(w, "data: {\"token\":\"first\"}\n\n")
		w.(http.Flusher).Flush()
		time.Sleep(hold)
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	})
}

// TestRetryOnFirstByteTimeout: an attempt that gets no response headers
// within the first-byte timeout is retried once on another backend (the
// session rebinds there, reason timeout), as Envoy's per_try_timeout and
// HAProxy's retry-on response-timeout do; the client gets 504 only when
// the retry times out too or cannot be made, and nothing is retried once
// a response byte reached the client.
func TestRetryOnFirstByteTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	proxyBlock := fmt.Sprintf("proxy: {firstByteTimeout: %s, outlierDetection: {consecutiveFailures: 5}}", timeout)
	sources := `[{type: Header, name: X-Session-ID}]`

	// sessionOn sends first turns of new sessions until one was placed on
	// pod (its access-log line names it as the selected or the failed pod)
	// and returns its key and its turn's result.
	sessionOn := func(t *testing.T, sc *sidecar, pod string, send func(key string) result) (string, result, accessLog) {
		t.Helper()
		for i := 0; i < 40; i++ {
			k := fmt.Sprint("s-", i)
			r := send(k)
			logs := sc.accessLogs(t)
			last := logs[len(logs)-1]
			if last.SelectedPod == pod || last.FailedPod == pod {
				return k, r, last
			}
		}
		t.Fatalf("no session of 40 was placed on %s", pod)
		return "", result{}, accessLog{}
	}

	t.Run("retried on another backend", func(t *testing.T) {
		silent := silentBackend(t)
		bs := startBackends(t, 1)
		sc := startSidecar(t, configFor("default/m", []string{silent, bs[0].addr()}, sources, proxyBlock))
		url := sc.url("default/m", "/v1/chat/completions")
		send := func(turn int) func(string) result {
			return func(key string) result {
				return chat(t, url, conversation(turn), func(r *http.Request) { r.Header.Set("X-Session-ID", key) })
			}
		}
		start := time.Now()
		key, r, line := sessionOn(t, sc, silent, send(1))
		if r.status != 200 || r.backend != bs[0].sim.ID() {
			t.Fatalf("turn on the silent backend: %d from %q (%s), want 200 from %s after a retry", r.status, r.backend, r.body, bs[0].sim.ID())
		}
		if !line.Retried || line.RetryReason != "timeout" || line.FailedPod != silent || line.SelectedPod != bs[0].addr() ||
			line.Decision != "rebind" || line.Outcome != "completed" || line.Status != 200 {
			t.Fatalf("access log of the retried turn: %+v", line)
		}
		if time.Since(start) < timeout {
			t.Fatalf("answered in %s: the first attempt did not wait for its first-byte timeout %s", time.Since(start), timeout)
		}
		// The session was rebound: its next turn goes to the new backend
		// at once, without a retry.
		if r := send(2)(key); r.status != 200 || r.backend != bs[0].sim.ID() {
			t.Fatalf("turn 2: %d from %q, want the new binding", r.status, r.backend)
		}
		logs := sc.accessLogs(t)
		if last := logs[len(logs)-1]; last.Retried || last.Decision != "hit" {
			t.Fatalf("turn 2 logged as %+v, want a hit without a retry", last)
		}
		for _, m := range []struct{ name, label, value string }{
			{"tether_upstream_retries_total", "reason", "timeout"},
			{"tether_session_rebinds_total", "reason", "timeout"},
			{"tether_backend_failures_total", "kind", "timeout"},
		} {
			if got := sc.metric(t, m.name, m.label, m.value); got != 1 {
				t.Errorf("%s{%s=%s} = %v, want 1", m.name, m.label, m.value, got)
			}
		}
		if got := sc.metric(t, "tether_requests_total", "code", "504"); got != 0 {
			t.Errorf("tether_requests_total{code=504} = %v, want none", got)
		}
	})

	t.Run("504 when the retry times out too", func(t *testing.T) {
		a, b := silentBackend(t), silentBackend(t)
		sc := startSidecar(t, configFor("default/m", []string{a, b}, sources, proxyBlock))
		url := sc.url("default/m", "/v1/chat/completions")
		start := time.Now()
		r := chat(t, url, conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", "both") })
		took := time.Since(start)
		if r.status != http.StatusGatewayTimeout || !strings.Contains(r.body, "timed out") {
			t.Fatalf("both backends silent: %d %s, want 504", r.status, r.body)
		}
		if took < 2*timeout {
			t.Fatalf("answered in %s, want two attempts of %s each", took, timeout)
		}
		if strings.Contains(r.body, a) || strings.Contains(r.body, b) {
			t.Fatalf("the error body names a backend: %s", r.body)
		}
		logs := sc.accessLogs(t)
		line := logs[len(logs)-1]
		if !line.Retried || line.RetryReason != "timeout" || line.Status != 504 || line.Outcome != "timeout" ||
			line.FailedPod == line.SelectedPod || (line.FailedPod != a && line.FailedPod != b) || (line.SelectedPod != a && line.SelectedPod != b) {
			t.Fatalf("access log: %+v, want a timeout on one backend, retried on the other, timed out too", line)
		}
		if got := sc.metric(t, "tether_upstream_retries_total", "reason", "timeout"); got != 1 {
			t.Errorf("retries{reason=timeout} = %v, want 1 (never a second retry)", got)
		}
		if got := sc.metric(t, "tether_backend_failures_total", "kind", "timeout"); got != 2 {
			t.Errorf("failures{kind=timeout} = %v, want one per attempt", got)
		}
		if got := sc.metric(t, "tether_requests_total", "code", "504", "outcome", "timeout"); got != 1 {
			t.Errorf("tether_requests_total{code=504,outcome=timeout} = %v, want 1", got)
		}
	})

	t.Run("504 when no other backend is selectable", func(t *testing.T) {
		silent := silentBackend(t)
		sc := startSidecar(t, configFor("default/m", []string{silent}, sources, proxyBlock))
		r := chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", "alone") })
		if r.status != http.StatusGatewayTimeout {
			t.Fatalf("the only backend silent: %d %s, want 504", r.status, r.body)
		}
		logs := sc.accessLogs(t)
		if line := logs[len(logs)-1]; line.Retried || line.Outcome != "timeout" || line.SelectedPod != silent {
			t.Fatalf("access log: %+v, want a timeout without a retry", line)
		}
		if got := sc.metric(t, "tether_upstream_retries_total", "reason", "timeout"); got != 0 {
			t.Errorf("retries{reason=timeout} = %v, want 0", got)
		}
	})

	t.Run("no retry once a response byte was sent", func(t *testing.T) {
		// The backend sends its headers and first event at once, then
		// nothing for three first-byte timeouts, then cuts the stream:
		// the timeout no longer applies, and the cut is the client's to
		// see (a second backend's answer cannot follow bytes it has).
		stalling := stallingBackend(t, 3*timeout)
		bs := startBackends(t, 1)
		sc := startSidecar(t, configFor("default/m", []string{stalling, bs[0].addr()}, sources, proxyBlock))
		url := sc.url("default/m", "/v1/chat/completions")
		var first string
		stream := func(key string) result {
			body := `{"model":"modelsim","stream":true,"max_tokens":4,"messages":` + conversation(1) + `}`
			req, _ := http.NewRequest("POST", url, strings.NewReader(body))
			req.Header.Set("X-Session-ID", key)
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("request: %v", err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			first, _ = br.ReadString('\n')
			rest, err := io.ReadAll(br)
			r := result{status: resp.StatusCode, backend: resp.Header.Get("X-Modelsim-Id"), body: first + string(rest)}
			if err != nil {
				r.body += " <cut: " + err.Error() + ">"
			}
			return r
		}
		_, r, line := sessionOn(t, sc, stalling, stream)
		if r.status != 200 || r.backend != "stalling" || !strings.Contains(first, "first") || !strings.Contains(r.body, "<cut") {
			t.Fatalf("stream from the stalling backend: %d from %q: %q, want its first event, then a cut", r.status, r.backend, r.body)
		}
		if line.Retried || line.SelectedPod != stalling || line.Outcome != "upstream_reset" || line.Status != 200 || line.Bytes == 0 {
			t.Fatalf("access log: %+v, want the cut stream of %s, not retried", line, stalling)
		}
		for _, reason := range []string{"timeout", "empty_response"} {
			if got := sc.metric(t, "tether_upstream_retries_total", "reason", reason); got != 0 {
				t.Errorf("retries{reason=%s} = %v, want 0", reason, got)
			}
		}
		if got := sc.metric(t, "tether_backend_failures_total", "kind", "timeout"); got != 0 {
			t.Errorf("failures{kind=timeout} = %v: the first-byte timeout ran on after the headers", got)
		}
	})
}

// faultOnAsk is a backend named name that answers like a model server,
// but fails a request that asks it to in header X-Fault-<name>: "reset"
// (reads it, closes the connection without a response byte), "hang" (no
// response until the request is cancelled) or "fail" (503).
func faultOnAsk(t *testing.T, name string) string {
	return serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.Header.Get("X-Fault-" + name) {
		case "reset":
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		case "hang":
			<-r.Context().Done()
			return
		case "fail":
			http.Error(w, "failing", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Modelsim-Id", name)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[]}`)
	})
}

// TestSecondRetry: a retry that meets a second faulty backend, which this
// replica could not know of, is retried once more on a third backend:
// each retry goes to a backend the request has not failed on, preferring
// one that is not failing; at most two retries, at most one after a
// first-byte timeout.
func TestSecondRetry(t *testing.T) {
	addr := map[string]string{}
	for _, n := range []string{"A", "B", "C"} {
		addr[n] = faultOnAsk(t, n)
	}
	sc := startSidecar(t, configFor("default/m", []string{addr["A"], addr["B"], addr["C"]}, `[{type: Header, name: X-Session-ID}]`,
		"proxy: {firstByteTimeout: 200ms, outlierDetection: {consecutiveFailures: 100}}"))
	url := sc.url("default/m", "/v1/chat/completions")
	send := func(key string, faults map[string]string) result {
		return chat(t, url, conversation(1), func(r *http.Request) {
			r.Header.Set("X-Session-ID", key)
			for n, f := range faults {
				r.Header.Set("X-Fault-"+n, f)
			}
		})
	}
	// A session bound to each backend (every backend answers these).
	on := map[string]string{}
	for i := 0; len(on) < 3; i++ {
		if i == 60 {
			t.Fatalf("60 sessions placed on %v only", on)
		}
		k := fmt.Sprint("s-", i)
		if r := send(k, nil); r.status == 200 && on[r.backend] == "" {
			on[r.backend] = k
		}
	}
	// C answers a turn 503: C is failing now, so a retry goes to B first.
	if r := send(on["C"], map[string]string{"C": "fail"}); r.status != http.StatusServiceUnavailable {
		t.Fatalf("C asked to fail: %d %s", r.status, r.body)
	}
	lastLine := func() accessLog {
		logs := sc.accessLogs(t)
		return logs[len(logs)-1]
	}
	for _, tc := range []struct {
		faults  map[string]string
		status  int
		backend string
		reasons string
		outcome string
	}{
		// A resets, the retry on B resets too: C answers.
		{map[string]string{"A": "reset", "B": "reset"}, 200, "C", "empty_response,empty_response", "completed"},
		// A resets, B never answers: C answers after B's timeout.
		{map[string]string{"A": "reset", "B": "hang"}, 200, "C", "empty_response,timeout", "completed"},
		// A never answers, B resets: C answers.
		{map[string]string{"A": "hang", "B": "reset"}, 200, "C", "timeout,empty_response", "completed"},
		// A and B never answer: one retry after a timeout at most, 504.
		{map[string]string{"A": "hang", "B": "hang"}, 504, "", "timeout", "timeout"},
		// All three reset: two retries at most, 502.
		{map[string]string{"A": "reset", "B": "reset", "C": "reset"}, 502, "", "empty_response,empty_response", "upstream_reset"},
	} {
		// The session bound to A; its earlier retries rebound it, so the
		// binding is put back by a turn with no fault first.
		key := fmt.Sprint("a-", tc.reasons, tc.status)
		for i := 0; ; i++ {
			if i == 60 {
				t.Fatal("no new session placed on A in 60")
			}
			k := fmt.Sprint(key, "-", i)
			if r := send(k, nil); r.backend == "A" {
				key = k
				break
			}
		}
		// C must be the one failing: end B's streak with a success.
		if b := on["B"]; b != "" {
			if r := send(b, nil); r.status != 200 || r.backend != "B" {
				t.Fatalf("B's session: %d from %q", r.status, r.backend)
			}
		}
		if r := send(on["C"], map[string]string{"C": "fail"}); r.status != http.StatusServiceUnavailable {
			t.Fatalf("C asked to fail: %d from %q", r.status, r.backend)
		}
		r := send(key, tc.faults)
		line := lastLine()
		if r.status != tc.status || r.backend != tc.backend || line.RetryReason != tc.reasons || line.Outcome != tc.outcome {
			t.Fatalf("faults %v: %d from %q, logged %+v; want %d from %q, retry_reason %q, outcome %s",
				tc.faults, r.status, r.backend, line, tc.status, tc.backend, tc.reasons, tc.outcome)
		}
		wantFailed := addr["A"] + "," + addr["B"]
		if tc.status == 504 {
			wantFailed = addr["A"]
		}
		if line.FailedPod != wantFailed {
			t.Fatalf("faults %v: failed_pod %q, want %q", tc.faults, line.FailedPod, wantFailed)
		}
	}
}
