// Package store defines where session bindings live. The implementations
// (memory, redisstore, gossip) know no HTTP and no Kubernetes: they map an
// opaque key — a hash of (pool, session key), never the raw key — to a
// Binding with a sliding TTL. Each is built the same way, New(ctx, cfg,
// Options) (*Store, error), with its part of the config and what the
// config does not say (registry, logger, tuning) in Options.
package store

import (
	"context"
	"errors"
	"time"
)

// Binding pins a session. Pod and PrefillPod are backend IDs as discovery
// reports them; PrefillPod is empty outside prefill/decode pools.
type Binding struct {
	Pod        string
	PrefillPod string
	// Created is when the binding was first committed (the creator's
	// clock). Of two concurrent creations of one generation the earlier wins.
	Created time.Time
	// Gen counts rebinds of the session: a rebind after the bound backend
	// became unselectable writes Gen+1 and supersedes every lower generation.
	Gen uint64
	// ExpiresAt is when the binding lapses unless refreshed. Stores fill it
	// on Lookup and Peek; it is ignored on Create.
	ExpiresAt time.Time
}

// MaxGeneration bounds Binding.Gen. A generation counts rebinds of one
// session, a handful in its life; 2^32 of them are beyond any real
// session, so a higher generation from a peer is forged or corrupt and is
// refused (it would otherwise supersede every real binding of the session
// for good), and NextGeneration saturates here instead of wrapping to 0
// (which would lose to every binding).
const MaxGeneration = 1<<32 - 1

// NextGeneration is the generation of a rebind of a binding of gen g:
// g+1, saturating at MaxGeneration.
func NextGeneration(g uint64) uint64 {
	if g >= MaxGeneration {
		return MaxGeneration
	}
	return g + 1
}

// SameTarget reports whether a and b name the same backends and generation:
// the identity CompareAndDelete compares.
func (b Binding) SameTarget(o Binding) bool {
	return b.Pod == o.Pod && b.PrefillPod == o.PrefillPod && b.Gen == o.Gen
}

// Store is a shared or local map from session hash to Binding.
//
// Every method is safe for concurrent use. A returned error means the store
// could not answer (Redis down, timeout); callers degrade to balancing
// without stickiness, they never fail the request for it.
type Store interface {
	// Lookup returns the live binding for key and slides its expiry to
	// now+ttl in the same operation.
	Lookup(ctx context.Context, key string, ttl time.Duration) (Binding, bool, error)
	// Create commits b if key has no live binding and returns the binding
	// that holds afterwards: b itself, or the one another replica
	// committed first, which the caller must use instead.
	Create(ctx context.Context, key string, b Binding, ttl time.Duration) (Binding, error)
	// CompareAndDelete removes key's binding only while it is still old
	// (SameTarget), so a stale delete never removes a newer binding.
	// It reports whether it deleted.
	CompareAndDelete(ctx context.Context, key string, old Binding) (bool, error)
	// Peek returns the live binding without refreshing it.
	Peek(ctx context.Context, key string) (Binding, bool, error)
	// Close releases the store's resources; a gossip store leaves its ring.
	Close() error
}

// Counter is implemented by stores that know how many bindings they hold
// (for the tether_bindings_live gauge).
type Counter interface {
	Len() int
}

// BindingCounter is implemented by stores that can count the bindings
// naming each backend (memory and gossip: all they hold; redisstore: those
// this replica has seen, in a memory store). Hashed placement bounds the
// sessions a backend carries by it where the store is shared (gossip,
// Redis): replicas with per-replica memory stores agree by the hash alone,
// and counts of their own would part them.
type BindingCounter interface {
	// CountBindings sets n[i] to the number of bindings that name ids[i]
	// as their pod or prefill pod. Expired bindings count until swept
	// (within a second); deleted ones do not.
	CountBindings(ids []string, n []int)
}

// WorkSharer is implemented by stores that share each replica's recent
// work per backend with the others (gossip), so that the work bound of
// hashed placement reads the same view on every replica: Redis needs no
// such view, its first create settles what replicas propose.
type WorkSharer interface {
	// ShareWork adds src to this replica's share of the view: src adds
	// its recent request bytes per backend as of at.
	ShareWork(src func(at time.Time, add func(id string, bytes float64)))
	// Work sets w[i] to the view's recent request bytes on ids[i].
	Work(ids []string, w []float64)
}

// ErrUnavailable wraps errors of a store that is temporarily not answering
// (a breaker is open, a timeout passed).
var ErrUnavailable = errors.New("store unavailable")
