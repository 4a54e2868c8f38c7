package scale

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/gossip"
)

// node is one in-process gossip replica with production timers.
type node struct {
	*gossip.Store
	addr string
}

// writeRingKey writes a random 32-byte gossip key into dir: every ring
// of the bench is encrypted and authenticated, as tether's default is.
func writeRingKey(dir string) (string, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "gossip.key")
	return path, os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}

// startNode starts a replica that joins seed (none: a new ring), with
// the ring key keyFile, holding at most maxEntries bindings (0: the
// sidecar's default).
func startNode(name, seed, keyFile string, maxEntries int) (*node, error) {
	if maxEntries == 0 {
		maxEntries = config.DefaultMaxEntries
	}
	port, err := procs.FreePort()
	if err != nil {
		return nil, err
	}
	cfg := &config.GossipStore{Bind: fmt.Sprintf("127.0.0.1:%d", port), Advertise: "127.0.0.1",
		Discovery: config.PeersStatic, MaxEntries: maxEntries, SecretKeyFile: keyFile}
	if seed != "" {
		cfg.Join = []string{seed}
	}
	s, err := gossip.New(context.Background(), cfg, gossip.Options{NodeName: name, Reg: prometheus.NewRegistry()})
	if err != nil {
		return nil, err
	}
	return &node{Store: s, addr: cfg.Bind}, nil
}

// ring starts n replicas joined to the first and waits until every one
// sees all n members and is synced.
func ring(n int, keyFile string) ([]*node, error) {
	var nodes []*node
	closeAll := func() { closeNodes(nodes) }
	for i := range n {
		seed := ""
		if i > 0 {
			seed = nodes[0].addr
		}
		s, err := startNode(fmt.Sprint("bench-", i), seed, keyFile, 0)
		if err != nil {
			closeAll()
			return nil, err
		}
		nodes = append(nodes, s)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := true
		for _, s := range nodes {
			ok = ok && s.Members() == n && s.Synced()
		}
		if ok {
			return nodes, nil
		}
		if time.Now().After(deadline) {
			closeAll()
			return nil, fmt.Errorf("ring of %d did not form in 60s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func closeNodes(nodes []*node) {
	var wg sync.WaitGroup
	for _, s := range nodes {
		wg.Go(func() { _ = s.Close() })
	}
	wg.Wait()
}

// convergence creates samples bindings, each on the next node in turn, and
// returns the times until every other node holds it (polled every 50 µs
// on a thread of its own: Go's timers would add up to a millisecond).
func convergence(nodes []*node, samples int) ([]time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	nap := syscall.NsecToTimespec(int64(50 * time.Microsecond))
	ctx := context.Background()
	out := make([]time.Duration, 0, samples)
	for i := range samples {
		k := key(1_000_000_000 + len(nodes)*100_000 + i)
		origin := nodes[i%len(nodes)]
		start := time.Now()
		if _, err := origin.Create(ctx, k, store.Binding{Pod: podIDs[i%len(podIDs)], Created: start}, time.Hour); err != nil {
			return nil, err
		}
		pending := slices.DeleteFunc(slices.Clone(nodes), func(n *node) bool { return n == origin })
		for len(pending) > 0 {
			if time.Since(start) > 10*time.Second {
				return nil, fmt.Errorf("binding %d not on %d of %d nodes after 10s", i, len(pending), len(nodes))
			}
			pending = slices.DeleteFunc(pending, func(n *node) bool {
				_, ok, _ := n.Peek(ctx, k)
				return ok
			})
			if len(pending) > 0 {
				_ = syscall.Nanosleep(&nap, nil)
			}
		}
		out = append(out, time.Since(start))
		time.Sleep(2 * time.Millisecond) // one binding at a time, as turns arrive
	}
	slices.Sort(out)
	return out, nil
}

// join starts a replica that joins holder (which has n bindings) and
// returns how long until it is synced (its /readyz would turn ready) and
// holds all n, checking a sample of them.
func join(holder *node, n int, keyFile string) (time.Duration, error) {
	// A ring's members are synced (they pulled the ring's state, or found
	// nobody to pull from, one startup grace after they started). A holder
	// filled and measured in under that grace is not yet, and a replica
	// pulls only from synced members: wait, as a rollout would.
	for wait := time.Now().Add(30 * time.Second); !holder.Synced(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(wait) {
			return 0, errors.New("the holder never became synced")
		}
	}
	start := time.Now()
	s, err := startNode("bench-joiner", holder.addr, keyFile, 2*n)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	deadline := start.Add(5 * time.Minute)
	for !(s.Synced() && s.Len() >= n) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("joiner holds %d of %d bindings after 5 minutes (synced %v)", s.Len(), n, s.Synced())
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	for i := 0; i < n; i += max(1, n/1000) {
		if _, ok, _ := s.Peek(context.Background(), key(i)); !ok {
			return 0, errors.New("joiner is synced but misses binding " + fmt.Sprint(i))
		}
	}
	return took, nil
}
