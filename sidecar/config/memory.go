package config

import (
	"math"
	"runtime/debug"
)

// The sidecar's memory budget, in one place. A container's memory limit is
// split into a Go memory limit (GOMEMLIMIT, which makes the garbage
// collector work harder instead of letting the heap run into the kernel's
// OOM killer) and, inside it, a reserve for everything but bindings; the
// rest holds bindings. The injector derives GOMEMLIMIT and the stores'
// maxEntries from a pod's memory limit with these functions, and Parse
// derives the default maxEntries from the process's own GOMEMLIMIT, so a
// config without maxEntries (a ConfigMap config, say) cannot hold more
// bindings than its container has memory for. An explicit maxEntries always
// wins.
const (
	// BindingBudgetBytes is what one binding may cost in the memory or the
	// gossip store. The stores' BenchmarkBytesPerBinding and `make bench`
	// (e2e/bench/scale) measure 61–68 bytes per binding in the memory store
	// and 69–76 in the gossip store between 250,000 and 2,000,000 bindings
	// (the range is the table index's load between two growths; gossip's
	// tombstones are entries and count against maxEntries like bindings).
	// The budget is the worst of those, 76, plus ~3 for what a gossip
	// replica allocates per binding while it serves state transfers (a
	// copy of one shard per pull), times ~1.6: a store at its cap must
	// leave the collector room for the garbage made between collections,
	// or a live heap at GOMEMLIMIT runs the GC back to back. The same
	// factor as the 400 bytes this was for the 231 bytes of the stores'
	// old Go maps.
	BindingBudgetBytes = 128

	// RuntimeReserveBytes is the part of the Go memory limit kept for
	// everything but bindings: the runtime, goroutine stacks, connection
	// buffers, informer caches, the garbage a small heap may gather
	// before it is collected (a heap goal of up to 32 MiB, package
	// gcfloor), and request bodies in flight (read, up to
	// proxy.maxRequestBodyBytes = 32 MiB each, before forwarding; a long
	// prompt is well under 1 MiB, so this covers one body at the maximum
	// size beside the rest).
	RuntimeReserveBytes = 64 << 20

	// GoMemLimitPercent of the container's memory limit is the Go memory
	// limit; the rest is headroom for what the Go runtime does not count
	// (the binary's mapped text, kernel-side socket buffers) and for the
	// moment between a burst and the next collection.
	GoMemLimitPercent = 90

	// MinMemoryLimitBytes is the smallest container memory limit the
	// injector accepts: below it the reserve alone does not fit.
	MinMemoryLimitBytes = 96 << 20

	// MinDerivedMaxEntries is the floor of a derived maxEntries, so a
	// tiny limit still keeps some sessions sticky.
	MinDerivedMaxEntries = 1000
)

// GoMemLimit is the GOMEMLIMIT, in bytes, for a container memory limit:
// GoMemLimitPercent of it, rounded down to a whole MiB (so that the
// injector can write it as "230MiB").
func GoMemLimit(containerLimitBytes int64) int64 {
	// Split so that no limit overflows int64 on the multiplication.
	b := containerLimitBytes/100*GoMemLimitPercent + containerLimitBytes%100*GoMemLimitPercent/100
	return b &^ (1<<20 - 1)
}

// MaxEntriesFor is the default maxEntries of the memory and gossip stores
// under a Go memory limit: what fits beside the reserve at
// BindingBudgetBytes each, between MinDerivedMaxEntries and
// DefaultMaxEntries. Without a limit (0, negative or math.MaxInt64, the
// runtime's "no limit") it is DefaultMaxEntries.
func MaxEntriesFor(goMemLimitBytes int64) int {
	if goMemLimitBytes <= 0 || goMemLimitBytes == math.MaxInt64 {
		return DefaultMaxEntries
	}
	n := (goMemLimitBytes - RuntimeReserveBytes) / BindingBudgetBytes
	return int(max(MinDerivedMaxEntries, min(n, DefaultMaxEntries)))
}

// DefaultMaxEntries sets the maxEntries of the memory store, and of the
// gossip store when it is the backend or configured, to n where they are
// unset (0). Call it before SetDefaults, which fills DefaultMaxEntries.
func (s *Store) DefaultMaxEntries(n int) {
	if s.Memory.MaxEntries == 0 {
		s.Memory.MaxEntries = n
	}
	if s.Backend == StoreGossip && s.Gossip == nil {
		s.Gossip = &GossipStore{}
	}
	if s.Gossip != nil && s.Gossip.MaxEntries == 0 {
		s.Gossip.MaxEntries = n
	}
}

// runtimeMemoryLimit is the process's Go memory limit (GOMEMLIMIT or
// debug.SetMemoryLimit); math.MaxInt64 when none is set.
func runtimeMemoryLimit() int64 { return debug.SetMemoryLimit(-1) }
