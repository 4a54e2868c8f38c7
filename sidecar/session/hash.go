package session

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// StoreKey is what stores hold instead of a session key: the SHA-256 of the
// length-prefixed pool name and key, hex-encoded and cut to 128 bits. The
// length prefix makes it unambiguous ("a"+"bc" and "ab"+"c" differ); the
// hash means a store dump or a gossip capture reveals no user identifier.
func StoreKey(pool, key string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(pool)))
	h.Write(n[:])
	h.Write([]byte(pool))
	binary.BigEndian.PutUint64(n[:], uint64(len(key)))
	h.Write(n[:])
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// ShortHashLen is the length of ShortHash.
const ShortHashLen = 12

// ShortHash is the access log's stand-in for a key: the first 12 hex
// characters of its StoreKey, enough to follow one session through logs.
func ShortHash(pool, key string) string {
	if key == "" {
		return ""
	}
	return StoreKey(pool, key)[:ShortHashLen]
}
