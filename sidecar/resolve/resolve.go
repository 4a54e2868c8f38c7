// Package resolve is the sticky decision: session key → binding → backend.
// It reads the request only through its Extractor and knows nothing else
// of HTTP, so it is tested with fakes of the store and discovery.
package resolve

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
)

// ErrNoBackend means the pool has no selectable backend (or pair) now.
var ErrNoBackend = errors.New("no selectable backend")

// Extractor finds a request's session key and the type of source that gave it.
type Extractor interface {
	Extract(r *http.Request) (key, source string)
}

// Decision is where one request goes and why.
type Decision struct {
	Backend discovery.Backend
	// Prefill is the prefill half of a PD pair; zero outside PD pools.
	Prefill  discovery.Backend
	Decision string // metrics.Decision*
	Source   string // the source type that yielded the key; "" without key
	KeyHash  string // short hash of the key for logs; never the key
	// StoreError is set when the store failed and stickiness was skipped.
	StoreError bool

	storeKey string
	binding  store.Binding // the binding the request follows, when sticky
	sticky   bool
}

// Options wires a Resolver. Every field but Now and Log is required.
type Options struct {
	Pool     string
	TTL      time.Duration
	PD       bool
	Keys     Extractor
	Store    store.Store
	Backends discovery.Source
	Balancer *balance.Balancer
	Failed   *FailSet
	Metrics  *metrics.Metrics
	Now      func() time.Time
	Log      *slog.Logger
}

// Resolver makes the sticky decision for one pool.
type Resolver struct{ o Options }

// New returns a Resolver.
func New(o Options) *Resolver {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Resolver{o: o}
}

// Pool is the pool this resolver decides for.
func (r *Resolver) Pool() string { return r.o.Pool }

// Resolve decides the backend for req. It fails only when no backend is
// selectable; a store error degrades to balancing without stickiness.
func (r *Resolver) Resolve(ctx context.Context, req *http.Request) (*Decision, error) {
	set := r.o.Backends.Current()
	key, source := r.o.Keys.Extract(req)
	if key == "" {
		return r.unsticky(set, &Decision{})
	}
	d := &Decision{Source: source, KeyHash: session.ShortHash(r.o.Pool, key), storeKey: session.StoreKey(r.o.Pool, key)}
	b, ok, err := r.o.Store.Lookup(ctx, d.storeKey, r.o.TTL)
	if err != nil {
		return r.storeFailed(set, d, "lookup", err)
	}
	if ok {
		if be, pf, usable := r.usable(set, b); usable {
			d.Backend, d.Prefill, d.binding, d.sticky, d.Decision = be, pf, b, true, metrics.DecisionHit
			r.o.Metrics.Sessions.WithLabelValues(r.o.Pool, metrics.DecisionHit).Inc()
			return d, nil
		}
		return r.rebind(ctx, set, d, b, metrics.ReasonUnselectable)
	}
	return r.bind(ctx, set, d, store.Binding{Gen: 1}, metrics.DecisionMiss)
}

// Retry is called when d's backend refused the connection before any
// response byte reached the client: the backend is marked failed, a sticky
// session is rebound, and the caller retries once on the new decision.
func (r *Resolver) Retry(ctx context.Context, d *Decision) (*Decision, error) {
	// The connection went to d.Backend (the decode half of a PD pair):
	// that is the backend known to be dead.
	r.o.Failed.Mark(d.Backend.ID)
	r.o.Metrics.BackendFailures.WithLabelValues(r.o.Pool).Inc()
	set := r.o.Backends.Current()
	nd := &Decision{Source: d.Source, KeyHash: d.KeyHash, storeKey: d.storeKey}
	if !d.sticky {
		return r.unsticky(set, nd)
	}
	return r.rebind(ctx, set, nd, d.binding, metrics.ReasonConnectFailed)
}

// rebind removes the stale binding old (only if it is still the one in the
// store) and binds anew with a higher generation, which supersedes old
// wherever replicas disagree.
func (r *Resolver) rebind(ctx context.Context, set *discovery.Set, d *Decision, old store.Binding, reason string) (*Decision, error) {
	if _, err := r.o.Store.CompareAndDelete(ctx, d.storeKey, old); err != nil {
		return r.storeFailed(set, d, "delete", err)
	}
	r.o.Metrics.Rebinds.WithLabelValues(r.o.Pool, reason).Inc()
	return r.bind(ctx, set, d, store.Binding{Gen: old.Gen + 1}, metrics.DecisionRebind)
}

// bind chooses a backend and commits it create-if-absent: when another
// replica committed first, its choice is used if it is usable.
func (r *Resolver) bind(ctx context.Context, set *discovery.Set, d *Decision, nb store.Binding, decision string) (*Decision, error) {
	be, pf, ok := r.pick(set)
	if !ok {
		return nil, ErrNoBackend
	}
	nb.Pod, nb.PrefillPod, nb.Created = be.ID, pf.ID, r.o.Now()
	won, err := r.o.Store.Create(ctx, d.storeKey, nb, r.o.TTL)
	if err != nil {
		d.Backend, d.Prefill = be, pf
		return r.storeFailed(set, d, "create", err)
	}
	if !won.SameTarget(nb) {
		if wbe, wpf, usable := r.usable(set, won); usable {
			be, pf, nb = wbe, wpf, won
		}
		// An unusable winner (a peer bound to a backend this replica
		// already sees as gone) is left to the next turn to rebind.
	}
	d.Backend, d.Prefill, d.binding, d.sticky, d.Decision = be, pf, nb, true, decision
	r.o.Metrics.Sessions.WithLabelValues(r.o.Pool, decision).Inc()
	return d, nil
}

// storeFailed balances without stickiness after a store error.
func (r *Resolver) storeFailed(set *discovery.Set, d *Decision, op string, err error) (*Decision, error) {
	r.o.Metrics.StoreFallbacks.WithLabelValues(r.o.Pool, op).Inc()
	d.StoreError = true
	if d.Backend.ID != "" {
		d.Decision = metrics.DecisionNone
		return d, nil
	}
	return r.unsticky(set, d)
}

func (r *Resolver) unsticky(set *discovery.Set, d *Decision) (*Decision, error) {
	be, pf, ok := r.pick(set)
	if !ok {
		return nil, ErrNoBackend
	}
	d.Backend, d.Prefill, d.Decision = be, pf, metrics.DecisionNone
	return d, nil
}

func (r *Resolver) pick(set *discovery.Set) (be, pf discovery.Backend, ok bool) {
	live := func(b discovery.Backend) bool { return !r.o.Failed.Failed(b.ID) }
	if r.o.PD {
		return r.o.Balancer.PickPair(set.Backends, set.Prefill, live)
	}
	be, ok = r.o.Balancer.Pick(set.Backends, live)
	return be, pf, ok
}

// usable resolves a binding against the current set: every backend it names
// must be selectable, not failed, and in the life it was bound in (a
// binding older than the backend's Since predates a restart or a NotReady
// period and is not resurrected).
func (r *Resolver) usable(set *discovery.Set, b store.Binding) (be, pf discovery.Backend, ok bool) {
	if be, ok = r.current(set, b.Pod, b.Created); !ok {
		return be, pf, false
	}
	if r.o.PD {
		if pf, ok = r.current(set, b.PrefillPod, b.Created); !ok || pf.Group != be.Group {
			return be, pf, false
		}
	}
	return be, pf, true
}

func (r *Resolver) current(set *discovery.Set, id string, created time.Time) (discovery.Backend, bool) {
	be, ok := set.Get(id)
	if !ok || r.o.Failed.Failed(id) || created.Before(be.Since) {
		return discovery.Backend{}, false
	}
	return be, true
}
