package session_test

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/jwtauth"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

var (
	_ session.ClaimReader      = (*jwtauth.Verifier)(nil)
	_ session.MultiClaimReader = (*jwtauth.Verifier)(nil)
)

// TestExtractWithVerifier wires the real verifier: a signed token yields
// its claim, a forged one yields nothing and is counted once even with
// two JWTClaim sources.
func TestExtractWithVerifier(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	v, err := jwtauth.New(&config.JWT{HMACSecretFile: path, Algorithms: []string{"HS256"}}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := session.NewExtractor([]config.Source{
		{Type: config.SourceJWTClaim, Name: "sid"},
		{Type: config.SourceJWTClaim, Name: "sub"},
		{Type: config.SourceHeader, Name: "X-Session-ID"},
	}, v)
	tok := func(key []byte) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.Header.Set("Authorization", "Bearer "+tok(secret))
	r.Header.Set("X-Session-ID", "h")
	if k := e.Extract(r); k.Value != "alice" || k.Source != config.SourceJWTClaim {
		t.Fatalf("signed token: Extract = %q, %q", k.Value, k.Source)
	}
	r.Header.Set("Authorization", "Bearer "+tok([]byte("forged-forged-forged-forged-1234")))
	if k := e.Extract(r); k.Value != "h" || k.Source != config.SourceHeader {
		t.Fatalf("forged token: Extract = %q, %q", k.Value, k.Source)
	}
	if n := testkit.Metric(t, reg, "tether_jwt_rejected_total", "reason", jwtauth.ReasonSignature); n != 1 {
		t.Fatalf("signature rejections = %v, want 1 (one verification per request)", n)
	}
}
