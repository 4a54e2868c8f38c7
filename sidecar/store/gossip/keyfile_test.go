package gossip

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b64 := base64.StdEncoding.EncodeToString
	key32 := bytes.Repeat([]byte{0xa5}, 32)
	key16 := bytes.Repeat([]byte{0x5a}, 16)
	raw16 := []byte("0123456789\x00\x01\x02\x03\x04\xff")
	rawNewline := []byte("0123456789\nabcdefghijklmnopqrst\n") // 32 raw bytes with line breaks
	for name, c := range map[string]struct {
		file []byte
		want [][]byte
	}{
		"base64 32":         {[]byte(b64(key32) + "\n"), [][]byte{key32}},
		"base64 16":         {[]byte(b64(key16)), [][]byte{key16}},
		"raw 16":            {raw16, [][]byte{raw16}},
		"raw 24 whitespace": {[]byte("  abcdefghijklmnopqrst  "), [][]byte{[]byte("  abcdefghijklmnopqrst  ")}},
		"raw with newlines": {rawNewline, [][]byte{rawNewline}},
		// Rotation: the first key is the primary, the others still decrypt.
		"two keys":          {[]byte(b64(key32) + "\n" + b64(key16) + "\n"), [][]byte{key32, key16}},
		"two keys, crlf":    {[]byte(b64(key16) + "\r\n\r\n" + b64(key32) + "\r\n"), [][]byte{key16, key32}},
		"three keys spaced": {[]byte("\n " + b64(key16) + "\n\n" + b64(key32) + "\n" + b64(raw16) + "\n"), [][]byte{key16, key32, raw16}},
	} {
		got, err := loadKeys(write(name, c.file))
		if err != nil || !slices.EqualFunc(got, c.want, bytes.Equal) {
			t.Errorf("%s: got %x, %v; want %x", name, got, err, c.want)
		}
	}
	for name, c := range map[string]struct {
		file []byte
		want string
	}{
		"short":             {[]byte("too short"), "want a 16, 24 or 32-byte key, raw or base64 (or several base64 keys, one per line); got 9 bytes"},
		"base64 of 8":       {[]byte(b64([]byte("12345678"))), "got 12 bytes that are neither"},
		"second key broken": {[]byte(b64(key32) + "\n" + "not-a-key\n"), "key 2 of 2 is not a base64 16, 24 or 32-byte key"},
		"empty":             {nil, "got 0 bytes"},
	} {
		_, err := loadKeys(write(name, c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want it to contain %q", name, err, c.want)
		}
	}
	if _, err := loadKeys(filepath.Join(dir, "missing")); err == nil || !strings.HasPrefix(err.Error(), "store.gossip.secretKeyFile: open ") {
		t.Errorf("missing file: %v", err)
	}
}
