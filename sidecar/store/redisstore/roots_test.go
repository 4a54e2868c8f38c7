package redisstore

import (
	"crypto/x509"
	"testing"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The pool built on demand holds the bundle: each of its roots without a
// constraint verifies as its own chain against it, and against an empty
// pool does not.
func TestFallbackPoolHoldsTheBundle(t *testing.T) {
	pool := fallbackPool()
	n := 0
	for c := range bundle.Roots() {
		if c.Constraint != nil {
			continue
		}
		cert, err := x509.ParseCertificate(c.Certificate)
		if err != nil {
			t.Fatalf("bundle root %d: %v", n, err)
		}
		// Within the root's validity, whatever today's date.
		at := cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: at}); err != nil {
			t.Errorf("%s: not verified against the fallback pool: %v", cert.Subject, err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), CurrentTime: at}); err == nil {
			t.Fatalf("%s: verified against an empty pool: the check above proves nothing", cert.Subject)
		}
		n++
	}
	if n < 50 {
		t.Fatalf("%d unconstrained roots in the bundle, want the public CAs (over 50)", n)
	}
}
