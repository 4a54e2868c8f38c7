package server_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeKey writes a session-token key file and returns its path.
func writeKey(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(p, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTokenCookieWithACookieJar: a browser-like client (a cookie jar, no
// custom headers) sticks through the real proxy: the first response sets
// the signed token as an HttpOnly cookie with Max-Age = the pool's TTL,
// and every later turn, sent to another replica that shares no store with
// the first, follows the cookie to the same backend.
func TestTokenCookieWithACookieJar(t *testing.T) {
	bs := startBackends(t, 4)
	key := writeKey(t)
	doc := configFor("default/chat", addrs(bs), `[{type: Header, name: X-Session-ID}]`, "") +
		"    sessionToken: {keyFile: " + key + ", cookie: {name: tether-session, sameSite: Strict}}\n"
	doc = strings.Replace(doc, "sessionAffinitySeconds: 300", "sessionAffinitySeconds: 900", 1)
	a, b := startSidecar(t, doc), startSidecar(t, doc) // two replicas, memory stores

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar}
	turn := func(sc *sidecar) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", sc.url("default/chat", "/v1/chat/completions"),
			strings.NewReader(`{"model":"modelsim","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp, resp.Header.Get("X-Modelsim-Id")
	}

	resp, home := turn(a)
	var set *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "tether-session" {
			set = c
		}
	}
	if set == nil {
		t.Fatalf("no tether-session cookie in %q", resp.Header.Values("Set-Cookie"))
	}
	if !set.HttpOnly || set.MaxAge != 900 || set.Path != "/" || set.SameSite != http.SameSiteStrictMode || set.Secure {
		t.Fatalf("cookie %+v: want HttpOnly, Max-Age=900 (the pool's TTL), Path=/, SameSite=Strict", set)
	}
	if resp.Header.Get("X-Session-Token") != set.Value {
		t.Fatal("the cookie does not carry the session token")
	}
	// Replica b has never seen the session: only the cookie can pin it.
	for i := 0; i < 12; i++ {
		if _, got := turn(b); got != home {
			t.Fatalf("turn %d through the other replica went to %s, the session is on %s", i, got, home)
		}
	}
	if n := strings.Count(b.logs.String(), `"decision":"hit"`); n != 12 {
		t.Fatalf("replica b logged %d hits, want 12 (each routed by the cookie)", n)
	}

	// A forged cookie is no pin: balanced, and replaced by a real one.
	jar.SetCookies(mustURL(t, b.url("default/chat", "/")), []*http.Cookie{{Name: "tether-session", Value: "forged.token", Path: "/"}})
	resp, _ = turn(b)
	if c := resp.Cookies(); len(c) != 1 || c[0].Value == "forged.token" {
		t.Fatalf("after a forged cookie: Set-Cookie %q", resp.Header.Values("Set-Cookie"))
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
