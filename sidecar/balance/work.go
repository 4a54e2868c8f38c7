package balance

import (
	"math"
	"time"
)

// The bindings bound deals sessions out evenly, but sessions are not
// alike: one conversation resends a few hundred tokens a turn, another
// tens of thousands, and a backend dealt a few of the long ones overflows
// its prefix cache while holding no more sessions than the others. In
// the stickiness bench (B = 4, 150 conversations) the runs in which a
// shared store fell under 0.98 of the oracle's hit rate were those whose
// placement sent one backend 1.3–1.5× the mean prompt tokens while it
// held 1.07–1.15× the mean sessions (the report's "token imbalance").
//
// So hashed placement is bounded by recent work as well: each request's
// body (the whole conversation so far, resent every turn) counts on the
// backend it is sent to, decaying by half every WorkHalfLife, and a
// backend carrying more than (1+ε) × the mean is passed over for a new
// session's next choice. Each replica counts only the requests it
// forwards; behind a Service those are a random sample of all of them,
// so every replica sees the same backends heavy, if less sharply the more
// replicas share the traffic. Replicas may then propose different
// backends for one new session: a store whose first create wins at once
// (Redis) settles it before the request is sent. A gossip ring settles it
// only once the binding has gone round, so there the bound reads a view
// of every replica's counts that all of them read alike (WithWorkView;
// the gossip store's Work), fed by each replica's own counts (WorkAt).

// DefaultWorkEpsilon is the work bound's ε when a pool bounded by work
// does not set it.
const DefaultWorkEpsilon = 0.2

// WorkHalfLife is how fast a request's bytes stop counting: a
// conversation's turns come seconds to minutes apart, and a backend whose
// long conversations ended is light again within a minute or two.
const WorkHalfLife = 30 * time.Second

// WithWorkBound bounds hashed placement by the request bytes each backend
// was sent recently (Carry; see DefaultWorkEpsilon), where the bindings
// bound applies: Place with WithBindingBound, not PlaceAgreed. Without
// WithHashPlacement it does nothing.
func WithWorkBound(epsilon float64) Option {
	return func(b *Balancer) { b.workEpsilon, b.work = epsilon, make(map[string]decayed) }
}

// WorkView sets w[i] to the recent work on backend ids[i] as a view
// shared by every replica sees it.
type WorkView func(ids []string, w []float64)

// WithWorkView has the work bound read view instead of this Balancer's
// own counts, which Carry still keeps for WorkAt. Without WithWorkBound
// it does nothing.
func WithWorkView(view WorkView) Option { return func(b *Balancer) { b.workView = view } }

// WorkAt calls add with each backend's recent work (Carry) as of at,
// for a view shared with other replicas (the gossip store's ShareWork).
func (b *Balancer) WorkAt(at time.Time, add func(id string, bytes float64)) {
	if b.work == nil {
		return
	}
	t := at.Sub(b.epoch).Microseconds()
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, d := range b.work {
		if v := d.as(t); v >= 1 {
			add(id, v)
		}
	}
}

// decayed is a sum that halves every WorkHalfLife: v as of at (µs since
// the Balancer's epoch).
type decayed struct {
	v  float64
	at int64
}

func (d decayed) as(nowUS int64) float64 {
	if nowUS <= d.at {
		return d.v
	}
	return d.v * math.Exp2(-float64(nowUS-d.at)/float64(WorkHalfLife.Microseconds()))
}

// Carry counts a request of n bytes sent to backend id toward its recent
// work. It does nothing unless the Balancer is bounded by work.
func (b *Balancer) Carry(id string, n int) {
	if b.work == nil || n <= 0 {
		return
	}
	now := b.now().Sub(b.epoch).Microseconds()
	b.mu.Lock()
	b.work[id] = decayed{v: b.work[id].as(now) + float64(n), at: now}
	if len(b.work) > max(sweepAbove, b.workSweepAbove) {
		// Backends come and go: keep the map small. The next sweep waits
		// until the map doubles, so a pool of more live backends than
		// sweepAbove does not sweep on every request.
		for k, d := range b.work {
			if d.as(now) < 1 {
				delete(b.work, k)
			}
		}
		b.workSweepAbove = 2 * len(b.work)
	}
	b.mu.Unlock()
}

// Work is the recent request bytes sent to backend id (Carry), as of now.
func (b *Balancer) Work(id string) float64 {
	if b.work == nil {
		return 0
	}
	now := b.now().Sub(b.epoch).Microseconds()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.work[id].as(now)
}
