// Package resolve is the sticky decision: session key → binding → backend.
// It reads the request only through its Extractor (a session.Key: the key,
// its source and, for a session token, the payload verified there) and
// knows nothing else of HTTP, so it is tested with fakes of the store and
// discovery. A Decision says where the request goes, the Outcome (hit,
// miss, rebind, none, broken: the words of the metrics and the access
// log), and the session tokens the response carries.
package resolve

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/jsonscan"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/pincost"
	"github.com/tetherproxy/tether/sidecar/reqview"
	"github.com/tetherproxy/tether/sidecar/responses"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/token"
)

// ErrNoBackend means the pool has no selectable backend (or pair) now.
var ErrNoBackend = errors.New("no selectable backend")

// ErrUnavailable is wrapped by a Policy's Down error: the pool has no
// usable definition (its ModelServer was deleted or is invalid). The
// error says why and names no backend, so the client may see it.
var ErrUnavailable = errors.New("pool unavailable")

// Extractor finds a request's session key (session.Extractor; tests fake it).
type Extractor interface {
	ExtractFrom(v reqview.View) session.Key
}

// Outcome is what the resolver did with a request's session: the
// decision label of the metrics and the access log.
type Outcome string

// Outcomes.
const (
	Hit    Outcome = "hit"    // the bound backend was selectable and used
	Miss   Outcome = "miss"   // no binding: a backend was chosen and bound
	Rebind Outcome = "rebind" // the binding was stale: a new backend was bound
	None   Outcome = "none"   // no session key (or no store): balanced, not bound
	Broken Outcome = "broken" // soft affinity broke an overloaded pin
)

// Reason is why a session was moved to another backend (the reason label
// of tether_session_rebinds_total).
type Reason string

// Rebind reasons.
const (
	ReasonUnselectable  Reason = "unselectable"   // the bound backend left the selectable set
	ReasonEjected       Reason = "ejected"        // outlier detection ejected the bound backend
	ReasonConnectFailed Reason = "connect_failed" // the bound backend refused a connection (retried)
	ReasonEmptyResponse Reason = "empty_response" // a connection closed or reset before any response byte (retried)
	ReasonTimeout       Reason = "timeout"        // no response headers within the first-byte timeout (retried)
	ReasonOverload      Reason = "overload"       // soft affinity: the pinned backend's queue
	ReasonCacheEvicted  Reason = "cache_evicted"  // soft affinity: the pin's last turn found its cache gone
)

// Decision is where one request goes and why.
type Decision struct {
	Backend discovery.Backend
	// Prefill is the prefill half of a PD pair; zero outside PD pools.
	Prefill discovery.Backend
	Outcome Outcome
	Source  config.SourceType // the source type that yielded the key; "" without key
	KeyHash string            // the store key (a hash of pool and key) for logs and /debug/bindings; never the key
	// StoreError is set when the store failed and stickiness was skipped.
	StoreError bool
	// Since is when the session was placed on Backend (the binding's or
	// the token's time; now for a new placement). Session tokens carry it.
	Since time.Time
	// Tokens are the response headers that carry the session's tokens
	// (pool.sessionToken), for the proxy to set over any a backend set;
	// empty when the pool has no session tokens.
	Tokens []Header
	// Cookies are Set-Cookie values carrying the session token
	// (pool.sessionToken.cookie), for the proxy to add beside any cookie
	// the backend set; empty without a token cookie.
	Cookies []string
	// Timeout bounds the wait for the backend's response headers (a
	// ModelServer's trafficPolicy.timeout); 0 leaves it to the transport.
	Timeout time.Duration

	pol      Policy // the pool's policy the decision was made under
	storeKey string
	binding  store.Binding // the binding the request follows, when sticky
	sticky   bool
	pinned   bool   // only this backend holds the stored response the request names
	learn    bool   // the request stores a response: bind its id (Answered)
	avoid    string // a backend the next pick should avoid (overloaded pin)
	// bodyBytes is the request body's size: the prompt's, for the cost
	// policy's estimates and to learn bytes per token.
	bodyBytes int
	// stream: the request asked for a streamed response (read only under
	// the cost policy, which times its first token).
	stream bool
	// tried are the backends this request failed on before (Retry): a
	// retry goes to none of them.
	tried []string
}

// Header is one response header.
type Header struct{ Name, Value string }

// Policy is what a pool's definition says about its sessions. It may
// change while the sidecar runs (an edit of the ModelServer that defines
// the pool), so the resolver reads it once per request: a request sees one
// policy whole, and the next one the new policy.
type Policy struct {
	// Keys finds a request's session key; nil for a pool without
	// sessionSticky, whose requests are all balanced and bind nothing.
	Keys Extractor
	// TTL is the bindings' sliding time to live (and a token cookie's Max-Age).
	TTL time.Duration
	// Timeout bounds the wait for a backend's response headers; 0: none
	// beyond the transport's.
	Timeout time.Duration
	// PD says the pool routes to prefill/decode pairs (a ModelServer
	// with a pdGroup is one).
	PD bool
	// Down, when set, fails every request with it: the pool has no
	// definition now (its ModelServer was deleted, or is invalid).
	Down error
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
	// Outliers are the pool's ejected backends; nil ejects none.
	Outliers *outlier.Detector
	Metrics  *metrics.Metrics
	Now      func() time.Time
	Log      *slog.Logger
	// Affinity is the pinning policy; the zero value is hard affinity.
	Affinity Affinity
	// Load reports scraped queue lengths (soft affinity); nil without scraping.
	Load LoadReader
	// StoreKeys turns session keys into store keys; nil: unkeyed SHA-256
	// (session.StoreKey).
	StoreKeys *session.KeyHasher
	// Responses are the Responses API metrics; nil: not exported.
	Responses *responses.Metrics
	// ResponseGrace is how long a response id without a binding is looked
	// up again before it is routed as any request: the time a binding
	// written by a peer replica may take to arrive (gossip). 0 for stores
	// where a write is visible to every replica at once (Redis).
	ResponseGrace time.Duration
	// Tokens signs the session tokens every decision carries; nil when
	// the pool has no session tokens. (Keys routes by the tokens of
	// requests, verified once, by the same codec.)
	Tokens *token.Codec
	// Policy, when set, is read on every request and replaces Keys, TTL
	// and PD (a pool defined by a ModelServer); nil: Keys, TTL and PD are
	// the policy, Keys nil making the pool non-sticky.
	Policy func() Policy
}

// Affinity is the soft-affinity policy (README "Affinity policy"). A
// moved pin (a break or a rebind) is kept for Cooldown since it was
// placed. Under the threshold policy a pin is broken when the pinned
// backend has more than MaxWaiting requests waiting, more than LoadMargin
// above the least-waiting other backend; under the cost policy when
// another backend is expected to reach the first token sooner by
// CostMargin (pincost). Under either, a pin whose last turn found its
// cache gone (cold) may move at once to a backend expected sooner.
type Affinity struct {
	Soft       bool
	Cost       bool // the cost policy; false: threshold
	MaxWaiting float64
	LoadMargin float64
	Cooldown   time.Duration
	CostMargin float64
	// PrefillTokensPerSecond fixes the prefill rate; 0 learns it.
	PrefillTokensPerSecond float64
}

// AffinityFrom converts a pool's config.
func AffinityFrom(a config.Affinity) Affinity {
	margin := config.DefaultCostMargin
	if a.CostMargin != nil {
		margin = *a.CostMargin
	}
	return Affinity{Soft: a.Mode == config.AffinitySoft, Cost: a.Policy == config.PolicyCost,
		MaxWaiting: float64(a.MaxWaiting), LoadMargin: float64(a.LoadMargin), Cooldown: a.Cooldown.Duration,
		CostMargin: margin, PrefillTokensPerSecond: float64(a.PrefillTokensPerSecond)}
}

// LoadReader reports a backend's scraped queue; ok is false without a
// fresh sample. loadscrape.Scraper implements it.
type LoadReader interface {
	Waiting(id string) (float64, bool)
	Queue(id string) (waiting, running float64, ok bool)
}

// Resolver makes the sticky decision for one pool.
type Resolver struct {
	o  Options
	m  poolMetrics
	rm responseMetrics
	// est and cold serve soft affinity: the pool's learned figures and
	// the sessions whose pin went cold; nil in hard pools.
	est  *pincost.Estimator
	cold *pincost.Cold
}

// poolMetrics are the resolver's children of the request-path metrics,
// taken once for its pool (metrics.Child).
type poolMetrics struct {
	sessions  map[Outcome]func() prometheus.Counter
	rebinds   map[Reason]func() prometheus.Counter
	broken    map[Reason]func() prometheus.Counter // tether_affinity_broken_total{reason}
	fallbacks map[string]func() prometheus.Counter
	diverted  func() prometheus.Counter // tether_placements_diverted_total
}

func newPoolMetrics(m *metrics.Metrics, pool string) poolMetrics {
	pm := poolMetrics{
		sessions:  map[Outcome]func() prometheus.Counter{},
		rebinds:   map[Reason]func() prometheus.Counter{},
		broken:    map[Reason]func() prometheus.Counter{},
		fallbacks: map[string]func() prometheus.Counter{},
	}
	for _, o := range []Outcome{Hit, Miss, Rebind, Broken} {
		pm.sessions[o] = metrics.Child(m.Sessions.WithLabelValues, pool, string(o))
	}
	for _, r := range []Reason{ReasonUnselectable, ReasonEjected, ReasonConnectFailed, ReasonEmptyResponse, ReasonTimeout, ReasonOverload, ReasonCacheEvicted} {
		pm.rebinds[r] = metrics.Child(m.Rebinds.WithLabelValues, pool, string(r))
	}
	for _, r := range []Reason{ReasonOverload, ReasonCacheEvicted} {
		pm.broken[r] = metrics.Child(m.AffinityBroken.WithLabelValues, pool, string(r))
	}
	for _, op := range []string{opLookup, opCreate, opDelete} {
		pm.fallbacks[op] = metrics.Child(m.StoreFallbacks.WithLabelValues, pool, op)
	}
	pm.diverted = metrics.Child(m.PlacementsDiverted.WithLabelValues, pool)
	return pm
}

// Store operations, the op label of tether_store_fallbacks_total.
const (
	opLookup = "lookup"
	opCreate = "create"
	opDelete = "delete"
)

// New returns a Resolver.
func New(o Options) *Resolver {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	r := &Resolver{o: o, m: newPoolMetrics(o.Metrics, o.Pool), rm: newResponseMetrics(o.Responses, o.Pool)}
	r.setAffinity(o.Affinity)
	return r
}

// setAffinity sets the pinning policy, with soft affinity's state.
func (r *Resolver) setAffinity(a Affinity) {
	r.o.Affinity, r.est, r.cold = a, nil, nil
	if a.Soft {
		r.est = pincost.New(a.PrefillTokensPerSecond)
		r.cold = pincost.NewCold(maxColdMarks)
	}
}

// maxColdMarks bounds the cold pins remembered (pincost.Cold): a mark
// lives from one turn to the next, so this is the cold sessions between
// two turns, a few KiB each thousand.
const maxColdMarks = 16384

// Resolve decides the backend for req. It fails when no backend is
// selectable or the pool is down, and with a *responses.LostError when
// req names a stored response whose backend is gone; a store error degrades to balancing
// without stickiness.
func (r *Resolver) Resolve(ctx context.Context, req *http.Request) (*Decision, error) {
	return r.ResolveInto(ctx, req, nil)
}

// ResolveInto is Resolve making the decision in into, whatever it held
// (a request's own, so that deciding costs it no allocation); nil: in a
// new one. The decision returned is into, unless Resolve failed.
func (r *Resolver) ResolveInto(ctx context.Context, req *http.Request, into *Decision) (*Decision, error) {
	return r.ResolveViewInto(ctx, reqview.OfRequest(req), into)
}

// ResolveViewInto is ResolveInto reading the request through v.
func (r *Resolver) ResolveViewInto(ctx context.Context, v reqview.View, into *Decision) (*Decision, error) {
	call := responses.ParseFrom(v)
	d, err, done := r.resolveCall(ctx, call, into)
	if !done {
		d, err = r.resolve(ctx, v, into)
	}
	if err == nil {
		d.learn = call.Kind == responses.Create && call.Stores
	}
	return r.withTokens(d, err)
}

// policy is the pool's policy now.
func (r *Resolver) policy() Policy {
	if r.o.Policy != nil {
		return r.o.Policy()
	}
	return Policy{Keys: r.o.Keys, TTL: r.o.TTL, PD: r.o.PD}
}

func (r *Resolver) resolve(ctx context.Context, req reqview.View, into *Decision) (*Decision, error) {
	pol := r.policy()
	if pol.Down != nil {
		return nil, pol.Down
	}
	set := r.o.Backends.Current()
	if pol.Keys == nil {
		return r.unsticky(set, made(into, pol))
	}
	key := pol.Keys.ExtractFrom(req)
	if key.Value == "" {
		return r.unsticky(set, made(into, pol))
	}
	// One hash serves the store, the log and /debug/bindings?keyHash=.
	sk := r.o.StoreKeys.StoreKey(r.o.Pool, key.Value)
	body := req.Body()
	d := made(into, pol)
	d.Source, d.KeyHash, d.bodyBytes = key.Source, sk, body.Len()
	if r.o.Affinity.Cost {
		d.stream = body.Value("stream").Kind == jsonscan.True
	}
	if key.Source == config.SourceToken {
		return r.fromToken(set, d, key.Token)
	}
	d.storeKey = sk
	b, ok, err := r.o.Store.Lookup(ctx, d.storeKey, pol.TTL)
	if err != nil {
		return r.storeFailed(set, d, opLookup, err)
	}
	if ok {
		if be, pf, usable := r.usable(set, b, pol.PD); usable {
			if reason := r.moveReason(set, d, be, b.Created, b.Gen > 1); reason != "" {
				return r.rebind(ctx, set, d, b, reason)
			}
			d.Backend, d.Prefill, d.binding, d.sticky, d.Outcome, d.Since = be, pf, b, true, Hit, b.Created
			r.m.sessions[Hit]().Inc()
			return d, nil
		}
		reason := ReasonUnselectable
		if r.o.Outliers.Ejected(b.Pod) {
			reason = ReasonEjected
		}
		return r.rebind(ctx, set, d, b, reason)
	}
	return r.bind(ctx, set, d, store.Binding{Gen: 1}, Miss)
}

// made is a new decision under pol, in into when into is not nil (its
// old fields cleared), else in a new Decision. The fields are set in
// place rather than copied from a literal: a Decision is about half a
// kilobyte, and each literal would be a temporary in the caller's stack
// frame, which a new connection's goroutine grows by copying
// (docs/hop-cost.md "What the first half second costs").
func made(into *Decision, pol Policy) *Decision {
	if into == nil {
		into = new(Decision)
	} else {
		*into = Decision{}
	}
	into.pol, into.Timeout = pol, pol.Timeout
	return into
}

// Retry is called when d's backend failed before any response byte
// reached the client (the caller reported the failure to the pool's
// outlier detection): a new decision avoids that backend, a sticky session
// is rebound to it (counted under reason), and the caller retries once.
// A request pinned to d's backend (the stored response it names is there
// only) is refused with ErrPinned: moving it cannot succeed.
func (r *Resolver) Retry(ctx context.Context, d *Decision, reason Reason) (*Decision, error) {
	if d.pinned {
		return nil, ErrPinned
	}
	set := r.o.Backends.Current()
	// The connection went to d.Backend (the decode half of a PD pair):
	// that is the backend known to have failed, ejected or not.
	tried := append(slices.Clip(d.tried), d.Backend.ID)
	if !r.untried(set, tried) {
		return nil, ErrNoBackend
	}
	nd := &Decision{Source: d.Source, KeyHash: d.KeyHash, storeKey: d.storeKey, avoid: d.Backend.ID, tried: tried,
		learn: d.learn, pol: d.pol, Timeout: d.Timeout, bodyBytes: d.bodyBytes, stream: d.stream}
	if !d.sticky {
		return r.withTokens(r.unsticky(set, nd))
	}
	return r.withTokens(r.rebind(ctx, set, nd, d.binding, reason))
}

// untried reports whether a live backend is not among tried.
func (r *Resolver) untried(set *discovery.Set, tried []string) bool {
	for _, b := range set.Backends {
		if !slices.Contains(tried, b.ID) && !r.o.Outliers.Ejected(b.ID) {
			return true
		}
	}
	return false
}

// withTokens makes a decision carry the session tokens of its placement:
// the backend (and prefill backend) it goes to, placed at d.Since, valid
// for the pool's TTL from now. Only a request with a session key (a token
// included) gets one: a keyless request has no session to keep. Two
// exceptions: a pool without sessionSticky has no sessions at all, and a
// pool with a token cookie gives a keyless request one anyway, since for
// a browser the cookie is the session (HAProxy's "cookie insert").
func (r *Resolver) withTokens(d *Decision, err error) (*Decision, error) {
	c := r.o.Tokens
	if err != nil || c == nil || d.Backend.ID == "" || d.pol.Keys == nil || (d.Source == "" && c.CookieName() == "") {
		return d, err
	}
	main := c.Sign(d.Backend.ID, d.Prefill.ID, d.Since)
	d.Tokens = append(make([]Header, 0, 2), Header{c.Header(), main})
	if d.Prefill.ID != "" && c.PrefillHeader() != "" {
		d.Tokens = append(d.Tokens, Header{c.PrefillHeader(), c.Prefill(d.Prefill.ID, d.Since)})
	}
	if c.CookieName() != "" {
		d.Cookies = []string{c.Cookie(main, d.pol.TTL)}
	}
	return d, nil
}

// rebind removes the stale binding old (only if it is still the one in the
// store) and binds anew with a higher generation, which supersedes old
// wherever replicas disagree.
func (r *Resolver) rebind(ctx context.Context, set *discovery.Set, d *Decision, old store.Binding, reason Reason) (*Decision, error) {
	if _, err := r.o.Store.CompareAndDelete(ctx, d.storeKey, old); err != nil {
		return r.storeFailed(set, d, opDelete, err)
	}
	r.m.rebinds[reason]().Inc()
	if broken := r.m.broken[reason]; broken != nil {
		broken().Inc()
		d.avoid = old.Pod
		return r.bind(ctx, set, d, store.Binding{Gen: store.NextGeneration(old.Gen)}, Broken)
	}
	return r.bind(ctx, set, d, store.Binding{Gen: store.NextGeneration(old.Gen)}, Rebind)
}

// fromToken routes by a session token's payload (verified by the
// extractor): to its backend while that is selectable and not failed and
// (soft affinity) not overloaded; otherwise balanced, and the response
// carries a new token. No store is involved.
func (r *Resolver) fromToken(set *discovery.Set, d *Decision, p token.Payload) (*Decision, error) {
	be, ok := r.find(set.Backends, p.Backend)
	if ok {
		since := time.Time{}
		if p.Since != 0 {
			since = time.Unix(p.Since, 0)
		}
		// A token does not say whether it was a move: keep the cool-down.
		if reason := r.moveReason(set, d, be, since, true); reason != "" {
			r.m.broken[reason]().Inc()
			r.m.sessions[Broken]().Inc()
			d.avoid = be.ID
			nd, err := r.unsticky(set, d)
			if err == nil {
				nd.Outcome = Broken
			}
			return nd, err
		}
		var pf discovery.Backend
		if d.pol.PD {
			if pf, ok = r.find(set.Prefill, p.Prefill); !ok || pf.Group != be.Group {
				// The pair's prefill half is gone: any prefill of the group.
				pf, ok = r.o.Balancer.Pick(set.Prefill, func(c discovery.Backend) bool {
					return c.Group == be.Group && !r.o.Outliers.Ejected(c.ID)
				})
			}
		}
		if ok {
			d.Backend, d.Prefill, d.Outcome, d.Since = be, pf, Hit, since
			r.m.sessions[Hit]().Inc()
			return d, nil
		}
	}
	r.m.sessions[Miss]().Inc()
	nd, err := r.unsticky(set, d)
	if err == nil {
		nd.Outcome = Miss
	}
	return nd, err
}

// find returns the live backend of list whose ID (signed tokens) or Name
// (llm-d's unsigned namespace/name) is ref.
func (r *Resolver) find(list []discovery.Backend, ref string) (discovery.Backend, bool) {
	if ref == "" {
		return discovery.Backend{}, false
	}
	for _, b := range list {
		if (b.ID == ref || b.Name == ref) && !r.o.Outliers.Ejected(b.ID) {
			return b, true
		}
	}
	return discovery.Backend{}, false
}

// bind chooses a backend and commits it create-if-absent: when another
// replica committed first, its choice is used if it is usable.
func (r *Resolver) bind(ctx context.Context, set *discovery.Set, d *Decision, nb store.Binding, outcome Outcome) (*Decision, error) {
	be, pf, ok := r.pick(set, d)
	if !ok {
		return nil, ErrNoBackend
	}
	nb.Pod, nb.PrefillPod, nb.Created = be.ID, pf.ID, r.o.Now()
	d.Since = nb.Created
	won, err := r.o.Store.Create(ctx, d.storeKey, nb, d.pol.TTL)
	if err != nil {
		d.Backend, d.Prefill = be, pf
		return r.storeFailed(set, d, opCreate, err)
	}
	if !won.SameTarget(nb) {
		if wbe, wpf, usable := r.usable(set, won, d.pol.PD); usable {
			be, pf, nb = wbe, wpf, won
			d.Since = won.Created
		}
		// An unusable winner (a peer bound to a backend this replica
		// already sees as gone) is left to the next turn to rebind.
	}
	d.Backend, d.Prefill, d.binding, d.sticky, d.Outcome = be, pf, nb, true, outcome
	r.m.sessions[outcome]().Inc()
	return d, nil
}

// storeFailed balances without stickiness after a store error.
func (r *Resolver) storeFailed(set *discovery.Set, d *Decision, op string, err error) (*Decision, error) {
	r.m.fallbacks[op]().Inc()
	d.StoreError = true
	if d.Backend.ID != "" {
		d.Outcome = None
		return d, nil
	}
	return r.unsticky(set, d)
}

func (r *Resolver) unsticky(set *discovery.Set, d *Decision) (*Decision, error) {
	be, pf, ok := r.pick(set, d)
	if !ok {
		return nil, ErrNoBackend
	}
	d.Backend, d.Prefill, d.Outcome, d.Since = be, pf, None, r.o.Now()
	return d, nil
}

// pick places d among the live backends, by its store key when it has one
// (Balancer.Place). A session being moved off an overloaded backend
// (d.avoid) goes to the least loaded other backend if any is live: soft
// affinity moves it for load, which the key's next choice may not relieve.
func (r *Resolver) pick(set *discovery.Set, d *Decision) (be, pf discovery.Backend, ok bool) {
	if d.avoid != "" {
		avoid := d.avoid
		d.avoid = ""
		// Preferably a backend with no sign of trouble: not failing now (a
		// failure since its last success, not ejected yet) and holding
		// none of this replica's requests before their response headers
		// (a backend that stopped answering keeps them): a retry sent to
		// the other of two faulty backends would fail too.
		for _, ok := range []func(discovery.Backend) bool{
			func(b discovery.Backend) bool {
				return !r.o.Outliers.Failing(b.ID) && r.o.Balancer.Unanswered(b.ID) == 0
			},
			func(b discovery.Backend) bool { return !r.o.Outliers.Failing(b.ID) },
			func(discovery.Backend) bool { return true },
		} {
			also := func(b discovery.Backend) bool {
				return b.ID != avoid && !slices.Contains(d.tried, b.ID) && ok(b)
			}
			if be, pf, found := r.pickIf(set, d, "", also); found {
				return r.sooner(set, d, be, also), pf, true
			}
		}
	}
	be, pf, ok = r.pickIf(set, d, d.storeKey, func(discovery.Backend) bool { return true })
	if ok {
		be = r.sooner(set, d, be, nil)
	}
	return be, pf, ok
}

func (r *Resolver) pickIf(set *discovery.Set, d *Decision, key string, also func(discovery.Backend) bool) (be, pf discovery.Backend, ok bool) {
	live := func(b discovery.Backend) bool { return !r.o.Outliers.Ejected(b.ID) && also(b) }
	// By the session's store key, so replicas (and this one while the
	// store is down) propose the same backend; without a key, by load.
	// While the store is down, without the bindings bound: replicas'
	// counts differ, and no store settles what they disagree on.
	place, placePair := r.o.Balancer.Place, r.o.Balancer.PlacePair
	if d.StoreError {
		place, placePair = r.o.Balancer.PlaceAgreed, r.o.Balancer.PlacePairAgreed
	}
	if d.pol.PD {
		return placePair(key, set.Backends, set.Prefill, live)
	}
	be, ok = place(key, set.Backends, live)
	return be, pf, ok
}

// usable resolves a binding against the current set: every backend it names
// must be selectable now (present, not terminating, Ready), not ejected,
// and in the run it was bound in: a binding older than the backend's Since
// predates a restart of its server (or a recreated pod, a new ID) and is
// not resurrected. A readiness blip moves no Since, so it keeps the pin.
func (r *Resolver) usable(set *discovery.Set, b store.Binding, pd bool) (be, pf discovery.Backend, ok bool) {
	if be, ok = r.current(set, b.Pod, b.Created); !ok {
		return be, pf, false
	}
	if pd {
		if pf, ok = r.current(set, b.PrefillPod, b.Created); !ok || pf.Group != be.Group {
			return be, pf, false
		}
	}
	return be, pf, true
}

func (r *Resolver) current(set *discovery.Set, id string, created time.Time) (discovery.Backend, bool) {
	be, ok := set.Get(id)
	if !ok || r.o.Outliers.Ejected(id) || created.Before(be.Since) {
		return discovery.Backend{}, false
	}
	return be, true
}
