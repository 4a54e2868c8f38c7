package gossip

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadSecretKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key32 := bytes.Repeat([]byte{0xa5}, 32)
	raw16 := []byte("0123456789\x00\x01\x02\x03\x04\xff")
	for name, c := range map[string]struct {
		file []byte
		want []byte
	}{
		"base64 32":         {[]byte(base64.StdEncoding.EncodeToString(key32) + "\n"), key32},
		"base64 16":         {[]byte(base64.StdEncoding.EncodeToString(key32[:16])), key32[:16]},
		"raw 16":            {raw16, raw16},
		"raw 24 whitespace": {[]byte("  abcdefghijklmnopqrst  "), []byte("  abcdefghijklmnopqrst  ")},
	} {
		got, err := loadSecretKey(write(name, c.file))
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("%s: got %x, %v; want %x", name, got, err, c.want)
		}
	}
	for name, b := range map[string][]byte{
		"short":       []byte("too short"),
		"base64 of 8": []byte(base64.StdEncoding.EncodeToString([]byte("12345678"))),
	} {
		if _, err := loadSecretKey(write(name, b)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := loadSecretKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}
