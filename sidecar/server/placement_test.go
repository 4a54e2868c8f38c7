package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/discovery"
	sessionkey "github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// TestHashedPlacementIsBoundedByBindings: 40 new sessions whose keys all
// hash first to one backend. Their requests come one at a time, so the
// load bound never sees that backend busier than the rest. A shared store
// counts its bindings, and past its share (bindingEpsilon 0.1: 1.1 × the
// mean plus one) the keys go to their next choice. With bindingEpsilon 10
// the bound is out of reach, and per-replica memory stores are never
// bounded by bindings (their replicas agree by the hash alone): the hash
// decides. (The work bound, which the same requests would trip, is out of
// reach here: TestHashedPlacementIsBoundedByWork tests it.)
func TestHashedPlacementIsBoundedByBindings(t *testing.T) {
	ids := addrs(startBackends(t, 4))
	keys := keysFirstOn(ids, "crowd-", 40)
	place := func(t *testing.T, storeCfg, pool string) (map[string]int, *sidecar) {
		sc := startSidecar(t, configFor("default/m", ids, `[{type: Header, name: X-Session-ID}]`, storeCfg)+pool)
		counts := map[string]int{}
		first := map[string]string{}
		for turn := 1; turn <= 2; turn++ {
			for _, k := range keys {
				r := chat(t, sc.url("default/m", "/v1/chat/completions"), conversation(turn), func(r *http.Request) {
					r.Header.Set("X-Session-ID", k)
				})
				if turn == 1 {
					counts[r.backend]++
					first[k] = r.backend
				} else if r.backend != first[k] {
					t.Fatalf("session %s moved from %s to %s on its second turn", k, first[k], r.backend)
				}
			}
		}
		return counts, sc
	}
	for name, storeCfg := range map[string]func(*testing.T) string{"redis": redisStore, "gossip": gossipStore} {
		t.Run(name, func(t *testing.T) {
			counts, sc := place(t, storeCfg(t), noWorkBound)
			// Before the n-th placement the bound is 1.1 × (n-1)/4 + 1, so
			// sim-0 ends with at most 1.1 × 39/4 + 2 = 12.7 sessions.
			if n := counts["sim-0"]; n > 12 || n < 9 {
				t.Fatalf("sim-0, every key's first choice, got %d of 40 sessions (want 9 to 12, its bounded share): %v", n, counts)
			}
			if len(counts) != 4 {
				t.Fatalf("the other keys did not spread over the other three backends: %v", counts)
			}
			want := fmt.Sprintf(`tether_placements_passed_over_total{bound="bindings",pool="default/m"} %d`, 40-counts["sim-0"])
			if _, m := get(t, sc.admin("/metrics")); !strings.Contains(m, want+"\n") {
				t.Fatalf("metrics lack %q", want)
			}
		})
	}
	for name, c := range map[string]struct {
		store func(*testing.T) string
		pool  string
	}{
		"redis, bound out of reach": {redisStore, "    affinity: {bindingEpsilon: 10, workEpsilon: 10}\n"},
		"memory":                    {func(*testing.T) string { return "" }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			if counts, _ := place(t, c.store(t), c.pool); counts["sim-0"] != 40 {
				t.Fatalf("the hash alone decides, yet its first choice sim-0 got %v", counts)
			}
		})
	}
}

// keysFirstOn returns n session keys (prefix and a number) whose hashed
// placement among backends ids, unbounded, chooses ids[0] first.
func keysFirstOn(ids []string, prefix string, n int) []string {
	cands := make([]discovery.Backend, len(ids))
	for i, id := range ids {
		cands[i] = discovery.Backend{ID: id}
	}
	hash := balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon))
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprint(prefix, i)
		if be, _ := hash.Place(sessionkey.StoreKey("default/m", k), cands, nil); be.ID == ids[0] {
			keys = append(keys, k)
		}
	}
	return keys
}

// noWorkBound puts the work bound out of reach.
const noWorkBound = "    affinity: {workEpsilon: 10}\n"

// redisStore is the store config of a Redis of the test's own, so that
// no run finds another's bindings.
func redisStore(t *testing.T) string {
	return fmt.Sprintf("store: {backend: redis, redis: {address: %q}}", redistest.Start(t).Addr)
}

// gossipStore is a ring of one: its table is every binding.
func gossipStore(t *testing.T) string {
	return fmt.Sprintf("store: {backend: gossip, gossip: {bind: %q, secretKeyFile: %q}}", freeAddr(t), gossipKeyFile(t))
}

// TestHashedPlacementIsBoundedByWork: 40 new sessions whose keys all hash
// first to one backend, the first a long conversation (about 19 KB a
// turn), the other 39 a few hundred bytes. The long one goes to the
// keys' first choice; bounded by work, that backend then carries more
// than 1.2 × the mean request bytes for every later placement, so the
// short ones all go to their next choices, though it holds one binding
// of 40. Bounded by bindings alone, it takes its share of them (about
// 12). Both stores are bounded by work unless workEpsilon is 10; a gossip
// ring's bound reads the ring's shared view, which holds the long
// conversation from the next epoch on (gossip.DefaultWorkInterval plus
// its grace).
func TestHashedPlacementIsBoundedByWork(t *testing.T) {
	ids := addrs(startBackends(t, 4))
	keys := keysFirstOn(ids, "heavy-", 40)
	for name, c := range map[string]struct {
		store func(*testing.T) string
		pool  string
		work  bool
	}{
		"redis":                {redisStore, "", true},
		"redis, out of reach":  {redisStore, noWorkBound, false},
		"gossip":               {gossipStore, "", true},
		"gossip, out of reach": {gossipStore, noWorkBound, false},
	} {
		t.Run(name, func(t *testing.T) {
			sc := startSidecar(t, configFor("default/m", ids, `[{type: Header, name: X-Session-ID}]`, c.store(t))+c.pool)
			counts := map[string]int{}
			for i, k := range keys {
				msgs := conversation(1)
				if i == 0 {
					msgs = conversation(60)
				}
				r := chat(t, sc.url("default/m", "/v1/chat/completions"), msgs, func(r *http.Request) {
					r.Header.Set("X-Session-ID", k)
				})
				counts[r.backend]++
				if i == 0 && strings.HasPrefix(name, "gossip") {
					testkit.Eventually(t, 5*time.Second, "the ring's view of work to hold the long conversation", func() error {
						if b := sc.metric(t, "tether_gossip_work_bytes"); b < 15_000 {
							return fmt.Errorf("the view holds %v bytes", b)
						}
						return nil
					})
				}
			}
			n := counts["sim-0"]
			if c.work && n != 1 {
				t.Fatalf("bounded by work, sim-0 (every key's first choice, sent the long conversation) got %d of 40 sessions: %v", n, counts)
			}
			if !c.work && (n < 9 || n > 12) {
				t.Fatalf("bounded by bindings alone, sim-0 got %d of 40 sessions, want its share (9 to 12): %v", n, counts)
			}
			if c.work {
				want := `tether_placements_passed_over_total{bound="work",pool="default/m"} 39`
				if _, m := get(t, sc.admin("/metrics")); !strings.Contains(m, want+"\n") {
					t.Fatalf("metrics lack %q", want)
				}
			}
			// /debug/backends shows what the bounds read: sim-0's bindings
			// and the long conversation's bytes (most of it: the turn
			// alone, decayed by at most a few seconds).
			held, work := debugBounds(t, sc)
			if held[ids[0]] != n || work[ids[0]] < 15_000 {
				t.Fatalf("/debug/backends shows sim-0 with %d bindings and %v recent bytes; want %d and the long conversation's (over 15,000)",
					held[ids[0]], work[ids[0]], n)
			}
		})
	}
}

// debugBounds reads /debug/backends: each backend's bindings and recent
// work as the bounds of hashed placement read them.
func debugBounds(t *testing.T, sc *sidecar) (held map[string]int, work map[string]float64) {
	t.Helper()
	code, body := get(t, sc.admin("/debug/backends"))
	var out struct {
		Pools []struct {
			Backends []struct {
				ID              string
				Bindings        *int
				RecentWorkBytes *float64
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || code != 200 || len(out.Pools) != 1 {
		t.Fatalf("/debug/backends: %d %s (%v)", code, body, err)
	}
	held, work = map[string]int{}, map[string]float64{}
	for _, b := range out.Pools[0].Backends {
		if b.Bindings == nil || b.RecentWorkBytes == nil {
			t.Fatalf("/debug/backends lacks what the bounds read: %s", body)
		}
		held[b.ID], work[b.ID] = *b.Bindings, *b.RecentWorkBytes
	}
	return held, work
}

// TestReplicasAgreeWhereWorkIsCounted: two replicas sharing a store, one
// of them having sent a long conversation to sim-0, then new sessions
// whose keys' first choice is sim-0: each session's first turn on either
// replica and its next turn, at once, on the other meet on one backend.
// On Redis the replicas count work apart and propose apart (the one that
// sent the long conversation never chooses sim-0, the other does); the
// first create wins in Redis before the request is sent, and the other
// replica follows its binding. A gossip ring settles a race only once the
// binding has gone round, so its replicas read one view of work that both
// share: once it holds the long conversation, neither chooses sim-0.
func TestReplicasAgreeWhereWorkIsCounted(t *testing.T) {
	for _, kind := range []string{"redis", "gossip"} {
		t.Run(kind, func(t *testing.T) {
			ids := addrs(startBackends(t, 4))
			keys := keysFirstOn(ids, "apart-", 11)
			storeA, storeB := sharedStores(t, kind)
			heavy := startSidecar(t, configFor("default/m", ids, `[{type: Header, name: X-Session-ID}]`, storeA))
			light := startSidecar(t, configFor("default/m", ids, `[{type: Header, name: X-Session-ID}]`, storeB))
			send := func(sc *sidecar, key, msgs string) string {
				return chat(t, sc.url("default/m", "/v1/chat/completions"), msgs, func(r *http.Request) {
					r.Header.Set("X-Session-ID", key)
				}).backend
			}
			if got := send(heavy, keys[0], conversation(60)); got != "sim-0" {
				t.Fatalf("the long conversation went to %s, not its first choice sim-0", got)
			}
			if kind == "gossip" {
				testkit.Eventually(t, 10*time.Second, "both replicas' view of work to hold the long conversation", func() error {
					for _, sc := range []*sidecar{heavy, light} {
						if b := sc.metric(t, "tether_gossip_work_bytes"); b < 15_000 {
							return fmt.Errorf("a view holds %v bytes", b)
						}
					}
					return nil
				})
			}
			lightOnFirst, heavyOnFirst := 0, 0 // sessions placed on sim-0 by each
			for i, k := range keys[1:] {
				first, next, placedOnFirst := heavy, light, &heavyOnFirst
				if i%2 == 1 {
					first, next, placedOnFirst = light, heavy, &lightOnFirst
				}
				a := send(first, k, conversation(1))
				if a == "sim-0" {
					*placedOnFirst++
				}
				if b := send(next, k, conversation(2)); b != a {
					t.Fatalf("session %s: first turn on %s, the next turn through the other replica on %s", k, a, b)
				}
			}
			wantLight := map[string]bool{"redis": true, "gossip": false}[kind]
			if heavyOnFirst != 0 || (lightOnFirst > 0) != wantLight {
				t.Fatalf("sessions placed on sim-0: %d by the replica that sent it the long conversation, %d by the other; want none and some (%v)",
					heavyOnFirst, lightOnFirst, wantLight)
			}
		})
	}
}
