package session

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"sync"
	"unicode/utf8"
)

// StoreKey is what stores hold instead of a session key, without a store
// key secret: the SHA-256 of the length-prefixed pool name and key,
// hex-encoded and cut to 128 bits. The length prefix makes it unambiguous
// ("a"+"bc" and "ab"+"c" differ). A store dump or a gossip capture holds no
// raw key, but anyone holding one can test guessed keys (a user id, a JWT
// sub) against it: KeyHasher with a secret prevents that.
func StoreKey(pool, key string) string { return (*KeyHasher)(nil).StoreKey(pool, key) }

// KeyHashLen is the length of a store key in hex: the access log's
// key_hash and what /debug/bindings?keyHash= takes.
const KeyHashLen = 32

// MinKeySecretBytes is the shortest store key secret accepted.
const MinKeySecretBytes = 16

// storeKeyDomain derives the HMAC key from the configured secret, so the
// same secret can also be the gossip key (AES-GCM) without one use
// weakening the other.
const storeKeyDomain = "tether store key v1"

// KeyHasher computes store keys: with a secret (store.keySecretFile) an
// HMAC-SHA256 of the length-prefixed pool name and key, so a store dump or
// a gossip capture cannot be tested against guessed keys without the
// secret; without one (nil) the plain SHA-256 of StoreKey. Every replica of
// a ring or of one Redis must use the same secret, or they address
// different keys. It is safe for concurrent use.
type KeyHasher struct {
	macs sync.Pool // of hash.Hash, keyed
}

// NewKeyHasher returns the KeyHasher of secret (at least MinKeySecretBytes).
func NewKeyHasher(secret []byte) (*KeyHasher, error) {
	if len(secret) < MinKeySecretBytes {
		return nil, fmt.Errorf("store key secret is %d bytes, at least %d are required", len(secret), MinKeySecretBytes)
	}
	d := hmac.New(sha256.New, secret)
	d.Write([]byte(storeKeyDomain))
	key := d.Sum(nil)
	h := &KeyHasher{}
	h.macs.New = func() any { return hmac.New(sha256.New, key) }
	return h, nil
}

// LoadKeyHasher reads the secret of store.keySecretFile: the file's first
// line, surrounding whitespace trimmed (a gossip key file, one base64 key
// per line, works as it is: its primary key is the secret), or the whole
// file when it is not text (a raw binary key).
func LoadKeyHasher(path string) (*KeyHasher, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store.keySecretFile: %w", err)
	}
	secret := raw
	if utf8.Valid(raw) {
		for _, line := range bytes.Split(raw, []byte("\n")) {
			if line = bytes.TrimSpace(line); len(line) > 0 {
				secret = line
				break
			}
		}
	}
	h, err := NewKeyHasher(secret)
	if err != nil {
		return nil, fmt.Errorf("store.keySecretFile %s: %w", path, err)
	}
	return h, nil
}

// Keyed reports whether store keys are an HMAC with a secret.
func (h *KeyHasher) Keyed() bool { return h != nil }

// StoreKey returns the store key of a session key in a pool: 32 hex digits.
func (h *KeyHasher) StoreKey(pool, key string) string {
	var m hash.Hash
	if h == nil {
		m = sha256.New()
	} else {
		m = h.macs.Get().(hash.Hash)
		m.Reset()
		defer h.macs.Put(m)
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(pool)))
	m.Write(n[:])
	m.Write([]byte(pool))
	binary.BigEndian.PutUint64(n[:], uint64(len(key)))
	m.Write(n[:])
	m.Write([]byte(key))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:KeyHashLen/2])
}
