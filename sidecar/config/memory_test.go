package config

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestMaxEntriesFor(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		containerLimit int64
		want           int
	}{
		{0, DefaultMaxEntries},                         // no limit
		{-1, DefaultMaxEntries},                        // nonsense: no limit
		{192 * mi, (172*mi - 64*mi) / 128},             // GOMEMLIMIT 172MiB: 884,736
		{256 * mi, DefaultMaxEntries},                  // the chart's default limit (GOMEMLIMIT 230MiB): 1,359,872 would fit, capped at the default
		{96 * mi, (86*mi - 64*mi) / 128},               // the smallest limit the injector accepts (86MiB): 180,224
		{64 * mi, MinDerivedMaxEntries},                // under the reserve: the floor
		{1 << 30, DefaultMaxEntries},                   // 1 GiB: 7,020,544 would fit, capped at the default
		{math.MaxInt64 / 100 * 100, DefaultMaxEntries}, // huge
	} {
		got := MaxEntriesFor(GoMemLimit(c.containerLimit))
		if got != c.want {
			t.Errorf("container limit %d: maxEntries %d, want %d", c.containerLimit, got, c.want)
		}
		// What the derived default may hold stays under the Go memory limit.
		if gml := GoMemLimit(c.containerLimit); c.containerLimit >= MinMemoryLimitBytes && got < DefaultMaxEntries &&
			int64(got)*BindingBudgetBytes+RuntimeReserveBytes > gml {
			t.Errorf("container limit %d: %d bindings and the reserve exceed GOMEMLIMIT %d", c.containerLimit, got, gml)
		}
	}
	if got := MaxEntriesFor(math.MaxInt64); got != DefaultMaxEntries {
		t.Errorf("the runtime's no-limit value gives %d", got)
	}
	if got := GoMemLimit(256 << 20); got != 230<<20 {
		t.Errorf("GoMemLimit(256Mi) = %d", got)
	}
}

// TestParseFollowsGoMemLimit: a config without maxEntries gets the
// derived default under GOMEMLIMIT; an explicit one wins.
func TestParseFollowsGoMemLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(GoMemLimit(256 << 20))
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	want := MaxEntriesFor(GoMemLimit(256 << 20))

	c, err := Parse([]byte(doc("")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Memory.MaxEntries != want {
		t.Errorf("memory maxEntries %d, want %d", c.Store.Memory.MaxEntries, want)
	}
	c, err = Parse([]byte(doc("store: {backend: gossip, gossip: {secretKeyFile: /k}}")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Gossip.MaxEntries != want {
		t.Errorf("gossip maxEntries %d, want %d", c.Store.Gossip.MaxEntries, want)
	}
	_, err = Parse([]byte(doc("store: {backend: gossip}")))
	if err == nil {
		t.Fatal("a gossip store without secretKeyFile parsed")
	}
	c, err = Parse([]byte(doc("store: {memory: {maxEntries: 2000000}, gossip: {maxEntries: 7, secretKeyFile: /k}}")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Memory.MaxEntries != 2000000 || c.Store.Gossip.MaxEntries != 7 {
		t.Errorf("explicit maxEntries lost: memory %d, gossip %d", c.Store.Memory.MaxEntries, c.Store.Gossip.MaxEntries)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	c, err = Parse([]byte(doc("")))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Memory.MaxEntries != DefaultMaxEntries {
		t.Errorf("without GOMEMLIMIT: maxEntries %d, want %d", c.Store.Memory.MaxEntries, DefaultMaxEntries)
	}
}
