package jwtauth

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func claims(extra jwt.MapClaims) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "user-1", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

func TestAccept(t *testing.T) {
	k := keys(t)
	dir := t.TempDir()
	hmacFile := writeFile(t, dir, "secret", []byte(secret))
	rsaPEM := writeFile(t, dir, "rsa.pem", pemPublic(t, &k.rsa.PublicKey))
	rsaPKCS1 := writeFile(t, dir, "rsa1.pem", pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)}))
	rsaCert := writeFile(t, dir, "rsa.crt", pemCert(t, &k.rsa.PublicKey))
	ecPEM := writeFile(t, dir, "ec.pem", pemPublic(t, &k.ec.PublicKey))
	edPEM := writeFile(t, dir, "ed.pem", pemPublic(t, k.ed.Public()))
	// A bundle: two blocks in one file, the matching key second.
	bundle := writeFile(t, dir, "bundle.pem", append(pemPublic(t, &k.rsa2.PublicKey), pemPublic(t, &k.rsa.PublicKey)...))
	set := writeFile(t, dir, "jwks.json", jwks(t,
		jwkOf(t, &k.rsa.PublicKey, "r1"), jwkOf(t, &k.ec.PublicKey, "e1"), jwkOf(t, k.ed.Public(), "d1"),
		jwkOf(t, &k.rsa2.PublicKey, "r2"), jwkOf(t, &k.ec384.PublicKey, "e384"),
		map[string]any{"kty": "oct", "k": "c2VjcmV0"},                              // skipped: symmetric
		map[string]any{"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"},       // skipped: encryption
		map[string]any{"kty": "OKP", "crv": "X25519", "x": b64u(make([]byte, 32))}, // skipped: key agreement
	))

	cases := []struct {
		name  string
		cfg   config.JWT
		token string
	}{
		{"HS256", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}}, sign(t, jwt.SigningMethodHS256, []byte(secret), claims(nil), "")},
		{"HS512", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256", "HS512"}}, sign(t, jwt.SigningMethodHS512, []byte(secret), claims(nil), "")},
		{"RS256 PKIX", config.JWT{PublicKeyFiles: []string{rsaPEM}, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")},
		{"RS256 PKCS1", config.JWT{PublicKeyFiles: []string{rsaPKCS1}, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")},
		{"RS256 certificate", config.JWT{PublicKeyFiles: []string{rsaCert}, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")},
		{"RS256 bundle", config.JWT{PublicKeyFiles: []string{bundle}, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")},
		{"RS256 PEM with kid", config.JWT{PublicKeyFiles: []string{rsaPEM}, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "any-kid")},
		{"PS256", config.JWT{PublicKeyFiles: []string{rsaPEM}, Algorithms: []string{"PS256"}}, sign(t, jwt.SigningMethodPS256, k.rsa, claims(nil), "")},
		{"ES256", config.JWT{PublicKeyFiles: []string{ecPEM}, Algorithms: []string{"ES256"}}, sign(t, jwt.SigningMethodES256, k.ec, claims(nil), "")},
		{"EdDSA", config.JWT{PublicKeyFiles: []string{edPEM}, Algorithms: []string{"EdDSA"}}, sign(t, jwt.SigningMethodEdDSA, k.ed, claims(nil), "")},
		{"all files", config.JWT{HMACSecretFile: hmacFile, PublicKeyFiles: []string{ecPEM, rsaPEM}, Algorithms: []string{"HS256", "RS256", "ES256"}}, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "")},
		{"JWKS RS256 kid", config.JWT{JWKSFile: set, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "r2")},
		{"JWKS RS256 no kid", config.JWT{JWKSFile: set, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "")},
		{"JWKS ES256", config.JWT{JWKSFile: set, Algorithms: []string{"ES256"}}, sign(t, jwt.SigningMethodES256, k.ec, claims(nil), "e1")},
		{"JWKS ES384", config.JWT{JWKSFile: set, Algorithms: []string{"ES384"}}, sign(t, jwt.SigningMethodES384, k.ec384, claims(nil), "e384")},
		{"JWKS EdDSA", config.JWT{JWKSFile: set, Algorithms: []string{"EdDSA"}}, sign(t, jwt.SigningMethodEdDSA, k.ed, claims(nil), "d1")},
		{"issuer and audience", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, Issuer: "https://idp", Audience: "tether"},
			sign(t, jwt.SigningMethodHS256, []byte(secret), claims(jwt.MapClaims{"iss": "https://idp", "aud": []string{"other", "tether"}}), "")},
		{"no exp", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}}, sign(t, jwt.SigningMethodHS256, []byte(secret), claims(jwt.MapClaims{"exp": nil}), "")},
		{"exp required and present", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, RequireExp: true}, sign(t, jwt.SigningMethodHS256, []byte(secret), claims(nil), "")},
		{"expired within leeway", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}},
			sign(t, jwt.SigningMethodHS256, []byte(secret), claims(jwt.MapClaims{"exp": time.Now().Add(-Leeway / 2).Unix()}), "")},
		{"nbf within leeway", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}},
			sign(t, jwt.SigningMethodHS256, []byte(secret), claims(jwt.MapClaims{"nbf": time.Now().Add(Leeway / 2).Unix()}), "")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, reg := newVerifier(t, &tc.cfg)
			got, ok := v.Claim(tc.token, "sub")
			if !ok || got != "user-1" {
				t.Fatalf("Claim = %q, %v; want user-1, true", got, ok)
			}
			for _, r := range reasons {
				if n := testkit.Metric(t, reg, "tether_jwt_rejected_total", "reason", r); n != 0 {
					t.Errorf("rejected{reason=%s} = %v, want 0", r, n)
				}
			}
		})
	}
}

// noneToken is an unsigned token, crafted by hand as an attacker would.
func noneToken(alg string) string {
	return b64u([]byte(`{"alg":"`+alg+`","typ":"JWT"}`)) + "." + b64u([]byte(`{"sub":"admin"}`)) + "."
}

func TestReject(t *testing.T) {
	k := keys(t)
	dir := t.TempDir()
	hmacFile := writeFile(t, dir, "secret", []byte(secret))
	rsaPEMBytes := pemPublic(t, &k.rsa.PublicKey)
	rsaPEM := writeFile(t, dir, "rsa.pem", rsaPEMBytes)
	set := writeFile(t, dir, "jwks.json", jwks(t, jwkOf(t, &k.rsa.PublicKey, "a"), jwkOf(t, &k.rsa2.PublicKey, "b")))
	ec384 := writeFile(t, dir, "ec384.pem", pemPublic(t, &k.ec384.PublicKey))

	hs := config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}}
	rs := config.JWT{PublicKeyFiles: []string{rsaPEM}, Algorithms: []string{"RS256"}}
	hsTok := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, []byte(secret), claims(c), "") }
	hour := time.Hour

	cases := []struct {
		name   string
		cfg    config.JWT
		token  string
		reason string
	}{
		{"alg none", hs, noneToken("none"), ReasonAlgorithm},
		{"alg None", hs, noneToken("None"), ReasonAlgorithm},
		{"alg none with a signature", hs, noneToken("none") + "c2ln", ReasonAlgorithm},
		{"unknown alg", hs, noneToken("HS1024"), ReasonAlgorithm},
		{"wrong algorithm RS256 when only HS256", hs, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), ""), ReasonAlgorithm},
		{"wrong algorithm HS384 when only HS256", hs, sign(t, jwt.SigningMethodHS384, []byte(secret), claims(nil), ""), ReasonAlgorithm},
		// Algorithm confusion: the attacker knows the public key and uses
		// its PEM bytes as an HMAC secret.
		{"confusion, RS256 only", rs, sign(t, jwt.SigningMethodHS256, rsaPEMBytes, claims(nil), ""), ReasonAlgorithm},
		{"confusion, HS256 allowed without a secret", config.JWT{PublicKeyFiles: []string{rsaPEM}, Algorithms: []string{"RS256", "HS256"}},
			sign(t, jwt.SigningMethodHS256, rsaPEMBytes, claims(nil), ""), ReasonNoKey},
		{"confusion, HS256 allowed with another secret", config.JWT{HMACSecretFile: hmacFile, PublicKeyFiles: []string{rsaPEM}, Algorithms: []string{"RS256", "HS256"}},
			sign(t, jwt.SigningMethodHS256, rsaPEMBytes, claims(nil), ""), ReasonSignature},
		{"wrong HMAC key", hs, sign(t, jwt.SigningMethodHS256, []byte("another secret, 32 bytes long!!!"), claims(nil), ""), ReasonSignature},
		{"wrong RSA key", rs, sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), ""), ReasonSignature},
		{"tampered payload", hs, func() string {
			p := strings.Split(hsTok(nil), ".")
			return p[0] + "." + b64u([]byte(`{"sub":"admin"}`)) + "." + p[2]
		}(), ReasonSignature},
		{"kid selects the wrong key", config.JWT{JWKSFile: set, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa2, claims(nil), "a"), ReasonSignature},
		{"unknown kid, no PEM fallback", config.JWT{JWKSFile: set, Algorithms: []string{"RS256"}}, sign(t, jwt.SigningMethodRS256, k.rsa, claims(nil), "zzz"), ReasonNoKey},
		{"no key of the type", config.JWT{PublicKeyFiles: []string{rsaPEM}, Algorithms: []string{"RS256", "ES256"}}, sign(t, jwt.SigningMethodES256, k.ec, claims(nil), ""), ReasonNoKey},
		{"ECDSA key of another curve", config.JWT{PublicKeyFiles: []string{ec384}, Algorithms: []string{"ES256", "ES384"}}, sign(t, jwt.SigningMethodES256, k.ec, claims(nil), ""), ReasonNoKey},
		{"expired", hs, hsTok(jwt.MapClaims{"exp": time.Now().Add(-hour).Unix()}), ReasonExpired},
		{"exp required, absent", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, RequireExp: true}, hsTok(jwt.MapClaims{"exp": nil}), ReasonNoExpiry},
		{"exp required, absent, issuer missing too", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, RequireExp: true, Issuer: "https://idp"},
			hsTok(jwt.MapClaims{"exp": nil}), ReasonNoExpiry},
		{"exp required, expired", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, RequireExp: true},
			hsTok(jwt.MapClaims{"exp": time.Now().Add(-hour).Unix()}), ReasonExpired},
		{"not yet valid", hs, hsTok(jwt.MapClaims{"nbf": time.Now().Add(hour).Unix()}), ReasonNotYetValid},
		{"wrong issuer", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, Issuer: "https://idp"}, hsTok(jwt.MapClaims{"iss": "https://evil"}), ReasonIssuer},
		{"missing issuer", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, Issuer: "https://idp"}, hsTok(nil), ReasonIssuer},
		{"wrong audience", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, Audience: "tether"}, hsTok(jwt.MapClaims{"aud": []string{"a", "b"}}), ReasonAudience},
		{"missing audience", config.JWT{HMACSecretFile: hmacFile, Algorithms: []string{"HS256"}, Audience: "tether"}, hsTok(nil), ReasonAudience},
		{"empty", hs, "", ReasonMalformed},
		{"one segment", hs, "abc", ReasonMalformed},
		{"four segments", hs, hsTok(nil) + ".x", ReasonMalformed},
		{"garbage segments", hs, "a.b.c", ReasonMalformed},
		{"header not JSON", hs, b64u([]byte("nope")) + "." + b64u([]byte(`{}`)) + ".", ReasonMalformed},
		{"payload not base64", hs, b64u([]byte(`{"alg":"HS256"}`)) + ".!!!." + "sig", ReasonMalformed},
		{"crit header", hs, rawHS256([]byte(secret), `{"alg":"HS256","crit":["exp"]}`, `{"sub":"u"}`), ReasonMalformed},
		{"exp of the wrong type", hs, rawHS256([]byte(secret), `{"alg":"HS256"}`, `{"sub":"u","exp":"tomorrow"}`), ReasonMalformed},
		{"claim absent", hs, hsTok(jwt.MapClaims{"sub": nil}), ReasonMissingClaim},
		{"claim empty", hs, hsTok(jwt.MapClaims{"sub": ""}), ReasonMissingClaim},
		{"claim null", hs, rawHS256([]byte(secret), `{"alg":"HS256"}`, `{"sub":null}`), ReasonMissingClaim},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, reg := newVerifier(t, &tc.cfg)
			if got, ok := v.Claim(tc.token, "sub"); ok || got != "" {
				t.Fatalf("Claim = %q, %v; want rejection", got, ok)
			}
			for _, r := range reasons {
				want := 0.0
				if r == tc.reason {
					want = 1
				}
				if n := testkit.Metric(t, reg, "tether_jwt_rejected_total", "reason", r); n != want {
					t.Errorf("rejected{reason=%s} = %v, want %v", r, n, want)
				}
			}
		})
	}
}

// TestRender: non-string claims become deterministic strings.
func TestRender(t *testing.T) {
	dir := t.TempDir()
	v, _ := newVerifier(t, &config.JWT{HMACSecretFile: writeFile(t, dir, "s", []byte(secret)), Algorithms: []string{"HS256"}})
	cases := []struct {
		claim string // JSON literal
		want  string
		ok    bool
	}{
		{`"abc"`, "abc", true},
		{`"<&>"`, "<&>", true},
		{`12345678901234567890123`, "12345678901234567890123", true}, // beyond float64
		{`1.50`, "1.50", true},
		{`1e3`, "1e3", true},
		{`-0`, "-0", true},
		{`true`, "true", true},
		{`false`, "false", true},
		{`["b","a",1.0]`, `["b","a",1.0]`, true},
		{`{"z":1,"a":{"y":[2],"b":"<x>"}}`, `{"a":{"b":"<x>","y":[2]},"z":1}`, true},
		{` { "b" : 1 , "a" : 2 } `, `{"a":2,"b":1}`, true},
		{`""`, "", false},
		{`null`, "", false},
		{`[]`, "", false},
		{`{}`, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.claim, func(t *testing.T) {
			tok := rawHS256([]byte(secret), `{"alg":"HS256","typ":"JWT"}`, `{"c":`+tc.claim+`}`)
			got, ok := v.Claim(tok, "c")
			if got != tc.want || ok != tc.ok {
				t.Fatalf("Claim = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestClaims: several claims from one verification; a bad token counts once.
func TestClaims(t *testing.T) {
	dir := t.TempDir()
	v, reg := newVerifier(t, &config.JWT{HMACSecretFile: writeFile(t, dir, "s", []byte(secret)), Algorithms: []string{"HS256"}})
	tok := sign(t, jwt.SigningMethodHS256, []byte(secret), claims(jwt.MapClaims{"tenant": "t1"}), "")
	got, ok := v.Claims(tok, []string{"missing", "tenant", "sub"})
	if !ok || fmt.Sprint(got) != "[ t1 user-1]" {
		t.Fatalf("Claims = %q, %v", got, ok)
	}
	if _, ok := v.Claims(tok, []string{"x", "y"}); ok {
		t.Fatal("Claims with no present claim: ok")
	}
	if n := testkit.Metric(t, reg, "tether_jwt_rejected_total", "reason", ReasonMissingClaim); n != 1 {
		t.Fatalf("missing_claim = %v, want 1", n)
	}
	if _, ok := v.Claims("x.y.z", []string{"a", "b", "c"}); ok {
		t.Fatal("bad token: ok")
	}
	if n := testkit.Metric(t, reg, "tether_jwt_rejected_total", "reason", ReasonMalformed); n != 1 {
		t.Fatalf("malformed = %v, want 1", n)
	}
	var nilV *Verifier
	if _, ok := nilV.Claim(tok, "sub"); ok {
		t.Fatal("nil Verifier yielded a claim")
	}
}

func TestNewErrors(t *testing.T) {
	k := keys(t)
	dir := t.TempDir()
	good := writeFile(t, dir, "good.pem", pemPublic(t, &k.rsa.PublicKey))
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(k.ec)
	if err != nil {
		t.Fatal(err)
	}
	offCurve := jwkOf(t, &k.ec.PublicKey, "x")
	offCurve["y"] = offCurve["x"]
	cases := []struct {
		name string
		cfg  *config.JWT
		want string
	}{
		{"nil", nil, "jwt: no configuration"},
		{"no algorithms", &config.JWT{PublicKeyFiles: []string{good}}, "jwt.algorithms: at least one"},
		{"alg none", &config.JWT{PublicKeyFiles: []string{good}, Algorithms: []string{"RS256", "none"}}, `jwt.algorithms[1]: unsupported algorithm "none"`},
		{"missing secret file", &config.JWT{HMACSecretFile: dir + "/nope", Algorithms: []string{"HS256"}}, "jwt.hmacSecretFile: open "},
		{"empty secret", &config.JWT{HMACSecretFile: writeFile(t, dir, "empty", nil), Algorithms: []string{"HS256"}}, "jwt.hmacSecretFile: " + dir + "/empty: file is empty"},
		{"not PEM", &config.JWT{PublicKeyFiles: []string{good, writeFile(t, dir, "bad.pem", []byte("hello"))}, Algorithms: []string{"RS256"}}, "jwt.publicKeyFiles[1]: " + dir + "/bad.pem: no PEM block found"},
		{"private key", &config.JWT{PublicKeyFiles: []string{writeFile(t, dir, "priv.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}))}, Algorithms: []string{"ES256"}}, "jwt.publicKeyFiles[0]: " + dir + "/priv.pem: PEM block 0 is a private key"},
		{"small RSA", &config.JWT{PublicKeyFiles: []string{writeFile(t, dir, "small.pem", pemPublic(t, &small.PublicKey))}, Algorithms: []string{"RS256"}}, "RSA key of 1024 bits is too small"},
		{"corrupt DER", &config.JWT{PublicKeyFiles: []string{writeFile(t, dir, "der.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte{1, 2, 3}}))}, Algorithms: []string{"RS256"}}, "jwt.publicKeyFiles[0]: " + dir + "/der.pem: PEM block 0 (PUBLIC KEY): "},
		{"JWKS not JSON", &config.JWT{JWKSFile: writeFile(t, dir, "j1", []byte("{")), Algorithms: []string{"RS256"}}, "jwt.jwksFile: " + dir + "/j1: not a JWK Set"},
		{"JWKS empty", &config.JWT{JWKSFile: writeFile(t, dir, "j2", []byte(`{"keys":[]}`)), Algorithms: []string{"RS256"}}, "no usable signature key"},
		{"JWKS point off curve", &config.JWT{JWKSFile: writeFile(t, dir, "j3", jwks(t, offCurve)), Algorithms: []string{"ES256"}}, `jwt.jwksFile: ` + dir + `/j3: keys[0] (kid "x"): `},
		{"JWKS bad base64", &config.JWT{JWKSFile: writeFile(t, dir, "j4", []byte(`{"keys":[{"kty":"RSA","n":"***","e":"AQAB"}]}`)), Algorithms: []string{"RS256"}}, `keys[0] (kid ""): "n" is not base64url`},
		{"JWKS even exponent", &config.JWT{JWKSFile: writeFile(t, dir, "j5", []byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"Ag"}]}`)), Algorithms: []string{"RS256"}}, `"e" = 2 is not a valid RSA exponent`},
		{"JWKS short EC coordinate", &config.JWT{JWKSFile: writeFile(t, dir, "j6", []byte(`{"keys":[{"kty":"EC","crv":"P-256","x":"AQAB","y":"AQAB"}]}`)), Algorithms: []string{"ES256"}}, `"x" and "y" must be 32 bytes each for P-256`},
		{"JWKS unknown curve", &config.JWT{JWKSFile: writeFile(t, dir, "j7", []byte(`{"keys":[{"kty":"EC","crv":"secp256k1","x":"AQAB","y":"AQAB"}]}`)), Algorithms: []string{"ES256"}}, `unsupported EC curve "secp256k1"`},
		{"file too large", &config.JWT{JWKSFile: writeFile(t, dir, "big", make([]byte, maxKeyFileBytes+1)), Algorithms: []string{"RS256"}}, "jwt.jwksFile: " + dir + "/big: larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestMetricsRegistration(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.JWT{HMACSecretFile: writeFile(t, dir, "s", []byte(secret)), Algorithms: []string{"HS256"}}
	_, reg := newVerifier(t, cfg)
	if _, err := New(cfg, reg, nil); err == nil {
		t.Fatal("registering twice on one registry: no error")
	}
	if testkit.Metric(t, reg, "tether_jwt_key_reload_errors_total") != 0 {
		t.Fatal("reload errors not 0")
	}
}

func BenchmarkClaimHS256(b *testing.B) {
	dir := b.TempDir()
	v, _ := newVerifier(b, &config.JWT{HMACSecretFile: writeFile(b, dir, "s", []byte(secret)), Algorithms: []string{"HS256"}, Issuer: "https://idp", Audience: "tether"})
	tok := sign(b, jwt.SigningMethodHS256, []byte(secret), claims(jwt.MapClaims{"iss": "https://idp", "aud": "tether", "iat": time.Now().Unix()}), "")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := v.Claim(tok, "sub"); !ok {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkClaimES256(b *testing.B) {
	k := keys(b)
	dir := b.TempDir()
	v, _ := newVerifier(b, &config.JWT{PublicKeyFiles: []string{writeFile(b, dir, "ec.pem", pemPublic(b, &k.ec.PublicKey))}, Algorithms: []string{"ES256"}})
	tok := sign(b, jwt.SigningMethodES256, k.ec, claims(nil), "")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := v.Claim(tok, "sub"); !ok {
			b.Fatal("rejected")
		}
	}
}
