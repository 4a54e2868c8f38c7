package hop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// backend answers as modelsim does (a JSON body, or SSE ending in
// [DONE] when the request asks for a stream) and counts connections and
// requests.
type backend struct {
	*httptest.Server
	conns, reqs atomic.Int64
	status      int
	noDone      bool
}

func newBackend(t *testing.T) *backend {
	b := &backend{status: http.StatusOK}
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.reqs.Add(1)
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Session-ID") == "" || !strings.Contains(string(body), `"messages"`) {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if !strings.Contains(string(body), `"stream":true`) {
			w.WriteHeader(b.status)
			io.WriteString(w, `{"choices":[]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range StreamEvents {
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
		if !b.noDone {
			io.WriteString(w, "data: [DONE]\n\n")
		}
	}))
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.conns.Add(1)
		}
	}
	b.Start()
	t.Cleanup(b.Close)
	return b
}

func TestClientReusesConnectionsAndReadsWholeAnswers(t *testing.T) {
	for _, mode := range []Mode{NonStreaming, Streaming} {
		b := newBackend(t)
		// As a proxy's target, and as direct (the client picks the backend).
		c := newClient(&target{name: "proxy", url: b.URL}, nil, 10, mode, "", 0)
		if mode == Streaming {
			c = newClient(&target{name: "direct"}, []string{b.Listener.Addr().String()}, 10, mode, "", 0)
		}
		for i := range 30 {
			if err := c.do(t.Context(), i); err != nil {
				t.Fatalf("%s: request %d: %v", mode, i, err)
			}
		}
		c.close()
		if b.reqs.Load() != 30 || b.conns.Load() != 1 {
			t.Errorf("%s: %d requests on %d connections, want 30 on 1 (one at a time, kept alive)", mode, b.reqs.Load(), b.conns.Load())
		}
	}
}

// With closeEvery, every closeEvery-th request closes its connection
// once answered, and the next one opens a new one.
func TestClientClosesEveryNthConnection(t *testing.T) {
	b := newBackend(t)
	c := newClient(&target{name: "proxy", url: b.URL}, nil, 10, NonStreaming, "", 0)
	c.closeEvery = 4
	for i := range 30 {
		if err := c.do(t.Context(), i); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	c.close()
	// Requests 4, 8, … 28 close theirs: seven closed, and the eighth
	// connection carries 29 and 30.
	if b.reqs.Load() != 30 || b.conns.Load() != 8 {
		t.Errorf("%d requests on %d connections, want 30 on 8", b.reqs.Load(), b.conns.Load())
	}
}

// A server that closed an idle connection costs a new one, not an error.
func TestClientRetriesOnAConnectionClosedIdle(t *testing.T) {
	b := newBackend(t)
	c := newClient(&target{name: "proxy", url: b.URL}, []string{b.Listener.Addr().String()}, 1, NonStreaming, "", 0)
	defer c.close()
	if err := c.do(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	b.CloseClientConnections()
	if err := c.do(t.Context(), 1); err != nil {
		t.Fatalf("after the server closed the idle connection: %v", err)
	}
	if b.conns.Load() != 2 {
		t.Errorf("%d connections, want 2", b.conns.Load())
	}
}

func TestClientCountsBadAnswersAsErrors(t *testing.T) {
	b := newBackend(t)
	b.status = http.StatusServiceUnavailable
	c := newClient(&target{name: "proxy", url: b.URL}, []string{b.Listener.Addr().String()}, 1, NonStreaming, "", 0)
	if err := c.do(t.Context(), 0); err == nil || !strings.Contains(err.Error(), "status 503") {
		t.Errorf("a 503: err = %v", err)
	}
	c.close()

	b = newBackend(t)
	b.noDone = true
	c = newClient(&target{name: "proxy", url: b.URL}, []string{b.Listener.Addr().String()}, 1, Streaming, "", 0)
	if err := c.do(t.Context(), 0); err == nil || !strings.Contains(err.Error(), "[DONE]") {
		t.Errorf("a stream without [DONE]: err = %v", err)
	}
	c.close()
}

// TestSDKHeaders: -headers sdk requests carry the SDK's fields besides
// the session's, and read as one request.
func TestSDKHeaders(t *testing.T) {
	extra, err := HeaderLines(HeadersSDK)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(&target{name: "proxy", url: "http://127.0.0.1:1"}, nil, 2, NonStreaming, extra, 0)
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(c.sessions[1].req)))
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Header) != 17 || req.Header.Get("X-Session-Id") != "hop-000001" ||
		req.Header.Get("X-Stainless-Lang") != "python" || !strings.HasPrefix(req.Header.Get("Authorization"), "Bearer ") {
		t.Fatalf("fields %v", req.Header)
	}
	if _, err := HeaderLines("other"); err == nil {
		t.Fatal("an unknown set of fields taken")
	}
}

// TestPromptBytesPadsTheBody: -prompt-bytes makes each body that long,
// still a chat completion whose one message holds the padding.
func TestPromptBytesPadsTheBody(t *testing.T) {
	for _, n := range []int{0, 200, 32 << 10, 256 << 10} {
		c := newClient(&target{name: "proxy", url: "http://127.0.0.1:1"}, nil, 2, NonStreaming, "", n)
		_, body, _ := bytes.Cut(c.sessions[0].req, []byte("\r\n\r\n"))
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) != 1 {
			t.Fatalf("-prompt-bytes %d: %v, %d messages", n, err, len(req.Messages))
		}
		if n > 0 && len(body) != n || n == 0 && len(body) > 200 {
			t.Errorf("-prompt-bytes %d: a body of %d bytes", n, len(body))
		}
		if !bytes.Contains(c.sessions[0].req, fmt.Appendf(nil, "Content-Length: %d\r\n", len(body))) {
			t.Errorf("-prompt-bytes %d: the Content-Length is not the body's", n)
		}
	}
}
