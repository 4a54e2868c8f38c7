package server_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
)

// TestBackendClosingIdleConnectionsKeepsTheSession: model servers close
// keep-alive connections idle for a few seconds (uvicorn: 5 s). The next
// turn after such a pause must not meet the closed connection: it goes to
// its backend on a new one, with no retry and no move to another backend.
func TestBackendClosingIdleConnectionsKeepsTheSession(t *testing.T) {
	var closed atomic.Int32
	bs := make([]*backend, 2)
	for i := range bs {
		s := sim.New(sim.Options{ID: fmt.Sprintf("sim-%d", i)})
		srv := httptest.NewUnstartedServer(s)
		srv.Config.IdleTimeout = 50 * time.Millisecond
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed.Add(1)
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		bs[i] = &backend{sim: s, srv: srv}
	}
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`, ""))
	url := sc.url("default/m", "/v1/chat/completions")
	set := func(r *http.Request) { r.Header.Set("X-Session-ID", "idle-session") }
	first := chat(t, url, conversation(1), set)
	if first.status != 200 {
		t.Fatalf("turn 1: %d", first.status)
	}
	for turn := 2; turn <= 4; turn++ {
		// Wait for the backend to close the sidecar's idle connection.
		before := closed.Load()
		deadline := time.Now().Add(5 * time.Second)
		for closed.Load() == before {
			if time.Now().After(deadline) {
				t.Fatal("the backend closed no idle connection within 5s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		r := chat(t, url, conversation(turn), set)
		if r.status != 200 || r.backend != first.backend {
			t.Fatalf("turn %d: %d from %q, want 200 from %q", turn, r.status, r.backend, first.backend)
		}
	}
	for _, l := range sc.accessLogs(t) {
		if l.Retried || l.Decision == "rebind" {
			t.Errorf("a turn was retried or rebound: %+v", l)
		}
	}
	if got := sc.metric(t, "tether_upstream_retries_total", "reason", "empty_response"); got != 0 {
		t.Errorf("tether_upstream_retries_total{reason=empty_response} = %v, want 0", got)
	}
}
