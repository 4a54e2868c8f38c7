package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The admin listener on the pod network (as the injector renders it:
// 0.0.0.0) serves health and metrics and nothing of /debug, whoever asks;
// /debug/* is on the loopback debug listener only.
func TestDebugOnlyOnLoopback(t *testing.T) {
	bs := startBackends(t, 1)
	doc := strings.Replace(configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`, "debug: 127.0.0.1:0"),
		"admin: 127.0.0.1:0", "admin: 0.0.0.0:0", 1)
	sc := startSidecar(t, doc)
	_, port, _ := net.SplitHostPort(sc.srv.AdminAddr())
	admin := "http://127.0.0.1:" + port
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := get(t, admin+path); code != 200 {
			t.Errorf("admin %s: %d", path, code)
		}
	}
	for _, path := range []string{"/debug/bindings?pool=default/m&key=k", "/debug/config", "/debug/backends", "/debug/pprof/", "/debug/loglevel"} {
		if code, body := get(t, admin+path); code != 404 || !strings.Contains(body, "404 page not found") {
			t.Errorf("admin on the pod network serves %s: %d", path, code)
		}
		if _, body := get(t, "http://"+sc.srv.DebugAddr()+path); strings.Contains(body, "404 page not found") {
			t.Errorf("debug listener lacks %s", path)
		}
	}
	if code, _ := get(t, "http://"+sc.srv.DebugAddr()+"/metrics"); code != 404 {
		t.Errorf("the debug listener serves /metrics: %d", code)
	}

	// Without a debug address, an admin listener on the pod network serves
	// no /debug at all.
	sc = startSidecar(t, strings.Replace(doc, "debug: 127.0.0.1:0", "", 1))
	_, port, _ = net.SplitHostPort(sc.srv.AdminAddr())
	if code, _ := get(t, "http://127.0.0.1:"+port+"/debug/config"); code != 404 || sc.srv.DebugAddr() != "" {
		t.Fatalf("admin 0.0.0.0 without debug serves /debug/config: %d", code)
	}
}

// A debug address on the pod network is refused before anything starts:
// config.Parse is what the sidecar's start runs first.
func TestDebugOffLoopbackRefusedAtStart(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:17021", "10.0.0.7:17021", ":17021", "[::]:17021"} {
		_, err := config.Parse([]byte(configFor("p", []string{"127.0.0.1:1"}, `[{type: Header, name: X}]`, "debug: \""+addr+"\"")))
		if err == nil || !strings.Contains(err.Error(), "debug: must be a loopback address") {
			t.Errorf("debug %s: %v", addr, err)
		}
	}
}

// From an access-log line to its binding without the raw key, with the
// same store keys as requests (keyed by store.keySecretFile here); the
// config shows the secret's path, never its content.
func TestDebugByKeyHashAndConfig(t *testing.T) {
	bs := startBackends(t, 2)
	secret := filepath.Join(t.TempDir(), "store-key")
	const content = "c3RvcmUta2V5LXNlY3JldC1zdG9yZS1rZXktc2VjcmV0"
	if err := os.WriteFile(secret, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	level := new(slog.LevelVar)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`,
		"store: {keySecretFile: "+secret+"}"), func(d *server.Deps) { d.LogLevel = level })
	chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(1), func(r *http.Request) { r.Header.Set("X-Session-ID", "alice") })

	var line struct {
		KeyHash string `json:"key_hash"`
		Pod     string `json:"selected_pod"`
	}
	testkit.Eventually(t, 5*time.Second, "the access-log line", func() error {
		for _, l := range sc.logs.Lines() {
			if strings.Contains(l, `"msg":"request"`) {
				return json.Unmarshal([]byte(l), &line)
			}
		}
		return fmt.Errorf("no access-log line yet")
	})
	byHash := func(q string) (int, map[string]any) {
		code, body := get(t, sc.admin("/debug/bindings?pool=default/m&"+q))
		var out map[string]any
		json.Unmarshal([]byte(body), &out)
		return code, out
	}
	code, got := byHash("keyHash=" + line.KeyHash)
	if code != 200 || got["backend"] != line.Pod || got["keyHash"] != line.KeyHash {
		t.Fatalf("by the logged key_hash %q: %d %v (the log says %s)", line.KeyHash, code, got, line.Pod)
	}
	if code, got2 := byHash("key=alice"); code != 200 || got2["keyHash"] != line.KeyHash {
		t.Fatalf("by key: %d %v; the key's hash must be the logged one", code, got2)
	}
	for q, want := range map[string]int{
		"keyHash=" + strings.ToUpper(line.KeyHash): 200,
		"keyHash=" + line.KeyHash[:12]:             400,
		"keyHash=zz" + line.KeyHash[2:]:            400,
		"key=alice&keyHash=" + line.KeyHash:        400,
		"keyHash=" + strings.Repeat("0", 32):       404,
	} {
		if code, _ := byHash(q); code != want {
			t.Errorf("%s: %d, want %d", q, code, want)
		}
	}

	code, cfg := get(t, sc.admin("/debug/config"))
	if code != 200 || !strings.Contains(cfg, secret) || strings.Contains(cfg, content) || !strings.Contains(cfg, `"bodyReadTimeout"`) {
		t.Fatalf("/debug/config (%d) must show the secret's path and the defaults, never the secret:\n%s", code, cfg)
	}

	code, body := get(t, sc.admin("/debug/backends"))
	var backends struct {
		Pools []struct {
			Name     string
			Synced   bool
			Backends []struct {
				ID         string
				Selectable bool
				Failed     bool
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &backends); err != nil || code != 200 || len(backends.Pools) != 1 ||
		!backends.Pools[0].Synced || len(backends.Pools[0].Backends) != 2 || !backends.Pools[0].Backends[0].Selectable {
		t.Fatalf("/debug/backends: %d %s (%v)", code, body, err)
	}
	// A memory store's placement has no bindings or work bound to show.
	if strings.Contains(body, `"bindings"`) || strings.Contains(body, `"recentWorkBytes"`) {
		t.Fatalf("/debug/backends shows bounds a memory store does not have: %s", body)
	}

	if code, _ := get(t, sc.admin("/debug/pprof/cmdline")); code != 200 {
		t.Fatalf("pprof: %d", code)
	}

	// The log level, at run time.
	if _, lv := get(t, sc.admin("/debug/loglevel")); strings.TrimSpace(lv) != "info" {
		t.Fatalf("log level %q", lv)
	}
	req, _ := http.NewRequest("PUT", sc.admin("/debug/loglevel?level=debug"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || level.Level() != slog.LevelDebug {
		t.Fatalf("PUT loglevel: %d, level %s", resp.StatusCode, level.Level())
	}
	req, _ = http.NewRequest("PUT", sc.admin("/debug/loglevel"), strings.NewReader("loud"))
	if resp, _ = http.DefaultClient.Do(req); resp.StatusCode != 400 {
		t.Fatalf("a bad level: %d", resp.StatusCode)
	}
	resp.Body.Close()
}

// headerBackend answers with the names and values of the headers it got.
func headerBackend(t *testing.T) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		json.NewEncoder(w).Encode(r.Header)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// X-Forwarded-For is appended to; routing headers are stripped in every
// spelling a backend could read as theirs.
func TestForwardedForAndRoutingHeaderSpellings(t *testing.T) {
	key := filepath.Join(t.TempDir(), "token-key")
	os.WriteFile(key, []byte(strings.Repeat("k", 32)), 0o600)
	sc := startSidecar(t, configFor("default/m", []string{headerBackend(t)},
		`[{type: Token, name: x-session-token}, {type: Header, name: X-Session-ID}]`, "")+
		"    sessionToken: {keyFile: "+key+"}\n")
	req, _ := http.NewRequest("POST", sc.url("default/m", "/v1/completions"), strings.NewReader("{}"))
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	req.Header.Set("X-Forwarded-Proto", "https")
	for _, name := range []string{
		"x_gateway_destination_endpoint", "x_prefiller_host_port", "x_session_token", "X_Session-Token",
		"x-session_token-prefill", "x-gateway-destination-endpoint", "X-Prefiller-Host-Port",
	} {
		req.Header[name] = []string{"10.0.0.9:8000"}
	}
	req.Header.Set("X-Other_Header", "kept")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got http.Header
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if xff := got.Get("X-Forwarded-For"); xff != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the router's value with this hop appended", xff)
	}
	if p := got.Get("X-Forwarded-Proto"); p != "https" {
		t.Errorf("X-Forwarded-Proto = %q, want the router's", p)
	}
	for name, v := range got {
		n := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		for _, routing := range []string{"x-gateway-destination-endpoint", "x-prefiller-host-port", "x-session-token", "x-session-token-prefill"} {
			if n == routing {
				t.Errorf("routing header %s: %v reached the backend", name, v)
			}
		}
	}
	if len(got["X-Other_header"]) == 0 {
		t.Errorf("an unrelated header was stripped: %v", got)
	}
}

// An error answer names no backend address; the log line does.
func TestErrorBodiesNameNoBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the dial is refused
	sc := startSidecar(t, configFor("default/m", []string{addr}, `[{type: Header, name: X-Session-ID}]`, ""))
	_, port, _ := net.SplitHostPort(addr)
	for i := range 2 { // 502 (refused), then 503 (marked failed)
		resp, err := http.Post(sc.url("default/m", "/v1/completions"), "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 500 || strings.Contains(string(b), port) || strings.Contains(string(b), "127.0.0.1") {
			t.Fatalf("request %d: %d %s: the answer names the backend", i, resp.StatusCode, b)
		}
	}
	if !strings.Contains(sc.logs.String(), addr) {
		t.Fatalf("the log does not name the backend that failed:\n%s", sc.logs.String())
	}
}

// rawRequest opens a connection and sends a request's head announcing a
// body of length n, plus the first bytes of it.
func rawRequest(t *testing.T, addr string, n int, first string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", n, first)
	return c
}

func status(t *testing.T, c net.Conn, within time.Duration) int {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(within))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A body that stops arriving is answered 408 after bodyReadTimeout of
// silence; one that trickles in slower than that in total but never
// pauses that long is read whole.
func TestBodyReadTimeout(t *testing.T) {
	var hits atomic.Int64
	backend := echoBackend(t, &hits)
	sc := startSidecar(t, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")},
		`[{type: Header, name: X-Session-ID}]`, "proxy: {bodyReadTimeout: 1s}"))
	addr := sc.srv.PoolAddr("default/m")

	stalled := rawRequest(t, addr, 100, `{"a":`)
	if code := status(t, stalled, 10*time.Second); code != http.StatusRequestTimeout {
		t.Fatalf("stalled body: %d, want 408", code)
	}
	if hits.Load() != 0 {
		t.Fatal("a stalled request reached the backend")
	}

	body := `{"prompt":"trickled slowly, byte by byte"}`
	slow := rawRequest(t, addr, len(body), "")
	for i := range len(body) {
		// 2.1 s in all, never 1 s apart: 950 ms of slack for a stalled
		// CI machine.
		time.Sleep(50 * time.Millisecond)
		if _, err := slow.Write([]byte{body[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if code := status(t, slow, 10*time.Second); code != 200 || hits.Load() != 1 {
		t.Fatalf("trickled body: %d, backend hits %d", code, hits.Load())
	}
}

// Past proxy.maxConcurrentRequests a listener answers 503 with
// Retry-After at once, without reading the body.
func TestConcurrencyCap(t *testing.T) {
	backend := echoBackend(t, nil)
	sc := startSidecar(t, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")},
		`[{type: Header, name: X-Session-ID}]`, "proxy: {maxConcurrentRequests: 2, bodyReadTimeout: 30s}"))
	addr := sc.srv.PoolAddr("default/m")
	rawRequest(t, addr, 10, "{")
	rawRequest(t, addr, 10, "{")
	reg := sc.srv.Registry()
	testkit.Eventually(t, 5*time.Second, "two requests in flight", func() error {
		if n := testkit.Metric(t, reg, "tether_listener_requests_active", "listener", "127.0.0.1:0"); n != 2 {
			return fmt.Errorf("%v active", n)
		}
		return nil
	})
	third := rawRequest(t, addr, 10, "{")
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(third), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third request: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if n := testkit.Metric(t, reg, "tether_listener_requests_shed_total", "listener", "127.0.0.1:0"); n != 1 {
		t.Fatalf("shed %v, want 1", n)
	}
}

// Issue 10: 20 connections that each announced 32 MiB and sent a byte at
// a time took the heap from 78 to 644 MiB, since the buffer was sized
// from Content-Length. Here 1,000 connections each announce 1 MiB (so the
// old code's heap would pass 1 GiB) and send one byte: the heap stays far
// below that, since buffers grow only with the bytes that arrive.
func TestSlowBodyFloodMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,000 connections")
	}
	backend := echoBackend(t, nil)
	sc := startSidecar(t, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")},
		`[{type: Header, name: X-Session-ID}]`, "proxy: {maxRequestBodyBytes: 1048576, bodyReadTimeout: 60s}"))
	addr := sc.srv.PoolAddr("default/m")
	const conns = 1000
	for range conns {
		rawRequest(t, addr, 1<<20, "{")
	}
	testkit.Eventually(t, 30*time.Second, "every slow body being read", func() error {
		if n := testkit.Metric(t, sc.srv.Registry(), "tether_listener_requests_active", "listener", "127.0.0.1:0"); n != conns {
			return fmt.Errorf("%v of %d requests active", n, conns)
		}
		return nil
	})
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	inUse := ms.HeapInuse + ms.StackInuse
	t.Logf("%d slow bodies: heap in use %d MiB, stacks %d MiB", conns, ms.HeapInuse>>20, ms.StackInuse>>20)
	if inUse > 100<<20 {
		t.Fatalf("%d slow-body connections hold %d MiB (heap and stacks), want < 100 MiB", conns, inUse>>20)
	}
}

// Issue 9: with store.redis.requireAtStartup: false a sidecar whose Redis
// is down starts and is ready at once, serves without stickiness (the
// breaker gauge says so), and is sticky again once a real redis-server
// comes up, without a restart.
func TestRedisDownAtStartup(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	bs := startBackends(t, 3)
	sc := startSidecar(t, configFor("default/m", addrs(bs), `[{type: Header, name: X-Session-ID}]`,
		fmt.Sprintf("store: {backend: redis, redis: {address: %q, requireAtStartup: false}}", srv.Addr)))
	reg := sc.srv.Registry()
	if v := testkit.Metric(t, reg, "tether_store_breaker_open", "backend", "redis"); v != 1 {
		t.Fatalf("tether_store_breaker_open = %v while Redis is down", v)
	}
	url := sc.url("default/m", "/v1/chat/completions")
	set := func(r *http.Request) { r.Header.Set("X-Session-ID", "s") }
	if r := chat(t, url, conversation(1), set); r.status != 200 {
		t.Fatalf("degraded request: %d %s", r.status, r.body)
	}
	if v := testkit.Metric(t, reg, "tether_store_fallbacks_total", "pool", "default/m", "op", "lookup"); v != 1 {
		t.Fatalf("%v store fallbacks, want 1", v)
	}

	srv.Restart()
	testkit.Eventually(t, 15*time.Second, "stickiness to resume", func() error {
		first := chat(t, url, conversation(1), set)
		second := chat(t, url, conversation(2), set)
		hits, err := testkit.FindMetric(reg, "tether_session_lookups_total", "pool", "default/m", "result", "hit")
		if err != nil || hits == 0 || first.backend != second.backend {
			return fmt.Errorf("%v hits (%v); turns went to %s and %s", hits, err, first.backend, second.backend)
		}
		return nil
	})
}

// A backend cannot hand the client a session token: the sidecar's
// replaces any the backend sent under the token's name, in any
// spelling, while the backend's own cookies go out beside the
// sidecar's token cookie and its hop-by-hop fields do not.
func TestBackendCannotSetTheSessionToken(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Session-Token", "forged")
		w.Header()["x-session-token"] = []string{"forged-too"}
		w.Header().Add("Set-Cookie", "b=1")
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "1")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	}))
	t.Cleanup(backend.Close)
	doc := configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")},
		`[{type: Token, name: x-session-token}, {type: Header, name: X-Session-ID}]`, "") +
		"    sessionToken: {keyFile: " + writeKey(t) + ", cookie: {name: tether-session}}\n"
	sc := startSidecar(t, doc)
	for i := 0; i < 3; i++ { // a fresh connection, then reused ones
		req, _ := http.NewRequest("POST", sc.url("default/m", "/v1/completions"), strings.NewReader("{}"))
		req.Header.Set("X-Session-ID", "s1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		tokens := resp.Header.Values("X-Session-Token")
		if len(tokens) != 1 || strings.HasPrefix(tokens[0], "forged") {
			t.Fatalf("session tokens %q: want the sidecar's alone", tokens)
		}
		var cookies []string
		for _, c := range resp.Cookies() {
			cookies = append(cookies, c.Name)
		}
		if !slices.Equal(cookies, []string{"b", "tether-session"}) {
			t.Fatalf("cookies %v: want the backend's, then the sidecar's", cookies)
		}
		if resp.Header.Get("X-Hop") != "" || resp.Header.Get("Connection") != "" {
			t.Fatalf("hop-by-hop fields reached the client: %v", resp.Header)
		}
	}
}
