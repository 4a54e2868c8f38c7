package gossip

import (
	"encoding/base64"
	"fmt"
	"os"
	"strings"
)

// loadKeys reads the gossip keyring from secretKeyFile. The file holds one
// key, in base64 (standard alphabet, surrounding whitespace ignored: what
// `openssl rand -base64 32` writes) or as its raw bytes, or, while a key
// is rotated, several base64 keys, one per line. The first key is the
// primary: it encrypts what this replica sends. Every key decrypts, so
// replicas whose primaries differ still understand each other as long as
// each holds the other's primary. The length selects AES-128, AES-192 or
// AES-256 (16, 24 or 32 bytes). Base64 is tried first, so a raw key that
// happens to be valid base64 of 16, 24 or 32 bytes is read as base64:
// generate keys as base64 to be unambiguous.
func loadKeys(path string) ([][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store.gossip.secretKeyFile: %w", err)
	}
	var lines []string
	for _, l := range strings.FieldsFunc(string(raw), func(r rune) bool { return r == '\n' || r == '\r' }) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 1 {
		if k, ok := decodeKey(lines[0]); ok {
			return [][]byte{k}, nil
		}
	}
	var bad int // 1-based line of the first key that is not base64
	if len(lines) > 1 {
		keys := make([][]byte, 0, len(lines))
		for i, l := range lines {
			k, ok := decodeKey(l)
			if !ok {
				bad = i + 1
				break
			}
			keys = append(keys, k)
		}
		if bad == 0 {
			return keys, nil
		}
	}
	if validKeyLen(len(raw)) {
		return [][]byte{raw}, nil
	}
	if bad > 0 {
		return nil, fmt.Errorf("store.gossip.secretKeyFile %s: key %d of %d is not a base64 16, 24 or 32-byte key (several keys are one base64 key per line, the first encrypts)", path, bad, len(lines))
	}
	return nil, fmt.Errorf("store.gossip.secretKeyFile %s: want a 16, 24 or 32-byte key, raw or base64 (or several base64 keys, one per line); got %d bytes that are neither", path, len(raw))
}

func decodeKey(s string) ([]byte, bool) {
	k, err := base64.StdEncoding.DecodeString(s)
	return k, err == nil && validKeyLen(len(k))
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
