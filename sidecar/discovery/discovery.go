// Package discovery says which backends a pool may send to right now. A
// Source publishes immutable Sets; the resolver reads the current one on
// every request, so a backend that leaves the set is never chosen again.
package discovery

import (
	"context"
	"sync/atomic"
	"time"
)

// MaxIDLen is the longest backend ID discovery produces: a pod's
// namespace (63), name (253) and UID (36) joined by two slashes; a static
// backend's host:port is shorter (a DNS name is at most 253 bytes). Stores
// refuse longer IDs from the wire: no backend of any pool can have one.
const MaxIDLen = 63 + 1 + 253 + 1 + 36

// Backend is one model-server endpoint.
type Backend struct {
	// ID is the stable identity bindings store: host:port for static
	// backends, namespace/name/uid for pods (a pod recreated under the same
	// name has a cold cache and is a new backend).
	ID string
	// Name is what logs and metrics show: host:port or namespace/name.
	Name string
	// Addr is the host:port to dial.
	Addr string
	// Group is the PD group-label value; pairs form only inside one group.
	Group string
	// Since is when the backend's server began its current run (for pods:
	// the serving container's startedAt, the same on every replica). A
	// binding created before Since predates a restart, whose cache is
	// cold, and is stale; a readiness blip does not move it, so pins
	// survive one. Zero for static backends.
	Since time.Time
}

// Set is an immutable snapshot of the selectable backends of a pool.
// Backends holds the decode side of PD pools; Prefill is empty otherwise.
type Set struct {
	Backends []Backend
	Prefill  []Backend
	byID     map[string]*Backend
	byAddr   map[string]bool
}

// NewSet indexes backends and prefill backends into a Set.
func NewSet(backends, prefill []Backend) *Set {
	n := len(backends) + len(prefill)
	s := &Set{Backends: backends, Prefill: prefill, byID: make(map[string]*Backend, n), byAddr: make(map[string]bool, n)}
	for _, list := range [][]Backend{s.Backends, s.Prefill} {
		for i := range list {
			s.byID[list[i].ID] = &list[i]
			s.byAddr[list[i].Addr] = true
		}
	}
	return s
}

// HasAddr reports whether host:port belongs to a backend of the Set.
func (s *Set) HasAddr(addr string) bool { return s != nil && s.byAddr[addr] }

// Get returns the selectable backend with id.
func (s *Set) Get(id string) (Backend, bool) {
	if s == nil {
		return Backend{}, false
	}
	b, ok := s.byID[id]
	if !ok {
		return Backend{}, false
	}
	return *b, true
}

// Len is the number of selectable backends (both halves of PD pools).
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.byID)
}

// Source provides a pool's backends.
type Source interface {
	// Current is the latest Set; never nil once Synced.
	Current() *Set
	// Synced reports whether the source has its first complete view.
	Synced() bool
	// Run keeps the Set current until ctx ends.
	Run(ctx context.Context) error
}

// Static is a fixed list of addresses, for local runs and tests.
type Static struct{ set atomic.Pointer[Set] }

// NewStatic returns a Source of the given host:port addresses.
func NewStatic(addrs []string) *Static {
	bs := make([]Backend, len(addrs))
	for i, a := range addrs {
		bs[i] = Backend{ID: a, Name: a, Addr: a}
	}
	s := &Static{}
	s.set.Store(NewSet(bs, nil))
	return s
}

func (s *Static) Current() *Set                 { return s.set.Load() }
func (s *Static) Synced() bool                  { return true }
func (s *Static) Run(ctx context.Context) error { <-ctx.Done(); return nil }
