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

// TestBenchProxiesDoTetherWork: with -work log the minimal proxy, and the
// layer proxy (tether's server and transport), keep a session on the
// backend their store binds it to, read the usage the backend reports
// and write an access line per request (a miss, then hits); with -work
// nolog they write none.
func TestBenchProxiesDoTetherWork(t *testing.T) {
	for name, run := range map[string]func(context.Context, []string, io.Writer) error{
		"minproxy": runMinproxy, "layerproxy": runLayerproxy,
	} {
		t.Run(name, func(t *testing.T) { testTetherWork(t, run) })
	}
}

func testTetherWork(t *testing.T, run func(context.Context, []string, io.Writer) error) {
	backend := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, `{"backend":%q,"usage":{"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":8}}}`, name)
		}))
	}
	a, b := backend("a"), backend("b")
	defer a.Close()
	defer b.Close()
	for _, work := range []string{"log", "nolog"} {
		var log testkit.SyncBuffer
		main := func(ctx context.Context, args []string) error {
			return run(ctx, append(args, "-work", work), &log)
		}
		addr, stop := startBenchProxy(t, main, strings.TrimPrefix(a.URL, "http://"), strings.TrimPrefix(b.URL, "http://"))
		client := &http.Client{Timeout: 5 * time.Second}
		post := func(session string) (string, error) {
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions?x=1", strings.NewReader("{}"))
			req.Header.Set("X-Session-ID", session)
			resp, err := client.Do(req)
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			return string(got), err
		}
		testkit.Eventually(t, 5*time.Second, "a response through the proxy", func() error {
			_, err := post("warm")
			return err
		})
		var first string
		for i := range 4 {
			got, err := post("s")
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = got
			} else if got != first {
				t.Errorf("%s: request %d answered %q, the first %q: the session moved", work, i, got, first)
			}
		}
		client.CloseIdleConnections()
		stop() // flushes the log
		lines := strings.Split(strings.TrimSpace(log.String()), "\n")
		if work == "nolog" {
			if log.String() != "" {
				t.Errorf("nolog: wrote %q", log.String())
			}
			continue
		}
		if len(lines) != 5 {
			t.Fatalf("log: %d lines, want 5 (warm-up and four):\n%s", len(lines), log.String())
		}
		for i, line := range lines[1:] {
			want := `"decision":"hit"`
			if i == 0 {
				want = `"decision":"miss"`
			}
			for _, w := range []string{want, `"prompt_tokens":12`, `"cached_tokens":8`, `"status":200`, `"method":"POST"`, `"path":"/v1/chat/completions"`} {
				if !strings.Contains(line, w) {
					t.Errorf("line %d lacks %s: %s", i+1, w, line)
				}
			}
		}
	}
}
