package resolve

import (
	"time"

	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/pincost"
	"github.com/tetherproxy/tether/sidecar/usage"
)

// moveReason is soft affinity's test of d's pin on be, placed at since:
// the reason to move it now, or "" to keep it.
//
// A pin whose last turn through this replica found its cache gone (cold)
// may move at once, with no cool-down: it has no cache left to lose, so
// it goes wherever the first token is expected sooner (cost policy), or
// to a shorter queue (threshold policy). Otherwise a pin that was itself
// a move (moved: a break or a rebind) is kept for the cool-down since it
// was placed, so a session is never moved again within it; a first
// placement has no cool-down — the balancer chose it when its queue was
// short, and a queue that built up since (an agent's burst) is what soft
// affinity is for. Backends without a fresh sample are not candidates:
// an unknown queue is no reason to move a warm session.
func (r *Resolver) moveReason(set *discovery.Set, d *Decision, be discovery.Backend, since time.Time, moved bool) Reason {
	a := r.o.Affinity
	if !a.Soft || r.o.Load == nil {
		return ""
	}
	cold := d.KeyHash != "" && r.cold.Take(d.KeyHash, be.ID, r.o.Now())
	if !cold && moved && r.o.Now().Sub(since) < a.Cooldown {
		return ""
	}
	var move bool
	switch {
	case a.Cost:
		move = r.costlier(set, d, be, cold)
	case cold:
		move = r.shorterQueue(set, be, 0, 0)
	default:
		move = r.shorterQueue(set, be, a.MaxWaiting, a.LoadMargin)
	}
	switch {
	case !move:
		return ""
	case cold:
		return ReasonCacheEvicted
	}
	return ReasonOverload
}

// shorterQueue is the threshold policy: be's queue is over maxWaiting
// and more than margin above the least-waiting other live backend.
func (r *Resolver) shorterQueue(set *discovery.Set, be discovery.Backend, maxWaiting, margin float64) bool {
	w, ok := r.o.Load.Waiting(be.ID)
	if !ok || w <= maxWaiting {
		return false
	}
	least, found := 0.0, false
	for _, c := range set.Backends {
		if c.ID == be.ID || r.o.Outliers.Ejected(c.ID) {
			continue
		}
		if cw, ok := r.o.Load.Waiting(c.ID); ok && (!found || cw < least) {
			least, found = cw, true
		}
	}
	return found && w-least > margin
}

// costlier is the cost policy: another live backend is expected to reach
// the turn's first token sooner than be by the cost margin (by any margin
// when the pin is cold: it has no cache to protect). The other backend
// compared is the least-queued, which the move's pick (by load) favours.
func (r *Resolver) costlier(set *discovery.Set, d *Decision, be discovery.Backend, cold bool) bool {
	w, run, ok := r.o.Load.Queue(be.ID)
	if !ok {
		return false
	}
	pinned := pincost.Load{Waiting: w, Running: run}
	var best pincost.Load
	found := false
	for _, c := range set.Backends {
		if c.ID == be.ID || r.o.Outliers.Ejected(c.ID) {
			continue
		}
		if cw, cr, ok := r.o.Load.Queue(c.ID); ok && (!found || cw < best.Waiting || cw == best.Waiting && cr < best.Running) {
			best, found = pincost.Load{Waiting: cw, Running: cr}, true
		}
	}
	if !found {
		return false
	}
	margin := r.o.Affinity.CostMargin
	if cold {
		margin = 0
	}
	return r.est.Compare(d.bodyBytes, pinned, best, cold).Better(margin)
}

// Report is what the response to a decision showed.
type Report struct {
	Header   time.Duration // until the response headers
	Duration time.Duration // the whole request
	Usage    usage.Usage
}

// Reported is called with the usage a backend reported for d. In soft
// pools it teaches the cost estimates, and marks a kept pin whose turn
// found its cache gone (pincost.IsCold) cold for its next turn.
func (r *Resolver) Reported(d *Decision, rep Report) {
	if r.est == nil || d == nil || d.Backend.ID == "" {
		return
	}
	u := rep.Usage
	queued := false
	if r.o.Load != nil {
		w, ok := r.o.Load.Waiting(d.Backend.ID)
		queued = !ok || w > 0
	}
	kept := d.Outcome == Hit
	r.est.Learn(pincost.Turn{BodyBytes: d.bodyBytes, PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens,
		HasCached: u.HasCached, Kept: kept, Header: rep.Header, Duration: rep.Duration, Queued: queued})
	if kept && u.HasCached && d.KeyHash != "" && pincost.IsCold(u.PromptTokens, u.CachedTokens) {
		r.cold.Mark(d.KeyHash, d.Backend.ID, r.o.Now().Add(d.pol.TTL))
	}
}
