package jwtauth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// jwk holds the members of a JSON Web Key (RFC 7517, 7518, 8037) that a
// verifier needs. Private members, if an issuer leaked them, are ignored.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads a JWK Set. Keys for encryption (use "enc") and key types
// a JWS verifier cannot use (oct, unknown kty) are skipped, because an
// identity provider's published set may legitimately contain them; a key of
// a supported type that is malformed is an error, naming its index.
func parseJWKS(b []byte) ([]publicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	var keys []publicKey
	for i, raw := range set.Keys {
		var k jwk
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("keys[%d]: %w", i, err)
		}
		if k.Use == "enc" {
			continue
		}
		key, err := k.publicKey()
		if errors.Is(err, errSkipKey) {
			continue
		}
		if err == nil {
			err = checkKey(key)
		}
		if err != nil {
			return nil, fmt.Errorf("keys[%d] (kid %q): %w", i, k.Kid, err)
		}
		keys = append(keys, publicKey{kid: k.Kid, alg: k.Alg, key: key})
	}
	if len(keys) == 0 {
		return nil, errors.New("no usable signature key (RSA, EC or OKP/Ed25519) in the set")
	}
	return keys, nil
}

var errSkipKey = errors.New("key type not used for JWS verification")

func (k *jwk) publicKey() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64(k.N, "n")
		if err != nil {
			return nil, err
		}
		e, err := b64(k.E, "e")
		if err != nil {
			return nil, err
		}
		// The exponent is a small positive integer (almost always 65537);
		// anything that does not fit an int is garbage.
		if len(e) > 4 {
			return nil, errors.New(`"e" is too large`)
		}
		var exp int
		for _, c := range e {
			exp = exp<<8 | int(c)
		}
		if exp < 3 || exp%2 == 0 {
			return nil, fmt.Errorf(`"e" = %d is not a valid RSA exponent`, exp)
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("unsupported EC curve %q (want P-256, P-384 or P-521)", k.Crv)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, err := b64(k.X, "x")
		if err != nil {
			return nil, err
		}
		y, err := b64(k.Y, "y")
		if err != nil {
			return nil, err
		}
		if len(x) != size || len(y) != size {
			return nil, fmt.Errorf(`"x" and "y" must be %d bytes each for %s`, size, k.Crv)
		}
		// ParseUncompressedPublicKey rejects points that are not on the curve.
		point := append(append([]byte{4}, x...), y...)
		return ecdsa.ParseUncompressedPublicKey(curve, point)
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, errSkipKey // X25519/X448 are for key agreement
		}
		x, err := b64(k.X, "x")
		if err != nil {
			return nil, err
		}
		if len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf(`"x" must be %d bytes for Ed25519`, ed25519.PublicKeySize)
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, errSkipKey
}

// b64 decodes a base64url member without padding (RFC 7515 §2); a padded
// value is tolerated since some generators emit it.
func b64(s, name string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("%q is missing", name)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		if b, err = base64.URLEncoding.DecodeString(s); err != nil {
			return nil, fmt.Errorf("%q is not base64url", name)
		}
	}
	return b, nil
}
