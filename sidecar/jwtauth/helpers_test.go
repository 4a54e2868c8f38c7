package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
)

// testKeys are generated once per test binary: RSA generation is slow on
// a shared machine, and nothing depends on the keys being fresh per test.
type testKeys struct {
	rsa, rsa2 *rsa.PrivateKey
	ec, ec2   *ecdsa.PrivateKey
	ec384     *ecdsa.PrivateKey
	ed        ed25519.PrivateKey
}

var (
	keysOnce sync.Once
	tk       testKeys
)

func keys(t testing.TB) *testKeys {
	t.Helper()
	keysOnce.Do(func() {
		must := func(err error) {
			if err != nil {
				panic(err)
			}
		}
		var err error
		tk.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
		must(err)
		tk.rsa2, err = rsa.GenerateKey(rand.Reader, 2048)
		must(err)
		tk.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tk.ec2, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tk.ec384, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		must(err)
		_, tk.ed, err = ed25519.GenerateKey(rand.Reader)
		must(err)
	})
	return &tk
}

const secret = "0123456789abcdef0123456789abcdef" // 32 bytes

func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pemPublic encodes pub as a PKIX "PUBLIC KEY" block.
func pemPublic(t testing.TB, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// pemCert wraps pub in a self-signed certificate (signed by the RSA key).
func pemCert(t testing.TB, pub any) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, keys(t).rsa)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwkOf renders a public key as a JWK.
func jwkOf(t testing.TB, pub any, kid string) map[string]any {
	t.Helper()
	m := map[string]any{"kid": kid}
	switch k := pub.(type) {
	case *rsa.PublicKey:
		m["kty"], m["n"], m["e"] = "RSA", b64u(k.N.Bytes()), b64u(big.NewInt(int64(k.E)).Bytes())
	case *ecdsa.PublicKey:
		b, err := k.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		size := (len(b) - 1) / 2
		m["kty"], m["crv"] = "EC", k.Curve.Params().Name
		m["x"], m["y"] = b64u(b[1:1+size]), b64u(b[1+size:])
	case ed25519.PublicKey:
		m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", b64u(k)
	default:
		t.Fatalf("jwkOf: %T", pub)
	}
	return m
}

func jwks(t testing.TB, keys ...map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sign makes a token; kid is set in the header when non-empty.
func sign(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawHS256 builds an HS256 token by hand from literal JSON, so tests
// control the exact bytes of header and payload.
func rawHS256(key []byte, header, payload string) string {
	s := b64u([]byte(header)) + "." + b64u([]byte(payload))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(s))
	return s + "." + b64u(mac.Sum(nil))
}

func newVerifier(t testing.TB, cfg *config.JWT) (*Verifier, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	v, err := New(cfg, reg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v, reg
}
