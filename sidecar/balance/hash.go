package balance

import (
	"cmp"
	"math"
	"slices"

	"github.com/tetherproxy/tether/sidecar/discovery"
)

// Placing a session by its key rather than at random lets replicas agree
// before the store does: two replicas that see the same new session at
// once, or every replica while the store is down, propose the same backend
// given the same key and backend set. The hash is rendezvous (highest
// random weight): a backend's arrival or departure moves only the sessions
// it wins or held. Loads bound it (consistent hashing with bounded loads):
// a backend more than (1+ε) × the mean load, plus one request, above the
// others is passed over for the next in the key's order, so a hot key set
// cannot pile onto one backend. Loads differ a little between replicas
// (each counts its own outstanding requests), which is why one request of
// slack keeps light loads from splitting their choices.

// DefaultHashEpsilon is ε when a pool does not set it: a backend may carry
// a quarter more than the mean before new sessions skip it.
const DefaultHashEpsilon = 0.25

// WithHashPlacement makes Place and PlacePair choose by the session key,
// bounded by epsilon (see DefaultHashEpsilon).
func WithHashPlacement(epsilon float64) Option {
	return func(b *Balancer) { b.hash, b.epsilon = true, epsilon }
}

// The load bound sees requests in flight, and a replica with a few of them
// rarely sees a backend busier than the rest; a hash spreads conversations
// unevenly (a draw of a few dozen per backend), and the backend dealt the
// most overflows its prefix cache first. A shared store knows how many
// live sessions each backend carries (gossip: every replica's; Redis:
// those this replica has seen), so the hash is bounded by that as well: a
// backend holding more than (1+ε) × the mean bindings, plus one, is passed
// over for the key's next choice. Replicas whose counts differ may then
// propose different backends for a new session, which the shared store's
// first-writer-wins settles; per-replica memory stores have nothing to
// settle it, so their pools are not bounded by bindings (the server's
// pool wiring decides).

// DefaultBindingEpsilon is the bindings bound's ε when a pool does not set
// it. It is tighter than the load bound's: bindings change slowly and
// every replica of a gossip ring counts nearly the same ones, so a small
// slack does not split replicas' choices. In the model of `make bench`'s
// backends (BenchmarkBoundedPlacementHitRate in e2e/bench/workload) 0.1
// won back more of the hash's gap to the oracle than 0.2, and 0.05 or 0
// no more within the model's noise.
const DefaultBindingEpsilon = 0.1

// BindingCounter counts the bindings naming each backend: n[i] for ids[i].
type BindingCounter func(ids []string, n []int)

// WithBindingBound bounds hashed placement by the bindings count reports
// (see DefaultBindingEpsilon). Without WithHashPlacement it does nothing.
func WithBindingBound(epsilon float64, count BindingCounter) Option {
	return func(b *Balancer) { b.bindingEpsilon, b.bindings = epsilon, count }
}

// Place chooses a backend for the session whose store key is key: by
// rendezvous hashing with bounded loads (and bindings, WithBindingBound)
// when the balancer hashes and key is set, else as Pick.
func (b *Balancer) Place(key string, cands []discovery.Backend, usable func(discovery.Backend) bool) (discovery.Backend, bool) {
	return b.place(key, cands, usable, b.bindings)
}

// PlaceAgreed is Place without the bindings bound, for routing while the
// store is down. Then nothing settles replicas' disagreements, and their
// bindings counts differ most (Redis replicas count samples, frozen at the
// outage's start), while the hash and the load bound, whose slack absorbs
// light loads, give every replica the same answer for most keys.
func (b *Balancer) PlaceAgreed(key string, cands []discovery.Backend, usable func(discovery.Backend) bool) (discovery.Backend, bool) {
	return b.place(key, cands, usable, nil)
}

func (b *Balancer) place(key string, cands []discovery.Backend, usable func(discovery.Backend) bool, bindings BindingCounter) (discovery.Backend, bool) {
	if !b.hash || key == "" {
		return b.Pick(cands, usable)
	}
	kh := fnv64(key)
	type cand struct {
		i      int
		weight uint64
		load   float64
		held   int     // bindings naming the backend
		work   float64 // recent request bytes (WithWorkBound)
	}
	cs := make([]cand, 0, len(cands))
	var sum float64
	for i := range cands {
		if usable != nil && !usable(cands[i]) {
			continue
		}
		l := b.Load(cands[i].ID)
		cs = append(cs, cand{i: i, weight: mix64(kh ^ fnv64(cands[i].ID)), load: l})
		sum += l
	}
	if len(cs) == 0 {
		return discovery.Backend{}, false
	}
	bound := (1+b.epsilon)*sum/float64(len(cs)) + NearEqual
	heldBound, workBound := math.Inf(1), math.Inf(1)
	if bindings != nil {
		ids, held := make([]string, len(cs)), make([]int, len(cs))
		var work []float64 // only with the work bound: nil is all zeros to measure
		if b.work != nil {
			work = make([]float64, len(cs))
		}
		for j, c := range cs {
			ids[j] = cands[c.i].ID
		}
		b.measure(ids, held, work, bindings)
		var totalHeld int
		var totalWork float64
		for j := range cs {
			cs[j].held = held[j]
			totalHeld += held[j]
			if work != nil {
				cs[j].work = work[j]
				totalWork += work[j]
			}
		}
		heldBound = (1+b.bindingEpsilon)*float64(totalHeld)/float64(len(cs)) + NearEqual
		// Bounded with the bindings, for the same reason: replicas' counts
		// differ, and only a shared store settles what they propose.
		if b.work != nil && totalWork > 0 {
			workBound = (1 + b.workEpsilon) * totalWork / float64(len(cs))
		}
	}
	slices.SortFunc(cs, func(x, y cand) int { return cmp.Compare(y.weight, x.weight) })
	chosen := slices.IndexFunc(cs, func(c cand) bool {
		return c.load <= bound && float64(c.held) <= heldBound && c.work <= workBound
	})
	if chosen < 0 {
		// The bounds together can pass over every backend (the one with
		// the fewest bindings may carry the longest conversations, or be
		// the busiest now): bindings give way first, as the coarser
		// measure of what a backend's cache holds, then work; load
		// decides last.
		chosen = slices.IndexFunc(cs, func(c cand) bool { return c.load <= bound && c.work <= workBound })
	}
	if chosen < 0 {
		chosen = slices.IndexFunc(cs, func(c cand) bool { return c.load <= bound })
	}
	if chosen != 0 && b.passedOver != nil {
		switch {
		case cs[0].load > bound:
			b.passedOver(BoundLoad)
		case float64(cs[0].held) > heldBound:
			b.passedOver(BoundBindings)
		default:
			b.passedOver(BoundWork)
		}
	}
	if chosen < 0 {
		// Only a negative epsilon (config refuses one) can put every
		// backend, the least loaded included, above the bound.
		return b.Pick(cands, usable)
	}
	return cands[cs[chosen].i], true
}

// Measures sets held[i] and work[i] to what the bindings and work bounds
// read for backend ids[i] (zero for a bound the Balancer does not have):
// live sessions, and recent request bytes (the shared view, with
// WithWorkView). It reports which of the two bounds the Balancer has.
func (b *Balancer) Measures(ids []string, held []int, work []float64) (bindings, recentWork bool) {
	if !b.hash || b.bindings == nil {
		clear(held)
		clear(work)
		return false, false
	}
	b.measure(ids, held, work, b.bindings)
	return true, b.work != nil
}

// measure fills held from bindings and work from the view or this
// Balancer's own counts (zero without WithWorkBound).
func (b *Balancer) measure(ids []string, held []int, work []float64, bindings BindingCounter) {
	bindings(ids, held)
	switch {
	case b.work == nil:
		clear(work)
	case b.workView != nil:
		b.workView(ids, work)
	default:
		now := b.now().Sub(b.epoch).Microseconds()
		b.mu.Lock()
		for i, id := range ids {
			work[i] = b.work[id].as(now)
		}
		b.mu.Unlock()
	}
}

// Bounds of hashed placement, as WithPassedOver reports them.
const (
	BoundLoad     = "load"     // requests in flight (WithHashPlacement's ε)
	BoundBindings = "bindings" // live sessions (WithBindingBound)
	BoundWork     = "work"     // recent request bytes (WithWorkBound)
)

// WithPassedOver has Place call f with the bound (BoundLoad,
// BoundBindings or BoundWork) that passed over a key's first choice, once per placement
// that did not go to it (for tether_placements_passed_over_total).
func WithPassedOver(f func(bound string)) Option {
	return func(b *Balancer) { b.passedOver = f }
}

// PlacePair is PickPair with the decode backend, then the prefill backend
// of its group, placed by key.
func (b *Balancer) PlacePair(key string, decode, prefill []discovery.Backend, usable func(discovery.Backend) bool) (d, p discovery.Backend, ok bool) {
	return b.placePair(key, decode, prefill, usable, b.bindings)
}

// PlacePairAgreed is PlacePair without the bindings bound (PlaceAgreed).
func (b *Balancer) PlacePairAgreed(key string, decode, prefill []discovery.Backend, usable func(discovery.Backend) bool) (d, p discovery.Backend, ok bool) {
	return b.placePair(key, decode, prefill, usable, nil)
}

func (b *Balancer) placePair(key string, decode, prefill []discovery.Backend, usable func(discovery.Backend) bool, bindings BindingCounter) (d, p discovery.Backend, ok bool) {
	byGroup := make(map[string][]discovery.Backend)
	for _, pb := range prefill {
		if usable == nil || usable(pb) {
			byGroup[pb.Group] = append(byGroup[pb.Group], pb)
		}
	}
	d, ok = b.place(key, decode, func(c discovery.Backend) bool {
		return len(byGroup[c.Group]) > 0 && (usable == nil || usable(c))
	}, bindings)
	if !ok {
		return d, p, false
	}
	p, ok = b.place(key, byGroup[d.Group], nil, bindings)
	return d, p, ok
}

// fnv64 is FNV-1a, the same on every replica (no per-process seed).
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is the splitmix64 finaliser: FNV's low bits alone are too regular
// for a fair rendezvous weight.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
