package redisstore

import (
	"crypto/x509"
	"sync"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// useFallbackRoots gives crypto/x509 the public roots of
// golang.org/x/crypto/x509roots/fallback, which it uses only where the
// system has none (the sidecar's image holds no CA bundle), so that a
// Redis with TLS and no caFile verifies against the public CAs there. It
// runs once, when such a Redis is configured: the one connection of the
// sidecar that verifies against public roots.
//
// Importing package fallback would do the same at every start: parse the
// whole bundle (3.5 ms, 8,900 allocations) and keep it until a first
// verification, which a sidecar without TLS never makes: 450 KB in 5,000
// objects of an idle sidecar's 3.5 MB, marked by every collection.
func useFallbackRoots() { fallbackOnce.Do(func() { x509.SetFallbackRoots(fallbackPool()) }) }

var fallbackOnce sync.Once

// fallbackPool is the bundle's roots as package fallback builds them,
// name constraints included.
func fallbackPool() *x509.CertPool {
	p := x509.NewCertPool()
	for c := range bundle.Roots() {
		cert, err := x509.ParseCertificate(c.Certificate)
		if err != nil {
			// The bundle is generated from parsed certificates; one that
			// no longer parses is left out rather than the store refused.
			continue
		}
		if c.Constraint == nil {
			p.AddCert(cert)
		} else {
			p.AddCertWithConstraint(cert, c.Constraint)
		}
	}
	return p
}
