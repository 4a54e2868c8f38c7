package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestMinproxyPinsSessionsAndStops: the minimal proxy sends every request
// of a session to one backend and the sessions over both, passes bodies
// both ways (a chunked stream's events included), answers 502 when the
// backend is gone, and returns once its context ends.
func TestMinproxyPinsSessionsAndStops(t *testing.T) {
	backend := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if r.URL.Path == "/stream" {
				for i := range 3 {
					fmt.Fprintf(w, "data: %d\n\n", i)
					w.(http.Flusher).Flush() // chunked
				}
				return
			}
			fmt.Fprintf(w, "%s %s %s", name, r.Header.Get("X-Session-ID"), body)
		}))
	}
	a, b := backend("a"), backend("b")
	defer a.Close()
	defer b.Close()
	addr, stop := startBenchProxy(t, minproxyMain,
		strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://"))
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(session, path, body string) (int, string, error) {
		req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("X-Session-ID", session)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got), err
	}
	testkit.Eventually(t, 5*time.Second, "a response through the proxy", func() error {
		_, _, err := post("warm", "/", "")
		return err
	})
	seen := map[string]string{} // session → backend
	for round := range 3 {
		for i := range 3 { // odd: a proxy taking backends in turn per request would move sessions
			s := fmt.Sprint("s", i)
			status, got, err := post(s, "/", "hello")
			if err != nil || status != 200 {
				t.Fatalf("session %s, round %d: status %d, %v", s, round, status, err)
			}
			name, rest, _ := strings.Cut(got, " ")
			if rest != s+" hello" {
				t.Errorf("session %s: backend answered %q, want the session and the body", s, got)
			}
			if prev, ok := seen[s]; ok && prev != name {
				t.Errorf("session %s went to %s, then to %s", s, prev, name)
			}
			seen[s] = name
		}
	}
	backends := map[string]bool{}
	for _, name := range seen {
		backends[name] = true
	}
	if len(backends) != 2 {
		t.Errorf("sessions on backends %v, want both", backends)
	}
	if status, got, err := post("s0", "/stream", ""); err != nil || status != 200 || got != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Errorf("stream: status %d, body %q, %v", status, got, err)
	}
	a.Close()
	b.Close()
	if status, _, err := post("s1", "/", ""); err != nil || status != http.StatusBadGateway {
		t.Errorf("with both backends gone: status %d, %v; want 502", status, err)
	}
	client.CloseIdleConnections()
	stop()
}
