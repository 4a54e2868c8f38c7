package table

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/sidecar/session"
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

// TestKeyOfStoreKeys: both kinds of store key the session package makes,
// the plain SHA-256 and the HMAC with store.keySecretFile, are 32
// lowercase hex digits that the table decodes (its 16 bytes are the
// store key's, not a hash of it), so keyed store keys cost nothing more
// and every replica with the same secret addresses the same entry.
func TestKeyOfStoreKeys(t *testing.T) {
	h, err := session.NewKeyHasher([]byte("0123456789abcdef-store-secret"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sk := range []string{session.StoreKey("pool", "user-1"), h.StoreKey("pool", "user-1")} {
		if got := KeyOf(sk); hex.EncodeToString(got[:]) != sk {
			t.Fatalf("store key %q hashed again to %x, not decoded", sk, got)
		}
	}
	if KeyOf(session.StoreKey("pool", "user-1")) == KeyOf(h.StoreKey("pool", "user-1")) {
		t.Fatal("the keyed and the plain store key of one session share a table key")
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
