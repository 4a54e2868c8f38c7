package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

// TestRelayCarriesRequestsAndStops: the relay passes keep-alive HTTP
// through unchanged, and returns once its context ends, with every
// connection closed.
func TestRelayCarriesRequestsAndStops(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Header.Get("X-Session-ID"))
	}))
	defer backend.Close()
	addr, stop := startBenchProxy(t, relayMain, strings.TrimPrefix(backend.URL, "http://"))
	client := &http.Client{Timeout: 2 * time.Second}
	var body string
	testkit.Eventually(t, 5*time.Second, "a response through the relay", func() error {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Header.Set("X-Session-ID", "s1")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	if body != "hello s1" {
		t.Errorf("body %q through the relay, want %q", body, "hello s1")
	}
	// A connection held open (keep-alive) must not keep the relay from
	// returning.
	stop()
}

// startBenchProxy runs main (relayMain, minproxyMain) on a free port in
// front of backends and returns its address; stop ends it and fails the
// test unless it returns nil within 5 s.
func startBenchProxy(t *testing.T, main func(context.Context, []string) error, backends ...string) (addr string, stop func()) {
	t.Helper()
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- main(ctx, []string{"-listen", addr, "-backends", strings.Join(backends, ",")}) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("returned %v after its context ended, want nil", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return addr, stop
}
