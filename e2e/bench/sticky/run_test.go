package sticky

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/workload"
)

// A scaled B runs its policies in groups that offer the machine about the
// smallest B's load at once, the target policies together in the first.
func TestGroupsKeepTheMachinesLoadAndTheTargetsTogether(t *testing.T) {
	o := Options{Backends: []int{4, 8}, Policies: AllPolicies}
	if g := o.groups(8); len(g) != 1 || !slices.Equal(g[0], AllPolicies) {
		t.Errorf("unscaled B = 8: groups %v, want all policies at once", g)
	}
	o.ScaleWithBackends = true
	if g := o.groups(4); len(g) != 1 || !slices.Equal(g[0], AllPolicies) {
		t.Errorf("scaled, smallest B: groups %v, want all policies at once", g)
	}
	want := [][]string{
		{RoundRobin, TetherMemory, TetherRedis, TetherGossip, Oracle},
		{LeastOutstanding, ConsistentHash, TetherMemoryHash, TetherSoft},
	}
	if g := o.groups(8); !slices.EqualFunc(g, want, slices.Equal) {
		t.Errorf("scaled B = 8: groups %v, want %v", g, want)
	}
	if g := o.groups(16); len(g) != 3 || len(g[0]) != 3 || !slices.Equal(g[0], want[0][:3]) {
		t.Errorf("scaled B = 16: groups %v, want 3 of 3 policies, the targets' first", g)
	}
	if o.Policies = []string{TetherGossip}; len(o.groups(8)) != 1 {
		t.Errorf("one policy: groups %v", o.groups(8))
	}
}

// The progress bar plans one step per group of every (R, B) and one per
// cache size.
func TestRunsCountsEveryGroupAndCacheSize(t *testing.T) {
	o := Options{Replicas: []int{1, 3, 6}, Backends: []int{4, 8}, Policies: AllPolicies, ScaleWithBackends: true, CacheSweep: []int{1024}}
	if got := o.Runs(); got != 3*1+3*2+1 {
		t.Errorf("Runs = %d, want 10", got)
	}
}

// Stayed counts a later turn as staying when the previous turn of the
// same conversation was answered by the same backend; a first turn, or a
// turn after a failed one, has nothing to stay with.
func TestSummarizeCountsTurnsThatStayedOnTheirBackend(t *testing.T) {
	fail := errors.New("refused")
	samples := []workload.Sample{
		{Conv: 0, Turn: 0, Backend: "a"},
		{Conv: 0, Turn: 1, Backend: "a"}, // stayed
		{Conv: 0, Turn: 2, Backend: "b"}, // moved
		{Conv: 0, Turn: 3, Err: fail},
		{Conv: 0, Turn: 4, Backend: "b"}, // after a failure: not counted
		{Conv: 1, Turn: 0, Backend: "b"}, // a new conversation, not a move
		{Conv: 1, Turn: 1, Backend: "b"}, // stayed
	}
	for i := range samples {
		samples[i].TTFT = time.Millisecond
	}
	r := summarize(Oracle, 1, 2, samples)
	if want := 2.0 / 3; math.Abs(r.Stayed-want) > 1e-9 {
		t.Errorf("Stayed = %v, want %v (2 of 3 later turns)", r.Stayed, want)
	}
	if r.Errors != 1 {
		t.Errorf("Errors = %d, want 1", r.Errors)
	}
}

// Token imbalance weighs what each backend was sent, not how often: two
// backends with the same requests, one sent three times the tokens.
func TestSummarizeWeighsBackendsByPromptTokens(t *testing.T) {
	samples := []workload.Sample{
		{Conv: 0, Turn: 0, Backend: "a", Prompt: 100},
		{Conv: 0, Turn: 1, Backend: "a", Prompt: 200},
		{Conv: 1, Turn: 0, Backend: "b", Prompt: 300},
		{Conv: 1, Turn: 1, Backend: "b", Prompt: 600},
		{Conv: 2, Turn: 0, Err: errors.New("refused"), Prompt: 5000}, // no backend answered
	}
	for i := range samples {
		samples[i].TTFT = time.Millisecond
	}
	// b was sent 900 of 1,200 tokens, over a mean of 600 across B = 2.
	if got := summarize(Oracle, 1, 2, samples).TokenImbalance; math.Abs(got-1.5) > 1e-9 {
		t.Errorf("TokenImbalance = %v, want 1.5", got)
	}
	// With B = 3 the third backend, sent nothing, counts in the mean (400).
	if got := summarize(Oracle, 1, 3, samples).TokenImbalance; math.Abs(got-2.25) > 1e-9 {
		t.Errorf("TokenImbalance over 3 backends = %v, want 2.25", got)
	}
}
