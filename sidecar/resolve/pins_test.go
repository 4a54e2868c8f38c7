package resolve

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/store"
)

// TestWhenAPinIsDropped: a binding is dropped exactly when its backend is
// gone, terminating or not ready now (discovery leaves it out of the set:
// the three reach the resolver alike), has restarted its server since
// the binding was made (a later Since) or is a new pod under the same
// name (a new ID); never because it was NotReady for a while in between.
func TestWhenAPinIsDropped(t *testing.T) {
	cases := []struct {
		name string
		// between changes the set after the session was bound to "a" and
		// before its next turn; it returns the set of that turn.
		between func(f *fixture, a discovery.Backend) []discovery.Backend
		want    Outcome
	}{
		{"nothing happened", func(f *fixture, a discovery.Backend) []discovery.Backend {
			return []discovery.Backend{a, be("b")}
		}, Hit},
		{"readiness blip: out of the set and back, same server run", func(f *fixture, a discovery.Backend) []discovery.Backend {
			f.src.put([]discovery.Backend{be("b")}, nil) // NotReady: discovery drops it
			f.now = f.now.Add(time.Minute)               // for a while
			return []discovery.Backend{a, be("b")}       // Ready again, Since unchanged
		}, Hit},
		{"gone, terminating or not ready now", func(f *fixture, a discovery.Backend) []discovery.Backend {
			return []discovery.Backend{be("b")}
		}, Rebind},
		{"its server restarted after the binding", func(f *fixture, a discovery.Backend) []discovery.Backend {
			f.now = f.now.Add(5 * time.Second)
			a.Since = f.now // the serving container's new startedAt
			return []discovery.Backend{a, be("b")}
		}, Rebind},
		{"recreated under the same name", func(f *fixture, a discovery.Backend) []discovery.Backend {
			again := discovery.Backend{ID: "ns/a/uid-2", Name: a.Name, Addr: a.Addr}
			return []discovery.Backend{again}
		}, Rebind},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := discovery.Backend{ID: "ns/a/uid-1", Name: "ns/a", Addr: "10.0.0.1:8000", Since: time.Unix(1_600_000_000, 0)}
			src := newSource(a)
			f := newFixture(t, nil, src, false)
			if d := f.resolve(t, "s1"); d.Backend.ID != a.ID {
				t.Fatalf("first turn went to %s", d.Backend.ID)
			}
			src.put(tc.between(f, a), nil)
			d := f.resolve(t, "s1")
			if d.Outcome != tc.want {
				t.Fatalf("next turn: %s to %s, want %s", d.Outcome, d.Backend.ID, tc.want)
			}
			if tc.want == Hit && d.Backend.ID != a.ID {
				t.Fatalf("kept pin went to %s", d.Backend.ID)
			}
		})
	}
}

// TestNonStickyPool: a pool without sessionSticky (no Keys) balances every
// request, session key or not, and binds nothing, even with a token codec.
func TestNonStickyPool(t *testing.T) {
	f := newFixture(t, nil, newSource(be("a"), be("b")), false)
	f.r.o.Keys = nil
	seen := map[string]bool{}
	for i := 0; i < 40; i++ {
		d := f.resolve(t, "s1")
		if d.Outcome != None || d.Source != "" || d.KeyHash != "" || len(d.Tokens) != 0 {
			t.Fatalf("decision = %+v", d)
		}
		seen[d.Backend.ID] = true
	}
	if len(seen) != 2 {
		t.Fatalf("one session key reached %v, want both backends (no pin)", seen)
	}
	if n := f.store.(store.Counter).Len(); n != 0 {
		t.Fatalf("a non-sticky pool wrote %d bindings", n)
	}
}

// TestPolicyIsReadPerRequest: a pool whose definition changes (a
// ModelServer edit) takes the new sources, TTL and timeout on the next
// request, and a pool that is down fails every request with its reason.
func TestPolicyIsReadPerRequest(t *testing.T) {
	m := newMemory(t, 100)
	defer m.Close()
	st := &ttlStore{Store: m}
	f := newFixture(t, st, newSource(be("a"), be("b")), false)
	pol := Policy{Keys: headerKeys{}, TTL: time.Minute, Timeout: 3 * time.Second}
	f.r.o.Policy = func() Policy { return pol }

	d := f.resolve(t, "s1")
	if d.Outcome != Miss || d.Timeout != 3*time.Second {
		t.Fatalf("first = %+v", d)
	}
	if st.last != time.Minute {
		t.Fatalf("binding TTL %s, want the policy's 1m", st.last)
	}
	// The edit: a new TTL for new bindings, then no sources at all.
	pol.TTL = 10 * time.Second
	if d := f.resolve(t, "s2"); d.Outcome != Miss || st.last != 10*time.Second {
		t.Fatalf("s2 = %+v with TTL %s, want a miss bound for 10s", d, st.last)
	}
	pol.Keys = nil
	if d := f.resolve(t, "s1"); d.Outcome != None {
		t.Fatalf("after sessionSticky was removed: %+v", d)
	}
	down := errors.New("ModelServer llm/ds was deleted")
	pol.Down = down
	if _, err := f.r.Resolve(context.Background(), req("s1")); !errors.Is(err, down) {
		t.Fatalf("down pool: err %v", err)
	}
}

// ttlStore records the TTL of the latest Create.
type ttlStore struct {
	store.Store
	last time.Duration
}

func (s *ttlStore) Create(ctx context.Context, key string, b store.Binding, ttl time.Duration) (store.Binding, error) {
	s.last = ttl
	return s.Store.Create(ctx, key, b, ttl)
}
