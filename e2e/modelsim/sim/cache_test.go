package sim

import (
	"strings"
	"testing"
)

// A block hits only when everything before it matches too.
func TestBlockHashesChainThePrefix(t *testing.T) {
	c := newPrefixCache(100)
	a := c.hashes(strings.Fields("x y s t"), 2)
	b := c.hashes(strings.Fields("z w s t"), 2)
	if len(a) != 2 || a[1] == b[1] {
		t.Fatalf("same second block after different first blocks hashes the same: %v %v", a, b)
	}
	if len(c.hashes(strings.Fields("x y s"), 2)) != 1 {
		t.Fatal("a partial block got a hash")
	}
	// Token boundaries count: "ab c" is not "a bc".
	if c.hashes([]string{"ab", "c"}, 2)[0] == c.hashes([]string{"a", "bc"}, 2)[0] {
		t.Fatal("token boundaries not hashed")
	}
	c.insert(b)
	if got := c.match(a, len(a)); got != 0 {
		t.Fatalf("matched %d blocks of another prefix", got)
	}
	c.insert(a)
	if got := c.match(a, 1); got != 1 {
		t.Fatalf("limit ignored: %d", got)
	}
}

// A prompt longer than the cache keeps its head, not its tail.
func TestOversizedPromptKeepsItsHead(t *testing.T) {
	c := newPrefixCache(2)
	hs := c.hashes(strings.Fields("a b c d e f g h"), 2) // 4 blocks
	c.insert(hs)
	if got := c.match(hs, len(hs)); got != 2 || c.len() != 2 {
		t.Fatalf("matched %d, cache holds %d", got, c.len())
	}
}
