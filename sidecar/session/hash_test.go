package session

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStoreKeyUnkeyed(t *testing.T) {
	// The documented construction: SHA-256 over the length-prefixed pool
	// and key, 128 bits in hex.
	want := sha256.Sum256([]byte("\x00\x00\x00\x00\x00\x00\x00\x01p\x00\x00\x00\x00\x00\x00\x00\x01k"))
	if got := StoreKey("p", "k"); got != hex.EncodeToString(want[:16]) {
		t.Fatalf("StoreKey = %s", got)
	}
	if StoreKey("a", "bc") == StoreKey("ab", "c") {
		t.Fatal("pool and key are not separated")
	}
	if n := len(StoreKey("p", "k")); n != KeyHashLen {
		t.Fatalf("store key of %d hex digits, want %d", n, KeyHashLen)
	}
}

func TestKeyHasher(t *testing.T) {
	h1, err := NewKeyHasher([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := NewKeyHasher([]byte("0123456789abcdeF"))
	k := h1.StoreKey("pool", "alice@example.com")
	switch {
	case k == StoreKey("pool", "alice@example.com"):
		t.Fatal("a keyed store key equals the unkeyed one")
	case k == h2.StoreKey("pool", "alice@example.com"):
		t.Fatal("two secrets give the same store key")
	case k != h1.StoreKey("pool", "alice@example.com"):
		t.Fatal("a store key is not stable")
	case k == h1.StoreKey("other", "alice@example.com"):
		t.Fatal("two pools give the same store key")
	case len(k) != KeyHashLen || !h1.Keyed() || (*KeyHasher)(nil).Keyed():
		t.Fatalf("store key %q, keyed %v", k, h1.Keyed())
	}
	if _, err := NewKeyHasher([]byte("short")); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
}

func TestLoadKeyHasher(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	primary := "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I="
	one, err := LoadKeyHasher(write("one", primary+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	// A gossip key file mid-rotation: the first line is the secret.
	two, err := LoadKeyHasher(write("two", "\n "+primary+" \nb3RoZXIta2V5LW90aGVyLWtleS1vdGhlci1rZXktb3Q=\n"))
	if err != nil {
		t.Fatal(err)
	}
	if one.StoreKey("p", "k") != two.StoreKey("p", "k") {
		t.Fatal("the first line is not the secret")
	}
	if _, err := LoadKeyHasher(write("short", "tiny\n")); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("short secret: %v", err)
	}
	if _, err := LoadKeyHasher(filepath.Join(dir, "missing")); err == nil || !strings.HasPrefix(err.Error(), "store.keySecretFile: ") {
		t.Fatalf("missing file: %v", err)
	}
}

func BenchmarkKeyedStoreKey(b *testing.B) {
	h, _ := NewKeyHasher([]byte("0123456789abcdef0123456789abcdef"))
	b.ReportAllocs()
	for b.Loop() {
		h.StoreKey("default/llm", "conversation-1234567890")
	}
}
