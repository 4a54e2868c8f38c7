package table

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestKeyOf(t *testing.T) {
	hexKey := "00112233445566778899aabbccddeeff"
	if got := KeyOf(hexKey); hex.EncodeToString(got[:]) != hexKey {
		t.Fatalf("hex key not decoded: %x", got)
	}
	hashed := func(s string) Key {
		sum := sha256.Sum256([]byte(s))
		return Key(sum[:16])
	}
	for _, s := range []string{
		"", "session-1", strings.ToUpper(hexKey), hexKey[:31] + "g", hexKey + "0", hexKey[:31],
	} {
		if got := KeyOf(s); got != hashed(s) {
			t.Errorf("KeyOf(%q) = %x, want the hash %x", s, got, hashed(s))
		}
	}
	if KeyOf(strings.ToUpper(hexKey)) == KeyOf(hexKey) {
		t.Error("two spellings of a key map to one")
	}
}

func FuzzKeyOf(f *testing.F) {
	f.Add("00112233445566778899aabbccddeeff")
	f.Add("session-1")
	f.Fuzz(func(t *testing.T, s string) {
		k := KeyOf(s)
		if hex.EncodeToString(k[:]) == s {
			return // decoded
		}
		if sum := sha256.Sum256([]byte(s)); k != Key(sum[:16]) {
			t.Fatalf("KeyOf(%q) = %x: neither decoded nor hashed", s, k)
		}
	})
}
