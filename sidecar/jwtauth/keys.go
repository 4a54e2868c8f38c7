package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tetherproxy/tether/sidecar/config"
)

// maxKeyFileBytes bounds one key file. Real secrets, PEM bundles and JWKS
// documents are a few KB; a larger file is a mistake, not a key.
const maxKeyFileBytes = 1 << 20

// minRSABits is the smallest RSA modulus accepted (NIST SP 800-131A).
const minRSABits = 2048

// publicKey is one verification key with the metadata that selects it.
type publicKey struct {
	kid string // from a JWKS entry; "" for PEM keys, which match any kid
	alg string // from a JWKS entry's "alg"; "" means any algorithm of the key's type
	key any    // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// keySet is an immutable snapshot of the configured keys. A reload builds
// a new one and swaps it in whole, so a verification never sees half a set.
type keySet struct {
	hmac   []byte // nil when no hmacSecretFile is configured
	public []publicKey
}

// keyFiles is the raw content of every configured file, read in one pass,
// so that reload can tell whether anything changed before parsing.
type keyFiles struct {
	hmac   []byte
	public [][]byte
	jwks   []byte
}

func (a *keyFiles) equal(b *keyFiles) bool {
	if b == nil || string(a.hmac) != string(b.hmac) || string(a.jwks) != string(b.jwks) || len(a.public) != len(b.public) {
		return false
	}
	for i := range a.public {
		if string(a.public[i]) != string(b.public[i]) {
			return false
		}
	}
	return true
}

// readKeyFiles reads every configured file. Errors name the config field.
func readKeyFiles(cfg *config.JWT) (*keyFiles, error) {
	var f keyFiles
	var err error
	if cfg.HMACSecretFile != "" {
		if f.hmac, err = readBounded(cfg.HMACSecretFile); err != nil {
			return nil, fmt.Errorf("jwt.hmacSecretFile: %w", err)
		}
	}
	for i, p := range cfg.PublicKeyFiles {
		b, err := readBounded(p)
		if err != nil {
			return nil, fmt.Errorf("jwt.publicKeyFiles[%d]: %w", i, err)
		}
		f.public = append(f.public, b)
	}
	if cfg.JWKSFile != "" {
		if f.jwks, err = readBounded(cfg.JWKSFile); err != nil {
			return nil, fmt.Errorf("jwt.jwksFile: %w", err)
		}
	}
	return &f, nil
}

func readBounded(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxKeyFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxKeyFileBytes)
	}
	return b, nil
}

// parseKeyFiles turns file contents into a key set. Errors name the config
// field and the file.
func parseKeyFiles(cfg *config.JWT, f *keyFiles) (*keySet, error) {
	ks := &keySet{}
	if cfg.HMACSecretFile != "" {
		// The secret is used byte for byte: a trailing newline written by
		// `echo` is part of it. Guessing would make two verifiers disagree.
		if len(f.hmac) == 0 {
			return nil, fmt.Errorf("jwt.hmacSecretFile: %s: file is empty", cfg.HMACSecretFile)
		}
		ks.hmac = f.hmac
	}
	for i, b := range f.public {
		keys, err := parsePEM(b)
		if err != nil {
			return nil, fmt.Errorf("jwt.publicKeyFiles[%d]: %s: %w", i, cfg.PublicKeyFiles[i], err)
		}
		ks.public = append(ks.public, keys...)
	}
	if cfg.JWKSFile != "" {
		keys, err := parseJWKS(f.jwks)
		if err != nil {
			return nil, fmt.Errorf("jwt.jwksFile: %s: %w", cfg.JWKSFile, err)
		}
		ks.public = append(ks.public, keys...)
	}
	return ks, nil
}

// parsePEM reads every block of a PEM file: PUBLIC KEY (PKIX: RSA, ECDSA,
// Ed25519), RSA PUBLIC KEY (PKCS #1) or CERTIFICATE. Private keys are
// refused: a verifier has no business holding one.
func parsePEM(b []byte) ([]publicKey, error) {
	var keys []publicKey
	for n := 0; ; n++ {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		var key any
		var err error
		switch block.Type {
		case "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(block.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(block.Bytes); err == nil {
				key = cert.PublicKey
			}
		case "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY":
			return nil, fmt.Errorf("PEM block %d is a private key (%s); give the public key or certificate", n, block.Type)
		default:
			return nil, fmt.Errorf("PEM block %d has unsupported type %q (want PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE)", n, block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %w", n, block.Type, err)
		}
		if err := checkKey(key); err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %w", n, block.Type, err)
		}
		keys = append(keys, publicKey{key: key})
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM block found")
	}
	return keys, nil
}

// checkKey accepts only the key types and sizes a JWT algorithm can use.
func checkKey(key any) error {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("RSA key of %d bits is too small (minimum %d)", k.N.BitLen(), minRSABits)
		}
	case *ecdsa.PublicKey:
		if curveAlg(k.Curve) == "" {
			return fmt.Errorf("ECDSA curve %s is not used by JWT (want P-256, P-384 or P-521)", k.Curve.Params().Name)
		}
	case ed25519.PublicKey:
	default:
		return fmt.Errorf("unsupported key type %T (want RSA, ECDSA or Ed25519)", key)
	}
	return nil
}

// curveAlg is the one JWS algorithm that uses an ECDSA curve.
func curveAlg(c elliptic.Curve) string {
	switch c {
	case elliptic.P256():
		return "ES256"
	case elliptic.P384():
		return "ES384"
	case elliptic.P521():
		return "ES512"
	}
	return ""
}

// errNoKey means the key set holds no key that could verify the token.
var errNoKey = errors.New("no key for this token's algorithm and kid")

// keysFor returns the keys that may verify a token signed with method and
// carrying kid. Only keys of the method's own type are ever returned: an
// HMAC method gets the HMAC secret and nothing else, so a token "signed"
// with an RSA public key as HMAC secret (algorithm confusion) cannot
// verify, and "none" gets no key at all.
func (ks *keySet) keysFor(method jwt.SigningMethod, kid string) (any, error) {
	alg := method.Alg()
	if _, ok := method.(*jwt.SigningMethodHMAC); ok {
		if ks.hmac == nil {
			return nil, errNoKey
		}
		return ks.hmac, nil
	}
	var match, unnamed []jwt.VerificationKey
	for _, k := range ks.public {
		if !fits(method, k.key) || (k.alg != "" && k.alg != alg) {
			continue
		}
		switch {
		case kid == "" || k.kid == kid:
			match = append(match, k.key)
		case k.kid == "":
			unnamed = append(unnamed, k.key)
		}
	}
	// A token without a kid tries every key of its type. A kid that names
	// keys selects exactly those; a kid that names none falls back to the
	// keys without a kid (PEM files), since issuers set kid even when the
	// verifier was handed a bare PEM key.
	if len(match) == 0 {
		match = unnamed
	}
	switch len(match) {
	case 0:
		return nil, errNoKey
	case 1:
		return match[0], nil
	}
	return jwt.VerificationKeySet{Keys: match}, nil
}

// fits reports whether key has the type (and, for ECDSA, the curve) that
// method verifies with.
func fits(method jwt.SigningMethod, key any) bool {
	switch method.(type) {
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		_, ok := key.(*rsa.PublicKey)
		return ok
	case *jwt.SigningMethodECDSA:
		k, ok := key.(*ecdsa.PublicKey)
		return ok && curveAlg(k.Curve) == method.Alg()
	case *jwt.SigningMethodEd25519:
		_, ok := key.(ed25519.PublicKey)
		return ok
	}
	return false
}
