package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const allSources = `[{type: Header, name: X-Session-ID}, {type: Query, name: session_id}, {type: Cookie, name: session_sid}, {type: JWTClaim, name: sub}]`

// TestStickinessPerSourceType: for every source type, the turns of one
// session land on one backend, and turn two hits its prefix cache.
func TestStickinessPerSourceType(t *testing.T) {
	bs := startBackends(t, 3)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("test-secret-at-least-32-bytes-long!!"), 0o600)
	sc := startSidecar(t, configFor("default/m", addrs(bs), allSources,
		fmt.Sprintf("jwt: {hmacSecretFile: %s, algorithms: [HS256]}", secret)))

	token := func(sub string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub, "exp": time.Now().Add(time.Hour).Unix(),
		}).SignedString([]byte("test-secret-at-least-32-bytes-long!!"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name string
		path string
		set  func(key string) func(*http.Request)
	}{
		{"Header", "/v1/chat/completions", func(k string) func(*http.Request) {
			return func(r *http.Request) { r.Header.Set("x-session-id", k) } // case-insensitive name
		}},
		{"Query", "/v1/chat/completions?session_id=%s", nil},
		{"Cookie", "/v1/chat/completions", func(k string) func(*http.Request) {
			return func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "session_sid", Value: k}) }
		}},
		{"JWTClaim", "/v1/chat/completions", func(k string) func(*http.Request) {
			return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token(k)) }
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for s := 0; s < 6; s++ {
				key := fmt.Sprintf("%s-session-%d", c.name, s)
				path := c.path
				if strings.Contains(path, "%s") {
					path = fmt.Sprintf(path, key)
				}
				var set func(*http.Request)
				if c.set != nil {
					set = c.set(key)
				}
				first := chat(t, sc.url("default/m", path), conversation(1), set)
				if first.status != 200 {
					t.Fatalf("turn 1: %d %s", first.status, first.body)
				}
				for turn := 2; turn <= 4; turn++ {
					r := chat(t, sc.url("default/m", path), conversation(turn), set)
					if r.status != 200 || r.backend != first.backend {
						t.Fatalf("session %s turn %d went to %s (%d), turn 1 to %s", key, turn, r.backend, r.status, first.backend)
					}
					if r.cached == 0 {
						t.Fatalf("session %s turn %d had no prefix-cache hit on %s", key, turn, r.backend)
					}
				}
			}
		})
	}
	// The access log names the source and a hash, never a raw key.
	logs := sc.logs.String()
	if strings.Contains(logs, "Header-session-0") || strings.Contains(logs, "Cookie-session-0") {
		t.Fatal("access log contains a raw session key")
	}
	for _, want := range []string{`"source":"Header"`, `"source":"Query"`, `"source":"Cookie"`, `"source":"JWTClaim"`, `"decision":"hit"`, `"selected_pod":"127.0.0.1:`} {
		if !strings.Contains(logs, want) {
			t.Fatalf("access log lacks %s", want)
		}
	}
}

// TestDistinctSessionsSpread: new sessions are balanced, not piled up.
func TestDistinctSessionsSpread(t *testing.T) {
	bs := startBackends(t, 3)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`, ""))
	counts := map[string]int{}
	for i := 0; i < 60; i++ {
		r := chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), func(r *http.Request) {
			r.Header.Set("X-Session-ID", fmt.Sprint("spread-", i))
		})
		counts[r.backend]++
	}
	if len(counts) != 3 {
		t.Fatalf("60 sessions reached %d of 3 backends: %v", len(counts), counts)
	}
	for id, n := range counts {
		if n < 5 {
			t.Fatalf("backend %s got only %d of 60 sessions: %v", id, n, counts)
		}
	}
}

// TestRebindAfterBackendStops: the bound backend dies; the next turn is
// served by another backend with no failed request, and stays there.
func TestRebindAfterBackendStops(t *testing.T) {
	bs := startBackends(t, 3)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`, ""))
	set := func(r *http.Request) { r.Header.Set("X-Session-ID", "survivor") }
	url := sc.url("default/m", "/v1/chat/completions")
	first := chat(t, url, conversation(1), set)
	for _, b := range bs {
		if b.sim.ID() == first.backend {
			b.srv.Close() // connection refused from now on
		}
	}
	second := chat(t, url, conversation(2), set)
	if second.status != 200 {
		t.Fatalf("turn after the backend stopped failed: %d %s", second.status, second.body)
	}
	if second.backend == first.backend || second.backend == "" {
		t.Fatalf("turn 2 served by %q", second.backend)
	}
	for turn := 3; turn <= 6; turn++ {
		r := chat(t, url, conversation(turn), set)
		if r.status != 200 || r.backend != second.backend {
			t.Fatalf("turn %d: %d on %s, want %s", turn, r.status, r.backend, second.backend)
		}
	}
	if !strings.Contains(sc.logs.String(), `"retried":true`) {
		t.Fatal("access log does not record the retry")
	}
	// Keyless requests never reach the dead backend either.
	for i := 0; i < 20; i++ {
		if r := chat(t, url, conversation(1), nil); r.status != 200 {
			t.Fatalf("keyless request failed: %d %s", r.status, r.body)
		}
	}
}

func TestDebugBindings(t *testing.T) {
	bs := startBackends(t, 2)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`, ""))
	chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", "dbg") })
	resp, err := http.Get(sc.admin("/debug/bindings?pool=default/m&key=dbg"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Backend   string `json:"backend"`
		ExpiresAt string `json:"expiresAt"`
	}
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || (got.Backend != bs[0].addr() && got.Backend != bs[1].addr()) {
		t.Fatalf("debug binding = %d %+v", resp.StatusCode, got)
	}
	if exp, err := time.Parse(time.RFC3339Nano, got.ExpiresAt); err != nil || time.Until(exp) < 250*time.Second {
		t.Fatalf("expiresAt = %q (%v)", got.ExpiresAt, err)
	}
	for _, q := range []string{"pool=default/m&key=nobody", "pool=nope&key=dbg"} {
		resp, _ := http.Get(sc.admin("/debug/bindings?" + q))
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("%s: status %d, want 404", q, resp.StatusCode)
		}
	}
}

func TestMetricsExposed(t *testing.T) {
	bs := startBackends(t, 2)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`, ""))
	set := func(r *http.Request) { r.Header.Set("X-Session-ID", "m") }
	chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), set)
	chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(2), set)
	resp, err := http.Get(sc.admin("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`tether_requests_total{code="200",decision="miss",outcome="completed",pool="default/m"} 1`,
		`tether_requests_total{code="200",decision="hit",outcome="completed",pool="default/m"} 1`,
		`tether_session_lookups_total{pool="default/m",result="hit"} 1`,
		`tether_bindings_live 1`,
		`tether_upstream_response_seconds_bucket`,
	} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("metrics lack %q", want)
		}
	}
}
