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
	macs sync.Pool // of *keyedMAC
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
	h.macs.New = func() any { return &keyedMAC{mac: hmac.New(sha256.New, key)} }
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
// It runs on every sticky request: the unkeyed hash is taken over a stack
// buffer and the keyed one over its pooled MAC's own buffer, so the
// string returned is its only allocation.
func (h *KeyHasher) StoreKey(pool, key string) string {
	var sum [sha256.Size]byte
	if h == nil {
		var stack [256]byte
		sum = sha256.Sum256(appendKeyInput(stack[:0], pool, key))
	} else {
		m := h.macs.Get().(*keyedMAC)
		m.mac.Reset()
		m.buf = appendKeyInput(m.buf[:0], pool, key)
		m.mac.Write(m.buf)
		m.mac.Sum(m.sum[:0])
		sum = m.sum
		h.macs.Put(m)
	}
	var out [KeyHashLen]byte
	hex.Encode(out[:], sum[:KeyHashLen/2])
	return string(out[:])
}

// keyedMAC is a pooled HMAC with the buffers one store key needs (the
// input is at most a pool name and MaxKeyBytes, so a buffer stays small).
type keyedMAC struct {
	mac hash.Hash
	buf []byte
	sum [sha256.Size]byte
}

// appendKeyInput appends what a store key hashes: the length-prefixed
// pool name and key.
func appendKeyInput(b []byte, pool, key string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(pool)))
	b = append(b, pool...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(key)))
	return append(b, key...)
}
