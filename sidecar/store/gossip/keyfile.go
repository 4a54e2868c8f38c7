package gossip

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
)

// loadSecretKey reads the gossip encryption key. The file holds either the
// key in base64 (standard alphabet, surrounding whitespace ignored: what
// `openssl rand -base64 32` writes) or the raw key bytes; the length
// selects AES-128, AES-192 or AES-256 (16, 24 or 32 bytes). Base64 is
// tried first, so a raw key that happens to be valid base64 of 16, 24 or
// 32 bytes is read as base64: generate keys as base64 to be unambiguous.
func loadSecretKey(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("store.gossip.secretKeyFile: %w", err)
	}
	if k, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(raw))); err == nil && validKeyLen(len(k)) {
		return k, nil
	}
	if validKeyLen(len(raw)) {
		return raw, nil
	}
	return nil, fmt.Errorf("store.gossip.secretKeyFile %s: want a 16, 24 or 32-byte key, raw or base64; got %d bytes that are neither", path, len(raw))
}

func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
