// Package balance chooses a backend for a new or rebound session: least
// estimated load (own outstanding requests plus load scraped from the
// backends) with power-of-two choices among the near-equals of the least
// loaded, so a burst of new sessions spreads out instead of piling onto
// whichever backend looked least loaded a moment ago (the herd effect of
// plain least-loaded).
package balance

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/tetherproxy/tether/sidecar/discovery"
)

// Balancer tracks this replica's outstanding requests per backend and
// picks among candidates. It is safe for concurrent use.
type Balancer struct {
	mu       sync.Mutex
	inflight map[string]int64
	extra    func(id string) float64
	intN     func(n int) int
	hash     bool    // Place chooses by session key (WithHashPlacement)
	epsilon  float64 // how far above the mean load a hashed choice may be
	// bindings bounds hashed choices by live sessions as well (WithBindingBound).
	bindings       BindingCounter
	bindingEpsilon float64
	// work bounds hashed choices by recent request bytes (WithWorkBound);
	// nil without that bound.
	work           map[string]decayed
	workEpsilon    float64
	workView       WorkView           // what the work bound reads instead of work (WithWorkView)
	workSweepAbove int                // Carry's next sweep, once work holds more backends
	passedOver     func(bound string) // WithPassedOver

	// unanswered counts, per backend, the outstanding requests that have
	// no response headers yet (Sent, Answered).
	unanswered map[string]int64
	// due are, per backend, the timed requests whose first token has not
	// arrived yet (Due, Done).
	due   map[string]pending
	epoch time.Time // due times and work are kept as microseconds since
	now   func() time.Time
}

// pending are one backend's timed requests, in microseconds since the
// Balancer's epoch: when the first tokens of those not done are due (a
// few: this replica's streams to one backend waiting for their first
// token), and when the backlog the last done one showed drains: it was
// late by L at T, so the backend was L behind then, and is caught up at
// T + L if nothing more queues (0: it was on time).
type pending struct {
	dues     []int64
	drainsAt int64
}

// backlog is how far behind p says the backend is at nowUS, in µs (0:
// not behind).
func (p pending) backlog(nowUS int64) int64 {
	var late int64
	if p.drainsAt != 0 {
		late = p.drainsAt - nowUS
	}
	for _, d := range p.dues {
		late = max(late, nowUS-d)
	}
	return max(late, 0)
}

// drained reports whether p says nothing any more at nowUS.
func (p pending) drained(nowUS int64) bool { return len(p.dues) == 0 && p.backlog(nowUS) <= 0 }

// sweepAbove is how many backends' timing the Balancer holds before Done
// forgets the drained ones: a backend gone from the pool is asked about
// no more (Behind forgets the others).
const sweepAbove = 1024

// Option configures a Balancer.
type Option func(*Balancer)

// WithExtraLoad adds load this replica cannot count itself (for example
// queue lengths scraped from the backends, which include other replicas'
// requests) to each backend's score.
func WithExtraLoad(f func(id string) float64) Option { return func(b *Balancer) { b.extra = f } }

// WithClock sets the clock that ages recent work (WithWorkBound);
// time.Now by default.
func WithClock(now func() time.Time) Option { return func(b *Balancer) { b.now = now } }

// WithRand replaces the random source (tests make choices deterministic).
func WithRand(intN func(n int) int) Option { return func(b *Balancer) { b.intN = intN } }

// New returns a Balancer.
func New(opts ...Option) *Balancer {
	b := &Balancer{inflight: make(map[string]int64), unanswered: make(map[string]int64), due: make(map[string]pending),
		intN: rand.IntN, now: time.Now}
	for _, o := range opts {
		o(b)
	}
	b.epoch = b.now()
	return b
}

// Acquire counts one outstanding request on backend id until release is
// called. release is idempotent.
func (b *Balancer) Acquire(id string) (release func()) {
	b.Hold(id)
	var once sync.Once
	return func() { once.Do(func() { b.Release(id) }) }
}

// Hold counts one outstanding request on backend id until Release(id):
// Acquire without a closure, for the proxy's hot path, which releases
// each hold exactly once.
func (b *Balancer) Hold(id string) {
	b.mu.Lock()
	b.inflight[id]++
	b.mu.Unlock()
}

// Release ends one Hold (or Acquire) of backend id.
func (b *Balancer) Release(id string) {
	b.mu.Lock()
	if b.inflight[id]--; b.inflight[id] <= 0 {
		delete(b.inflight, id) // backends come and go: keep the map small
	}
	b.mu.Unlock()
}

// Outstanding is the number of requests this replica has in flight on id.
func (b *Balancer) Outstanding(id string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight[id]
}

// Sent counts a request sent to backend id as unanswered until Answered
// is called for it (its response headers arrived, or the attempt ended
// without them): the caller calls Answered once for every Sent.
func (b *Balancer) Sent(id string) {
	b.mu.Lock()
	b.unanswered[id]++
	b.mu.Unlock()
}

// Answered ends the count of one request Sent to id.
func (b *Balancer) Answered(id string) {
	b.mu.Lock()
	if b.unanswered[id]--; b.unanswered[id] <= 0 {
		delete(b.unanswered, id)
	}
	b.mu.Unlock()
}

// Unanswered is the number of this replica's requests to id that have no
// response headers yet. A backend that never answers keeps them; a retry
// prefers a backend without any (resolve.Retry).
func (b *Balancer) Unanswered(id string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.unanswered[id]
}

// Due times a request sent to backend id whose first token is expected
// by due (sent, plus the backend's expected work before it: its
// prefill), until Done is called with the same due (the first token
// arrived, or the attempt ended without it): the caller calls Done once
// for every Due.
func (b *Balancer) Due(id string, due time.Time) {
	us := due.Sub(b.epoch).Microseconds()
	b.mu.Lock()
	p := b.due[id]
	p.dues = append(p.dues, us)
	b.due[id] = p
	b.mu.Unlock()
}

// Done ends the timing of one request Due on id by due: its first token
// arrived at arrived, or the attempt ended without one (arrived is zero:
// a failure or a client gone says nothing of the backend's backlog).
func (b *Balancer) Done(id string, due, arrived time.Time) {
	us := due.Sub(b.epoch).Microseconds()
	b.mu.Lock()
	p := b.due[id]
	if i := slices.Index(p.dues, us); i >= 0 {
		p.dues[i] = p.dues[len(p.dues)-1]
		p.dues = p.dues[:len(p.dues)-1]
	}
	var at int64
	if !arrived.IsZero() {
		at = arrived.Sub(b.epoch).Microseconds()
		p.drainsAt = 0
		if late := at - us; late > 0 {
			p.drainsAt = at + late
		}
	}
	if len(p.dues) == 0 && p.drainsAt == 0 {
		delete(b.due, id) // nothing pending, no backlog: nothing to say
	} else {
		b.due[id] = p
	}
	if !arrived.IsZero() && len(b.due) > sweepAbove {
		for k, q := range b.due {
			if q.drained(at) {
				delete(b.due, k)
			}
		}
	}
	b.mu.Unlock()
}

// Behind is how far behind backend id is at now: how late the oldest of
// this replica's timed requests to it is, or, when longer, how late the
// last one to get its first token was, less the time since (a backlog
// drains as time passes). It sees a backend fall behind as it happens
// (a long prefill holding its compute delays everything queued behind
// it), where a scraped queue length says nothing until requests wait for
// a slot, and it keeps seeing it between requests: a replica that moved
// its sessions away has none there to be late.
func (b *Balancer) Behind(id string, now time.Time) time.Duration {
	nowUS := now.Sub(b.epoch).Microseconds()
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.due[id]
	if !ok {
		return 0
	}
	if p.drained(nowUS) {
		delete(b.due, id)
		return 0
	}
	return time.Duration(p.backlog(nowUS)) * time.Microsecond
}

// Load is the score Pick minimises: own outstanding requests plus extra load.
func (b *Balancer) Load(id string) float64 {
	l := float64(b.Outstanding(id))
	if b.extra != nil {
		l += b.extra(id)
	}
	return l
}

// NearEqual is how much more loaded than the least-loaded candidate a
// backend may be and still be one of the "near-equals" the two random
// choices are drawn from: one request.
const NearEqual = 1.0

// Pick chooses among the candidates that usable accepts (nil accepts all):
// the least estimated load wins, by power-of-two choices among the
// near-equals of the least loaded (within NearEqual), ties broken at
// random. Drawing from near-equals instead of taking the minimum keeps
// replicas that see the same scraped load from all sending their next
// session to the same backend. ok is false when no candidate is usable.
func (b *Balancer) Pick(cands []discovery.Backend, usable func(discovery.Backend) bool) (discovery.Backend, bool) {
	type cand struct {
		i    int
		load float64
	}
	cs := make([]cand, 0, len(cands))
	least := math.Inf(1)
	for i := range cands {
		if usable != nil && !usable(cands[i]) {
			continue
		}
		l := b.Load(cands[i].ID)
		cs = append(cs, cand{i, l})
		least = min(least, l)
	}
	near := cs[:0]
	for _, c := range cs {
		if c.load <= least+NearEqual {
			near = append(near, c)
		}
	}
	k, ok := b.twoChoices(len(near), func(k int) float64 { return near[k].load })
	if !ok {
		return discovery.Backend{}, false
	}
	return cands[near[k].i], true
}

// PickPair chooses a decode backend and a prefill backend of the same
// group. Only groups that have both a usable decode and a usable prefill
// backend are candidates: a half pair is never chosen.
func (b *Balancer) PickPair(decode, prefill []discovery.Backend, usable func(discovery.Backend) bool) (d, p discovery.Backend, ok bool) {
	return b.PlacePair("", decode, prefill, usable)
}

// twoChoices returns the index in [0,n) of the less loaded of two distinct
// random candidates.
func (b *Balancer) twoChoices(n int, load func(int) float64) (int, bool) {
	switch n {
	case 0:
		return 0, false
	case 1:
		return 0, true
	}
	i := b.intN(n)
	j := b.intN(n - 1)
	if j >= i {
		j++
	}
	li, lj := load(i), load(j)
	switch {
	case li < lj:
		return i, true
	case lj < li:
		return j, true
	case b.intN(2) == 0:
		return i, true
	default:
		return j, true
	}
}
