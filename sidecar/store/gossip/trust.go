package gossip

import (
	"time"

	"github.com/tetherproxy/tether/sidecar/store"
)

// What a replica takes from the ring. The key (memberlist's keyring) keeps
// out everyone who does not hold it; what a key holder sends, a bug in a
// peer or a peer with another configuration mid-rollout, is still held to
// this replica's own limits, record by record:
//
//   - a generation above store.MaxGeneration is refused: it would
//     supersede every later rebind of the session for good;
//   - a record must name backends that one of this replica's pools lists
//     now (its prefill backend too, in the same pool): a binding to anything
//     else could never be used here, and refusing it keeps forged backend
//     names out of memory (the decoder already refuses names longer than a
//     backend ID can be);
//   - its time left is clamped to the TTL of the pools that list its
//     backends (a tombstone's to twice that plus TombstoneGrace, its own
//     lifetime), so no record outlives what this replica would give it.
//
// The pool of a record is not on the wire (the key is a hash of pool and
// session key): it is found through the backends the record names, which
// discovery maps to pools. A backend in several pools takes the longest of
// their TTLs. Until every pool's discovery has its first view, "unknown"
// does not mean foreign, so records are refused (counted as not_synced) and
// no state transfer is pulled; the transfer pulled once discovery is synced
// brings what was refused.

// Limits is this replica's knowledge of its pools, against which the store
// judges every record from the ring. The server implements it over the
// pools' discovery; nil (tests, benchmarks) applies only the wire's bounds.
type Limits interface {
	// BindingTTL returns the longest TTL of the pools that list pod (and
	// prefill, when not empty) among their selectable backends; ok is
	// false when none does.
	BindingTTL(pod, prefill string) (ttl time.Duration, ok bool)
	// Synced reports whether every pool's discovery has its first view.
	Synced() bool
}

// Reasons a record from the ring is dropped, the reason label of
// tether_gossip_records_dropped_total.
const (
	dropGeneration     = "generation"      // above store.MaxGeneration
	dropUnknownBackend = "unknown_backend" // no pool here lists its backends
	dropNotSynced      = "not_synced"      // discovery has no first view yet
	dropWorkReport     = "work_report"     // a work report of an epoch out of use, or from a non-member (work.go)
)

var dropReasons = []string{dropGeneration, dropUnknownBackend, dropNotSynced, dropWorkReport}

// admit turns a record from the ring into the value this replica may merge,
// or says why it is dropped. clamped reports an expiry cut to the limit.
func (s *Store) admit(r record, now int64) (v value, drop string, clamped bool) {
	if r.Gen > store.MaxGeneration {
		return value{}, dropGeneration, false
	}
	limit := int64(maxTTL)
	if l := s.opts.Limits; l != nil {
		if !l.Synced() {
			return value{}, dropNotSynced, false
		}
		ttl, ok := l.BindingTTL(r.Pod, r.Prefill)
		if !ok {
			return value{}, dropUnknownBackend, false
		}
		limit = ttlMs(ttl)
		if r.Tomb {
			limit = 2*limit + s.opts.TombstoneGrace.Milliseconds()
		}
	}
	if r.TTL > limit {
		r.TTL, clamped = limit, true
	}
	return r.value(now), "", clamped
}

// limitsSynced reports whether records can be judged (always, without Limits).
func (s *Store) limitsSynced() bool { return s.opts.Limits == nil || s.opts.Limits.Synced() }
