package resolve

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/responses"
	"github.com/tetherproxy/tether/sidecar/store"
)

// The Responses API (README "Responses API"): a model server keeps the
// responses it stored in its own memory, so the id of a stored response
// is bound, like a session, to the backend (or PD pair) that produced it;
// a request that names one goes there and nowhere else.

// SourceResponseID is the access log's source of a request routed by the
// stored response it names (not a configurable source type).
const SourceResponseID config.SourceType = "ResponseID"

// ErrPinned refuses a retry of a request that only one backend can
// serve: moving it cannot succeed, so its failure is reported as it is.
var ErrPinned = errors.New("the stored response it names is on this backend only, so it is not retried elsewhere")

// graceStep is how often an unknown response id is looked up again
// within Options.ResponseGrace.
const graceStep = 5 * time.Millisecond

// responseMetrics are the pool's children of responses.Metrics.
type responseMetrics struct {
	lost                 func() prometheus.Counter
	pinned, unknown      func() prometheus.Counter
	bound, noID, failure func() prometheus.Counter
}

func newResponseMetrics(m *responses.Metrics, pool string) responseMetrics {
	if m == nil {
		m = responses.NewMetrics(nil)
	}
	return responseMetrics{
		lost:    metrics.Child(m.Lost.WithLabelValues, pool),
		pinned:  metrics.Child(m.Routed.WithLabelValues, pool, responses.Pinned),
		unknown: metrics.Child(m.Routed.WithLabelValues, pool, responses.Unknown),
		bound:   metrics.Child(m.Learned.WithLabelValues, pool, responses.Bound),
		noID:    metrics.Child(m.Learned.WithLabelValues, pool, responses.NoID),
		failure: metrics.Child(m.Learned.WithLabelValues, pool, responses.StoreError),
	}
}

// responseKey is the store key of a response id (keyed like session
// keys when the store has a key secret): a keyspace of its own in the
// pool (no configured pool name ends in the NUL suffix), so no session key
// can address a response's binding.
func (r *Resolver) responseKey(id string) string {
	return r.o.StoreKeys.StoreKey(r.o.Pool+"\x00responses", id)
}

// resolveCall routes a request by the stored response it names. done is
// false when it names none or tether has no binding for it (or the store
// failed): the request is then routed as any other, and the backend
// answers for an id it does not know. A binding whose backend is no
// longer selectable — gone, ejected, or restarted since (its memory, and
// the response, are gone) — is a *responses.LostError.
func (r *Resolver) resolveCall(ctx context.Context, call responses.Call, into *Decision) (d *Decision, err error, done bool) {
	if call.ID == "" {
		return nil, nil, false
	}
	key := r.responseKey(call.ID)
	b, ok, err := r.o.Store.Lookup(ctx, key, r.o.TTL)
	// A binding written by a peer may still be on its way (gossip): look
	// again for the grace period before calling the id unknown.
	for waited := time.Duration(0); err == nil && !ok && waited < r.o.ResponseGrace; waited += graceStep {
		t := time.NewTimer(graceStep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err(), true
		case <-t.C:
		}
		b, ok, err = r.o.Store.Lookup(ctx, key, r.o.TTL)
	}
	if err != nil {
		r.m.fallbacks[opLookup]().Inc()
		return nil, nil, false
	}
	if !ok {
		r.rm.unknown().Inc()
		return nil, nil, false
	}
	set := r.o.Backends.Current()
	be, live := r.current(set, b.Pod, b.Created)
	if !live {
		r.rm.lost().Inc()
		r.o.Log.Info("stored response lost with its backend", "key_hash", key, "backend", b.Pod)
		return nil, &responses.LostError{ID: call.ID, Param: call.Param()}, true
	}
	var pf discovery.Backend
	if r.o.PD {
		// The decode half holds the response; a prefill half that is gone
		// costs only a cache, so any prefill of the group will do.
		if pf, live = r.current(set, b.PrefillPod, b.Created); !live || pf.Group != be.Group {
			if pf, live = r.o.Balancer.Pick(set.Prefill, func(c discovery.Backend) bool {
				return c.Group == be.Group && !r.o.Outliers.Ejected(c.ID)
			}); !live {
				return nil, ErrNoBackend, true
			}
		}
	}
	r.rm.pinned().Inc()
	d = made(into, Policy{})
	d.Backend, d.Prefill, d.Outcome, d.Source, d.KeyHash = be, pf, Hit, SourceResponseID, key
	d.Since, d.binding, d.pinned = b.Created, b, true
	return d, nil, true
}

// Answered is told of the backend's answer to d's request before its
// body is read. When the request stores a response (POST /v1/responses
// without store: false) and the answer is a success, the body is watched
// as it streams to the client and the response's id is bound to d's
// backend (and prefill backend) in the store, with the pool's TTL, before
// the bytes that carry the id reach the client.
func (r *Resolver) Answered(d *Decision, resp *http.Response) {
	if d == nil || !d.learn || resp.StatusCode != http.StatusOK {
		return
	}
	ctx := resp.Request.Context()
	resp.Body = responses.Watch(resp.Body, resp.Header.Get("Content-Type"), func(id string) { r.bindResponse(ctx, d, id) })
}

func (r *Resolver) bindResponse(ctx context.Context, d *Decision, id string) {
	if id == "" {
		r.rm.noID().Inc()
		return
	}
	key := r.responseKey(id)
	b := store.Binding{Pod: d.Backend.ID, PrefillPod: d.Prefill.ID, Created: r.o.Now(), Gen: 1}
	if _, err := r.o.Store.Create(ctx, key, b, r.o.TTL); err != nil {
		r.rm.failure().Inc()
		r.o.Log.Warn("binding a stored response failed: it can only be continued through luck", "key_hash", key, "err", err)
		return
	}
	r.rm.bound().Inc()
}
