// Package affinity is the affinity benchmark (bench affinity, make
// bench-affinity): round robin, hard affinity, threshold soft affinity,
// cost soft affinity and a global-map oracle on one multi-turn workload
// under cache pressure and skewed load, over in-process modelsim backends
// and in-process tether sidecars on loopback. Each tether policy runs as
// three sidecar replicas sharing their bindings through a real gossip
// ring, requests spread over the replicas; the oracle is hard affinity
// through one sidecar, whose map is global by construction. It reports,
// per policy, the prefix-cache hit rate counted by the backends next to
// the one the sidecars measured from the responses' usage, TTFT p50/p99
// and the pins soft affinity broke.
package affinity

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Policy is one row of the benchmark.
type Policy struct {
	Key  string // names it in -policies
	Name string
	// RoundRobin routes through the bench's own round-robin proxies
	// (e2e/bench/routers), not tether: the no-affinity baseline.
	RoundRobin bool
	// Affinity is the pool's affinity block (YAML flow style).
	Affinity string
	// Replicas is the number of sidecars (or round-robin proxies); more
	// than one sidecar share bindings through a gossip ring.
	Replicas int
}

// Replicas of every multi-replica policy: the smallest ring in which
// a session's turns regularly reach a replica that did not bind it.
const Replicas = 3

// Policies are the benchmark's rows. The two soft policies share the
// cool-down (the shipped default of 30 s would let a session move at most
// once in a run) and otherwise keep their defaults: threshold soft's
// maxWaiting 8 and loadMargin 4, cost soft's margin of 0.25 as the
// issue configures it.
var Policies = []Policy{
	{Key: "rr", Name: "round robin", RoundRobin: true, Replicas: Replicas},
	{Key: "hard", Name: "hard", Affinity: "{mode: hard}", Replicas: Replicas},
	{Key: "threshold", Name: "threshold soft", Affinity: "{mode: soft, policy: threshold, cooldown: 5s}", Replicas: Replicas},
	{Key: "cost", Name: "cost soft", Affinity: "{mode: soft, policy: cost, costMargin: 0.25, cooldown: 5s}", Replicas: Replicas},
	{Key: "oracle", Name: "oracle (hard, 1 sidecar)", Affinity: "{mode: hard}", Replicas: 1},
}

// Select returns the policies named by keys (comma-separated Keys), in
// the benchmark's order.
func Select(keys string) ([]Policy, error) {
	want := map[string]bool{}
	for k := range strings.SplitSeq(keys, ",") {
		want[strings.TrimSpace(k)] = true
	}
	var out []Policy
	for _, p := range Policies {
		if want[p.Key] {
			out = append(out, p)
			delete(want, p.Key)
		}
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("-policies: unknown %v (known: rr, hard, threshold, cost, oracle)", slices.Collect(maps.Keys(want)))
	}
	return out, nil
}
