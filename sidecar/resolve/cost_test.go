package resolve

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/reqbody"
	"github.com/tetherproxy/tether/sidecar/usage"
)

// resolveBody resolves a request of session key whose body is n bytes.
func (f *fixture) resolveBody(t *testing.T, key string, n int) *Decision {
	t.Helper()
	r := req(key)
	body := (*reqbody.Fields)(nil).Of(bytes.Repeat([]byte("x"), n))
	d, err := f.r.Resolve(context.Background(), r.WithContext(reqbody.NewContext(r.Context(), body)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// idleExcept sets every backend idle (one running, none waiting) but id.
func idleExcept(l *fakeLoad, id string, waiting float64) {
	for _, b := range []string{"a", "b", "c"} {
		l.set(b, 0)
		l.setRunning(b, 1)
	}
	l.set(id, waiting)
}

func (f *fixture) broken(reason Reason) float64 {
	return testutil.ToFloat64(f.r.o.Metrics.AffinityBroken.WithLabelValues("ns/pool", string(reason)))
}

// coldTurn reports a kept turn of d that found none of its 1,000-token
// prompt cached.
func coldTurn(f *fixture, d *Decision) {
	f.r.Reported(d, Report{FirstToken: time.Second, Duration: 2 * time.Second,
		Usage: usage.Usage{PromptTokens: 1000, CachedTokens: 0, HasCached: true}})
}

// TestColdPinMovesAtOnce: a kept turn that found its cache gone marks the
// pin cold; under soft affinity the next turn moves to a backend with a
// shorter queue though the threshold policy would keep it (and within a
// moved pin's cool-down), counted as cache_evicted. The mark serves one
// decision. Hard affinity keeps a cold pin.
func TestColdPinMovesAtOnce(t *testing.T) {
	f, l := softFixture(t, true)
	first := f.resolve(t, "s1")
	idleExcept(l, first.Backend.ID, 1) // far below maxWaiting 8
	kept := f.resolve(t, "s1")
	if kept.Outcome != Hit {
		t.Fatalf("second turn: %+v", kept)
	}
	coldTurn(f, kept)
	moved := f.resolve(t, "s1")
	if moved.Outcome != Broken || moved.Backend.ID == first.Backend.ID {
		t.Fatalf("cold pin: %s on %s, want broken off %s", moved.Outcome, moved.Backend.ID, first.Backend.ID)
	}
	if n := f.broken(ReasonCacheEvicted); n != 1 {
		t.Fatalf("tether_affinity_broken_total{reason=cache_evicted} = %v", n)
	}
	if n := testutil.ToFloat64(f.r.o.Metrics.Rebinds.WithLabelValues("ns/pool", string(ReasonCacheEvicted))); n != 1 {
		t.Fatalf("tether_session_rebinds_total{reason=cache_evicted} = %v", n)
	}
	// The moved pin is in its cool-down: going cold again still moves it.
	idleExcept(l, moved.Backend.ID, 1)
	f.now = f.now.Add(time.Second)
	if d := f.resolve(t, "s1"); d.Outcome != Hit || d.Backend.ID != moved.Backend.ID {
		t.Fatalf("a warm moved pin within its cool-down: %+v", d)
	}
	coldTurn(f, &Decision{Backend: moved.Backend, Outcome: Hit, KeyHash: moved.KeyHash, pol: moved.pol})
	if d := f.resolve(t, "s1"); d.Outcome != Broken || d.Backend.ID == moved.Backend.ID {
		t.Fatalf("a cold pin within its cool-down: %+v, want broken", d)
	}
	if n := f.broken(ReasonOverload); n != 0 {
		t.Fatalf("overload breaks = %v", n)
	}
}

// TestColdPinStaysWithoutABetterBackend: a cold pin on a backend no
// busier than any other stays (moving would gain nothing), and the mark
// is spent.
func TestColdPinStaysWithoutABetterBackend(t *testing.T) {
	f, l := softFixture(t, true)
	first := f.resolve(t, "s1")
	idleExcept(l, first.Backend.ID, 0)
	coldTurn(f, f.resolve(t, "s1"))
	if d := f.resolve(t, "s1"); d.Outcome != Hit || d.Backend.ID != first.Backend.ID {
		t.Fatalf("cold pin among equals: %+v", d)
	}
	l.set(first.Backend.ID, 3)
	if d := f.resolve(t, "s1"); d.Outcome != Hit {
		t.Fatalf("the spent mark moved the pin later: %+v", d)
	}
}

func TestHardAffinityKeepsColdPins(t *testing.T) {
	f, l := softFixture(t, false)
	first := f.resolve(t, "s1")
	idleExcept(l, first.Backend.ID, 5)
	coldTurn(f, f.resolve(t, "s1"))
	if d := f.resolve(t, "s1"); d.Outcome != Hit || d.Backend.ID != first.Backend.ID {
		t.Fatalf("hard affinity moved a cold pin: %+v", d)
	}
}

// TestCostPolicy: the cost policy weighs the queue against the prefill a
// move would redo. With 1,000 tokens/s, a 90% expected hit ratio and 1 s
// per request: a 4,000-token conversation (16,000 bytes) keeps its pin
// behind 4 waiting requests (4.4 s against 4 s to prefill elsewhere) and
// moves behind 6 (6.4 s > 1.25 × 4 s); a short one moves behind 1.
func TestCostPolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bodyBytes int
		waiting   float64
		move      bool
	}{
		{"long conversation, short queue", 16000, 4, false},
		{"long conversation, long queue", 16000, 6, true},
		{"short conversation, queue of 1", 400, 1, true},
		{"short conversation, idle", 400, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, l := softFixture(t, true)
			a := f.r.o.Affinity
			a.Cost, a.CostMargin, a.PrefillTokensPerSecond = true, 0.25, 1000
			f.r.setAffinity(a)
			first := f.resolveBody(t, "s1", tc.bodyBytes)
			idleExcept(l, first.Backend.ID, tc.waiting)
			d := f.resolveBody(t, "s1", tc.bodyBytes)
			if moved := d.Outcome == Broken; moved != tc.move {
				t.Fatalf("%s on %s (pinned %s), want moved=%v", d.Outcome, d.Backend.ID, first.Backend.ID, tc.move)
			}
			if tc.move && (d.Backend.ID == first.Backend.ID || f.broken(ReasonOverload) != 1) {
				t.Fatalf("moved to %s, overload breaks %v", d.Backend.ID, f.broken(ReasonOverload))
			}
		})
	}
}

// TestCostPolicySeesALateBackend: the pinned backend reports no queue,
// but this replica's requests to it are late (a long prefill holds its
// compute, and requests that hold a running slot wait unseen by the
// waiting gauge): the cost policy counts the lateness as queue wait.
// 4,000 tokens at 1,000 tokens/s: 4 s elsewhere, 0.4 s on the warm pin.
func TestCostPolicySeesALateBackend(t *testing.T) {
	for _, tc := range []struct {
		late time.Duration
		move bool
	}{
		{0, false},
		{3 * time.Second, false}, // 3.4 s against 4 s
		{6 * time.Second, true},  // 6.4 s > 1.25 × 4 s
	} {
		f, l := softFixture(t, true)
		a := f.r.o.Affinity
		a.Cost, a.CostMargin, a.PrefillTokensPerSecond = true, 0.25, 1000
		f.r.setAffinity(a)
		first := f.resolveBody(t, "s1", 16000)
		idleExcept(l, first.Backend.ID, 0)
		f.r.o.Balancer.Due(first.Backend.ID, f.r.o.Now().Add(-tc.late))
		d := f.resolveBody(t, "s1", 16000)
		if moved := d.Outcome == Broken; moved != tc.move {
			t.Fatalf("pinned backend late by %v: %s on %s (pinned %s), want moved=%v", tc.late, d.Outcome, d.Backend.ID, first.Backend.ID, tc.move)
		}
	}
}

// resolveStream resolves a request of session key whose body asks for a
// stream and is about n bytes long.
func (f *fixture) resolveStream(t *testing.T, key string, n int) *Decision {
	t.Helper()
	r := req(key)
	raw := []byte(`{"stream": true, "prompt": "` + strings.Repeat("x", n-30) + `"}`)
	body := (*reqbody.Fields)(nil).Of(raw)
	d, err := f.r.Resolve(context.Background(), r.WithContext(reqbody.NewContext(r.Context(), body)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestFirstTokenDue is the prefill the proxy expects before a decision's
// first token: of the new turn on a kept pin, of the whole prompt
// otherwise; only streams are timed, and only under the cost policy.
func TestFirstTokenDue(t *testing.T) {
	f, _ := softFixture(t, true)
	if _, ok := f.r.FirstTokenDue(f.resolveStream(t, "s1", 16000)); ok {
		t.Fatal("the threshold policy times a stream")
	}
	a := f.r.o.Affinity
	a.Cost, a.PrefillTokensPerSecond = true, 1000
	f.r.setAffinity(a)
	if _, ok := f.r.FirstTokenDue(f.resolveBody(t, "s3", 16000)); ok {
		t.Fatal("a request that asked for no stream is timed")
	}
	near := func(got, want time.Duration) bool { return (got - want).Abs() <= time.Millisecond }
	if d := f.resolveStream(t, "s2", 16000); d.Outcome != Miss {
		t.Fatalf("first turn: %s", d.Outcome)
	} else if due, ok := f.r.FirstTokenDue(d); !ok || !near(due, 4*time.Second) {
		t.Fatalf("first turn: due after %v (timed %v), want 4s (4,000 tokens at 1,000/s)", due, ok)
	}
	if d := f.resolveStream(t, "s2", 16000); d.Outcome != Hit {
		t.Fatalf("second turn: %s", d.Outcome)
	} else if due, ok := f.r.FirstTokenDue(d); !ok || !near(due, 400*time.Millisecond) {
		t.Fatalf("second turn: due after %v (timed %v), want 400ms (the 10%% not cached)", due, ok)
	}
}

// TestCostPolicyDivertsPlacementFromALateBackend: a new session goes
// where its key hashes unless the cost policy expects its first token
// sooner elsewhere by the margin: the hashed backend's requests are late
// by more than its whole prompt's prefill. Counted in
// tether_placements_diverted_total.
func TestCostPolicyDivertsPlacementFromALateBackend(t *testing.T) {
	for _, tc := range []struct {
		late   time.Duration
		divert bool
	}{
		{0, false},
		{500 * time.Millisecond, false}, // 0.5 s + 4 s against 4 s: within the margin
		{2 * time.Second, true},         // 6 s > 1.25 × 4 s
	} {
		f, l := softFixture(t, true)
		f.r.o.Balancer = balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon))
		a := f.r.o.Affinity
		a.Cost, a.CostMargin, a.PrefillTokensPerSecond = true, 0.25, 1000
		f.r.setAffinity(a)
		idleExcept(l, "a", 0)
		// Where s1 hashes: as a resolver without the cost policy places it.
		g, gl := softFixture(t, true)
		g.r.o.Balancer = balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon))
		idleExcept(gl, "a", 0)
		want := g.resolveBody(t, "s1", 16000).Backend.ID
		f.r.o.Balancer.Due(want, f.r.o.Now().Add(-tc.late))
		d := f.resolveBody(t, "s1", 16000)
		diverted := testutil.ToFloat64(f.r.o.Metrics.PlacementsDiverted.WithLabelValues("ns/pool"))
		if got := d.Backend.ID != want; got != tc.divert || diverted != map[bool]float64{true: 1}[tc.divert] {
			t.Fatalf("hashed backend %s late by %v: placed on %s (diverted counted %v), want diverted=%v", want, tc.late, d.Backend.ID, diverted, tc.divert)
		}
	}
}
