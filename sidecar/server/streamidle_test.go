package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// streamIdle is the proxy block of these tests.
const streamIdle = "proxy: {streamIdleTimeout: 300ms}"

// TestAStreamThatStopsIsCutAfterTheIdleTimeout: a backend that sends its
// headers and a first event, then nothing, with its connection open (a
// hung worker): the client's stream is cut (not left waiting, not ended
// as if complete), the backend's connection is closed, and the request
// is logged as a timeout, a stream_idle failure of that backend.
func TestAStreamThatStopsIsCutAfterTheIdleTimeout(t *testing.T) {
	gone := make(chan struct{})
	addr := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"token\":\"first\"}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(gone)
	})
	sc := startSidecar(t, configFor("default/m", []string{addr}, `[{type: Header, name: X-Session-ID}]`, streamIdle))
	if got, err := readStream(t, sc); err == nil || !strings.Contains(got, "first") {
		t.Fatalf("the client read %q, %v: want the first event, then the stream cut", got, err)
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's connection is still open")
	}
	testkit.Eventually(t, 10*time.Second, "the access-log line", func() bool { return len(sc.accessLogs(t)) == 1 })
	a := sc.accessLogs(t)[0]
	if a.Outcome != "timeout" || a.Status != 200 || a.Error != "upstream: the backend sent no byte of its response for 300ms" {
		t.Fatalf("logged as %+v, want outcome timeout, status 200, the idle error", a)
	}
	if got := sc.metric(t, "tether_requests_total", "outcome", "timeout", "code", "200"); got != 1 {
		t.Fatalf("tether_requests_total{outcome=timeout} = %v", got)
	}
	if got := sc.metric(t, "tether_backend_failures_total", "kind", "stream_idle"); got != 1 {
		t.Fatalf("failures{kind=stream_idle} = %v", got)
	}
	if got := sc.metric(t, "tether_backend_failures_total", "kind", "timeout"); got != 0 {
		t.Fatalf("a stream that stopped counted as a first-byte timeout: failures{kind=timeout} = %v", got)
	}
}

// TestAClientThatStopsReadingIsLetGo: a client that sends its request
// and reads nothing more, its connection open, while the backend streams
// on: once the sockets' buffers are full the sidecar waits the idle
// timeout, then closes both connections (the backend stops generating
// for nobody); the request is logged as client_closed, no failure of the
// backend's.
func TestAClientThatStopsReadingIsLetGo(t *testing.T) {
	gone := make(chan struct{})
	addr := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		event := "data: " + strings.Repeat("x", 16<<10) + "\n\n"
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, event); err != nil {
				break
			}
		}
		close(gone)
	})
	sc := startSidecar(t, configFor("default/m", []string{addr}, `[{type: Header, name: X-Session-ID}]`, streamIdle))
	c, err := net.Dial("tcp", sc.srv.PoolAddr("default/m"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const body = `{"stream":true}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if line, err := bufio.NewReader(c).ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	select {
	case <-gone:
	case <-time.After(20 * time.Second):
		t.Fatal("the backend still streams 20 s after the client stopped reading")
	}
	testkit.Eventually(t, 10*time.Second, "the access-log line", func() bool { return len(sc.accessLogs(t)) == 1 })
	a := sc.accessLogs(t)[0]
	if a.Outcome != "client_closed" || a.Error != "downstream: the client took no byte of the response for 300ms" {
		t.Fatalf("logged as %+v, want outcome client_closed with the idle error", a)
	}
	for _, kind := range []string{"reset", "timeout", "stream_idle", "5xx"} {
		if got := sc.metric(t, "tether_backend_failures_total", "kind", kind); got != 0 {
			t.Fatalf("a client that stopped reading counted as a backend failure (%s)", kind)
		}
	}
}
