//go:build chaos && soak

package chaos

import "testing"

// TestSoak is the load test in full (make soak, not in CI: about
// 20 minutes on 2 cores): 1,000,000 distinct sessions at a bounded rate
// through one replica whose store holds 100,000 bindings, then the same
// through a 3-replica gossip ring; memory, goroutines and file
// descriptors sampled after every tenth, which must not grow.
func TestSoak(t *testing.T) {
	for _, o := range []ChurnOptions{
		{Name: "Load: one replica", Replicas: 1},
		{Name: "Load: a 3-replica gossip ring", Replicas: 3},
	} {
		t.Run(o.Name, func(t *testing.T) {
			o.Sessions, o.Rate, o.MaxEntries, o.Backends, o.Samples = 1_000_000, 2000, 100_000, 3, 10
			ch, err := RunChurn(env, o)
			if err != nil {
				t.Fatal(err)
			}
			report.Churn(ch)
			checkFlat(t, ch)
		})
	}
}
