package resolve

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
	f.r.Reported(d, Report{Header: time.Second, Duration: 2 * time.Second,
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
