package gossip

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/testkit"
)

var ctx = context.Background()

const ttl = 30 * time.Second

// Two replicas race Create on the same new sessions: each may answer with
// its own binding for an instant, then both hold one identical binding, the
// earlier creation.
func TestRaceCreateConverges(t *testing.T) {
	nodes := startCluster(t, newTestNet(), 2)
	const sessions = 50
	var wg sync.WaitGroup
	for i := range sessions {
		start := make(chan struct{})
		for j, s := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if _, err := s.Create(ctx, skey(i), store.Binding{Pod: fmt.Sprint("pod-", j), Gen: 0}, ttl); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
	}
	wg.Wait()
	for i := range sessions {
		testkit.Eventually(t, 5*time.Second, "every node to agree on the session", func() error {
			_, ok, err := agree(nodes, skey(i))
			if err == nil && !ok {
				return fmt.Errorf("session %d: no binding", i)
			}
			return err
		})
	}
	// A later Create on either replica returns the agreed binding.
	for i := range sessions {
		want, _, _ := nodes[0].Peek(ctx, skey(i))
		for _, s := range nodes {
			got, err := s.Create(ctx, skey(i), store.Binding{Pod: "late"}, ttl)
			if err != nil || !got.SameTarget(want) {
				t.Fatalf("session %d on %s: Create returned %+v, want %+v", i, s.name, got, want)
			}
		}
	}
}

// A replica started later receives, by state transfer in bounded chunks,
// the bindings (and deletes) made before it joined.
func TestLateJoinerReceivesState(t *testing.T) {
	tn := newTestNet()
	a := startNode(t, tn, "a", nil)
	const n = 5000
	for i := range n {
		if _, err := a.Create(ctx, skey(i), store.Binding{Pod: fmt.Sprint("pod-", i%13), PrefillPod: "prefill-0"}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	old, _, _ := a.Peek(ctx, skey(0))
	if ok, _ := a.CompareAndDelete(ctx, skey(0), old); !ok {
		t.Fatal("delete failed")
	}
	testkit.Eventually(t, 5*time.Second, "the first node synced", func() error {
		if !a.Synced() {
			return fmt.Errorf("first node not synced")
		}
		return nil
	})
	b := startNode(t, tn, "b", []string{a.selfAddr})
	testkit.Eventually(t, 20*time.Second, "the late node to receive the state", func() error {
		if b.Len() != n-1 || !b.Synced() {
			return fmt.Errorf("late node holds %d bindings (synced %v), want %d", b.Len(), b.Synced(), n-1)
		}
		return nil
	})
	for i := range n {
		if _, _, err := agree([]*Store{a, b}, skey(i)); err != nil {
			t.Fatal(err)
		}
	}
	chunks := testutil.ToFloat64(b.met.chunks.WithLabelValues("received"))
	if chunks < 3 {
		t.Fatalf("%.0f chunks for %d bindings: the state did not travel in bounded chunks", chunks, n)
	}
	// The tombstone travelled too: a Create on the late node supersedes it.
	got, _ := b.Create(ctx, skey(0), store.Binding{Pod: "new"}, ttl)
	if got.Gen != 1 {
		t.Fatalf("create after a transferred delete: gen %d, want 1", got.Gen)
	}
	t.Logf("%d bindings in %.0f chunks", n, chunks)
}

// A partition with conflicting binds on each side heals into one binding
// per session on every node.
func TestPartitionHeals(t *testing.T) {
	tn := newTestNet()
	nodes := startCluster(t, tn, 4)
	left, right := nodes[:2], nodes[2:]

	// Before the split: a binding everyone knows, rebound on one side later.
	if _, err := nodes[0].Create(ctx, skey(100), store.Binding{Pod: "pod-x"}, ttl); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "every node to agree before the split", func() error { _, _, err := agree(nodes, skey(100)); return err })
	waitSynced(t, nodes)

	tn.partition(left, right)
	waitMembers(t, left, 2, 20*time.Second)
	waitMembers(t, right, 2, 20*time.Second)

	// Conflicts: the left side creates first, the right side a little later.
	for i := range 20 {
		if _, err := left[i%2].Create(ctx, skey(i), store.Binding{Pod: "pod-left"}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	for i := range 20 {
		if _, err := right[i%2].Create(ctx, skey(i), store.Binding{Pod: "pod-right"}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	// Sessions only one side knows.
	for i := 20; i < 40; i++ {
		side := left
		if i%2 == 1 {
			side = right
		}
		if _, err := side[0].Create(ctx, skey(i), store.Binding{Pod: fmt.Sprint("pod-", i)}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	// The right side rebinds session 100 (backend gone): gen 1 supersedes.
	old, _, _ := right[0].Peek(ctx, skey(100))
	if ok, _ := right[0].CompareAndDelete(ctx, skey(100), old); !ok {
		t.Fatal("delete failed")
	}
	if _, err := right[0].Create(ctx, skey(100), store.Binding{Pod: "pod-y", Gen: old.Gen + 1}, ttl); err != nil {
		t.Fatal(err)
	}

	// Let memberlist's gossip queue spend its retransmits on the other
	// side's unreachable nodes: after this, only the state transfer that
	// the rejoin triggers can carry what each side missed.
	testkit.Eventually(t, 10*time.Second, "the gossip queues to drain", func() error {
		for _, s := range nodes {
			if q := s.queue.NumQueued(); q > 0 {
				return fmt.Errorf("%s still has %d deltas queued for gossip", s.name, q)
			}
		}
		return nil
	})
	var pulled []float64
	for _, s := range nodes {
		pulled = append(pulled, testutil.ToFloat64(s.met.transfers.WithLabelValues("complete")))
	}

	tn.heal()
	waitMembers(t, nodes, 4, 30*time.Second)
	// 30s: a pull whose peer does not answer is retried after the
	// transfer timeout (10s) with another member, which a loaded machine
	// (every package's tests under -race at once) sometimes needs.
	testkit.Eventually(t, 30*time.Second, "a state pull after the heal", func() error {
		for i, s := range nodes {
			if testutil.ToFloat64(s.met.transfers.WithLabelValues("complete")) <= pulled[i] {
				return fmt.Errorf("%s has not pulled state since the heal", s.name)
			}
		}
		return nil
	})
	for i := range 40 {
		testkit.Eventually(t, 15*time.Second, "the sides to agree after the heal", func() error {
			b, ok, err := agree(nodes, skey(i))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("session %d lost", i)
			}
			if i < 20 && b.Pod != "pod-left" {
				return fmt.Errorf("session %d settled on %s, want the earlier pod-left", i, b.Pod)
			}
			return nil
		})
	}
	testkit.Eventually(t, 15*time.Second, "the rebound session to win everywhere", func() error {
		b, _, err := agree(nodes, skey(100))
		if err == nil && (b.Pod != "pod-y" || b.Gen != 1) {
			err = fmt.Errorf("rebound session holds %+v, want pod-y gen 1", b)
		}
		return err
	})
}

// waitSynced waits until every node is synced and has announced it in its
// memberlist metadata (what a joining peer decides to pull from): the flag
// flips a moment before the announcement.
func waitSynced(t *testing.T, nodes []*Store) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "every node synced", func() error {
		for _, s := range nodes {
			if !s.Synced() {
				return fmt.Errorf("%s not synced", s.name)
			}
			// (Not LocalNode's Meta: memberlist writes it under its lock.)
			if !s.xfer.isAnnounced() {
				return fmt.Errorf("%s synced, not announced yet", s.name)
			}
		}
		return nil
	})
}

// TTLs are honoured on every replica: a binding nobody looks up lapses
// everywhere; one looked up on a single replica stays alive everywhere.
func TestTTLExpiryAndRefresh(t *testing.T) {
	nodes := startCluster(t, newTestNet(), 3)
	// 4s rather than the 1s minimum: a refresh is announced once the ring's
	// view is a quarter TTL behind, so the others keep 3s of slack for a
	// CI machine stalled by other work (2s flaked under a load of 11).
	const short = 4 * time.Second
	if _, err := nodes[0].Create(ctx, skey(1), store.Binding{Pod: "idle"}, short); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[0].Create(ctx, skey(2), store.Binding{Pod: "busy"}, short); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, short/2, "both bindings everywhere", func() error {
		for _, s := range nodes {
			if s.Len() != 2 {
				return fmt.Errorf("%s holds %d", s.name, s.Len())
			}
		}
		return nil
	})
	// Look the busy session up on node 2 only, for 3 TTLs; every replica
	// must hold it all along.
	end := time.Now().Add(3 * short)
	for time.Now().Before(end) {
		if _, ok, _ := nodes[2].Lookup(ctx, skey(2), short); !ok {
			t.Fatal("busy session lapsed on the replica that serves it")
		}
		for _, s := range nodes {
			if _, ok, _ := s.Peek(ctx, skey(2)); !ok {
				t.Fatalf("busy session lapsed on %s while looked up on %s", s.name, nodes[2].name)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, s := range nodes {
		if _, ok, _ := s.Peek(ctx, skey(1)); ok {
			t.Fatalf("idle session alive on %s after 3 TTLs", s.name)
		}
	}
	// Once nobody looks it up, the busy one lapses everywhere too, and the
	// sweep frees the memory.
	testkit.Eventually(t, 3*short, "every binding to lapse", func() error {
		for _, s := range nodes {
			if s.Len() != 0 {
				return fmt.Errorf("%s still holds %d", s.name, s.Len())
			}
		}
		return nil
	})
}

// A replica that receives a value losing to its own sends its winner back:
// a conflict left by lost packets heals at the next refresh.
func TestReadRepair(t *testing.T) {
	nodes := startCluster(t, newTestNet(), 2)
	a, b := nodes[0], nodes[1]
	k := keyOf(skey(7))
	now := a.now()
	// As if the deltas had been lost: each replica holds its own binding.
	a.st.create(k, value{Created: now - 10, Pod: "older"}, now, 60_000)
	b.st.create(k, value{Created: now, Pod: "newer"}, now, 60_000)
	// b serves the session; its coalesced refresh reaches a, which answers
	// with the older binding.
	testkit.Eventually(t, 5*time.Second, "read repair to settle on the older binding", func() error {
		b.Lookup(ctx, skey(7), 4*time.Minute)
		got, _, err := agree(nodes, skey(7))
		if err == nil && got.Pod != "older" {
			err = fmt.Errorf("settled on %s", got.Pod)
		}
		return err
	})
}

// With encryption, a replica with another key cannot join; one with the
// same key can.
func TestEncryptionKeepsOutWrongKey(t *testing.T) {
	dir := t.TempDir()
	keyFile := func(name string, b byte) string {
		p := filepath.Join(dir, name)
		k := make([]byte, 32)
		for i := range k {
			k[i] = b
		}
		if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(k)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, bad := keyFile("good", 1), keyFile("bad", 2)
	tn := newTestNet()
	nodes := startCluster(t, tn, 2, withKey(good))
	intruder := startNode(t, tn, "intruder", []string{nodes[0].selfAddr}, withKey(bad))
	plain := startNode(t, tn, "plain", []string{nodes[0].selfAddr})
	if _, err := nodes[0].Create(ctx, skey(1), store.Binding{Pod: "secret-pod"}, ttl); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // several rejoin attempts
	for _, s := range []*Store{intruder, plain} {
		if s.Members() != 1 || s.Len() != 0 {
			t.Fatalf("%s joined a ring with another key: %d members, %d bindings", s.name, s.Members(), s.Len())
		}
	}
	waitMembers(t, nodes, 2, time.Second)
	friend := startNode(t, tn, "friend", []string{nodes[0].selfAddr}, withKey(good))
	waitMembers(t, append(nodes, friend), 3, 10*time.Second)
	testkit.Eventually(t, 10*time.Second, "the keyed newcomer to receive the binding", func() error {
		if _, ok, _ := friend.Peek(ctx, skey(1)); !ok {
			return fmt.Errorf("friend has not received the binding")
		}
		return nil
	})
}

// Close leaves gracefully: the others drop the member (with the test's
// fast timers failure detection would too; this checks Close's sequence
// and that a second Close is harmless).
func TestCloseLeaves(t *testing.T) {
	nodes := startCluster(t, newTestNet(), 3)
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, nodes[:2], 2, 5*time.Second)
	if err := nodes[2].Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// discovery: dns resolves a name (here localhost) on every rejoin.
func TestDNSDiscovery(t *testing.T) {
	tn := newTestNet()
	a := startNode(t, tn, "a", nil)
	b := startNode(t, tn, "b", nil, func(c *configGossip, _ *Options) {
		c.Discovery, c.DNSName = "dns", fmt.Sprintf("localhost:%d", portOf(a.selfAddr))
	})
	waitMembers(t, []*Store{a, b}, 2, 10*time.Second)
}
