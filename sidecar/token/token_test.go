package token

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/config"
)

var (
	keyA = []byte(strings.Repeat("a", 32))
	keyB = []byte(strings.Repeat("b", 32))
)

func TestSignVerify(t *testing.T) {
	c := NewWithKeys("ns/pool", keyA, nil, false)
	since := time.Unix(1_700_000_000, 0)
	tok := c.Sign("ns/pod-0/uid", "ns/prefill-1/uid", since)
	p, ok := c.Verify(tok)
	if !ok || p != (Payload{Pool: "ns/pool", Backend: "ns/pod-0/uid", Prefill: "ns/prefill-1/uid", Since: since.Unix()}) {
		t.Fatalf("Verify = %+v %v", p, ok)
	}
	if strings.ContainsAny(tok, "+/= ") {
		t.Fatalf("token %q is not a valid URL-safe token", tok)
	}
}

// TestRejects: every way a client could aim at a backend of its choice fails.
func TestRejects(t *testing.T) {
	c := NewWithKeys("ns/pool", keyA, nil, false)
	good := c.Sign("ns/pod-0/uid", "", time.Time{})
	enc, sig, _ := strings.Cut(good, ".")
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"p":"ns/pool","b":"ns/pod-9/uid"}`))
	cases := map[string]string{
		"empty":              "",
		"payload swapped":    forged + "." + sig,
		"signature cut":      enc + "." + sig[:10],
		"signature flipped":  enc + "." + strings.ToUpper(sig[:1]) + strings.ToLower(sig[1:2]) + sig[2:],
		"other key":          NewWithKeys("ns/pool", keyB, nil, false).Sign("ns/pod-0/uid", "", time.Time{}),
		"other pool":         NewWithKeys("ns/other", keyA, nil, false).Sign("ns/pod-0/uid", "", time.Time{}),
		"unsigned, disabled": base64.StdEncoding.EncodeToString([]byte("ns/pod-0")),
		"too long":           enc + strings.Repeat("A", MaxTokenBytes) + "." + sig,
		"no backend": func() string {
			e := base64.RawURLEncoding.EncodeToString([]byte(`{"p":"ns/pool"}`))
			return e + "." + base64.RawURLEncoding.EncodeToString(mac(keyA, e))
		}(),
		"payload not JSON": func() string {
			e := base64.RawURLEncoding.EncodeToString([]byte(`ns/pod`))
			return e + "." + base64.RawURLEncoding.EncodeToString(mac(keyA, e))
		}(),
		"two dots": good + ".x",
	}
	for name, tok := range cases {
		if p, ok := c.Verify(tok); ok {
			t.Errorf("%s: Verify(%q) = %+v, accepted", name, tok, p)
		}
	}
}

// TestRotation: the current key signs; tokens of the previous key still
// verify, tokens of a key older than that do not.
func TestRotation(t *testing.T) {
	old := NewWithKeys("p", keyA, nil, false).Sign("b1", "", time.Time{})
	rotated := NewWithKeys("p", keyB, keyA, false)
	if _, ok := rotated.Verify(old); !ok {
		t.Fatal("token of the previous key rejected")
	}
	fresh := rotated.Sign("b1", "", time.Time{})
	if _, ok := NewWithKeys("p", keyB, nil, false).Verify(fresh); !ok {
		t.Fatal("new tokens are not signed with the current key")
	}
	keyC := []byte(strings.Repeat("c", 32))
	if _, ok := NewWithKeys("p", keyC, keyB, false).Verify(old); ok {
		t.Fatal("token of a retired key accepted")
	}
}

func TestUnsigned(t *testing.T) {
	c := NewWithKeys("p", keyA, nil, true)
	for tok, want := range map[string]string{
		base64.StdEncoding.EncodeToString([]byte("default/vllm-0")): "default/vllm-0",
		base64.RawStdEncoding.EncodeToString([]byte("ns/a")):        "ns/a",
	} {
		if p, ok := c.Verify(tok); !ok || p.Backend != want || p.Pool != "p" {
			t.Errorf("Verify(%q) = %+v %v, want backend %q", tok, p, ok, want)
		}
	}
	for _, bad := range []string{"!!!", base64.StdEncoding.EncodeToString([]byte("a\nb")), base64.StdEncoding.EncodeToString([]byte{0xff})} {
		if p, ok := c.Verify(bad); ok {
			t.Errorf("Verify(%q) = %+v, accepted", bad, p)
		}
	}
	// Signed tokens still need their MAC when unsigned ones are allowed.
	enc := base64.RawURLEncoding.EncodeToString([]byte(`{"p":"p","b":"x"}`))
	if _, ok := c.Verify(enc + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 32))); ok {
		t.Fatal("bad MAC accepted with allowUnsigned")
	}
}

func TestNewReadsKeyFiles(t *testing.T) {
	dir := t.TempDir()
	cur, prev, short := filepath.Join(dir, "cur"), filepath.Join(dir, "prev"), filepath.Join(dir, "short")
	os.WriteFile(cur, append(keyB, '\n'), 0o600)
	os.WriteFile(prev, keyA, 0o600)
	os.WriteFile(short, []byte("tiny"), 0o600)
	c, err := New("p", 0, &config.SessionToken{KeyFile: cur, PreviousKeyFile: prev})
	if err != nil {
		t.Fatal(err)
	}
	if !valid(c, NewWithKeys("p", keyA, nil, false).Sign("b", "", time.Time{})) || !valid(c, NewWithKeys("p", keyB, nil, false).Sign("b", "", time.Time{})) {
		t.Fatal("keys from files do not verify")
	}
	if _, err := New("p", 0, &config.SessionToken{KeyFile: short}); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("short key: %v", err)
	}
	if _, err := New("p", 0, &config.SessionToken{KeyFile: cur, PreviousKeyFile: filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "previousKeyFile") {
		t.Fatalf("missing previous key: %v", err)
	}
}

// A token lapses the pool's TTL after it was issued; one without an
// expiry (signed by a codec that sets none) is refused by one that does.
func TestExpiry(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return clock }
	c := NewWithKeys("p", keyA, nil, false).WithTTL(5*time.Minute, now)
	tok := c.Sign("b", "", clock)
	p, ok := c.Verify(tok)
	if !ok || p.Expires != clock.Add(5*time.Minute).Unix() {
		t.Fatalf("fresh token: %+v %v", p, ok)
	}
	clock = clock.Add(5*time.Minute - time.Second)
	if !valid(c, tok) {
		t.Fatal("token refused before its TTL passed")
	}
	renewed := c.Sign("b", "", time.Unix(1_700_000_000, 0)) // the next response's token
	clock = clock.Add(time.Second)
	if valid(c, tok) {
		t.Fatal("token accepted once its TTL passed")
	}
	if !valid(c, renewed) {
		t.Fatal("the renewed token lapsed with the old one")
	}
	if valid(c, NewWithKeys("p", keyA, nil, false).Sign("b", "", clock)) {
		t.Fatal("a signed token without an expiry was accepted")
	}
	// The key alone cannot extend a token: the expiry is under the MAC.
	enc, sig, _ := strings.Cut(renewed, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(enc)
	longer := strings.Replace(string(raw), `"e":`, `"e":9`, 1)
	if valid(c, base64.RawURLEncoding.EncodeToString([]byte(longer))+"."+sig) {
		t.Fatal("an extended expiry verified")
	}
}

// FuzzVerify: no input panics, and anything accepted without unsigned
// tokens was signed for this pool (and, with a TTL, is not past it).
func FuzzVerify(f *testing.F) {
	c := NewWithKeys("p", keyA, keyB, false)
	clock := time.Unix(1_700_000_000, 0)
	e := NewWithKeys("p", keyA, keyB, false).WithTTL(time.Minute, func() time.Time { return clock })
	f.Add(e.Sign("b", "", clock))
	u := NewWithKeys("p", keyA, keyB, true)
	f.Add(c.Sign("b", "f", time.Unix(1, 0)))
	f.Add(base64.StdEncoding.EncodeToString([]byte("ns/name")))
	f.Add("a.b")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		if p, ok := c.Verify(tok); ok && (p.Pool != "p" || p.Backend == "" || !strings.Contains(tok, ".")) {
			t.Fatalf("accepted %q as %+v", tok, p)
		}
		u.Verify(tok)
		if p, ok := e.Verify(tok); ok && (p.Expires <= clock.Unix() || p.Pool != "p") {
			t.Fatalf("accepted %q as %+v at %d", tok, p, clock.Unix())
		}
	})
}

func valid(c *Codec, tok string) bool { _, ok := c.Verify(tok); return ok }

// TestCookie: the token cookie is HttpOnly, Path=/, with Max-Age = the
// pool's TTL and the configured Secure and SameSite.
func TestCookie(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, keyA, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cookie *config.TokenCookie
		want   string
	}{
		{nil, ""},
		{&config.TokenCookie{Name: "tether-session", SameSite: config.SameSiteLax}, "tether-session=TOK; Path=/; Max-Age=300; HttpOnly; SameSite=Lax"},
		{&config.TokenCookie{Name: "sid", SameSite: config.SameSiteStrict}, "sid=TOK; Path=/; Max-Age=300; HttpOnly; SameSite=Strict"},
		{&config.TokenCookie{Name: "sid", Secure: true, SameSite: config.SameSiteNone}, "sid=TOK; Path=/; Max-Age=300; HttpOnly; Secure; SameSite=None"},
	} {
		c, err := New("p", 5*time.Minute, &config.SessionToken{KeyFile: key, Cookie: tc.cookie})
		if err != nil {
			t.Fatal(err)
		}
		if tc.cookie == nil {
			if c.CookieName() != "" {
				t.Fatalf("no cookie configured, CookieName = %q", c.CookieName())
			}
			continue
		}
		if c.CookieName() != tc.cookie.Name {
			t.Fatalf("CookieName = %q", c.CookieName())
		}
		if got := c.Cookie("TOK", 5*time.Minute); got != tc.want {
			t.Fatalf("Cookie = %q, want %q", got, tc.want)
		}
	}
}
