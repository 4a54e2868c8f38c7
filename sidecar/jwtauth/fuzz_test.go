package jwtauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tetherproxy/tether/sidecar/config"
)

// FuzzClaim feeds arbitrary token strings to a verifier that trusts one
// HMAC secret. It must never panic, and whatever it accepts must be, by an
// independent check, an HS256 token whose MAC is right; with jwt.requireExp
// it accepts a subset, each with an exp claim.
func FuzzClaim(f *testing.F) {
	good := sign(f, jwt.SigningMethodHS256, []byte(secret), claims(jwt.MapClaims{"n": json.Number("1.0"), "a": []any{"x", map[string]any{"b": true}}}), "k")
	for _, s := range []string{
		good, "", ".", "..", "...", noneToken("none"), noneToken("HS256"),
		rawHS256([]byte(secret), `{"alg":"HS256"}`, `{"sub":{"z":[1,2,{"y":null}]}}`),
		rawHS256([]byte(secret), `{"alg":"HS256"}`, `{"sub":"x","exp":1e400}`),
		rawHS256([]byte(secret), `{"alg":"HS256","kid":7}`, `{"sub":1e-7}`),
		rawHS256([]byte(secret), `{"alg":"RS256"}`, `{"sub":"x"}`),
		strings.Repeat("a.", 100),
	} {
		f.Add(s, "sub")
	}
	cfg := config.JWT{HMACSecretFile: writeFile(f, f.TempDir(), "s", []byte(secret)), Algorithms: []string{"HS256", "RS256", "ES256", "EdDSA"}}
	v, _ := newVerifier(f, &cfg)
	cfg.RequireExp = true
	vExp, _ := newVerifier(f, &cfg)
	f.Fuzz(func(t *testing.T, token, name string) {
		val, ok := v.Claim(token, name)
		if valExp, okExp := vExp.Claim(token, name); okExp {
			if !ok || valExp != val {
				t.Fatalf("requireExp accepted %q (%q) where the plain verifier gave %q, %v", token, valExp, val, ok)
			}
			var payload map[string]any
			pb, err := base64.RawURLEncoding.DecodeString(strings.Split(token, ".")[1])
			if err != nil || json.Unmarshal(pb, &payload) != nil || payload["exp"] == nil {
				t.Fatalf("requireExp accepted a token without exp: %q", pb)
			}
		}
		if !ok {
			if val != "" {
				t.Fatalf("rejected token returned %q", val)
			}
			return
		}
		if val == "" {
			t.Fatal("accepted an empty claim")
		}
		parts := strings.Split(token, ".")
		if len(parts) != 3 {
			t.Fatalf("accepted a token of %d segments", len(parts))
		}
		var hdr struct{ Alg string }
		hb, err := base64.RawURLEncoding.DecodeString(parts[0])
		if err != nil || json.Unmarshal(hb, &hdr) != nil || hdr.Alg != "HS256" {
			t.Fatalf("accepted a token whose header is %q", hb)
		}
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(parts[0] + "." + parts[1]))
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
			t.Fatal("accepted a token whose MAC is wrong")
		}
		if val2, ok2 := v.Claim(token, name); val2 != val || !ok2 {
			t.Fatalf("not deterministic: %q then %q", val, val2)
		}
	})
}
