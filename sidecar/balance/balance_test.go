package balance

import (
	"fmt"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/discovery"
)

func backends(ids ...string) []discovery.Backend {
	bs := make([]discovery.Backend, len(ids))
	for i, id := range ids {
		bs[i] = discovery.Backend{ID: id, Name: id, Addr: id}
	}
	return bs
}

func TestPickPrefersLessLoaded(t *testing.T) {
	b := New()
	cands := backends("a", "b")
	for i := 0; i < 3; i++ {
		b.Acquire("a")
	}
	for i := 0; i < 100; i++ {
		got, ok := b.Pick(cands, nil)
		if !ok || got.ID != "b" {
			t.Fatalf("Pick = %v %v, want b (a has 3 outstanding)", got.ID, ok)
		}
	}
}

func TestPickNeverChoosesUnusable(t *testing.T) {
	b := New()
	cands := backends("a", "b", "c")
	for i := 0; i < 200; i++ {
		got, ok := b.Pick(cands, func(c discovery.Backend) bool { return c.ID != "b" })
		if !ok || got.ID == "b" {
			t.Fatalf("Pick = %v %v", got.ID, ok)
		}
	}
	if _, ok := b.Pick(cands, func(discovery.Backend) bool { return false }); ok {
		t.Fatal("Pick found a backend where none is usable")
	}
	if _, ok := b.Pick(nil, nil); ok {
		t.Fatal("Pick found a backend in an empty list")
	}
}

func TestTiesBrokenAtRandomSpreadEvenly(t *testing.T) {
	b := New()
	cands := backends("a", "b", "c", "d")
	counts := map[string]int{}
	const n = 4000
	for i := 0; i < n; i++ {
		got, _ := b.Pick(cands, nil)
		counts[got.ID]++
	}
	for _, c := range cands {
		// Expected 1000 each; a fair coin is far inside ±30%.
		if counts[c.ID] < 700 || counts[c.ID] > 1300 {
			t.Fatalf("uneven spread with equal load: %v", counts)
		}
	}
}

func TestAcquireReleaseCounts(t *testing.T) {
	b := New()
	r1 := b.Acquire("a")
	r2 := b.Acquire("a")
	if got := b.Outstanding("a"); got != 2 {
		t.Fatalf("Outstanding = %d, want 2", got)
	}
	r1()
	r1() // idempotent
	if got := b.Outstanding("a"); got != 1 {
		t.Fatalf("Outstanding = %d, want 1", got)
	}
	r2()
	if got := b.Outstanding("a"); got != 0 {
		t.Fatalf("Outstanding = %d, want 0", got)
	}
	if len(b.inflight) != 0 {
		t.Fatalf("idle backend kept in the map: %v", b.inflight)
	}
}

func TestExtraLoadCounts(t *testing.T) {
	b := New(WithExtraLoad(func(id string) float64 {
		if id == "a" {
			return 10
		}
		return 0
	}))
	b.Acquire("b")
	got, _ := b.Pick(backends("a", "b"), nil)
	if got.ID != "b" {
		t.Fatalf("Pick = %s, want b (a has 10 queued elsewhere)", got.ID)
	}
}

func TestPickPairStaysInOneGroup(t *testing.T) {
	b := New()
	decode := []discovery.Backend{
		{ID: "d1", Group: "g1"}, {ID: "d2", Group: "g2"}, {ID: "d3", Group: "g3"},
	}
	prefill := []discovery.Backend{
		{ID: "p1", Group: "g1"}, {ID: "p2", Group: "g2"}, {ID: "p2b", Group: "g2"},
		// g3 has no prefill: d3 must never be chosen.
	}
	seen := map[string]bool{}
	for i := 0; i < 500; i++ {
		d, p, ok := b.PickPair(decode, prefill, nil)
		if !ok {
			t.Fatal("no pair found")
		}
		if d.Group != p.Group {
			t.Fatalf("pair across groups: %+v %+v", d, p)
		}
		if d.ID == "d3" {
			t.Fatal("chose a decode pod whose group has no prefill pod")
		}
		seen[d.ID+"/"+p.ID] = true
	}
	for _, want := range []string{"d1/p1", "d2/p2", "d2/p2b"} {
		if !seen[want] {
			t.Fatalf("pair %s never chosen: %v", want, seen)
		}
	}
}

func TestPickPairNoCompleteGroup(t *testing.T) {
	b := New()
	decode := []discovery.Backend{{ID: "d1", Group: "g1"}}
	prefill := []discovery.Backend{{ID: "p2", Group: "g2"}}
	if _, _, ok := b.PickPair(decode, prefill, nil); ok {
		t.Fatal("formed a pair across groups")
	}
	prefill = append(prefill, discovery.Backend{ID: "p1", Group: "g1"})
	if _, _, ok := b.PickPair(decode, prefill, func(c discovery.Backend) bool { return c.ID != "p1" }); ok {
		t.Fatal("formed a pair with an unusable prefill pod")
	}
}

func BenchmarkPick(b *testing.B) {
	bal := New()
	cands := make([]discovery.Backend, 16)
	for i := range cands {
		cands[i] = discovery.Backend{ID: fmt.Sprint(i)}
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		bal.Pick(cands, nil)
	}
}

// TestPickOnlyAmongNearEquals: plain power-of-two choices would pick a
// backend with 5 outstanding whenever it drew two of them; drawing from
// the near-equals of the least loaded never does.
func TestPickOnlyAmongNearEquals(t *testing.T) {
	b := New()
	cands := backends("idle", "busy1", "busy2", "busy3")
	for _, id := range []string{"busy1", "busy2", "busy3"} {
		for i := 0; i < 5; i++ {
			b.Acquire(id)
		}
	}
	for i := 0; i < 200; i++ {
		if got, _ := b.Pick(cands, nil); got.ID != "idle" {
			t.Fatalf("Pick = %s, want idle (the others have 5 outstanding)", got.ID)
		}
	}
	// Within NearEqual both compete.
	b.Acquire("idle")
	b.Acquire("idle")
	b.Acquire("idle")
	b.Acquire("idle")
	seen := map[string]bool{}
	for i := 0; i < 400; i++ {
		got, _ := b.Pick(cands, nil)
		seen[got.ID] = true
	}
	if !seen["idle"] || len(seen) < 3 {
		t.Fatalf("near-equals (4 vs 5 outstanding) not all chosen: %v", seen)
	}
}

// Behind is how late the oldest of a backend's timed requests is; once
// done, a request's lateness stays as a backlog that drains with time
// (a replica that sends nothing more there still sees it), and untimed
// requests (Sent, Answered) count for nothing.
func TestBehindIsTheOldestLatenessThenADrainingBacklog(t *testing.T) {
	b := New()
	t0 := b.epoch.Add(time.Second) // whole microseconds since the epoch
	if got := b.Behind("a", t0); got != 0 {
		t.Fatalf("behind with nothing sent = %v, want 0", got)
	}
	b.Sent("a")                              // untimed: a non-streamed request
	b.Due("a", t0)                           // due at once
	b.Due("a", t0.Add(100*time.Millisecond)) // a long prefill: due later
	b.Due("b", t0.Add(time.Second))
	at := t0.Add(250 * time.Millisecond)
	if got, want := b.Behind("a", at), 250*time.Millisecond; got != want {
		t.Fatalf("behind(a) = %v, want %v (late by 250ms and 150ms: the oldest)", got, want)
	}
	if got := b.Behind("b", at); got != 0 {
		t.Fatalf("behind(b) = %v, want 0: its request is not due yet", got)
	}
	// The second request's first token arrives 150ms late, the first
	// request is still waiting: it sets how far behind.
	b.Done("a", t0.Add(100*time.Millisecond), at)
	if got, want := b.Behind("a", at), 250*time.Millisecond; got != want {
		t.Fatalf("behind(a) after the younger one = %v, want %v", got, want)
	}
	// The first one's first token arrives 300ms late: with nothing left
	// in flight, the backlog it showed drains 1:1 with time.
	done := t0.Add(300 * time.Millisecond)
	b.Done("a", t0, done)
	if got, want := b.Behind("a", done.Add(100*time.Millisecond)), 200*time.Millisecond; got != want {
		t.Fatalf("behind(a) 100ms after the last first token, 300ms late = %v, want %v", got, want)
	}
	// An attempt that ended without a first token (a failure, a client
	// gone) says nothing of the backlog: it neither sets nor clears it.
	b.Due("a", done.Add(100*time.Millisecond))
	b.Done("a", done.Add(100*time.Millisecond), time.Time{})
	if got, want := b.Behind("a", done.Add(100*time.Millisecond)), 200*time.Millisecond; got != want {
		t.Fatalf("behind(a) after an attempt ended without a first token = %v, want %v", got, want)
	}
	// A request in flight later than the draining backlog sets it again.
	b.Due("a", done)
	if got, want := b.Behind("a", done.Add(250*time.Millisecond)), 250*time.Millisecond; got != want {
		t.Fatalf("behind(a) with a new request 250ms late = %v, want %v", got, want)
	}
	b.Done("a", done, done.Add(time.Millisecond))
	b.Done("b", t0.Add(time.Second), at)
	b.Answered("a")
	// Drained: nothing is behind, and nothing is left tracked.
	later := done.Add(time.Second)
	if got := b.Behind("a", later) + b.Behind("b", later); got != 0 || b.Unanswered("a") != 0 {
		t.Fatalf("behind after every answer = %v, unanswered %d; want 0, 0", got, b.Unanswered("a"))
	}
	b.mu.Lock()
	left := len(b.due) + len(b.unanswered)
	b.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d backends still tracked with nothing pending", left)
	}
}

// The timing of backends nobody asks about any more (gone from the pool)
// is forgotten once drained, so a churning pod set leaves nothing behind.
func TestBehindForgetsDrainedBackends(t *testing.T) {
	b := New()
	t0 := b.epoch.Add(time.Second)
	for i := range sweepAbove + 10 {
		id := fmt.Sprint("gone-", i)
		b.Due(id, t0)
		b.Done(id, t0, t0.Add(time.Millisecond)) // 1ms late: drained 1ms later
	}
	b.Due("live", t0)
	b.Done("live", t0, t0.Add(time.Second))
	b.mu.Lock()
	left := len(b.due)
	b.mu.Unlock()
	if left != 1 {
		t.Fatalf("%d backends tracked after the sweep, want 1 (the one still draining)", left)
	}
	if got := b.Behind("live", t0.Add(time.Second)); got != time.Second {
		t.Fatalf("behind(live) = %v, want 1s", got)
	}
}
