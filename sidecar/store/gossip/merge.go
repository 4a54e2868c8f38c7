package gossip

import (
	"cmp"

	"github.com/tetherproxy/tether/sidecar/store/internal/table"
)

// key is a store key in 16 bytes instead of the 32-hex string callers
// pass: half the memory per binding and a fixed-size table key. keyOf
// decodes a session.StoreKey and hashes anything else (SHA-256, first 16
// bytes), the same way on every replica, so odd keys still work and agree.
type key = table.Key

func keyOf(s string) key { return table.KeyOf(s) }

// value is one replica's view of a binding: the unit of merge and of
// gossip. Expires is local (this replica's clock, unix ms); everything
// else is the binding's identity and is the same on every replica.
type value struct {
	Gen     uint64
	Created int64 // unix ms on the creator's clock, truncated so the wire carries it exactly
	Pod     string
	Prefill string
	Tomb    bool
	Expires int64 // unix ms, local clock; for a tombstone: when it may be dropped
}

// compareIdentity orders two values of one key; > 0 means a wins.
//
// The order is total over identities, so the winner of a set of values
// does not depend on the order they arrive in:
//
//  1. the higher generation wins (a rebind supersedes);
//  2. then the earlier Created (of two concurrent creations the first wins);
//  3. then the smaller Pod, then the smaller PrefillPod (a tie-break that
//     only matters for creations in the same millisecond);
//  4. a tombstone beats the live binding it deletes (same gen, created and
//     backends), so late gossip of that binding cannot resurrect it.
//
// A tombstone deletes exactly the binding it names: a concurrent binding of
// the same generation that was created earlier still wins over it, and one
// created later lost to the deleted binding anyway.
func compareIdentity(a, b value) int {
	if c := cmp.Compare(a.Gen, b.Gen); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Created, a.Created); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Pod, a.Pod); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Prefill, a.Prefill); c != 0 {
		return c
	}
	switch {
	case a.Tomb == b.Tomb:
		return 0
	case a.Tomb:
		return 1
	default:
		return -1
	}
}

// sameIdentity reports whether a and b are the same binding (or the same
// tombstone), whatever their expiries: compareIdentity(a, b) == 0.
func sameIdentity(a, b value) bool {
	a.Expires = b.Expires
	return a == b
}

// merge returns the winner of a and b. Values of the same identity keep the
// later expiry: refreshes only ever extend. merge is commutative,
// associative and idempotent (dskit's Mergeable), which is what lets every
// replica converge whatever order and however often deltas arrive.
//
// Expiry itself is outside merge: a value whose Expires has passed on this
// replica's clock is absent, and the state treats it so before merging.
func merge(a, b value) value {
	switch c := compareIdentity(a, b); {
	case c > 0:
		return a
	case c < 0:
		return b
	}
	a.Expires = max(a.Expires, b.Expires)
	return a
}
