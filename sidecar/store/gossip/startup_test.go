package gossip

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

// Replicas that start together meet before any of them is synced, each
// holding bindings it made alone (here: while the network is cut, so no
// delta reaches anyone). None of them finds a synced member to pull from,
// yet every replica ends up holding every binding.
func TestStartedTogetherConverge(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n, " replicas"), func(t *testing.T) {
			tn := newTestNet()
			tn.isolate()
			// A grace long enough that they meet within it on a busy
			// machine (healing takes a rejoin interval, 300ms).
			grace := withGrace(3 * time.Second)
			nodes := []*Store{startNode(t, tn, "n0", nil, grace)}
			for i := 1; i < n; i++ {
				nodes = append(nodes, startNode(t, tn, fmt.Sprint("n", i), []string{nodes[0].selfAddr}, grace))
			}
			// More than the gossip queue keeps (maxQueued): memberlist's
			// gossip would carry a few pre-meeting bindings to the others
			// once they meet, but not these.
			const each = maxQueued + 500
			for i, s := range nodes {
				for j := range each {
					if _, err := s.Create(ctx, skey(i*each+j), store.Binding{Pod: fmt.Sprint("pod-", i)}, 10*time.Minute); err != nil {
						t.Fatal(err)
					}
				}
			}
			tn.heal()
			waitMembers(t, nodes, n, 20*time.Second)
			testkit.Eventually(t, 30*time.Second, "every replica to hold every binding", func() error {
				for _, s := range nodes {
					if !s.Synced() || s.Len() != n*each {
						return fmt.Errorf("%s holds %d of %d bindings (synced %v)", s.name, s.Len(), n*each, s.Synced())
					}
				}
				return nil
			})
			for k := range n * each {
				b, ok, err := agree(nodes, skey(k))
				if err != nil || !ok || b.Pod != fmt.Sprint("pod-", k/each) {
					t.Fatalf("binding %d: %+v (%v), %v", k, b, ok, err)
				}
			}
		})
	}
}

// A replica that declared itself synced by its startup grace while the
// members it knew were not synced yet pulls once, from the first of them
// that turns synced, however many turn synced after.
func TestGraceOnlyCatchesUpOnce(t *testing.T) {
	tn := newTestNet()
	// The members cannot pull (their discovery has no first view, so they
	// wait) and their grace outlasts the test: each turns synced when the
	// test lets its discovery sync, one at a time.
	var lims []*fakeLimits
	var members []*Store
	for i := range 3 {
		lim := newFakeLimits(time.Minute, "pod-g", "pod-m")
		lim.synced.Store(false)
		lims = append(lims, lim)
		var join []string
		if i > 0 {
			join = []string{members[0].selfAddr}
		}
		m := startNode(t, tn, fmt.Sprint("m", i), join, withLimits(lim), withGrace(time.Hour))
		if _, err := m.Create(ctx, skey(100+i), store.Binding{Pod: "pod-m"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	waitMembers(t, members, 3, 20*time.Second)
	g := startNode(t, tn, "g", []string{members[0].selfAddr})
	if _, err := g.Create(ctx, skey(1), store.Binding{Pod: "pod-g"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	all := append([]*Store{g}, members...)
	waitMembers(t, all, 4, 20*time.Second)
	waitSynced(t, []*Store{g})
	for _, m := range members {
		if m.Synced() {
			t.Fatalf("%s synced before its discovery did", m.name)
		}
	}
	g.xfer.mu.Lock()
	graceOnly := g.xfer.graceOnly
	g.xfer.mu.Unlock()
	if !graceOnly {
		t.Fatal("g did not declare itself synced by its grace alone")
	}
	// Pulls after a member was declared dead and rejoined are partition
	// heals, not catch-ups (a loaded machine makes members flap): the
	// catch-ups are counted apart.
	catchUps := func() float64 { return testutil.ToFloat64(g.met.transfers.WithLabelValues("catch_up")) }
	pulls := func() float64 {
		return testutil.ToFloat64(g.met.transfers.WithLabelValues("complete")) +
			testutil.ToFloat64(g.met.transfers.WithLabelValues("gave_up"))
	}
	for i, m := range members {
		lims[i].synced.Store(true)
		testkit.Eventually(t, 20*time.Second, "the member to turn synced and g to see it", func() error {
			if !m.Synced() {
				return fmt.Errorf("%s not synced", m.name)
			}
			if n := g.member(m.name); n == nil || !peerSynced(n) {
				return fmt.Errorf("g has not seen %s turn synced", m.name)
			}
			return nil
		})
		testkit.Eventually(t, 20*time.Second, "g's pull decision", func() error {
			g.xfer.mu.Lock()
			defer g.xfer.mu.Unlock()
			if x := g.xfer; x.pull != nil || len(x.turned) > 0 || len(x.burst) > 0 {
				return fmt.Errorf("g has a pull pending")
			}
			if catchUps() == 0 || pulls() == 0 {
				return fmt.Errorf("g has not caught up")
			}
			return nil
		})
	}
	if c := catchUps(); c != 1 {
		t.Fatalf("g started %.0f catch-up pulls, want one", c)
	}
	testkit.Eventually(t, 20*time.Second, "every replica to hold every binding", func() error {
		for _, s := range all {
			if s.Len() != 4 {
				return fmt.Errorf("%s holds %d of 4 bindings", s.name, s.Len())
			}
		}
		return nil
	})
}

// kill stops s as kill -9 would: no leave, the others keep it alive in
// their views until their failure detection declares it dead.
func kill(s *Store) {
	s.closeOnce.Do(func() {
		s.cancel()
		s.closeErr = s.ml.Load().Shutdown()
		s.wg.Wait()
		s.src.stop()
	})
}

// A replica killed and restarted at the same address meets its previous
// incarnation, still alive in the ring's view (memberlist's production
// timers take seconds to declare it dead), advertising synced: it pulls
// from the live member, never from its ghost, which would leave the pull
// unanswered for TransferTimeout.
func TestRestartedReplicaIgnoresItsGhost(t *testing.T) {
	// Registered first, so it runs after the nodes are closed: memberlist's
	// Shutdown does not wait for a probe in flight, which lasts up to a
	// ProbeInterval (1s in production), and goleak checks after the tests.
	t.Cleanup(func() { time.Sleep(2 * time.Second) })
	tn := newTestNet()
	a := startNode(t, tn, "a", nil, production)
	if _, err := a.Create(ctx, skey(1), store.Binding{Pod: "pod-a"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	b := startNode(t, tn, "b", []string{a.selfAddr}, production)
	waitMembers(t, []*Store{a, b}, 2, 20*time.Second)
	testkit.Eventually(t, 20*time.Second, "a to see b synced", func() error {
		if n := a.member(b.name); n == nil || !peerSynced(n) {
			return fmt.Errorf("a does not see b synced")
		}
		return nil
	})
	addr := b.selfAddr
	kill(b)
	again := startNode(t, tn, "b", []string{a.selfAddr}, production, func(c *configGossip, _ *Options) { c.Bind = addr })
	// Seconds before memberlist declares the ghost dead.
	testkit.Eventually(t, 20*time.Second, "the restarted replica to meet its previous incarnation", func() error {
		if n := again.member(b.name); n == nil || !peerSynced(n) {
			return fmt.Errorf("no synced ghost")
		}
		return nil
	})
	testkit.Eventually(t, 30*time.Second, "the restarted replica to pull the ring's state", func() error {
		if !again.Synced() || again.Len() != 1 {
			return fmt.Errorf("synced %v, %d bindings", again.Synced(), again.Len())
		}
		return nil
	})
	for _, r := range []string{"retry", "gave_up"} {
		if n := testutil.ToFloat64(again.met.transfers.WithLabelValues(r)); n != 0 {
			t.Fatalf("%s = %.0f: the restarted replica pulled from its ghost", r, n)
		}
	}
}
