package server_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/discovery"
	sessionkey "github.com/tetherproxy/tether/sidecar/session"
)

// TestHashedPlacementIsBoundedByBindings: 40 new sessions whose keys all
// hash first to one backend. Their requests come one at a time, so the
// load bound never sees that backend busier than the rest; the store's
// bindings do, and past its share (bindingEpsilon 0.1: 1.1 × the mean
// plus one) the keys go to their next choice. With bindingEpsilon 10 the
// bound is out of reach and the hash alone decides.
func TestHashedPlacementIsBoundedByBindings(t *testing.T) {
	bs := startBackends(t, 4)
	ids := addrs(bs)
	cands := make([]discovery.Backend, len(ids))
	for i, id := range ids {
		cands[i] = discovery.Backend{ID: id}
	}
	hash := balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon))
	var keys []string
	for i := 0; len(keys) < 40; i++ {
		k := fmt.Sprint("crowd-", i)
		if be, _ := hash.Place(sessionkey.StoreKey("default/m", k), cands, nil); be.ID == ids[0] {
			keys = append(keys, k)
		}
	}
	place := func(t *testing.T, extra string) map[string]int {
		sc := startSidecar(t, configFor("default/m", ids, `[{type: Header, name: X-Session-ID}]`, "")+extra)
		counts := map[string]int{}
		for turn := 1; turn <= 2; turn++ {
			first := map[string]string{}
			for _, k := range keys {
				r := chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(turn), func(r *http.Request) {
					r.Header.Set("X-Session-ID", k)
				})
				if turn == 1 {
					counts[r.backend]++
					first[k] = r.backend
				} else if r.backend != first[k] && first[k] != "" {
					t.Fatalf("session %s moved from %s to %s on its second turn", k, first[k], r.backend)
				}
			}
		}
		return counts
	}
	t.Run("default bound", func(t *testing.T) {
		counts := place(t, "")
		// Before the n-th placement the bound is 1.1 × (n-1)/4 + 1, so
		// sim-0 ends with at most 1.1 × 39/4 + 2 = 12.7 sessions.
		if n := counts["sim-0"]; n > 12 || n < 9 {
			t.Fatalf("sim-0, every key's first choice, got %d of 40 sessions (want 9 to 12, its bounded share): %v", n, counts)
		}
		if len(counts) != 4 {
			t.Fatalf("the other keys did not spread over the other three backends: %v", counts)
		}
	})
	t.Run("bound out of reach", func(t *testing.T) {
		if counts := place(t, "    affinity: {bindingEpsilon: 10}\n"); counts["sim-0"] != 40 {
			t.Fatalf("with bindingEpsilon 10 the hash alone decides, yet sim-0 got %v", counts)
		}
	})
}
