package resolve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/reqview"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/memory"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// headerKeys reads the session key from X-Session-ID: the resolver's tests
// are about bindings, not extraction.
type headerKeys struct{}

func (headerKeys) ExtractFrom(v reqview.View) session.Key {
	return session.Key{Value: v.Header("X-Session-Id"), Source: config.SourceHeader}
}

// fakeSource is a discovery.Source whose Set the test replaces.
type fakeSource struct{ set atomic.Pointer[discovery.Set] }

func newSource(bs ...discovery.Backend) *fakeSource {
	s := &fakeSource{}
	s.set.Store(discovery.NewSet(bs, nil))
	return s
}
func (s *fakeSource) Current() *discovery.Set        { return s.set.Load() }
func (s *fakeSource) Synced() bool                   { return true }
func (s *fakeSource) Run(context.Context) error      { return nil }
func (s *fakeSource) put(bs, pf []discovery.Backend) { s.set.Store(discovery.NewSet(bs, pf)) }

func be(id string) discovery.Backend { return discovery.Backend{ID: id, Name: id, Addr: id} }

type fixture struct {
	r     *Resolver
	store store.Store
	src   *fakeSource
	now   time.Time
	reg   *prometheus.Registry
	last  Decision // the one the last resolve made
}

func newFixture(t *testing.T, st store.Store, src *fakeSource, pd bool) *fixture {
	t.Helper()
	return newFixtureWith(t, st, src, pd, balance.New())
}

func newFixtureWith(t *testing.T, st store.Store, src *fakeSource, pd bool, bal *balance.Balancer) *fixture {
	t.Helper()
	if st == nil {
		m := newMemory(t, 1000)
		t.Cleanup(func() { m.Close() })
		st = m
	}
	f := &fixture{store: st, src: src, now: time.Unix(1_700_000_000, 0), reg: prometheus.NewRegistry()}
	now := func() time.Time { return f.now }
	f.r = New(Options{
		Pool: "ns/pool", TTL: time.Minute, PD: pd,
		Keys: headerKeys{}, Store: st, Backends: src,
		Balancer: bal,
		Outliers: outlier.New(outlier.Options{Pool: "ns/pool", Now: now, Config: config.OutlierDetection{
			ConsecutiveFailures: 5, BaseEjectionTime: config.Duration{Duration: 10 * time.Second},
			MaxEjectionTime: config.Duration{Duration: time.Minute}, MaxEjectionPercent: 100,
		}}),
		Metrics: metrics.New(f.reg),
		Now:     now,
	})
	return f
}

// newMemory is a memory store of at most n bindings.
func newMemory(t testing.TB, n int) *memory.Store {
	t.Helper()
	m, err := memory.New(context.Background(), &config.MemoryStore{MaxEntries: n}, memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func req(key string) *http.Request {
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	if key != "" {
		r.Header.Set("X-Session-ID", key)
	}
	return r
}

// resolve decides for a request with key, in the decision the fixture
// made the last one in (as ResolveInto is used: whatever that held must
// not show), and returns a copy.
func (f *fixture) resolve(t *testing.T, key string) *Decision {
	t.Helper()
	d, err := f.r.ResolveInto(context.Background(), req(key), &f.last)
	if err != nil {
		t.Fatalf("Resolve(%q): %v", key, err)
	}
	if d != &f.last {
		t.Fatalf("Resolve(%q) decided elsewhere than in the decision it was given", key)
	}
	c := *d
	return &c
}

func TestNoKeyBalancesWithoutBinding(t *testing.T) {
	f := newFixture(t, nil, newSource(be("a"), be("b")), false)
	d := f.resolve(t, "")
	if d.Outcome != None || d.Backend.ID == "" {
		t.Fatalf("decision = %+v", d)
	}
	if n := f.store.(store.Counter).Len(); n != 0 {
		t.Fatalf("a keyless request created %d bindings", n)
	}
}

func TestMissThenHitsStick(t *testing.T) {
	f := newFixture(t, nil, newSource(be("a"), be("b"), be("c")), false)
	first := f.resolve(t, "s1")
	if first.Outcome != Miss || first.Source != "Header" {
		t.Fatalf("first = %+v", first)
	}
	for i := 0; i < 20; i++ {
		d := f.resolve(t, "s1")
		if d.Outcome != Hit || d.Backend.ID != first.Backend.ID {
			t.Fatalf("turn %d: %+v, want hit on %s", i, d, first.Backend.ID)
		}
	}
	if first.KeyHash == "" || first.KeyHash == "s1" {
		t.Fatalf("KeyHash %q must be a hash, not empty or the key", first.KeyHash)
	}
}

func TestStoreHoldsHashNotKey(t *testing.T) {
	f := newFixture(t, nil, newSource(be("a")), false)
	f.resolve(t, "alice@example.com")
	if _, ok, _ := f.store.Peek(context.Background(), session.StoreKey("ns/pool", "alice@example.com")); !ok {
		t.Fatal("binding not stored under StoreKey(pool, key)")
	}
	if _, ok, _ := f.store.Peek(context.Background(), "alice@example.com"); ok {
		t.Fatal("binding stored under the raw key")
	}
}

func TestRebindWhenBoundBackendLeaves(t *testing.T) {
	src := newSource(be("a"), be("b"))
	f := newFixture(t, nil, src, false)
	first := f.resolve(t, "s1")
	var other discovery.Backend
	if first.Backend.ID == "a" {
		other = be("b")
	} else {
		other = be("a")
	}
	src.put([]discovery.Backend{other}, nil)
	d := f.resolve(t, "s1")
	if d.Outcome != Rebind || d.Backend.ID != other.ID {
		t.Fatalf("after removal: %+v, want rebind to %s", d, other.ID)
	}
	if d.binding.Gen != first.binding.Gen+1 {
		t.Fatalf("rebind gen = %d, want %d", d.binding.Gen, first.binding.Gen+1)
	}
	// The old backend returns: the session stays where it was rebound.
	src.put([]discovery.Backend{be("a"), be("b")}, nil)
	for i := 0; i < 10; i++ {
		if d := f.resolve(t, "s1"); d.Outcome != Hit || d.Backend.ID != other.ID {
			t.Fatalf("session moved back: %+v", d)
		}
	}
}

// TestRetryRebindsAway: a retry goes to another backend and rebinds the
// session there; while the failed backend is ejected no session goes to
// it, and the sessions still bound to it rebind with reason "ejected".
func TestRetryRebindsAway(t *testing.T) {
	f := newFixture(t, nil, newSource(be("a"), be("b"), be("c")), false)
	first := f.resolve(t, "s1")
	// Another session on the same backend.
	var other string
	for i := 0; other == ""; i++ {
		if k := fmt.Sprint("other-", i); f.resolve(t, k).Backend.ID == first.Backend.ID {
			other = k
		}
	}
	f.r.o.Outliers.Failure(first.Backend.ID, outlier.ConnectFailed)
	d, err := f.r.Retry(context.Background(), first, ReasonConnectFailed)
	if err != nil {
		t.Fatal(err)
	}
	if d.Backend.ID == first.Backend.ID || d.Outcome != Rebind {
		t.Fatalf("retry = %+v, want rebind away from %s", d, first.Backend.ID)
	}
	// While ejected, no session (new or keyless) goes to the backend.
	for i := 0; i < 20; i++ {
		if got := f.resolve(t, ""); got.Backend.ID == first.Backend.ID {
			t.Fatal("ejected backend chosen for a keyless request")
		}
	}
	if got := f.resolve(t, "s1"); got.Outcome != Hit || got.Backend.ID != d.Backend.ID {
		t.Fatalf("next turn = %+v, want hit on %s", got, d.Backend.ID)
	}
	if got := f.resolve(t, other); got.Outcome != Rebind || got.Backend.ID == first.Backend.ID {
		t.Fatalf("a session bound to the ejected backend: %+v, want rebind elsewhere", got)
	}
	for reason, want := range map[Reason]float64{ReasonConnectFailed: 1, ReasonEjected: 1, ReasonUnselectable: 0} {
		got, _ := testkit.FindMetric(f.reg, "tether_session_rebinds_total", "reason", string(reason))
		if got != want {
			t.Errorf("rebinds{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	// A retry of an unsticky request avoids the failed backend even when
	// it is not ejected.
	for i := 0; i < 20; i++ {
		keyless := f.resolve(t, "")
		if d, err := f.r.Retry(context.Background(), keyless, ReasonEmptyResponse); err != nil || d.Backend.ID == keyless.Backend.ID {
			t.Fatalf("keyless retry from %s: %+v %v", keyless.Backend.ID, d, err)
		}
	}
	// After the ejection the backend is selectable again.
	f.now = f.now.Add(11 * time.Second)
	seen := false
	for i := 0; i < 50 && !seen; i++ {
		seen = f.resolve(t, "").Backend.ID == first.Backend.ID
	}
	if !seen {
		t.Fatal("backend never selectable again after its fail timeout")
	}
}

func TestNoBackend(t *testing.T) {
	f := newFixture(t, nil, newSource(), false)
	if _, err := f.r.Resolve(context.Background(), req("s")); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("err = %v, want ErrNoBackend", err)
	}
}

func TestPoolsAreIndependent(t *testing.T) {
	src := newSource(be("a"), be("b"), be("c"), be("d"))
	m := newMemory(t, 100)
	defer m.Close()
	f1 := newFixture(t, m, src, false)
	f2 := newFixture(t, m, src, false)
	f2.r.o.Pool = "ns/other"
	f1.resolve(t, "same-key")
	if d := f2.resolve(t, "same-key"); d.Outcome != Miss {
		t.Fatalf("second pool saw the first pool's binding: %+v", d)
	}
}

// failingStore fails every operation, as Redis does when it is down.
type failingStore struct{ store.Store }

var errDown = errors.New("redis: connection refused")

func (failingStore) Lookup(context.Context, string, time.Duration) (store.Binding, bool, error) {
	return store.Binding{}, false, errDown
}
func (failingStore) Create(context.Context, string, store.Binding, time.Duration) (store.Binding, error) {
	return store.Binding{}, errDown
}
func (failingStore) CompareAndDelete(context.Context, string, store.Binding) (bool, error) {
	return false, errDown
}

func TestStoreErrorDegradesToUnsticky(t *testing.T) {
	f := newFixture(t, failingStore{}, newSource(be("a"), be("b")), false)
	d := f.resolve(t, "s1")
	if d.Outcome != None || !d.StoreError || d.Backend.ID == "" {
		t.Fatalf("decision on store error = %+v", d)
	}
}

// With hashed placement, two replicas that each bind a new session before
// they see the other's binding (two stores) choose the same backend, and a
// replica whose store is down routes each session where it would have
// bound it.
func TestHashedPlacementAgreesWithoutTheStore(t *testing.T) {
	src := newSource(be("a"), be("b"), be("c"), be("d"))
	hashed := func(st store.Store) *fixture {
		return newFixtureWith(t, st, src, false, balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon)))
	}
	r1, r2, down := hashed(nil), hashed(nil), hashed(failingStore{})
	spread := map[string]bool{}
	for i := range 40 {
		k := fmt.Sprint("session-", i)
		d1, d2, d3 := r1.resolve(t, k), r2.resolve(t, k), down.resolve(t, k)
		if d1.Outcome != Miss || d2.Outcome != Miss || !d3.StoreError {
			t.Fatalf("%s: outcomes %s %s, store error %v", k, d1.Outcome, d2.Outcome, d3.StoreError)
		}
		if d1.Backend.ID != d2.Backend.ID || d3.Backend.ID != d1.Backend.ID {
			t.Fatalf("%s: replica 1 bound %s, replica 2 %s, the replica without store routed to %s",
				k, d1.Backend.ID, d2.Backend.ID, d3.Backend.ID)
		}
		spread[d1.Backend.ID] = true
	}
	if len(spread) < 3 {
		t.Fatalf("40 sessions placed on only %v", spread)
	}
}

// While the store is down a session goes to its key's first choice even
// if that backend holds more than its share of bindings: replicas' counts
// differ, and with no store to settle it they would scatter the session.
// With the store up the bindings bound passes that backend over.
func TestStoreDownPlacesWithoutTheBindingsBound(t *testing.T) {
	src := newSource(be("a"), be("b"), be("c"), be("d"))
	set := src.Current()
	const key = "session-1"
	first, _ := balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon)).Place(session.StoreKey("ns/pool", key), set.Backends, nil)
	crowded := func(ids []string, n []int) {
		for i, id := range ids {
			n[i] = 0
			if id == first.ID {
				n[i] = 100
			}
		}
	}
	bounded := func(st store.Store) *fixture {
		return newFixtureWith(t, st, src, false, balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon),
			balance.WithBindingBound(balance.DefaultBindingEpsilon, crowded)))
	}
	if d := bounded(nil).resolve(t, key); d.Outcome != Miss || d.Backend.ID == first.ID {
		t.Fatalf("with the store up: %s on %s, want a miss placed off %s (100 bindings against none)", d.Outcome, d.Backend.ID, first.ID)
	}
	if d := bounded(failingStore{}).resolve(t, key); !d.StoreError || d.Backend.ID != first.ID {
		t.Fatalf("with the store down: routed to %s (store error %v), want the key's first choice %s", d.Backend.ID, d.StoreError, first.ID)
	}
}

// racingStore plays a peer replica that commits its binding between this
// replica's Lookup and Create.
type racingStore struct {
	store.Store
	peer store.Binding
}

func (s racingStore) Create(ctx context.Context, key string, _ store.Binding, ttl time.Duration) (store.Binding, error) {
	return s.Store.Create(ctx, key, s.peer, ttl)
}

func TestCreateRaceUsesWinner(t *testing.T) {
	m := newMemory(t, 100)
	defer m.Close()
	src := newSource(be("a"), be("b"), be("c"))
	f := newFixture(t, racingStore{Store: m, peer: store.Binding{Pod: "c", Gen: 1}}, src, false)
	for i := 0; i < 10; i++ {
		if d := f.resolve(t, "s1"); d.Backend.ID != "c" {
			t.Fatalf("request went to %s, the peer's binding is c", d.Backend.ID)
		}
	}
}

func TestPDPairPinnedAndReplacedInGroup(t *testing.T) {
	d := func(id, g string) discovery.Backend { b := be(id); b.Group = g; return b }
	src := &fakeSource{}
	src.put([]discovery.Backend{d("d1", "g1"), d("d2", "g2")}, []discovery.Backend{d("p1", "g1"), d("p1b", "g1"), d("p2", "g2")})
	f := newFixture(t, nil, src, true)
	first := f.resolve(t, "s1")
	if first.Prefill.ID == "" || first.Prefill.Group != first.Backend.Group {
		t.Fatalf("pair = %+v / %+v", first.Backend, first.Prefill)
	}
	for i := 0; i < 10; i++ {
		got := f.resolve(t, "s1")
		if got.Outcome != Hit || got.Backend.ID != first.Backend.ID || got.Prefill.ID != first.Prefill.ID {
			t.Fatalf("pair moved: %+v", got)
		}
	}
	// Make g1 the only complete group with two prefill pods, pin there, then
	// drop the bound prefill pod: the new pair stays in g1.
	src.put([]discovery.Backend{d("d1", "g1"), d("d2", "g2")}, []discovery.Backend{d("p1", "g1"), d("p1b", "g1")})
	pinned := f.resolve(t, "s2")
	if pinned.Backend.ID != "d1" {
		t.Fatalf("s2 pinned to %s, only d1 has a group with prefill", pinned.Backend.ID)
	}
	var keep discovery.Backend
	if pinned.Prefill.ID == "p1" {
		keep = d("p1b", "g1")
	} else {
		keep = d("p1", "g1")
	}
	src.put([]discovery.Backend{d("d1", "g1"), d("d2", "g2")}, []discovery.Backend{keep})
	got := f.resolve(t, "s2")
	if got.Outcome != Rebind || got.Backend.ID != "d1" || got.Prefill.ID != keep.ID {
		t.Fatalf("after losing the prefill pod: %+v / %+v, want d1 / %s", got.Backend, got.Prefill, keep.ID)
	}
}

func BenchmarkResolveHit(b *testing.B) {
	m := newMemory(b, 1000)
	defer m.Close()
	r := New(Options{
		Pool: "ns/pool", TTL: time.Minute, Keys: headerKeys{}, Store: m,
		Backends: newSource(be("a"), be("b"), be("c")), Balancer: balance.New(),
		Metrics: metrics.New(prometheus.NewRegistry()),
	})
	rq := req("session-1")
	ctx := context.Background()
	r.Resolve(ctx, rq)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Resolve(ctx, rq); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRetryChoosesAHealthyUntriedBackend: a retry goes to none of the
// backends the request failed on, preferably to one that is not failing
// (a failure since its last success, not ejected yet) and holds none of
// this replica's requests before their response headers (a backend that
// stopped answering keeps them); with no untried backend left it is
// refused.
func TestRetryChoosesAHealthyUntriedBackend(t *testing.T) {
	bal := balance.New()
	f := newFixtureWith(t, nil, newSource(be("a"), be("b"), be("c"), be("d")), false, bal)
	d := f.resolve(t, "s1")
	var others []string
	for _, id := range []string{"a", "b", "c", "d"} {
		if id != d.Backend.ID {
			others = append(others, id)
		}
	}
	failing, silent, healthy := others[0], others[1], others[2]
	f.r.o.Outliers.Failure(failing, outlier.Reset) // one failure: not ejected
	bal.Sent(silent)                               // a request of ours without an answer yet
	for _, want := range []string{healthy, silent, failing} {
		from := d.Backend.ID
		var err error
		if d, err = f.r.Retry(context.Background(), d, ReasonEmptyResponse); err != nil || d.Backend.ID != want {
			t.Fatalf("retry from %s: %+v %v, want %s (%s failing, %s with an unanswered request, %s healthy)",
				from, d, err, want, failing, silent, healthy)
		}
	}
	if _, err := f.r.Retry(context.Background(), d, ReasonTimeout); !errors.Is(err, ErrNoBackend) {
		t.Fatalf("retry after every backend was tried: %v, want ErrNoBackend", err)
	}
	if got := f.resolve(t, "s1"); got.Outcome != Hit || got.Backend.ID != failing {
		t.Fatalf("next turn = %+v, want a hit on the last retry's %s", got, failing)
	}
	if got, _ := testkit.FindMetric(f.reg, "tether_session_rebinds_total", "reason", "empty_response"); got != 3 {
		t.Errorf("rebinds{reason=empty_response} = %v, want 3", got)
	}
}
