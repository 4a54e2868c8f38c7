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
// compared is the one with the least expected queue wait.
func (r *Resolver) costlier(set *discovery.Set, d *Decision, be discovery.Backend, cold bool) bool {
	pinned, ok := r.queue(be.ID)
	if !ok {
		return false
	}
	_, best, _, found := r.soonest(set, be.ID, nil)
	if !found {
		return false
	}
	margin := r.o.Affinity.CostMargin
	if cold {
		margin = 0
	}
	return r.est.Compare(d.bodyBytes, pinned, best, cold).Better(margin)
}

// sooner is the cost policy's say in a placement (a new session, a
// rebind, a moved pin) that chose backend chosen: another live backend
// that also accepts (nil: any), where the session's first token is
// expected sooner by the cost margin, or chosen. The session's prompt is
// cached on neither, so its prefill is the same on both and only the
// queue wait (the scraped queue, and how late this replica's requests
// are: a long prefill holding a backend's compute) differs. Outside the
// cost policy, in PD pools (their pair is placed together) and without
// fresh scrapes, it is chosen.
func (r *Resolver) sooner(set *discovery.Set, d *Decision, chosen discovery.Backend, also func(discovery.Backend) bool) discovery.Backend {
	if r.est == nil || !r.o.Affinity.Cost || r.o.Load == nil || d.pol.PD {
		return chosen
	}
	cl, ok := r.queue(chosen.ID)
	if !ok {
		return chosen
	}
	best, _, bestWait, found := r.soonest(set, chosen.ID, also)
	if !found {
		return chosen
	}
	prefill := r.est.Prefill(d.bodyBytes, false)
	if (pincost.Estimate{Keep: r.est.QueueWait(cl) + prefill, Move: bestWait + prefill}).Better(r.o.Affinity.CostMargin) {
		r.m.diverted().Inc()
		return best
	}
	return chosen
}

// soonest is the live backend other than skip that also accepts (nil:
// any) with the least expected queue wait (ties: fewer running), with its
// load and that wait; found is false when none has a fresh scrape.
func (r *Resolver) soonest(set *discovery.Set, skip string, also func(discovery.Backend) bool) (be discovery.Backend, l pincost.Load, wait time.Duration, found bool) {
	for _, c := range set.Backends {
		if c.ID == skip || r.o.Outliers.Ejected(c.ID) || also != nil && !also(c) {
			continue
		}
		if cl, ok := r.queue(c.ID); ok {
			if w := r.est.QueueWait(cl); !found || w < wait || w == wait && cl.Running < l.Running {
				be, l, wait, found = c, cl, w, true
			}
		}
	}
	return be, l, wait, found
}

// queue is backend id's load as the cost policy sees it: the scraped
// queue, and how late this replica's requests to it are. ok is false
// without a fresh scrape.
func (r *Resolver) queue(id string) (pincost.Load, bool) {
	w, run, ok := r.o.Load.Queue(id)
	if !ok {
		return pincost.Load{}, false
	}
	var behind time.Duration
	if r.o.Balancer != nil {
		behind = r.o.Balancer.Behind(id, r.o.Now())
	}
	return pincost.Load{Waiting: w, Running: run, Behind: behind}, true
}

// FirstTokenDue is how long d's backend is expected to take before the
// first token of d's stream, with no queue: its prefill. ok is true when
// the proxy should time it (balance.Balancer.Due, until the stream's first
// bytes): in a pool whose cost policy learns the prefill rate, for a
// request that asked for a stream. A whole response is not timed: it
// arrives after its decode, which says nothing of a queue.
func (r *Resolver) FirstTokenDue(d *Decision) (prefill time.Duration, ok bool) {
	if r.est == nil || !r.o.Affinity.Cost || d == nil || !d.stream {
		return 0, false
	}
	return r.est.Prefill(d.bodyBytes, d.Outcome == Hit), true
}

// Report is what the response to a decision showed.
type Report struct {
	// FirstToken is the time until a stream's first token (its first
	// body bytes: servers such as vLLM send a stream's headers before
	// any work), for a stream FirstTokenDue timed; 0 otherwise.
	FirstToken time.Duration
	Duration   time.Duration // the whole request
	Usage      usage.Usage
}

// Reported is called with the usage a backend reported for d. In soft
// pools it teaches the cost estimates, and marks a kept pin whose turn
// found its cache gone (pincost.IsCold) cold for its next turn.
func (r *Resolver) Reported(d *Decision, rep Report) {
	if r.est == nil || d == nil || d.Backend.ID == "" {
		return
	}
	u := rep.Usage
	// A turn that waited says nothing of the prefill rate: one sent to a
	// backend with requests waiting, or whose requests are late now.
	queued := false
	if r.o.Load != nil {
		w, ok := r.o.Load.Waiting(d.Backend.ID)
		queued = !ok || w > 0 || r.o.Balancer != nil && r.o.Balancer.Behind(d.Backend.ID, r.o.Now()) > 0
	}
	kept := d.Outcome == Hit
	r.est.Learn(pincost.Turn{BodyBytes: d.bodyBytes, PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens,
		HasCached: u.HasCached, Kept: kept, FirstToken: rep.FirstToken, Duration: rep.Duration, Queued: queued})
	if kept && u.HasCached && d.KeyHash != "" && pincost.IsCold(u.PromptTokens, u.CachedTokens) {
		r.cold.Mark(d.KeyHash, d.Backend.ID, r.o.Now().Add(d.pol.TTL))
	}
}
