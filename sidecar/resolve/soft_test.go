package resolve

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/reqview"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/token"
)

// fakeLoad is a LoadReader whose queue lengths the test sets; a backend
// absent from the map has no fresh sample.
type fakeLoad struct {
	mu      sync.Mutex
	w       map[string]float64
	running map[string]float64 // absent: 0
}

func (l *fakeLoad) set(id string, w float64) { l.mu.Lock(); l.w[id] = w; l.mu.Unlock() }
func (l *fakeLoad) setRunning(id string, n float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[string]float64{}
	}
	l.running[id] = n
}
func (l *fakeLoad) Waiting(id string) (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.w[id]
	return w, ok
}
func (l *fakeLoad) Queue(id string) (float64, float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.w[id]
	return w, l.running[id], ok
}

func softFixture(t *testing.T, soft bool) (*fixture, *fakeLoad) {
	f := newFixture(t, nil, newSource(be("a"), be("b"), be("c")), false)
	l := &fakeLoad{w: map[string]float64{}}
	f.r.o.Load = l
	f.r.setAffinity(AffinityFrom(config.Affinity{Mode: map[bool]config.AffinityMode{true: config.AffinitySoft, false: config.AffinityHard}[soft], MaxWaiting: 8, LoadMargin: 4, Cooldown: config.Duration{Duration: 30 * time.Second}}))
	return f, l
}

// TestSoftBreakConditions: a pin is broken only when every condition
// holds: soft mode, a fresh sample over maxWaiting, more than loadMargin
// above the least-waiting other backend, and the cool-down passed.
func TestSoftBreakConditions(t *testing.T) {
	cases := []struct {
		name    string
		soft    bool
		pinned  float64 // waiting on the pinned backend; <0: no sample
		others  float64 // waiting on the others; <0: no sample
		elapsed time.Duration
		broken  bool
	}{
		{"overloaded", true, 20, 0, time.Minute, true},
		{"hard mode", false, 20, 0, time.Minute, false},
		{"at maxWaiting", true, 8, 0, time.Minute, false},
		{"within margin", true, 12, 8, time.Minute, false},
		{"just over margin", true, 13, 8, time.Minute, true},
		// A first placement has no cool-down (a moved pin has: below).
		{"fresh binding breaks at once", true, 20, 0, time.Second, true},
		{"no sample of the pin", true, -1, 0, time.Minute, false},
		{"no sample of any other", true, 20, -1, time.Minute, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, l := softFixture(t, tc.soft)
			first := f.resolve(t, "s1")
			for _, id := range []string{"a", "b", "c"} {
				w := tc.others
				if id == first.Backend.ID {
					w = tc.pinned
				}
				if w >= 0 {
					l.set(id, w)
				}
			}
			f.now = f.now.Add(tc.elapsed)
			d := f.resolve(t, "s1")
			if got := d.Outcome == Broken; got != tc.broken {
				t.Fatalf("decision %s on %s (pinned %s), want broken=%v", d.Outcome, d.Backend.ID, first.Backend.ID, tc.broken)
			}
			if tc.broken && d.Backend.ID == first.Backend.ID {
				t.Fatal("broken pin stayed on the overloaded backend")
			}
			if !tc.broken && d.Backend.ID != first.Backend.ID {
				t.Fatalf("moved to %s without breaking", d.Backend.ID)
			}
		})
	}
}

// TestSoftBreakRebindsOnceThenCoolsDown: a broken pin is rebound with a
// higher generation and counted; the new binding's creation time starts
// the cool-down, so the session is not moved again however loaded its new
// backend gets, until the cool-down has passed.
func TestSoftBreakRebindsOnceThenCoolsDown(t *testing.T) {
	f, l := softFixture(t, true)
	first := f.resolve(t, "s1")
	for _, id := range []string{"a", "b", "c"} {
		l.set(id, 0)
	}
	l.set(first.Backend.ID, 30)
	f.now = f.now.Add(time.Minute)
	moved := f.resolve(t, "s1")
	if moved.Outcome != Broken || moved.Backend.ID == first.Backend.ID {
		t.Fatalf("moved = %+v", moved)
	}
	b, ok, _ := f.store.Peek(context.Background(), moved.storeKey)
	if !ok || b.Pod != moved.Backend.ID || b.Gen != 2 || !b.Created.Equal(f.now) {
		t.Fatalf("binding after break = %+v %v", b, ok)
	}
	m := f.r.o.Metrics
	if n := testutil.ToFloat64(m.AffinityBroken.WithLabelValues("ns/pool", "overload")); n != 1 {
		t.Fatalf("tether_affinity_broken_total = %v", n)
	}
	if n := testutil.ToFloat64(m.Sessions.WithLabelValues("ns/pool", string(Broken))); n != 1 {
		t.Fatalf("broken lookups = %v", n)
	}
	// Now the new backend is the overloaded one, the old one idle.
	l.set(first.Backend.ID, 0)
	l.set(moved.Backend.ID, 50)
	for i := 0; i < 5; i++ {
		f.now = f.now.Add(5 * time.Second)
		if d := f.resolve(t, "s1"); d.Outcome != Hit || d.Backend.ID != moved.Backend.ID {
			t.Fatalf("within cool-down: %+v", d)
		}
	}
	f.now = f.now.Add(5 * time.Second)
	if d := f.resolve(t, "s1"); d.Outcome != Broken || d.Backend.ID == moved.Backend.ID {
		t.Fatalf("after cool-down: %+v", d)
	}
}

// TestSoftBreakLosesToPeer: when another replica broke the pin first, the
// CompareAndDelete of the old binding fails and its new binding wins.
func TestSoftBreakLosesToPeer(t *testing.T) {
	f, l := softFixture(t, true)
	first := f.resolve(t, "s1")
	old, _, _ := f.store.Peek(context.Background(), first.storeKey)
	for _, id := range []string{"a", "b", "c"} {
		l.set(id, 0)
	}
	l.set(first.Backend.ID, 30)
	f.now = f.now.Add(time.Minute)
	// A peer moved the session to some other backend already.
	var peer string
	for _, id := range []string{"a", "b", "c"} {
		if id != first.Backend.ID {
			peer = id
		}
	}
	f.store.CompareAndDelete(context.Background(), first.storeKey, old)
	f.store.Create(context.Background(), first.storeKey, store.Binding{Pod: peer, Gen: 2, Created: f.now}, time.Minute)
	if d := f.resolve(t, "s1"); d.Outcome != Hit || d.Backend.ID != peer {
		t.Fatalf("after a peer's break: %+v, want hit on %s", d, peer)
	}
}

// tokenKeys is an Extractor yielding X-Token as a Token source when its
// codec verifies it.
type tokenKeys struct{ codec *token.Codec }

func (k tokenKeys) ExtractFrom(v reqview.View) session.Key {
	tok := v.Header("X-Token")
	if p, ok := k.codec.Verify(tok); ok {
		return session.Key{Value: tok, Source: config.SourceToken, Token: p}
	}
	return session.Key{}
}

func tokenReq(tok string) *http.Request {
	r := req("")
	r.Header.Set("X-Token", tok)
	return r
}

// TestTokenRouting: a token routes to its backend while selectable, with
// no store; a token of a gone or failed backend is balanced (miss); soft
// affinity breaks an overloaded token's pin after the cool-down.
func TestTokenRouting(t *testing.T) {
	src := newSource(be("a"), be("b"), be("c"))
	f := newFixture(t, nil, src, false)
	codec := token.NewWithKeys("ns/pool", []byte("0123456789abcdef0123456789abcdef"), nil, true)
	f.r.o.Keys, f.r.o.Tokens = tokenKeys{codec}, codec
	l := &fakeLoad{w: map[string]float64{"a": 0, "b": 0, "c": 0}}
	f.r.o.Load = l
	f.r.setAffinity(Affinity{Soft: true, MaxWaiting: 8, LoadMargin: 4, Cooldown: 30 * time.Second})
	res := func(tok string) *Decision {
		d, err := f.r.Resolve(context.Background(), tokenReq(tok))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	placed := f.now.Add(-10 * time.Second)
	for i := 0; i < 10; i++ {
		if d := res(codec.Sign("b", "", placed)); d.Outcome != Hit || d.Backend.ID != "b" || !d.Since.Equal(placed) || d.Source != config.SourceToken {
			t.Fatalf("token for b: %+v", d)
		}
	}
	if n := f.store.(store.Counter).Len(); n != 0 {
		t.Fatalf("token routing wrote %d bindings", n)
	}
	if d := res("bm90LWEtdG9rZW4="); d.Outcome != Miss { // unsigned "not-a-token"
		t.Fatalf("token of an unknown backend: %+v", d)
	}
	if d := res("Yw=="); d.Outcome != Hit || d.Backend.ID != "c" { // unsigned "c"
		t.Fatalf("unsigned token by name: %+v", d)
	}
	f.r.o.Outliers.Failure("b", outlier.ConnectFailed)
	if d := res(codec.Sign("b", "", placed)); d.Outcome != Miss || d.Backend.ID == "b" {
		t.Fatalf("token of a failed backend: %+v", d)
	}
	l.set("c", 20)
	if d := res(codec.Sign("c", "", placed)); d.Outcome != Hit {
		t.Fatalf("overloaded within cool-down: %+v", d)
	}
	if d := res(codec.Sign("c", "", placed.Add(-time.Minute))); d.Outcome != Broken || d.Backend.ID != "a" || !d.Since.Equal(f.now) {
		t.Fatalf("overloaded after cool-down: %+v, want broken to a (b failed)", d)
	}
}

// TestDecisionCarriesTokens: with session tokens every decision names the
// tokens of its placement, the PD prefill's too, for the proxy to write
// back as they are; a retried decision names its new backend.
func TestDecisionCarriesTokens(t *testing.T) {
	d := func(id string) discovery.Backend { b := be(id); b.Group = "g"; return b }
	src := &fakeSource{}
	src.put([]discovery.Backend{d("d1"), d("d2")}, []discovery.Backend{d("p1")})
	f := newFixture(t, nil, src, true)
	codec := token.NewWithKeys("ns/pool", []byte("0123456789abcdef0123456789abcdef"), nil, false)
	f.r.o.Tokens = codec
	first := f.resolve(t, "s1")
	want := []Header{
		{codec.Header(), codec.Sign(first.Backend.ID, "p1", first.Since)},
		{codec.PrefillHeader(), codec.Prefill("p1", first.Since)},
	}
	if !slices.Equal(first.Tokens, want) {
		t.Fatalf("tokens %+v, want %+v", first.Tokens, want)
	}
	retried, err := f.r.Retry(context.Background(), first, ReasonConnectFailed)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := codec.Verify(retried.Tokens[0].Value); !ok || p.Backend != retried.Backend.ID || p.Backend == first.Backend.ID {
		t.Fatalf("retried to %s with token %+v %v", retried.Backend.ID, p, ok)
	}
	f.r.o.Tokens = nil
	if d := f.resolve(t, "s1"); len(d.Tokens) != 0 {
		t.Fatalf("tokens without a codec: %+v", d.Tokens)
	}
}

// TestDecisionCarriesTokenCookie: with a token cookie the decision also
// carries the Set-Cookie of the main token, Max-Age the policy's TTL.
func TestDecisionCarriesTokenCookie(t *testing.T) {
	f := newFixture(t, nil, newSource(be("a")), false)
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	codec, err := token.New("ns/pool", 5*time.Minute, &config.SessionToken{Header: "x-session-token", KeyFile: key,
		Cookie: &config.TokenCookie{Name: "sid", SameSite: config.SameSiteLax}})
	if err != nil {
		t.Fatal(err)
	}
	f.r.o.Tokens = codec
	d := f.resolve(t, "s1")
	want := "sid=" + d.Tokens[0].Value + "; Path=/; Max-Age=60; HttpOnly; SameSite=Lax"
	if len(d.Cookies) != 1 || d.Cookies[0] != want {
		t.Fatalf("cookies %q, want [%q]", d.Cookies, want)
	}
}
